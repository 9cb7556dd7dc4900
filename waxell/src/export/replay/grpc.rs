//! Replay over OTLP/gRPC (tonic), on a current-thread runtime of its own.

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;

use super::{rejected, Note, ReplayError, Requests};
use crate::config::OtlpSettings;
use crate::export::jsonl::span_count;

/// Send each request once to the collector at `endpoint`, noting what became of it.
pub(super) fn send_all(
    endpoint: &str,
    settings: &OtlpSettings,
    requests: &Requests,
    note: &mut Note<'_>,
) -> Result<(), ReplayError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ReplayError::Send {
            endpoint: endpoint.to_owned(),
            line: 0,
            message: format!("starting a runtime: {e}"),
        })?;
    runtime.block_on(async {
        let channel = tonic::transport::Endpoint::from_shared(endpoint.to_owned())
            .map(|e| e.timeout(settings.timeout).connect_timeout(settings.timeout))
            .map_err(|e| e.to_string());
        let client = match channel {
            Ok(e) => e.connect().await.map_err(|e| format!("connecting: {e}")),
            Err(e) => Err(e),
        };
        let mut client = match client {
            Ok(channel) => TraceServiceClient::new(channel),
            Err(why) => {
                for (line, request) in requests {
                    note(*line, span_count(request), Err(why.clone()));
                }
                return;
            }
        };
        for (line, request) in requests {
            let outcome = async {
                let mut req = tonic::Request::new(request.clone());
                for (k, v) in &settings.headers {
                    let key = tonic::metadata::MetadataKey::from_bytes(k.to_ascii_lowercase().as_bytes())
                        .map_err(|e| format!("header {k:?}: {e}"))?;
                    let value = v
                        .parse()
                        .map_err(|_| format!("header {k:?} has an invalid value"))?;
                    req.metadata_mut().insert(key, value);
                }
                let response = client.export(req).await.map_err(|status| status.to_string())?;
                Ok(rejected(Some(response.into_inner())))
            }
            .await;
            note(*line, span_count(request), outcome);
        }
    });
    Ok(())
}
