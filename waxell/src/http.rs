//! The one place HTTP clients are built. TLS is reqwest's own: rustls with the aws-lc-rs provider and the
//! platform's certificate verifier, or the process-wide rustls provider when the application installed one.
//!
//! Why not a leaner provider handed to reqwest ready-made (ring, through reqwest's `rustls-no-provider`): Cargo
//! unifies features across the whole dependency graph, so that feature would reach every other crate in the
//! user's tree that uses reqwest 0.13, and there a client built without a provider of its own panics ("No rustls
//! crypto provider is configured"). reqwest's `rustls` feature gives those clients a working default instead.

/// A builder for an async client.
#[cfg(any(feature = "llm", feature = "e2b"))]
pub(crate) fn async_client() -> reqwest::ClientBuilder {
    reqwest::Client::builder()
}

/// A blocking client. Built on a thread of its own: reqwest's blocking client starts a runtime, which must not
/// happen inside the caller's async runtime.
#[cfg(feature = "otlp-http")]
pub(crate) fn blocking_client(
    configure: impl FnOnce(reqwest::blocking::ClientBuilder) -> reqwest::blocking::ClientBuilder + Send + 'static,
) -> Result<reqwest::blocking::Client, String> {
    std::thread::Builder::new()
        .name("waxell-http-client".into())
        .spawn(move || {
            configure(reqwest::blocking::Client::builder())
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
    /// Every client builds with no process-wide rustls provider installed, the state of any program that
    /// never chose one: waxell's own, and one built the plain way, as another crate in the user's tree does.
    #[test]
    fn clients_build_without_a_process_wide_crypto_provider() {
        #[cfg(feature = "otlp-http")]
        super::blocking_client(|b| b).expect("blocking client");
        #[cfg(any(feature = "llm", feature = "e2b"))]
        super::async_client().build().expect("async client");
        #[cfg(any(feature = "llm", feature = "e2b"))]
        reqwest::Client::builder()
            .build()
            .expect("a neighbour's plain client");
    }
}
