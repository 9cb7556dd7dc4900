//! Crate-internal handles the instrumented clients (sandbox, LLM, E2B) use to emit spans.
//! (Skeleton: the core SDK commit fills these in.)

use opentelemetry::global::BoxedTracer;

/// The tracer every waxell span is started from.
pub(crate) fn tracer() -> BoxedTracer {
    opentelemetry::global::tracer("waxell")
}

/// Whether content (arguments, results, code, messages) may be captured on spans.
pub(crate) fn capture_content() -> bool {
    true
}

/// Scrub secrets from `text` and truncate it to `max_chars` characters for a span attribute.
pub(crate) fn content_preview(text: &str, max_chars: usize) -> String {
    text.chars().take(max_chars).collect()
}

/// The meter for waxell's metrics (`gen_ai.client.*`). A no-op meter unless `init()` configured an
/// OTLP endpoint.
pub(crate) fn meter() -> opentelemetry::metrics::Meter {
    opentelemetry::global::meter("waxell")
}

/// Record a decision (a `decide {name}` span under the current context, plus the
/// `decision_confidence:{name}` score when a confidence is given). Used by the LLM client for
/// `tool_call:{name}` decisions.
pub(crate) fn record_decision(
    name: &str,
    options: &[String],
    chosen: &str,
    reasoning: Option<&str>,
    confidence: Option<f64>,
) {
    let _ = (name, options, chosen, reasoning, confidence);
}
