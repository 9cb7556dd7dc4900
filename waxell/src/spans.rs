//! Small helpers shared by everything that records on spans (the macros' runtime, decisions, scores):
//! string-array values and the marker of an open agent run. Depends on nothing above it.

use opentelemetry::{Context, StringValue, Value};

/// Marks the context of an agent run, so `score()`, `tag()` and `metadata()` find the innermost one.
#[derive(Clone)]
pub(crate) struct AgentRun {
    /// A context whose active span is the agent's span.
    pub(crate) cx: Context,
}

/// A string-array attribute value.
pub(crate) fn string_array(items: &[impl AsRef<str>]) -> Value {
    Value::Array(
        items
            .iter()
            .map(|s| StringValue::from(s.as_ref().to_owned()))
            .collect::<Vec<_>>()
            .into(),
    )
}

/// A string attribute value that clones by reference count (the same content goes into two keys).
pub(crate) fn shared(text: String) -> Value {
    Value::String(StringValue::from(std::sync::Arc::<str>::from(text)))
}
