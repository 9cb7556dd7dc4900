//! OTLP export to a collector: the span pipeline and the meter provider. Each transport is a module of its
//! own behind its cargo feature (as in opentelemetry-otlp); without it, asking for that protocol is an error
//! naming the feature.

#[cfg(feature = "grpc")]
mod grpc;
#[cfg(feature = "otlp-http")]
mod http;

use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::TracerProviderBuilder;
use opentelemetry_sdk::Resource;

use super::pipeline::Limits;
use crate::config::{OtlpSettings, Protocol};
use crate::error::InitError;

/// What an exporter runs on besides its own threads (gRPC's private Tokio runtime); dropping it stops that
/// without blocking, so the guard may be dropped inside async code.
pub(crate) type Background = Box<dyn Send + Sync>;

/// The provider with the export pipeline added, the meter provider beside it, and what they run on.
pub(super) type Installed = (TracerProviderBuilder, SdkMeterProvider, Option<Background>);

/// Add OTLP export to `settings.traces_endpoint` (spans through `limits`' pipeline, metrics beside them) to
/// `provider`. `metrics_endpoint` is `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT` (HTTP only).
pub(super) fn install(
    provider: TracerProviderBuilder,
    settings: &OtlpSettings,
    metrics_endpoint: Option<&str>,
    resource: Resource,
    limits: &Limits,
) -> Result<Installed, InitError> {
    match settings.protocol {
        Protocol::Grpc => grpc(provider, settings, metrics_endpoint, resource, limits),
        Protocol::HttpProtobuf | Protocol::HttpJson => {
            http(provider, settings, metrics_endpoint, resource, limits)
        }
    }
}

/// The error for an exporter that could not be built.
#[cfg(any(feature = "grpc", feature = "otlp-http"))]
fn failed(settings: &OtlpSettings, message: impl Into<String>) -> InitError {
    InitError::Exporter {
        protocol: settings.protocol.name(),
        endpoint: settings.traces_endpoint.clone().unwrap_or_default(),
        message: message.into(),
    }
}

/// The error for a protocol whose cargo feature this build lacks.
#[cfg(not(all(feature = "grpc", feature = "otlp-http")))]
fn feature_missing(settings: &OtlpSettings, feature: &'static str) -> InitError {
    InitError::FeatureMissing {
        feature,
        needed_for: format!(
            "OTLP {} export to {} (OTEL_EXPORTER_OTLP_PROTOCOL or the builder's protocol)",
            settings.protocol.name(),
            settings.traces_endpoint.as_deref().unwrap_or_default()
        ),
    }
}

#[cfg(feature = "grpc")]
use self::grpc::install as grpc;

#[cfg(not(feature = "grpc"))]
fn grpc(
    _provider: TracerProviderBuilder,
    settings: &OtlpSettings,
    _metrics_endpoint: Option<&str>,
    _resource: Resource,
    _limits: &Limits,
) -> Result<Installed, InitError> {
    Err(feature_missing(settings, "grpc"))
}

#[cfg(feature = "otlp-http")]
use self::http::install as http;

#[cfg(not(feature = "otlp-http"))]
fn http(
    _provider: TracerProviderBuilder,
    settings: &OtlpSettings,
    _metrics_endpoint: Option<&str>,
    _resource: Resource,
    _limits: &Limits,
) -> Result<Installed, InitError> {
    Err(feature_missing(settings, "otlp-http"))
}
