//! OTLP over gRPC (tonic), on a private Tokio runtime.

use opentelemetry_otlp::{WithExportConfig as _, WithTonicConfig as _};
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::TracerProviderBuilder;
use opentelemetry_sdk::Resource;

use super::{failed, Installed};
use crate::config::OtlpSettings;
use crate::error::InitError;
use crate::export::fail_open::SpanExporterDelivery;
use crate::init::pipeline::Limits;

/// Metrics go to the same address as the traces; `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT` is for HTTP.
pub(super) fn install(
    provider: TracerProviderBuilder,
    settings: &OtlpSettings,
    _metrics_endpoint: Option<&str>,
    resource: Resource,
    limits: &Limits,
) -> Result<Installed, InitError> {
    let url = settings.traces_endpoint.clone().unwrap_or_default();
    let fail = |message: String| failed(settings, message);
    let runtime = Runtime::new().map_err(|e| fail(e.to_string()))?;
    let entered = runtime.0.as_ref().map(tokio::runtime::Runtime::enter);
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(&url)
        .with_timeout(settings.timeout)
        // Retries happen in the fail-open exporter, where a refused connection is final.
        .with_retry_policy(opentelemetry_otlp::RetryPolicy::disabled())
        .with_metadata(metadata(&settings.headers).map_err(fail)?)
        .build()
        .map_err(|e| fail(e.to_string()))?;
    let provider = provider.with_span_processor(limits.pipeline(SpanExporterDelivery(exporter), None)?);
    let metrics = opentelemetry_otlp::MetricExporter::builder()
        .with_tonic()
        .with_endpoint(&url)
        .with_timeout(settings.timeout)
        .with_retry_policy(opentelemetry_otlp::RetryPolicy::disabled())
        .with_metadata(metadata(&settings.headers).map_err(fail)?)
        .build()
        .map_err(|e| fail(e.to_string()))?;
    let meter_provider = SdkMeterProvider::builder()
        .with_periodic_exporter(metrics)
        .with_resource(resource)
        .build();
    drop(entered);
    Ok((provider, meter_provider, Some(Box::new(runtime))))
}

/// A private Tokio runtime for tonic: gRPC export then works from a plain `main`, a current-thread runtime
/// or a multi-thread one alike, and shutdown never waits on the user's runtime.
struct Runtime(Option<tokio::runtime::Runtime>);

impl Runtime {
    fn new() -> Result<Self, std::io::Error> {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("waxell-otlp-grpc")
            .enable_all()
            .build()
            .map(|rt| Self(Some(rt)))
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            // Never blocks, so the guard may be dropped inside async code.
            rt.shutdown_background();
        }
    }
}

fn metadata(headers: &[(String, String)]) -> Result<tonic::metadata::MetadataMap, String> {
    let mut map = tonic::metadata::MetadataMap::new();
    for (k, v) in headers {
        let key = tonic::metadata::MetadataKey::from_bytes(k.to_ascii_lowercase().as_bytes())
            .map_err(|_| format!("header name {k:?} is not valid gRPC metadata"))?;
        let value = v
            .parse()
            .map_err(|_| format!("the value of header {k:?} is not valid gRPC metadata"))?;
        map.insert(key, value);
    }
    Ok(map)
}
