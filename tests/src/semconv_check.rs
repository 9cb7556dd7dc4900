//! Checks received spans against the GenAI part of the OpenTelemetry semantic conventions v1.41.1, from a
//! pinned extract of the registry's definitions (`tests/data/semconv-genai-v1.41.1.json`, source noted in
//! it): attribute names and the naming rules, types, enum values, deprecated names, span kinds and names,
//! and the requirement levels that can be decided from a span (required; `error.type` when the operation
//! failed; `server.port` when `server.address` is set). Every attribute outside the registry must be in our
//! documented namespaces (`waxell.*`, OpenInference's keys).
//!
//! What we knowingly do differently is listed in [`EXTENSIONS`] and [`OMISSIONS`], each documented in
//! docs/attributes.md (the tests check that too).

use std::collections::BTreeMap;

use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use serde::Deserialize;

use crate::{AnyValue, Received};

/// The pinned registry extract.
pub const REGISTRY_JSON: &str = include_str!("../data/semconv-genai-v1.41.1.json");

/// Values outside a registry enum that we emit on purpose: (attribute, value, why).
pub const EXTENSIONS: &[(&str, &str, &str)] = &[
    (
        "gen_ai.operation.name",
        "decide",
        "an agent's own choice between options (#[decision]); no registered operation is a decision",
    ),
    (
        "gen_ai.operation.name",
        "reasoning",
        "an agent's reasoning step (#[reasoning]); `plan` is not in v1.41.1",
    ),
    (
        "gen_ai.operation.name",
        "step",
        "a container span grouping an agent's work (#[step])",
    ),
];

/// Attributes the registry requires on a span definition that we leave out on purpose: (span definition,
/// attribute, why).
pub const OMISSIONS: &[(&str, &str, &str)] = &[(
    "span.gen_ai.invoke_agent.internal",
    "gen_ai.provider.name",
    "an in-process agent has no provider of its own (its LLM calls carry theirs) and waxell is not one",
)];

/// OpenInference's reserved keys and prefixes (Arize-ai/openinference `spec/semantic_conventions.md`).
const OPENINFERENCE: &[&str] = &[
    "openinference.span.kind",
    "input.value",
    "input.mime_type",
    "output.value",
    "output.mime_type",
    "metadata",
    "tag.tags",
    "session.id",
    "user.id",
    "agent.name",
    "graph.node.",
    "llm.",
    "tool.",
    "tool_call.",
    "message.",
    "retrieval.documents",
    "embedding.",
    "reranker.",
    "document.",
    "exception.",
];

#[derive(Debug, Deserialize)]
pub struct Registry {
    pub version: String,
    pub attributes: BTreeMap<String, AttributeDef>,
    pub deprecated: Vec<String>,
    pub spans: BTreeMap<String, SpanDef>,
    pub events: BTreeMap<String, EventDef>,
}

#[derive(Debug, Deserialize)]
pub struct AttributeDef {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub members: Vec<String>,
}

#[derive(Debug, Deserialize)]
pub struct Requirement {
    pub requirement_level: String,
    #[serde(default)]
    pub condition: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct SpanDef {
    pub span_kind: String,
    pub attributes: BTreeMap<String, Requirement>,
}

#[derive(Debug, Deserialize)]
pub struct EventDef {
    pub attributes: BTreeMap<String, Requirement>,
}

pub fn registry() -> Registry {
    serde_json::from_str(REGISTRY_JSON).expect("the pinned registry extract parses")
}

/// OpenTelemetry's attribute naming rules: lowercase, dot-separated namespaces, `snake_case` segments (digits
/// allowed, e.g. OpenInference's flattened list indexes).
pub fn valid_key(key: &str) -> bool {
    key.starts_with(|c: char| c.is_ascii_lowercase())
        && key.split('.').all(|segment| {
            !segment.is_empty()
                && segment
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        })
}

fn ours(key: &str) -> bool {
    key.starts_with("waxell.")
        || OPENINFERENCE.iter().any(|k| {
            if k.ends_with('.') {
                key.starts_with(k)
            } else {
                key == *k
            }
        })
}

fn value_of(kv: &KeyValue) -> Option<&AnyValue> {
    kv.value.as_ref().and_then(|v| v.value.as_ref())
}

fn type_matches(kind: &str, value: &AnyValue) -> bool {
    match (kind, value) {
        ("string" | "enum", AnyValue::StringValue(_)) => true,
        ("int", AnyValue::IntValue(_)) => true,
        ("double", AnyValue::DoubleValue(_)) => true,
        ("boolean", AnyValue::BoolValue(_)) => true,
        ("string[]", AnyValue::ArrayValue(a)) => a
            .values
            .iter()
            .all(|v| matches!(v.value, Some(AnyValue::StringValue(_)))),
        ("any", _) => true,
        _ => false,
    }
}

/// Which span definition a span follows, from its operation and kind.
fn span_def_id(operation: &str, kind: i32) -> Option<&'static str> {
    Some(match operation {
        "chat" | "text_completion" | "generate_content" => "span.gen_ai.inference.client",
        "embeddings" => "span.gen_ai.embeddings.client",
        "retrieval" => "span.gen_ai.retrieval.client",
        "create_agent" => "span.gen_ai.create_agent.client",
        "invoke_workflow" => "span.gen_ai.invoke_workflow.internal",
        "execute_tool" => "span.gen_ai.execute_tool.internal",
        "invoke_agent" if kind == SpanKind::Client as i32 => "span.gen_ai.invoke_agent.client",
        "invoke_agent" => "span.gen_ai.invoke_agent.internal",
        _ => return None,
    })
}

impl Registry {
    /// Problems with one attribute (`on` names where it is, for the message).
    fn check_attribute(&self, on: &str, kv: &KeyValue, problems: &mut Vec<String>) {
        let key = kv.key.as_str();
        if !valid_key(key) {
            problems.push(format!("{on}: attribute key {key:?} breaks the naming rules"));
        }
        if self.deprecated.iter().any(|d| d == key) {
            problems.push(format!("{on}: {key} is deprecated in v{}", self.version));
            return;
        }
        let Some(def) = self.attributes.get(key) else {
            if key.starts_with("gen_ai.") {
                problems.push(format!("{on}: {key} is not in the v{} registry", self.version));
            } else if !ours(key) {
                problems.push(format!(
                    "{on}: {key} is neither in the registry nor in a documented namespace (waxell.*, OpenInference)"
                ));
            }
            return;
        };
        let Some(value) = value_of(kv) else {
            problems.push(format!("{on}: {key} has no value"));
            return;
        };
        if !type_matches(&def.kind, value) {
            problems.push(format!("{on}: {key} should be {}, is {value:?}", def.kind));
            return;
        }
        if let (false, AnyValue::StringValue(s)) = (def.members.is_empty(), value) {
            let registered = def.members.iter().any(|m| m == s);
            let extension = EXTENSIONS.iter().any(|(k, v, _)| *k == key && v == s);
            // error.type lists only `_OTHER`; its values are the error's own low-cardinality names.
            if !registered && !extension && key != "error.type" {
                problems.push(format!(
                    "{on}: {key} = {s:?} is neither a registered value ({}) nor a documented extension",
                    def.members.join(", ")
                ));
            }
        }
    }

    /// Every problem found in `spans`; empty when they follow the conventions.
    pub fn check(&self, spans: &[Received]) -> Vec<String> {
        let mut problems = Vec::new();
        for received in spans {
            let span = &received.span;
            let on = format!("span {:?}", span.name);
            let attrs: BTreeMap<&str, &KeyValue> =
                span.attributes.iter().map(|kv| (kv.key.as_str(), kv)).collect();
            for kv in &span.attributes {
                self.check_attribute(&on, kv, &mut problems);
            }
            let failed = span
                .status
                .as_ref()
                .is_some_and(|s| s.code == StatusCode::Error as i32);
            if failed && !attrs.contains_key("error.type") {
                problems.push(format!("{on}: the operation failed but error.type is not set"));
            }
            if attrs.contains_key("server.address") && !attrs.contains_key("server.port") {
                problems.push(format!("{on}: server.address is set but server.port is not"));
            }
            for event in &span.events {
                let on = format!("{on} event {:?}", event.name);
                for kv in &event.attributes {
                    self.check_attribute(&on, kv, &mut problems);
                }
                if let Some(def) = self.events.get(&event.name) {
                    for (key, req) in &def.attributes {
                        if req.requirement_level == "required"
                            && !event.attributes.iter().any(|kv| &kv.key == key)
                        {
                            problems.push(format!("{on}: required {key} is missing"));
                        }
                    }
                }
            }
            let Some(AnyValue::StringValue(operation)) =
                attrs.get("gen_ai.operation.name").and_then(|kv| value_of(kv))
            else {
                continue;
            };
            if !attrs.contains_key("openinference.span.kind") {
                problems.push(format!(
                    "{on}: no openinference.span.kind (Phoenix and MLflow would not classify it)"
                ));
            }
            if span.name != *operation && !span.name.starts_with(&format!("{operation} ")) {
                problems.push(format!(
                    "{on}: the name should be `{operation}` or `{operation} {{...}}`"
                ));
            }
            let Some(def_id) = span_def_id(operation, span.kind) else {
                continue; // a documented extension, checked above as an enum value
            };
            let def = &self.spans[def_id];
            let kind = match span.kind {
                k if k == SpanKind::Client as i32 => "client",
                k if k == SpanKind::Internal as i32 => "internal",
                k if k == SpanKind::Server as i32 => "server",
                _ => "other",
            };
            if def.span_kind != kind {
                problems.push(format!(
                    "{on}: {def_id} spans are {}, this one is {kind}",
                    def.span_kind
                ));
            }
            for (key, req) in &def.attributes {
                let omitted = OMISSIONS.iter().any(|(d, k, _)| *d == def_id && k == key);
                if req.requirement_level == "required" && !attrs.contains_key(key.as_str()) && !omitted {
                    problems.push(format!("{on}: {key} is required on {def_id}"));
                }
            }
            if def_id == "span.gen_ai.inference.client" && !attrs.contains_key("gen_ai.request.model") {
                problems.push(format!(
                    "{on}: gen_ai.request.model is available (it names the span) but not set"
                ));
            }
        }
        problems
    }
}

/// The registry attributes that appear on the given spans, per span definition (or custom operation), with
/// their requirement level: what docs/attributes.md must list.
pub fn registry_attributes_used(
    registry: &Registry,
    spans: &[Received],
) -> BTreeMap<String, BTreeMap<String, String>> {
    let mut used: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for received in spans {
        let span = &received.span;
        let Some(AnyValue::StringValue(operation)) = span
            .attributes
            .iter()
            .find(|kv| kv.key == "gen_ai.operation.name")
            .and_then(value_of)
        else {
            continue;
        };
        let def_id = span_def_id(operation, span.kind);
        let entry = used
            .entry(def_id.map_or_else(|| format!("{operation} (extension)"), str::to_owned))
            .or_default();
        for kv in &span.attributes {
            if !registry.attributes.contains_key(&kv.key) {
                continue;
            }
            let level = match def_id {
                Some(d) => registry.spans[d]
                    .attributes
                    .get(&kv.key)
                    .map_or("not in this span's definition", |r| r.requirement_level.as_str()),
                None => "extension span",
            };
            entry.insert(kv.key.clone(), level.to_owned());
        }
    }
    used
}
