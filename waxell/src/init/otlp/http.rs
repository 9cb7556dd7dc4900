//! OTLP over HTTP (protobuf or JSON bodies), with the observed blocking client (`export::transport`).

use std::sync::Arc;
use std::time::Duration;

use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::TracerProviderBuilder;
use opentelemetry_sdk::Resource;

use super::{failed, Installed};
use crate::config::{OtlpSettings, Protocol};
use crate::error::InitError;
use crate::export::otlp_http::{OtlpHttp, Target};
use crate::export::transport::TransportLog;
use crate::init::pipeline::Limits;

pub(super) fn install(
    provider: TracerProviderBuilder,
    settings: &OtlpSettings,
    metrics_endpoint: Option<&str>,
    resource: Resource,
    limits: &Limits,
) -> Result<Installed, InitError> {
    let traces_url = settings.traces_endpoint.clone().unwrap_or_default();
    let fail = |message: String| failed(settings, message);
    let transport = Arc::new(TransportLog::default());
    // Not opentelemetry-otlp's span exporter: the fail-open exporter keeps each batch to retry or save it,
    // and the encoded request is a far cheaper copy than the spans (see `export::otlp_http`).
    let delivery = OtlpHttp::new(
        Target::new(&traces_url, settings).map_err(fail)?,
        Arc::clone(&transport),
    );
    let provider = provider.with_span_processor(limits.pipeline(delivery, Some(transport))?);

    // Metrics go next to the traces: `/v1/metrics` beside `/v1/traces`.
    let metrics_url = metrics_endpoint.map_or_else(
        || match traces_url.strip_suffix("/v1/traces") {
            Some(base) => format!("{base}/v1/metrics"),
            None => traces_url.clone(),
        },
        str::to_owned,
    );
    let metrics = opentelemetry_otlp::MetricExporter::builder()
        .with_http()
        .with_protocol(wire_protocol(settings.protocol))
        .with_endpoint(metrics_url)
        .with_timeout(settings.timeout)
        .with_retry_policy(opentelemetry_otlp::RetryPolicy::disabled())
        .with_headers(settings.headers.iter().cloned().collect())
        .with_http_client(client(settings.timeout).map_err(fail)?)
        .build()
        .map_err(|e| fail(e.to_string()))?;
    let meter_provider = SdkMeterProvider::builder()
        .with_periodic_exporter(metrics)
        .with_resource(resource)
        .build();
    Ok((provider, meter_provider, None))
}

fn wire_protocol(protocol: Protocol) -> opentelemetry_otlp::Protocol {
    if protocol == Protocol::HttpJson {
        opentelemetry_otlp::Protocol::HttpJson
    } else {
        opentelemetry_otlp::Protocol::HttpBinary
    }
}

fn client(timeout: Duration) -> Result<reqwest::blocking::Client, String> {
    crate::http::blocking_client(move |b| b.timeout(timeout))
}
