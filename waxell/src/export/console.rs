//! A readable trace tree: span names, durations, tool types, tokens, decisions, scores and errors. The one
//! renderer: the embedded default prints spans with it as they end, and `waxell show` prints saved trace files
//! with it, through the same [`View`] of a span.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::{Duration, UNIX_EPOCH};

use opentelemetry::trace::Status;
use opentelemetry::{KeyValue, Value};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue};
use opentelemetry_proto::tonic::trace::v1 as proto;
use opentelemetry_sdk::trace::SpanData;

use crate::semconv::*;

/// What the tree shows of one span, from a live `SpanData` or a span read back from an OTLP file.
#[derive(Debug, Clone)]
pub(crate) struct View {
    pub(crate) trace_id: String,
    pub(crate) id: Vec<u8>,
    /// Empty for a root.
    pub(crate) parent: Vec<u8>,
    pub(crate) name: String,
    pub(crate) start_nanos: u64,
    pub(crate) end_nanos: u64,
    pub(crate) attributes: Vec<KeyValue>,
    /// Events: name and attributes (scores are `gen_ai.evaluation.result` events).
    pub(crate) events: Vec<(String, Vec<KeyValue>)>,
    pub(crate) error: Option<String>,
}

fn nanos(t: std::time::SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

impl View {
    pub(crate) fn from_sdk(span: &SpanData) -> Self {
        let parent = if span.parent_span_id == opentelemetry::trace::SpanId::INVALID {
            Vec::new()
        } else {
            span.parent_span_id.to_bytes().to_vec()
        };
        Self {
            trace_id: span.span_context.trace_id().to_string(),
            id: span.span_context.span_id().to_bytes().to_vec(),
            parent,
            name: span.name.to_string(),
            start_nanos: nanos(span.start_time),
            end_nanos: nanos(span.end_time),
            attributes: span.attributes.clone(),
            events: span
                .events
                .iter()
                .map(|e| (e.name.to_string(), e.attributes.clone()))
                .collect(),
            error: match &span.status {
                Status::Error { description } => Some(description.to_string()),
                _ => None,
            },
        }
    }

    pub(crate) fn from_proto(span: &proto::Span) -> Self {
        let error = span
            .status
            .as_ref()
            .filter(|s| s.code == proto::status::StatusCode::Error as i32)
            .map(|s| s.message.clone());
        Self {
            trace_id: span.trace_id.iter().map(|b| format!("{b:02x}")).collect(),
            id: span.span_id.clone(),
            parent: span.parent_span_id.clone(),
            name: span.name.clone(),
            start_nanos: span.start_time_unix_nano,
            end_nanos: span.end_time_unix_nano,
            attributes: key_values(&span.attributes),
            events: span
                .events
                .iter()
                .map(|e| (e.name.clone(), key_values(&e.attributes)))
                .collect(),
            error,
        }
    }
}

fn key_values(list: &[opentelemetry_proto::tonic::common::v1::KeyValue]) -> Vec<KeyValue> {
    list.iter()
        .map(|kv| KeyValue::new(kv.key.clone(), value(kv.value.as_ref())))
        .collect()
}

fn value(v: Option<&AnyValue>) -> Value {
    match v.and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => Value::from(s.clone()),
        Some(any_value::Value::BoolValue(b)) => Value::Bool(*b),
        Some(any_value::Value::IntValue(i)) => Value::I64(*i),
        Some(any_value::Value::DoubleValue(d)) => Value::F64(*d),
        Some(any_value::Value::ArrayValue(a)) => Value::from(
            a.values
                .iter()
                .map(|v| text(&value(Some(v))))
                .collect::<Vec<_>>()
                .join(","),
        ),
        Some(other) => Value::from(format!("{other:?}")),
        None => Value::from(""),
    }
}

fn attr<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a Value> {
    attrs.iter().find(|kv| kv.key.as_str() == key).map(|kv| &kv.value)
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.as_str().to_owned(),
        other => other.to_string(),
    }
}

fn short(s: &str, max: usize) -> String {
    let s = s.replace('\n', " ");
    match s.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &s[..cut]),
        None => s,
    }
}

fn duration(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1000.0;
    if ms >= 1000.0 {
        format!("{:.2} s", ms / 1000.0)
    } else if ms >= 1.0 {
        format!("{ms:.0} ms")
    } else {
        format!("{:.0} µs", ms * 1000.0)
    }
}

/// One line of details after the span's name.
fn details(span: &View) -> String {
    let a = &span.attributes;
    let mut parts = Vec::new();
    if let Some(t) = attr(a, WAXELL_TOOL_TYPE) {
        parts.push(format!("[{}]", text(t)));
    }
    if let (Some(i), Some(o)) = (
        attr(a, GEN_AI_USAGE_INPUT_TOKENS),
        attr(a, GEN_AI_USAGE_OUTPUT_TOKENS),
    ) {
        parts.push(format!("tokens {}→{}", text(i), text(o)));
    }
    if let Some(Value::F64(c)) = attr(a, WAXELL_LLM_COST) {
        parts.push(format!("${c:.5}"));
    }
    if attr(a, WAXELL_DRY_RUN).is_some_and(|v| matches!(v, Value::Bool(true))) {
        parts.push("dry-run".into());
    }
    if let Some(c) = attr(a, WAXELL_DECISION_CHOSEN) {
        let conf = attr(a, WAXELL_DECISION_CONFIDENCE)
            .map(|c| format!(" ({})", text(c)))
            .unwrap_or_default();
        parts.push(format!("→ {}{conf}", text(c)));
    }
    if attr(a, WAXELL_DECISION_INVALID_CHOICE).is_some() {
        parts.push("⚠ not one of the options".into());
    }
    if let Some(c) = attr(a, WAXELL_REASONING_CONCLUSION) {
        parts.push(format!("⇒ {}", short(&text(c), 60)));
    }
    if let Some(e) = attr(a, WAXELL_SANDBOX_ERROR_NAME) {
        parts.push(format!("code raised {}", text(e)));
    }
    if let Some(n) = attr(a, WAXELL_RETRIEVAL_RESULT_COUNT) {
        parts.push(format!("{} results", text(n)));
    }
    if attr(a, WAXELL_CANCELLED).is_some() {
        parts.push("⊘ cancelled".into());
    }
    if let Some(description) = &span.error {
        parts.push(format!("✗ {}", short(description, 80)));
    }
    parts.join("  ")
}

fn scores(span: &View) -> Vec<String> {
    span.events
        .iter()
        .filter(|(name, _)| name == GEN_AI_EVALUATION_RESULT)
        .map(|(_, a)| {
            let name = attr(a, GEN_AI_EVALUATION_NAME).map(text).unwrap_or_default();
            let value = attr(a, GEN_AI_EVALUATION_SCORE_LABEL)
                .filter(|_| attr(a, WAXELL_SCORE_DATA_TYPE).is_some_and(|t| text(t) != "numeric"))
                .or(attr(a, GEN_AI_EVALUATION_SCORE_VALUE))
                .map(text)
                .unwrap_or_default();
            let comment =
                attr(a, GEN_AI_EVALUATION_EXPLANATION).map(|c| format!(" — {}", short(&text(c), 70)));
            format!("★ score {name} = {value}{}", comment.unwrap_or_default())
        })
        .collect()
}

/// Render the spans of one trace, as the SDK hands them to an exporter, as a tree.
pub(crate) fn render_sdk_trace(spans: &[SpanData]) -> String {
    render_trace(&spans.iter().map(View::from_sdk).collect::<Vec<_>>())
}

/// Render the spans of one trace as a tree.
pub(crate) fn render_trace(spans: &[View]) -> String {
    let ids: HashMap<&[u8], usize> = spans
        .iter()
        .enumerate()
        .map(|(i, s)| (s.id.as_slice(), i))
        .collect();
    let mut children: HashMap<Option<&[u8]>, Vec<usize>> = HashMap::new();
    for (i, s) in spans.iter().enumerate() {
        let parent = Some(s.parent.as_slice()).filter(|p| ids.contains_key(p));
        children.entry(parent).or_default().push(i);
    }
    for list in children.values_mut() {
        list.sort_by_key(|&i| spans[i].start_nanos);
    }
    let mut out = String::new();
    let trace_id = spans.first().map(|s| s.trace_id.clone()).unwrap_or_default();
    let _ = writeln!(out, "\n── waxell trace {trace_id} ──");
    let roots = children.get(&None).cloned().unwrap_or_default();
    for root in roots {
        walk(spans, &children, root, "", None, &mut out);
    }
    out
}

fn walk(
    spans: &[View],
    children: &HashMap<Option<&[u8]>, Vec<usize>>,
    index: usize,
    prefix: &str,
    last: Option<bool>,
    out: &mut String,
) {
    let span = &spans[index];
    let took = Duration::from_nanos(span.end_nanos.saturating_sub(span.start_nanos));
    let (branch, child_prefix) = match last {
        None => (String::new(), String::new()),
        Some(true) => (format!("{prefix}└─ "), format!("{prefix}   ")),
        Some(false) => (format!("{prefix}├─ "), format!("{prefix}│  ")),
    };
    let info = details(span);
    let _ = writeln!(
        out,
        "{branch}{}  {}{}",
        span.name,
        duration(took),
        if info.is_empty() {
            String::new()
        } else {
            format!("  {info}")
        }
    );
    let kids = children
        .get(&Some(span.id.as_slice()))
        .cloned()
        .unwrap_or_default();
    let score_lines = scores(span);
    let total = kids.len() + score_lines.len();
    for (n, line) in score_lines.iter().enumerate() {
        let end = n + 1 == total;
        let _ = writeln!(out, "{child_prefix}{}{line}", if end { "└─ " } else { "├─ " });
    }
    for (n, kid) in kids.iter().enumerate() {
        let end = score_lines.len() + n + 1 == total;
        walk(spans, children, *kid, &child_prefix, Some(end), out);
    }
}
