//! `score()`, `tag()` and `metadata()`: facts about the innermost open agent run.
//!
//! A score becomes a `gen_ai.evaluation.result` event on the agent's span (Jaeger shows it in the span's
//! logs) and the latest value also an attribute `waxell.score.{name}` (searchable). Outside an agent run these
//! calls do nothing and return `false`.

use opentelemetry::trace::TraceContextExt;
use opentelemetry::{Context, KeyValue, Value};

use crate::semconv::*;
use crate::spans::AgentRun;
use crate::telemetry;

/// A score's value: numeric, boolean or categorical.
#[derive(Debug, Clone, PartialEq)]
pub enum ScoreValue {
    /// A number, e.g. a 0-1 quality rating or a latency in ms.
    Numeric(f64),
    /// Pass/fail.
    Boolean(bool),
    /// One label out of a set, e.g. `"helpful"`.
    Categorical(String),
}

impl ScoreValue {
    fn data_type(&self) -> &'static str {
        match self {
            Self::Numeric(_) => "numeric",
            Self::Boolean(_) => "boolean",
            Self::Categorical(_) => "categorical",
        }
    }
}

macro_rules! numeric_from {
    ($($t:ty),*) => {$(
        impl From<$t> for ScoreValue {
            fn from(v: $t) -> Self { Self::Numeric(v as f64) }
        }
    )*};
}
numeric_from!(f64, f32, i8, i16, i32, i64, u8, u16, u32, u64, usize, isize);

impl From<bool> for ScoreValue {
    fn from(v: bool) -> Self {
        Self::Boolean(v)
    }
}
impl From<&str> for ScoreValue {
    fn from(v: &str) -> Self {
        Self::Categorical(v.to_owned())
    }
}
impl From<String> for ScoreValue {
    fn from(v: String) -> Self {
        Self::Categorical(v)
    }
}

/// The agent run's own context (its span is the agent span), if one is open.
fn current_agent() -> Option<Context> {
    if !telemetry::maybe_active() {
        return None;
    }
    Context::current().get::<AgentRun>().map(|run| run.cx.clone())
}

/// The current context, if an agent run is open in it.
fn current_with_agent() -> Option<Context> {
    if !telemetry::maybe_active() {
        return None;
    }
    let cx = Context::current();
    cx.get::<AgentRun>().is_some().then_some(cx)
}

/// Record a score on the innermost open agent run. Returns whether there was one.
///
/// ```
/// waxell::score("output_quality", 0.85);
/// waxell::score("passed_review", true);
/// waxell::score("tone", "friendly");
/// ```
pub fn score(name: impl AsRef<str>, value: impl Into<ScoreValue>) -> bool {
    match current_with_agent() {
        Some(cx) => record_in(&cx, name.as_ref(), value.into(), None),
        None => false,
    }
}

/// [`score`] with a comment explaining it (`gen_ai.evaluation.explanation`).
pub fn score_with_comment(
    name: impl AsRef<str>,
    value: impl Into<ScoreValue>,
    comment: impl AsRef<str>,
) -> bool {
    match current_with_agent() {
        Some(cx) => record_in(&cx, name.as_ref(), value.into(), Some(comment.as_ref())),
        None => false,
    }
}

/// Record a score on the innermost agent run open in `cx` (the decision runtime passes its own context).
pub(crate) fn record_in(cx: &Context, name: &str, value: ScoreValue, comment: Option<&str>) -> bool {
    let Some(run) = cx.get::<AgentRun>() else {
        return false;
    };
    let span = run.cx.span();
    let Some(state) = telemetry::state_for(&run.cx).filter(|_| span.is_recording()) else {
        return true;
    };
    let mut attrs = vec![
        KeyValue::new(GEN_AI_EVALUATION_NAME, name.to_owned()),
        KeyValue::new(WAXELL_SCORE_DATA_TYPE, value.data_type()),
    ];
    let attribute_value: Value = match &value {
        ScoreValue::Numeric(v) => {
            attrs.push(KeyValue::new(GEN_AI_EVALUATION_SCORE_VALUE, *v));
            (*v).into()
        }
        ScoreValue::Boolean(b) => {
            attrs.push(KeyValue::new(
                GEN_AI_EVALUATION_SCORE_VALUE,
                if *b { 1.0 } else { 0.0 },
            ));
            attrs.push(KeyValue::new(GEN_AI_EVALUATION_SCORE_LABEL, b.to_string()));
            (*b).into()
        }
        ScoreValue::Categorical(label) => {
            attrs.push(KeyValue::new(
                GEN_AI_EVALUATION_SCORE_LABEL,
                state.preview(label, 200),
            ));
            state.preview(label, 200).into()
        }
    };
    if let Some(comment) = comment {
        attrs.push(KeyValue::new(
            GEN_AI_EVALUATION_EXPLANATION,
            state.content(comment),
        ));
    }
    span.add_event(GEN_AI_EVALUATION_RESULT, attrs);
    span.set_attribute(KeyValue::new(
        format!("{WAXELL_SCORE_PREFIX}{}", key_segment(name)),
        attribute_value,
    ));
    true
}

/// Set the tag `waxell.tag.{key}` on the innermost open agent run. Returns whether there was one.
pub fn tag(key: impl AsRef<str>, value: impl Into<String>) -> bool {
    let Some(cx) = current_agent() else { return false };
    let Some(state) = telemetry::state_for(&cx) else {
        return true;
    };
    let value = state.preview(&value.into(), 1000);
    cx.span().set_attribute(KeyValue::new(
        format!("{WAXELL_TAG_PREFIX}{}", key_segment(key.as_ref())),
        value,
    ));
    true
}

/// Set the metadata `waxell.meta.{key}` on the innermost open agent run; numbers and booleans keep their
/// type, anything else is recorded as JSON. Returns whether there was a run.
pub fn metadata(key: impl AsRef<str>, value: impl serde::Serialize) -> bool {
    let Some(cx) = current_agent() else { return false };
    let Some(state) = telemetry::state_for(&cx) else {
        return true;
    };
    let value: Value = match serde_json::to_value(&value) {
        Ok(serde_json::Value::Bool(b)) => b.into(),
        Ok(serde_json::Value::Number(n)) => match n.as_i64() {
            Some(i) => i.into(),
            None => n.as_f64().unwrap_or(f64::NAN).into(),
        },
        Ok(serde_json::Value::String(s)) => state.preview(&s, 1000).into(),
        Ok(other) => state.json_content(other).into(),
        Err(e) => format!("<unserialisable: {e}>").into(),
    };
    cx.span().set_attribute(KeyValue::new(
        format!("{WAXELL_META_PREFIX}{}", key_segment(key.as_ref())),
        value,
    ));
    true
}

/// The trace id of the current context, as 32 hex digits, if a span is active.
pub fn current_trace_id() -> Option<String> {
    let cx = Context::current();
    let span_context = cx.span().span_context().clone();
    span_context
        .is_valid()
        .then(|| span_context.trace_id().to_string())
}
