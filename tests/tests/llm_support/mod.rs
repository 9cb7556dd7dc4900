//! Span capture for the LLM-crate integration tests: each test captures its own spans with
//! `waxell::testing`, so the tests share one process.
#![allow(dead_code, unreachable_pub)]

use opentelemetry::Value;
use opentelemetry_sdk::trace::SpanData;

/// A secret that must never reach a span.
pub const PLANTED_KEY: &str = "sk-proj-PlantedOpenAiKey0123456789abcdef";

pub fn capture_spans() -> waxell::testing::Capture {
    waxell::testing::capture()
}

pub fn spans(capture: &waxell::testing::Capture) -> Vec<SpanData> {
    capture.spans().iter().map(|span| span.data().clone()).collect()
}

pub fn named<'a>(spans: &'a [SpanData], name: &str) -> Vec<&'a SpanData> {
    spans.iter().filter(|span| span.name == name).collect()
}

pub fn one<'a>(spans: &'a [SpanData], name: &str) -> &'a SpanData {
    match named(spans, name)[..] {
        [span] => span,
        ref found => panic!(
            "expected one span {name:?}, found {}; spans: {:?}",
            found.len(),
            spans.iter().map(|s| s.name.as_ref()).collect::<Vec<_>>()
        ),
    }
}

pub fn attr(span: &SpanData, key: &str) -> Option<Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.clone())
}

pub fn attr_str(span: &SpanData, key: &str) -> String {
    match attr(span, key) {
        Some(value) => value.as_str().into_owned(),
        None => panic!("{} has no {key}: {:?}", span.name, span.attributes),
    }
}

pub fn attr_i64(span: &SpanData, key: &str) -> i64 {
    match attr(span, key) {
        Some(Value::I64(value)) => value,
        other => panic!("{}: {key} is {other:?}", span.name),
    }
}

pub fn attr_f64(span: &SpanData, key: &str) -> f64 {
    match attr(span, key) {
        Some(Value::F64(value)) => value,
        other => panic!("{}: {key} is {other:?}", span.name),
    }
}

pub fn is_child(child: &SpanData, parent: &SpanData) -> bool {
    child.parent_span_id == parent.span_context.span_id()
        && child.span_context.trace_id() == parent.span_context.trace_id()
}

/// No attribute, event or status of any span contains `secret`.
pub fn assert_secret_absent(spans: &[SpanData], secret: &str) {
    for span in spans {
        let text = format!("{:?} {:?} {:?}", span.attributes, span.events, span.status);
        assert!(
            !text.contains(secret),
            "{} leaks the planted key: {text}",
            span.name
        );
    }
}
