//! The OTLP/gRPC receiver (features `ui` and `grpc`), on 4317 by default. Browsers cannot speak gRPC, so the
//! `Host` and cross-site checks of the HTTP services have nothing to guard here; the token, when one is
//! required, comes as `authorization: Bearer` or `x-waxell-token` metadata.

use std::sync::Arc;

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};

use super::http::Security;
use super::ingest::Ingest;
use super::store::Prepared;

struct Receiver {
    ingest: Arc<Ingest>,
    security: Arc<Security>,
}

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        if let Some(token) = &self.security.token {
            let metadata = request.metadata();
            let bearer = metadata
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "));
            let own = metadata.get("x-waxell-token").and_then(|v| v.to_str().ok());
            if !bearer.or(own).is_some_and(|t| super::http::same(t.trim(), token)) {
                return Err(tonic::Status::unauthenticated(
                    "a token is required: OTEL_EXPORTER_OTLP_HEADERS=authorization=Bearer%20<token>",
                ));
            }
        }
        let request = request.into_inner();
        // Made ready here; answered once queued for the store's writer.
        match tokio::task::spawn_blocking(move || Prepared::from_otlp(std::slice::from_ref(&request))).await {
            Ok(Ok(prepared)) => match self.ingest.submit(prepared).await {
                Ok(()) => Ok(tonic::Response::new(ExportTraceServiceResponse::default())),
                Err(e) => Err(tonic::Status::unavailable(e.to_string())),
            },
            Ok(Err(e)) => Err(tonic::Status::invalid_argument(e.to_string())),
            Err(e) => Err(tonic::Status::internal(e.to_string())),
        }
    }
}

/// Serve OTLP/gRPC on `listener` until `stop` completes.
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    ingest: Arc<Ingest>,
    security: Arc<Security>,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let incoming = futures_util::stream::unfold(listener, |listener| async move {
        let accepted = listener.accept().await.map(|(stream, _)| stream);
        Some((accepted, listener))
    });
    let service =
        TraceServiceServer::new(Receiver { ingest, security }).max_decoding_message_size(64 * 1024 * 1024);
    if let Err(e) = tonic::transport::Server::builder()
        .add_service(service)
        .serve_with_incoming_shutdown(incoming, stop)
        .await
    {
        crate::console::current().message(format_args!("ui: OTLP/gRPC receiver: {e}"));
    }
}
