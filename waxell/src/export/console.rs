//! A readable trace tree: span names, durations, tool types, tokens, decisions, scores and errors.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Duration;

use opentelemetry::trace::{SpanId, Status};
use opentelemetry::{KeyValue, Value};
use opentelemetry_sdk::trace::SpanData;

use crate::semconv::*;

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
fn details(span: &SpanData) -> String {
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
    if let Status::Error { description } = &span.status {
        parts.push(format!("✗ {}", short(description, 80)));
    }
    parts.join("  ")
}

fn scores(span: &SpanData) -> Vec<String> {
    span.events
        .iter()
        .filter(|e| e.name == GEN_AI_EVALUATION_RESULT)
        .map(|e| {
            let a = &e.attributes;
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

/// Render the spans of one trace as a tree.
pub(crate) fn render_trace(spans: &[SpanData]) -> String {
    let ids: HashMap<SpanId, usize> = spans
        .iter()
        .enumerate()
        .map(|(i, s)| (s.span_context.span_id(), i))
        .collect();
    let mut children: HashMap<Option<SpanId>, Vec<usize>> = HashMap::new();
    for (i, s) in spans.iter().enumerate() {
        let parent = Some(s.parent_span_id).filter(|p| ids.contains_key(p));
        children.entry(parent).or_default().push(i);
    }
    for list in children.values_mut() {
        list.sort_by_key(|&i| spans[i].start_time);
    }
    let mut out = String::new();
    let trace_id = spans
        .first()
        .map(|s| s.span_context.trace_id().to_string())
        .unwrap_or_default();
    let _ = writeln!(out, "\n── waxell trace {trace_id} ──");
    let roots = children.get(&None).cloned().unwrap_or_default();
    for root in roots {
        walk(spans, &children, root, "", None, &mut out);
    }
    out
}

fn walk(
    spans: &[SpanData],
    children: &HashMap<Option<SpanId>, Vec<usize>>,
    index: usize,
    prefix: &str,
    last: Option<bool>,
    out: &mut String,
) {
    let span = &spans[index];
    let took = span.end_time.duration_since(span.start_time).unwrap_or_default();
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
        .get(&Some(span.span_context.span_id()))
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
