//! What the UI keeps of a span ([`SpanRecord`], OTLP flattened to JSON-friendly fields) and of a run
//! ([`RunSummary`], the run list's row, folded span by span as they arrive).

use std::collections::BTreeMap;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::{span, status, Span};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::semconv::*;

/// Characters of a run's inputs and outputs kept for the list's search.
const SEARCH_CHARS: usize = 32 * 1024;
/// Characters of the root's input and output shown in the run list.
const PREVIEW_CHARS: usize = 300;

/// One span as the UI stores and serves it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SpanRecord {
    /// Trace id, 32 lowercase hex digits.
    pub trace_id: String,
    /// Span id, 16 lowercase hex digits.
    pub span_id: String,
    /// Parent span id, empty for a root.
    pub parent_id: String,
    /// The span's name.
    pub name: String,
    /// `internal`, `server`, `client`, `producer`, `consumer` or `unspecified`.
    pub kind: String,
    /// Start, nanoseconds since the Unix epoch.
    pub start: u64,
    /// End, nanoseconds since the Unix epoch.
    pub end: u64,
    /// `unset`, `ok` or `error`.
    pub status: String,
    /// The status message (an error's text).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub status_message: String,
    /// Attributes, each OTLP value as JSON (arrays as arrays, bytes as base64).
    pub attributes: Map<String, Value>,
    /// Events, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<EventRecord>,
    /// Links to other spans.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub links: Vec<LinkRecord>,
    /// The resource's `service.name`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub service: String,
    /// The instrumentation scope's name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub scope: String,
}

/// A span event.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct EventRecord {
    /// The event's name.
    pub name: String,
    /// When, nanoseconds since the Unix epoch.
    pub time: u64,
    /// Its attributes.
    pub attributes: Map<String, Value>,
}

/// A link from a span to another.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LinkRecord {
    /// The linked trace.
    pub trace_id: String,
    /// The linked span.
    pub span_id: String,
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// An OTLP value as JSON.
pub(crate) fn json_value(value: Option<&AnyValue>) -> Value {
    match value.and_then(|v| v.value.as_ref()) {
        None => Value::Null,
        Some(any_value::Value::StringValue(s)) => Value::String(s.clone()),
        Some(any_value::Value::BoolValue(b)) => Value::Bool(*b),
        Some(any_value::Value::IntValue(i)) => Value::from(*i),
        Some(any_value::Value::DoubleValue(d)) => {
            serde_json::Number::from_f64(*d).map_or_else(|| Value::String(d.to_string()), Value::Number)
        }
        Some(any_value::Value::ArrayValue(a)) => {
            Value::Array(a.values.iter().map(|v| json_value(Some(v))).collect())
        }
        Some(any_value::Value::KvlistValue(kv)) => Value::Object(attributes(&kv.values)),
        Some(any_value::Value::BytesValue(b)) => {
            use base64::Engine;
            Value::String(base64::engine::general_purpose::STANDARD.encode(b))
        }
        #[allow(unreachable_patterns, reason = "newer OTLP value kinds are shown as null")]
        Some(_) => Value::Null,
    }
}

fn attributes(kvs: &[KeyValue]) -> Map<String, Value> {
    kvs.iter()
        .map(|kv| (kv.key.clone(), json_value(kv.value.as_ref())))
        .collect()
}

impl SpanRecord {
    /// Flatten one OTLP span with its resource's service name and its scope's name.
    pub fn from_proto(span: &Span, service: &str, scope: &str) -> Self {
        let kind = match span::SpanKind::try_from(span.kind).unwrap_or(span::SpanKind::Unspecified) {
            span::SpanKind::Internal => "internal",
            span::SpanKind::Server => "server",
            span::SpanKind::Client => "client",
            span::SpanKind::Producer => "producer",
            span::SpanKind::Consumer => "consumer",
            span::SpanKind::Unspecified => "unspecified",
        };
        let (status, status_message) = match &span.status {
            Some(s) => (
                match status::StatusCode::try_from(s.code).unwrap_or(status::StatusCode::Unset) {
                    status::StatusCode::Ok => "ok",
                    status::StatusCode::Error => "error",
                    status::StatusCode::Unset => "unset",
                },
                s.message.clone(),
            ),
            None => ("unset", String::new()),
        };
        Self {
            trace_id: hex(&span.trace_id),
            span_id: hex(&span.span_id),
            parent_id: hex(&span.parent_span_id),
            name: span.name.clone(),
            kind: kind.to_owned(),
            start: span.start_time_unix_nano,
            end: span.end_time_unix_nano.max(span.start_time_unix_nano),
            status: status.to_owned(),
            status_message,
            attributes: attributes(&span.attributes),
            events: span
                .events
                .iter()
                .map(|e| EventRecord {
                    name: e.name.clone(),
                    time: e.time_unix_nano,
                    attributes: attributes(&e.attributes),
                })
                .collect(),
            links: span
                .links
                .iter()
                .map(|l| LinkRecord {
                    trace_id: hex(&l.trace_id),
                    span_id: hex(&l.span_id),
                })
                .collect(),
            service: service.to_owned(),
            scope: scope.to_owned(),
        }
    }

    /// A model call: a GenAI inference operation or OpenInference kind `LLM`.
    pub fn is_llm(&self) -> bool {
        SpanFacts::is_llm(self)
    }
}

/// Every span of a request, flattened.
pub fn spans_of(request: &ExportTraceServiceRequest) -> Vec<SpanRecord> {
    let mut out = Vec::new();
    for rs in &request.resource_spans {
        let service = rs
            .resource
            .as_ref()
            .and_then(|r| r.attributes.iter().find(|kv| kv.key == "service.name"))
            .and_then(|kv| match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(any_value::Value::StringValue(s)) => Some(s.as_str()),
                _ => None,
            })
            .unwrap_or_default();
        for ss in &rs.scope_spans {
            let scope = ss.scope.as_ref().map(|s| s.name.as_str()).unwrap_or_default();
            for span in &ss.spans {
                out.push(SpanRecord::from_proto(span, service, scope));
            }
        }
    }
    out
}

/// A score as the run list shows it: the latest value of that name in the run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct Score {
    /// The numeric value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
    /// The label (categorical and boolean scores).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// The comment (`gen_ai.evaluation.explanation`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
    /// When it was recorded (ns), so the latest wins.
    #[serde(default)]
    pub time: u64,
}

/// One row of the run list: a trace, summarised.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct RunSummary {
    /// The trace id.
    pub trace_id: String,
    /// The root span's name (until the root arrives, the first span's).
    pub name: String,
    /// The root's agent, else the first agent seen.
    pub agent: String,
    /// Every agent in the run, in order of arrival.
    pub agents: Vec<String>,
    /// The service that sent it.
    pub service: String,
    /// Earliest start (ns).
    pub start: u64,
    /// Latest end (ns).
    pub end: u64,
    /// `running` (no root span yet), `ok` or `error` (the root failed).
    pub status: String,
    /// Whether the root span arrived.
    pub root_seen: bool,
    /// Spans with status error.
    pub errors: u64,
    /// Spans stored.
    pub spans: u64,
    /// Input tokens of the run's model calls.
    pub input_tokens: u64,
    /// Output tokens of the run's model calls.
    pub output_tokens: u64,
    /// Cost of the run's model calls (USD), when any reported one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
    /// Scores by name.
    pub scores: BTreeMap<String, Score>,
    /// `gen_ai.conversation.id` / `session.id`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub session: String,
    /// `user.id`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub user: String,
    /// The root's input, shortened.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub input: String,
    /// The root's output, shortened.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub output: String,
    /// Lowercased inputs and outputs of the run's spans, for search (stored, not served).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub search: String,
    /// The store's change counter when this run last changed.
    pub seq: u64,
}

fn shorten(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

/// `shorten(&text.to_lowercase(), max)`, appended to `out`; ASCII without the copies.
fn push_lowercase(out: &mut String, text: &str, max: usize) {
    if !text.is_ascii() {
        out.push_str(&shorten(&text.to_lowercase(), max));
        return;
    }
    let part = &text[..text.len().min(max)];
    out.extend(part.bytes().map(|b| char::from(b.to_ascii_lowercase())));
    if part.len() < text.len() {
        out.push('…');
    }
}

impl RunSummary {
    /// An empty summary of `trace_id`.
    pub fn new(trace_id: &str) -> Self {
        Self {
            trace_id: trace_id.to_owned(),
            status: "running".to_owned(),
            start: u64::MAX,
            ..Self::default()
        }
    }

    /// Fold one newly stored span into the summary.
    pub fn add(&mut self, span: &SpanRecord) {
        self.fold(span);
    }

    /// Fold in the summary of spans that came after this one's (`later`, folded from [`RunSummary::new`]),
    /// as if they had been folded in one by one. `later_root_agent`: an agent's root span was among them.
    /// The search text may be cut at another place than one by one would cut it.
    pub(crate) fn merge(&mut self, later: &RunSummary, later_root_agent: bool) {
        self.spans += later.spans;
        self.start = self.start.min(later.start);
        self.end = self.end.max(later.end);
        if self.service.is_empty() {
            later.service.clone_into(&mut self.service);
        }
        self.errors += later.errors;
        if later.root_seen || self.name.is_empty() {
            later.name.clone_into(&mut self.name);
        }
        for agent in &later.agents {
            if !self.agents.contains(agent) {
                self.agents.push(agent.clone());
            }
        }
        if later_root_agent || self.agent.is_empty() {
            later.agent.clone_into(&mut self.agent);
        }
        if self.session.is_empty() {
            later.session.clone_into(&mut self.session);
        }
        if self.user.is_empty() {
            later.user.clone_into(&mut self.user);
        }
        self.input_tokens += later.input_tokens;
        self.output_tokens += later.output_tokens;
        if let Some(cost) = later.cost {
            self.cost = Some(self.cost.unwrap_or(0.0) + cost);
        }
        for (name, score) in &later.scores {
            if self.scores.get(name).is_none_or(|old| old.time <= score.time) {
                self.scores.insert(name.clone(), score.clone());
            }
        }
        if !later.input.is_empty() {
            later.input.clone_into(&mut self.input);
        }
        if !later.output.is_empty() {
            later.output.clone_into(&mut self.output);
        }
        if self.search.len() < SEARCH_CHARS && !later.search.is_empty() {
            let room = SEARCH_CHARS - self.search.len();
            self.search.push_str(&shorten(&later.search, room));
        }
        if later.root_seen {
            self.root_seen = true;
            later.status.clone_into(&mut self.status);
        }
    }

    /// Fold one newly stored span, as a record or straight from OTLP, into the summary.
    pub(crate) fn fold<S: SpanFacts + ?Sized>(&mut self, span: &S) {
        self.spans += 1;
        if span.start() > 0 {
            self.start = self.start.min(span.start());
        }
        self.end = self.end.max(span.end());
        if self.service.is_empty() {
            span.service().clone_into(&mut self.service);
        }
        if span.is_error() {
            self.errors += 1;
        }
        let is_root = span.is_root();
        if self.name.is_empty() || is_root {
            span.name().clone_into(&mut self.name);
        }
        if span.is_agent() {
            if let Some(agent) = span.agent_name() {
                if !self.agents.iter().any(|a| a == agent) {
                    self.agents.push(agent.to_owned());
                }
                if self.agent.is_empty() || is_root {
                    agent.clone_into(&mut self.agent);
                }
            }
        }
        for (key, field) in [
            (GEN_AI_CONVERSATION_ID, 0),
            (OI_SESSION_ID, 0),
            (WAXELL_SESSION_ID, 0),
            (OI_USER_ID, 1),
            (WAXELL_USER_ID, 1),
        ] {
            if let Some(v) = span.str_attr(key) {
                let slot = if field == 0 {
                    &mut self.session
                } else {
                    &mut self.user
                };
                if slot.is_empty() {
                    *slot = v.to_owned();
                }
            }
        }
        if span.is_llm() {
            let tokens =
                |a: &str, b: &str| span.num_attr(a).or_else(|| span.num_attr(b)).unwrap_or(0.0) as u64;
            self.input_tokens += tokens(GEN_AI_USAGE_INPUT_TOKENS, OI_LLM_TOKEN_COUNT_PROMPT);
            self.output_tokens += tokens(GEN_AI_USAGE_OUTPUT_TOKENS, OI_LLM_TOKEN_COUNT_COMPLETION);
            if let Some(cost) = span
                .num_attr(WAXELL_LLM_COST)
                .or_else(|| span.num_attr(OI_LLM_COST_TOTAL))
            {
                self.cost = Some(self.cost.unwrap_or(0.0) + cost);
            }
        }
        span.scores(&mut |name, score| {
            let keep = self.scores.get(name).is_none_or(|old| old.time <= score.time);
            if keep {
                self.scores.insert(name.to_owned(), score);
            }
        });
        for key in [OI_INPUT_VALUE, OI_OUTPUT_VALUE] {
            if let Some(text) = span.str_attr(key) {
                if is_root {
                    let slot = if key == OI_INPUT_VALUE {
                        &mut self.input
                    } else {
                        &mut self.output
                    };
                    *slot = shorten(text, PREVIEW_CHARS);
                }
                if self.search.len() < SEARCH_CHARS {
                    let room = SEARCH_CHARS - self.search.len();
                    push_lowercase(&mut self.search, text, room);
                    self.search.push('\n');
                }
            }
        }
        if is_root {
            self.root_seen = true;
            self.status = if span.is_error() { "error" } else { "ok" }.to_owned();
        }
    }
}

/// What a run's summary reads of a span: a [`SpanRecord`] or an OTLP span as it was decoded ([`OtlpSpan`]).
pub(crate) trait SpanFacts {
    fn start(&self) -> u64;
    fn end(&self) -> u64;
    fn service(&self) -> &str;
    fn name(&self) -> &str;
    fn is_error(&self) -> bool;
    fn is_root(&self) -> bool;
    /// A string attribute (the last one of that key).
    fn str_attr(&self, key: &str) -> Option<&str>;
    /// A numeric attribute (integer or finite double; the last one of that key).
    fn num_attr(&self, key: &str) -> Option<f64>;
    /// Each evaluation result among the span's events, by score name.
    fn scores(&self, found: &mut dyn FnMut(&str, Score));

    fn operation(&self) -> &str {
        self.str_attr(GEN_AI_OPERATION_NAME).unwrap_or_default()
    }

    /// A model call: a GenAI inference operation or OpenInference kind `LLM`.
    fn is_llm(&self) -> bool {
        matches!(
            self.operation(),
            "chat" | "text_completion" | "generate_content" | "embeddings"
        ) || self.str_attr(OI_SPAN_KIND) == Some(OI_KIND_LLM)
    }

    fn is_agent(&self) -> bool {
        self.operation() == OP_INVOKE_AGENT || self.str_attr(OI_SPAN_KIND) == Some(OI_KIND_AGENT)
    }

    fn agent_name(&self) -> Option<&str> {
        self.str_attr(GEN_AI_AGENT_NAME)
            .or_else(|| self.str_attr(OI_AGENT_NAME))
            .or_else(|| self.str_attr(WAXELL_AGENT_NAME))
    }
}

impl SpanFacts for SpanRecord {
    fn start(&self) -> u64 {
        self.start
    }
    fn end(&self) -> u64 {
        self.end
    }
    fn service(&self) -> &str {
        &self.service
    }
    fn name(&self) -> &str {
        &self.name
    }
    fn is_error(&self) -> bool {
        self.status == "error"
    }
    fn is_root(&self) -> bool {
        self.parent_id.is_empty()
    }
    fn str_attr(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).and_then(Value::as_str)
    }
    fn num_attr(&self, key: &str) -> Option<f64> {
        self.attributes.get(key).and_then(Value::as_f64)
    }
    fn scores(&self, found: &mut dyn FnMut(&str, Score)) {
        for event in self.events.iter().filter(|e| e.name == GEN_AI_EVALUATION_RESULT) {
            let get = |k: &str| event.attributes.get(k);
            let Some(name) = get(GEN_AI_EVALUATION_NAME).and_then(Value::as_str) else {
                continue;
            };
            found(
                name,
                Score {
                    value: get(GEN_AI_EVALUATION_SCORE_VALUE).and_then(Value::as_f64),
                    label: get(GEN_AI_EVALUATION_SCORE_LABEL)
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                    comment: get(GEN_AI_EVALUATION_EXPLANATION)
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                    time: event.time,
                },
            );
        }
    }
}

/// The run list's filters (all optional; an empty string matches everything).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct RunFilter {
    /// Runs that involve this agent.
    #[serde(default)]
    pub agent: String,
    /// Runs of this session.
    #[serde(default)]
    pub session: String,
    /// Runs of this user.
    #[serde(default)]
    pub user: String,
    /// `running`, `ok` or `error`.
    #[serde(default)]
    pub status: String,
    /// Runs that started at or after this time (ms since the epoch).
    #[serde(default)]
    pub since_ms: Option<u64>,
    /// Runs that started before this time (ms since the epoch).
    #[serde(default)]
    pub until_ms: Option<u64>,
    /// Text to find in the runs' inputs and outputs (case-insensitive).
    #[serde(default)]
    pub q: String,
    /// At most this many runs (newest first); default 200.
    #[serde(default)]
    pub limit: Option<usize>,
}

impl RunFilter {
    /// Whether `run` passes every filter.
    pub fn matches(&self, run: &RunSummary) -> bool {
        (self.agent.is_empty() || run.agents.iter().any(|a| a == &self.agent))
            && (self.session.is_empty() || run.session == self.session)
            && (self.user.is_empty() || run.user == self.user)
            && (self.status.is_empty() || run.status == self.status)
            && self
                .since_ms
                .is_none_or(|t| run.start >= t.saturating_mul(1_000_000))
            && self
                .until_ms
                .is_none_or(|t| run.start < t.saturating_mul(1_000_000))
            && (self.q.is_empty()
                || run.search.contains(&self.q.to_lowercase())
                || run.name.to_lowercase().contains(&self.q.to_lowercase()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(id: &str, parent: &str, start: u64, attributes: serde_json::Value) -> SpanRecord {
        SpanRecord {
            trace_id: "ab".repeat(16),
            span_id: id.into(),
            parent_id: parent.into(),
            name: format!("span {id}"),
            kind: "internal".into(),
            start,
            end: start + 10,
            status: "unset".into(),
            status_message: String::new(),
            attributes: attributes.as_object().cloned().unwrap_or_default(),
            events: Vec::new(),
            links: Vec::new(),
            service: "svc".into(),
            scope: "scope".into(),
        }
    }

    fn scored(mut span: SpanRecord, name: &str, value: f64, time: u64) -> SpanRecord {
        span.events.push(EventRecord {
            name: GEN_AI_EVALUATION_RESULT.into(),
            time,
            attributes: serde_json::json!({
                GEN_AI_EVALUATION_NAME: name,
                GEN_AI_EVALUATION_SCORE_VALUE: value,
                GEN_AI_EVALUATION_EXPLANATION: format!("at {time}"),
            })
            .as_object()
            .cloned()
            .unwrap(),
        });
        span
    }

    /// A run's spans in the order an exporter might send them: children, the root, a late child.
    fn run() -> Vec<SpanRecord> {
        let mut llm = span(
            "03",
            "01",
            30,
            serde_json::json!({
                GEN_AI_OPERATION_NAME: "chat",
                GEN_AI_USAGE_INPUT_TOKENS: 10,
                GEN_AI_USAGE_OUTPUT_TOKENS: 5,
                WAXELL_LLM_COST: 0.5,
            }),
        );
        llm.status = "error".into();
        let mut first = span(
            "02",
            "01",
            20,
            serde_json::json!({ OI_SESSION_ID: "s1", OI_OUTPUT_VALUE: "Out One" }),
        );
        first.service = String::new();
        vec![
            first,
            span(
                "04",
                "01",
                25,
                serde_json::json!({ GEN_AI_OPERATION_NAME: OP_INVOKE_AGENT, GEN_AI_AGENT_NAME: "inner" }),
            ),
            llm,
            scored(span("05", "01", 40, serde_json::json!({})), "quality", 0.9, 5),
            scored(span("06", "01", 45, serde_json::json!({})), "quality", 0.2, 7),
            span(
                "01",
                "",
                10,
                serde_json::json!({
                    GEN_AI_OPERATION_NAME: OP_INVOKE_AGENT,
                    GEN_AI_AGENT_NAME: "outer",
                    OI_INPUT_VALUE: "In",
                    OI_OUTPUT_VALUE: "Done",
                    OI_USER_ID: "u",
                }),
            ),
            span(
                "07",
                "01",
                50,
                serde_json::json!({
                    GEN_AI_OPERATION_NAME: OP_INVOKE_AGENT,
                    GEN_AI_AGENT_NAME: "late",
                    OI_SESSION_ID: "s2",
                }),
            ),
            scored(
                span(
                    "08",
                    "01",
                    55,
                    serde_json::json!({ GEN_AI_OPERATION_NAME: "chat", GEN_AI_USAGE_INPUT_TOKENS: 3 }),
                ),
                "quality",
                0.4,
                6,
            ),
        ]
    }

    fn folded(spans: &[SpanRecord]) -> (RunSummary, bool) {
        let mut summary = RunSummary::new(&"ab".repeat(16));
        for s in spans {
            summary.fold(s);
        }
        let root_agent = spans
            .iter()
            .any(|s| s.is_root() && s.is_agent() && s.agent_name().is_some());
        (summary, root_agent)
    }

    #[test]
    fn a_run_summarised_in_parts_and_merged_is_the_run_summarised_span_by_span() {
        let spans = run();
        let (whole, _) = folded(&spans);
        assert_eq!(whole.agent, "outer");
        assert_eq!((whole.session.as_str(), whole.user.as_str()), ("s1", "u"));
        assert_eq!(whole.scores["quality"].value, Some(0.2));
        for i in 0..=spans.len() {
            for j in i..=spans.len() {
                let mut merged = RunSummary::new(&"ab".repeat(16));
                for part in [&spans[..i], &spans[i..j], &spans[j..]] {
                    let (summary, root_agent) = folded(part);
                    merged.merge(&summary, root_agent);
                }
                assert_eq!(merged, whole, "parts split at {i} and {j}");
            }
        }
    }
}
