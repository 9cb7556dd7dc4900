//! Attribute lookups on the SDK's [`SpanData`], for tests that collect spans with an exporter of their own
//! (an `InMemorySpanExporter` on their provider). [`CapturedSpan`](super::CapturedSpan) has the same lookups
//! as methods. As there, the last value set for a key wins: a span may set an attribute again as it learns
//! more (an LLM call's model, once the response names it).
//!
//! ```
//! use opentelemetry::trace::{Span as _, Tracer as _, TracerProvider as _};
//! use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
//! use waxell::testing::span_data::{attr_i64, attr_str};
//!
//! let exporter = InMemorySpanExporter::default();
//! let provider = SdkTracerProvider::builder().with_simple_exporter(exporter.clone()).build();
//! let mut span = provider.tracer("test").start("work");
//! span.set_attribute(opentelemetry::KeyValue::new("tries", 1_i64));
//! span.set_attribute(opentelemetry::KeyValue::new("tries", 2_i64));
//! span.set_attribute(opentelemetry::KeyValue::new("who", "me"));
//! span.end();
//! let spans = exporter.get_finished_spans().unwrap();
//! assert_eq!(attr_i64(&spans[0], "tries"), 2);
//! assert_eq!(attr_str(&spans[0], "who"), "me");
//! ```

use opentelemetry::{KeyValue, Value};
use opentelemetry_sdk::trace::SpanData;

/// The last value set for `key` among `attributes`.
pub(super) fn last<'a>(attributes: &'a [KeyValue], key: &str) -> Option<&'a Value> {
    attributes
        .iter()
        .rev()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| &kv.value)
}

/// The value of attribute `key` (the last one set), if the span has it.
pub fn attr(span: &SpanData, key: &str) -> Option<Value> {
    last(&span.attributes, key).cloned()
}

/// Attribute `key` as text: a string as it is, another value in its string form. Panics, naming the keys the
/// span has, when it has no such attribute.
#[track_caller]
pub fn attr_str(span: &SpanData, key: &str) -> String {
    match last(&span.attributes, key) {
        Some(Value::String(s)) => s.as_str().to_owned(),
        Some(other) => other.as_str().into_owned(),
        None => panic!(
            "span {:?} has no attribute {key:?}; it has {:?}",
            span.name,
            span.attributes
                .iter()
                .map(|kv| kv.key.as_str())
                .collect::<Vec<_>>()
        ),
    }
}

/// Attribute `key` as an integer. Panics when it is missing or not an integer.
#[track_caller]
pub fn attr_i64(span: &SpanData, key: &str) -> i64 {
    match last(&span.attributes, key) {
        Some(Value::I64(value)) => *value,
        other => panic!("{key} is not an integer attribute on {:?}: {other:?}", span.name),
    }
}

/// Attribute `key` as a float. Panics when it is missing or not a float.
#[track_caller]
pub fn attr_f64(span: &SpanData, key: &str) -> f64 {
    match last(&span.attributes, key) {
        Some(Value::F64(value)) => *value,
        other => panic!("{key} is not a float attribute on {:?}: {other:?}", span.name),
    }
}

/// Attribute `key` parsed as JSON (arguments, results and messages are recorded as JSON strings). Panics
/// when it is missing or not JSON.
#[track_caller]
pub fn attr_json(span: &SpanData, key: &str) -> serde_json::Value {
    serde_json::from_str(&attr_str(span, key)).unwrap_or_else(|e| panic!("{key} is not JSON: {e}"))
}

/// Attribute `key` as a list of strings. Panics when it is missing or not a string array.
#[track_caller]
pub fn attr_strings(span: &SpanData, key: &str) -> Vec<String> {
    match last(&span.attributes, key) {
        Some(Value::Array(opentelemetry::Array::String(values))) => {
            values.iter().map(|value| value.to_string()).collect()
        }
        other => panic!("{key} is not a string array on {:?}: {other:?}", span.name),
    }
}
