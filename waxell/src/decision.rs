//! What `#[reasoning]` and `#[decision]` record, the types they understand, and manual `decide()`.

use opentelemetry::trace::{SpanBuilder, SpanKind, TraceContextExt};
use opentelemetry::{Context, KeyValue, Value};
use serde::{Serialize, Serializer};

use crate::capture::Captured;
use crate::semconv::*;
use crate::spans::string_array;
use crate::telemetry::{self, State};

/// A reasoning step's record, as `#[reasoning]` reads it from the function's return value.
///
/// Any serialisable value with `thought`, `evidence` and `conclusion` fields works too; a plain string is
/// taken as the thought.
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct Reasoning {
    /// What the agent thought at this step (`waxell.reasoning.thought`).
    pub thought: String,
    /// What the thought rests on, one item each (`waxell.reasoning.evidence`; may be empty).
    #[serde(default)]
    pub evidence: Vec<String>,
    /// What the step concluded (`waxell.reasoning.conclusion`; empty = not recorded).
    #[serde(default)]
    pub conclusion: String,
}

impl Reasoning {
    /// A record with this thought, no evidence and no conclusion.
    pub fn new(thought: impl Into<String>) -> Self {
        Self {
            thought: thought.into(),
            ..Self::default()
        }
    }
    /// Add one piece of evidence (call it again for more).
    pub fn evidence(mut self, item: impl Into<String>) -> Self {
        self.evidence.push(item.into());
        self
    }
    /// Set the conclusion.
    pub fn conclusion(mut self, conclusion: impl Into<String>) -> Self {
        self.conclusion = conclusion.into();
        self
    }
}

/// The options of a typed decision: implemented by `#[derive(waxell::DecisionOptions)]` on a fieldless enum,
/// so a misspelt option does not compile.
pub trait DecisionOptions: 'static {
    /// Every option, in declaration order.
    const OPTIONS: &'static [&'static str];
    /// This option's name.
    fn as_str(&self) -> &'static str;
}

/// A decision's record, as `#[decision]` reads it from the function's return value.
///
/// `C` is the chosen option: a [`DecisionOptions`] enum for typed decisions, or a `String`.
/// Any serialisable value with `chosen` (or `choice`), `reasoning` (or `reason`) and `confidence` fields works
/// too; any other value is taken as the chosen option itself.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision<C> {
    /// The option chosen.
    pub chosen: C,
    /// Why it was chosen, when given.
    pub reasoning: Option<String>,
    /// In `[0, 1]`; also recorded as the score `decision_confidence:{name}`.
    pub confidence: Option<f64>,
}

impl<C> Decision<C> {
    /// A decision for `chosen` with no reasoning and no confidence.
    pub fn new(chosen: C) -> Self {
        Self {
            chosen,
            reasoning: None,
            confidence: None,
        }
    }
    /// Say why this option was chosen.
    pub fn reasoning(mut self, reasoning: impl Into<String>) -> Self {
        self.reasoning = Some(reasoning.into());
        self
    }
    /// How sure the decision is, in `[0, 1]` (values outside are recorded as given).
    pub fn confidence(mut self, confidence: f64) -> Self {
        self.confidence = Some(confidence);
        self
    }
}

/// How a chosen option is named in the record.
pub trait ChosenName {
    fn chosen_name(&self) -> String;
}
impl<T: DecisionOptions> ChosenName for T {
    fn chosen_name(&self) -> String {
        self.as_str().to_owned()
    }
}
impl ChosenName for String {
    fn chosen_name(&self) -> String {
        self.clone()
    }
}
impl ChosenName for &str {
    fn chosen_name(&self) -> String {
        (*self).to_owned()
    }
}

impl<C: ChosenName> Serialize for Decision<C> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("Decision", 3)?;
        st.serialize_field("chosen", &self.chosen.chosen_name())?;
        st.serialize_field("reasoning", &self.reasoning)?;
        st.serialize_field("confidence", &self.confidence)?;
        st.end()
    }
}

struct Fields {
    chosen: String,
    reasoning: Option<String>,
    confidence: Option<f64>,
}

fn decision_fields(value: &Captured) -> Fields {
    if let Captured::Json(serde_json::Value::Object(map)) = value {
        let text = |keys: &[&str]| {
            keys.iter()
                .find_map(|k| map.get(*k))
                .filter(|v| !v.is_null())
                .map(|v| match v {
                    serde_json::Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
        };
        if let Some(chosen) = text(&["chosen", "choice"]) {
            return Fields {
                chosen,
                reasoning: text(&["reasoning", "reason"]),
                confidence: map.get("confidence").and_then(|c| c.as_f64()),
            };
        }
    }
    Fields {
        chosen: value.to_text(),
        reasoning: None,
        confidence: None,
    }
}

/// Record a `#[decision]` function's return value on its span (the context `cx` holds).
pub(crate) fn record_decision_outcome(
    cx: &Context,
    state: &State,
    name: &str,
    options: &[&str],
    value: &Captured,
) {
    let f = decision_fields(value);
    apply_decision(cx, state, name, options, &f);
}

fn apply_decision(cx: &Context, state: &State, name: &str, options: &[impl AsRef<str>], f: &Fields) {
    let span = cx.span();
    span.set_attribute(KeyValue::new(WAXELL_DECISION_CHOSEN, f.chosen.clone()));
    span.set_attribute(KeyValue::new(OI_OUTPUT_VALUE, f.chosen.clone()));
    span.set_attribute(KeyValue::new(OI_OUTPUT_MIME_TYPE, MIME_TEXT));
    if !options.is_empty() {
        let names: Vec<&str> = options.iter().map(|o| o.as_ref()).collect();
        span.set_attribute(KeyValue::new(
            OI_INPUT_VALUE,
            serde_json::json!({ "options": names }).to_string(),
        ));
        span.set_attribute(KeyValue::new(OI_INPUT_MIME_TYPE, MIME_JSON));
        // Parallel tool calls choose several options at once, recorded comma-separated.
        let chosen_ok = names.contains(&f.chosen.as_str())
            || (f.chosen.contains(',') && f.chosen.split(',').all(|part| names.contains(&part.trim())));
        if !chosen_ok {
            span.set_attribute(KeyValue::new(WAXELL_DECISION_INVALID_CHOICE, true));
            span.add_event(
                "waxell.decision.invalid_choice",
                vec![
                    KeyValue::new(WAXELL_DECISION_CHOSEN, f.chosen.clone()),
                    KeyValue::new(WAXELL_DECISION_OPTIONS, string_array(&names)),
                ],
            );
        }
    }
    if let Some(reasoning) = &f.reasoning {
        if state.capture.content {
            span.set_attribute(KeyValue::new(WAXELL_DECISION_REASONING, state.content(reasoning)));
        }
    }
    if let Some(confidence) = f.confidence {
        span.set_attribute(KeyValue::new(WAXELL_DECISION_CONFIDENCE, confidence));
        let comment = format!("Chose '{}' from {} options", f.chosen, options.len());
        let rounded = (confidence * 10_000.0).round() / 10_000.0;
        crate::score::record_in(
            cx,
            &format!("decision_confidence:{name}"),
            rounded.into(),
            Some(&comment),
        );
    }
}

/// Record a decision made outside a `#[decision]` function: a `decide {name}` span under the current context.
/// With a confidence, also records the score `decision_confidence:{name}` on the current agent run.
pub fn decide(name: &str, options: &[&str], chosen: &str, reasoning: Option<&str>, confidence: Option<f64>) {
    let options: Vec<String> = options.iter().map(|s| (*s).to_owned()).collect();
    record(name, &options, chosen, reasoning, confidence, None);
}

/// A `decide {name}` span under the current context; `at` is when the decision was made if it is recorded
/// later (a model's tool call recorded off the caller's thread), else now.
pub(crate) fn record(
    name: &str,
    options: &[String],
    chosen: &str,
    reasoning: Option<&str>,
    confidence: Option<f64>,
    at: Option<std::time::SystemTime>,
) {
    let parent = Context::current();
    let Some(state) = telemetry::state_for(&parent) else {
        return;
    };
    let mut builder = SpanBuilder::from_name(format!("decide {name}"))
        .with_kind(SpanKind::Internal)
        .with_attributes([
            KeyValue::new(GEN_AI_OPERATION_NAME, OP_DECIDE),
            KeyValue::new(OI_SPAN_KIND, OI_KIND_CHAIN),
            KeyValue::new(WAXELL_SPAN_TYPE, "decision"),
            KeyValue::new(WAXELL_DECISION_NAME, name.to_owned()),
            KeyValue::new(WAXELL_DECISION_OPTIONS, string_array(options)),
        ]);
    if let Some(at) = at {
        builder = builder.with_start_time(at);
    }
    let cx = state.start(builder, &parent);
    if cx.span().is_recording() {
        let fields = Fields {
            chosen: chosen.to_owned(),
            reasoning: reasoning.map(str::to_owned),
            confidence,
        };
        apply_decision(&cx, &state, name, options, &fields);
    }
    match at {
        Some(at) => cx.span().end_with_timestamp(at),
        None => cx.span().end(),
    }
}

/// Record a `#[reasoning]` function's return value on its span (the context `cx` holds).
pub(crate) fn record_reasoning(cx: &Context, state: &State, value: &Captured) {
    if !state.capture.content {
        return;
    }
    let (thought, evidence, conclusion) = match value {
        Captured::Json(serde_json::Value::Object(map)) => {
            let text = |k: &str| {
                map.get(k)
                    .map(|v| v.as_str().map(str::to_owned).unwrap_or_else(|| v.to_string()))
            };
            let evidence = match map.get("evidence") {
                Some(serde_json::Value::Array(items)) => items
                    .iter()
                    .map(|i| i.as_str().map(str::to_owned).unwrap_or_else(|| i.to_string()))
                    .collect(),
                Some(serde_json::Value::String(s)) => vec![s.clone()],
                _ => Vec::new(),
            };
            (
                text("thought").unwrap_or_else(|| value.to_text()),
                evidence,
                text("conclusion"),
            )
        }
        other => (other.to_text(), Vec::new(), None),
    };
    let span = cx.span();
    let thought = state.content(&thought);
    span.set_attribute(KeyValue::new(WAXELL_REASONING_THOUGHT, thought.clone()));
    if !evidence.is_empty() {
        let evidence: Vec<String> = evidence.iter().map(|e| state.content(e)).collect();
        span.set_attribute(KeyValue::new(WAXELL_REASONING_EVIDENCE, string_array(&evidence)));
    }
    let conclusion = conclusion.map(|c| state.content(&c));
    if let Some(c) = &conclusion {
        span.set_attribute(KeyValue::new(WAXELL_REASONING_CONCLUSION, c.clone()));
    }
    // The GenAI shape for reasoning text: an assistant message with a reasoning part.
    let mut parts = vec![serde_json::json!({"type": "reasoning", "content": thought})];
    if let Some(c) = &conclusion {
        parts.push(serde_json::json!({"type": "text", "content": c}));
    }
    let messages = serde_json::json!([{"role": "assistant", "parts": parts}]);
    span.set_attribute(KeyValue::new(
        GEN_AI_OUTPUT_MESSAGES,
        Value::from(messages.to_string()),
    ));
}
