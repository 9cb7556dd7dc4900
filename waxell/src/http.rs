//! The one place HTTP clients are built. TLS is rustls with the *ring* provider and the platform's certificate
//! verifier, handed to reqwest ready-made: reqwest's own default provider (aws-lc-rs) needs cmake and a C
//! toolchain to build, which a lean default build must not impose. Nothing is installed process-wide, so an
//! application that picked another rustls provider keeps it.
//!
//! Every reqwest client in this crate must come from here: with reqwest's `rustls-no-provider` feature, a client
//! built without a preconfigured TLS config panics when no process-wide provider is installed.

use std::sync::{Arc, LazyLock};

/// The TLS client configuration every client shares (building the platform verifier reads the system's roots
/// once).
fn tls_config() -> Result<rustls::ClientConfig, String> {
    static CONFIG: LazyLock<Result<rustls::ClientConfig, String>> = LazyLock::new(|| {
        use rustls_platform_verifier::BuilderVerifierExt as _;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .and_then(|b| b.with_platform_verifier())
            .map(|b| b.with_no_client_auth())
            .map_err(|e| format!("setting up TLS: {e}"))
    });
    CONFIG.clone()
}

/// A builder for an async client with waxell's TLS set up.
#[cfg(any(feature = "llm", feature = "e2b"))]
pub(crate) fn async_client() -> Result<reqwest::ClientBuilder, String> {
    Ok(reqwest::Client::builder().tls_backend_preconfigured(tls_config()?))
}

/// A blocking client with waxell's TLS set up. Built on a thread of its own: reqwest's blocking client starts a
/// runtime, which must not happen inside the caller's async runtime.
#[cfg(feature = "otlp-http")]
pub(crate) fn blocking_client(
    configure: impl FnOnce(reqwest::blocking::ClientBuilder) -> reqwest::blocking::ClientBuilder + Send + 'static,
) -> Result<reqwest::blocking::Client, String> {
    let tls = tls_config()?;
    std::thread::Builder::new()
        .name("waxell-http-client".into())
        .spawn(move || {
            configure(reqwest::blocking::Client::builder().tls_backend_preconfigured(tls))
                .build()
                .map_err(|e| format!("building the HTTP client: {e}"))
        })
        .map_err(|e| format!("starting a thread for the HTTP client: {e}"))?
        .join()
        .map_err(|_| "building the HTTP client panicked".to_owned())?
}

/// W3C `traceparent`/`tracestate` headers of the current OpenTelemetry context (empty without a span), so the
/// server called becomes the current span's child.
#[cfg(any(feature = "llm", feature = "e2b"))]
pub(crate) fn trace_headers() -> reqwest::header::HeaderMap {
    let mut headers = reqwest::header::HeaderMap::new();
    insert_trace_headers(&opentelemetry::Context::current(), &mut headers);
    headers
}

/// Put the W3C trace context of `cx`'s span into `headers` (nothing for an invalid span). Written out
/// directly rather than through `TraceContextPropagator`: the async-openai layer does this before every
/// request the caller waits for, and the propagator's string building costs several times more.
#[cfg(any(feature = "llm", feature = "e2b"))]
pub(crate) fn insert_trace_headers(cx: &opentelemetry::Context, headers: &mut reqwest::header::HeaderMap) {
    use opentelemetry::trace::{TraceContextExt as _, TraceFlags};
    use reqwest::header::HeaderValue;

    let span = cx.span();
    let context = span.span_context();
    if !context.is_valid() {
        return;
    }
    // Only the sampled flag is defined for version 00 (W3C Trace Context, "trace-flags").
    let flags = (context.trace_flags() & TraceFlags::SAMPLED).to_u8();
    let traceparent = format!("00-{}-{}-{flags:02x}", context.trace_id(), context.span_id());
    if let Ok(value) = HeaderValue::try_from(traceparent) {
        headers.insert("traceparent", value);
    }
    let state = context.trace_state().header();
    if !state.is_empty() {
        if let Ok(value) = HeaderValue::try_from(state) {
            headers.insert("tracestate", value);
        }
    }
}

#[cfg(test)]
mod tests {
    /// Guards the lean build: with reqwest's `rustls-no-provider`, a client built any other way panics for
    /// want of a crypto provider; these must not.
    #[test]
    fn clients_build_without_a_process_wide_crypto_provider() {
        assert!(rustls::crypto::CryptoProvider::get_default().is_none());
        #[cfg(feature = "otlp-http")]
        super::blocking_client(|b| b).expect("blocking client");
        #[cfg(any(feature = "llm", feature = "e2b"))]
        super::async_client()
            .expect("builder")
            .build()
            .expect("async client");
    }
}
