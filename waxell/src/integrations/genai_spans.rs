//! `tracing` spans with GenAI fields (rig's `chat`/`embeddings` spans, genai's `chat {model}`), turned
//! into waxell's LLM spans on their way to OpenTelemetry.
//!
//! Why here and not in rig's hook traits: rig and genai already instrument their one chokepoint (the
//! provider request) with `tracing`, for every provider and for streaming, and both record usage there;
//! hooks would cover rig's agents only, not its bare completion models, nor genai. So
//! [`crate::tracing_layer`] builds its OpenTelemetry spans through [`GenAiTracer`]: a span whose
//! `gen_ai.operation.name` is `chat`, `generate_content`, `text_completion` or `embeddings` is handed
//! to the same recorder [`crate::llm::record`] uses, which names it `{operation} {model}`, mirrors the
//! OpenInference attributes, prices it, re-captures content under waxell's policy (scrubbed,
//! truncated; the crate's raw content fields are never passed on), records the `tool_call:{name}`
//! decision and the `gen_ai.client.*` metrics. Every other span passes through untouched.
//!
//! Non-spec fields are renamed into waxell's namespace (`gen_ai.usage.reasoning_tokens` becomes the
//! spec's `gen_ai.usage.reasoning.output_tokens`; `rig.provider_request_id` becomes
//! `waxell.llm.provider_request_id`).

use std::borrow::Cow;
use std::time::{Instant, SystemTime};

use opentelemetry::trace::{SpanBuilder, SpanContext, Status, TraceContextExt as _, Tracer};
use opentelemetry::{Context, KeyValue, Value};
use serde_json::Value as Json;

use crate::llm::instrument::{CallTelemetry, Operation, StreamStats};
use crate::llm::record::Provider;
use crate::llm::{
    AssistantMessage, ChatRequest, ChatResponse, Choice, FunctionDefinition, Message, Tool, ToolCall, Usage,
};
use crate::semconv::*;
use crate::telemetry::bridge::{BridgeSpan, BridgeTracer};
use crate::telemetry::{with_preset_ids, SpanIds};

/// The tracer behind [`crate::tracing_layer`]: waxell's tracer, with GenAI client spans recorded by
/// waxell's LLM recorder.
#[derive(Debug)]
pub(crate) struct GenAiTracer {
    inner: BridgeTracer,
}

impl GenAiTracer {
    pub(crate) fn new(inner: BridgeTracer) -> Self {
        Self { inner }
    }
}

/// A span built by [`GenAiTracer`].
#[derive(Debug)]
#[allow(
    clippy::large_enum_variant,
    reason = "the pass-through variant is the common one; boxing it would cost an allocation per span"
)]
pub(crate) enum GenAiSpan {
    /// Not a GenAI client span: passed through.
    Plain(BridgeSpan),
    /// A GenAI client span, recorded through waxell's LLM recorder.
    Llm(Box<LlmSpan>),
    /// An agent runtime's tool call (rig-agent's `execute_tool`), in waxell's tool schema.
    Tool(ToolSpan),
    /// Nothing left to record here, only a context for children: an agent runtime's run inside an
    /// `#[agent]` (rig-agent's `invoke_agent`, merged into the `#[agent]`, whose context this is; what it
    /// records is dropped, the `#[agent]` records the run), or an LLM span already handed to the
    /// recording thread.
    Inert(SpanContext),
}

/// What the crate recorded, kept until the span ends.
#[derive(Debug, Default)]
struct Seen {
    /// Provider and model recorded after the span started (see `LlmSpan::identity_pending`).
    provider_name: Option<String>,
    request_model: Option<String>,
    input_messages: Option<String>,
    output_messages: Option<String>,
    system_instructions: Option<String>,
    tool_definitions: Option<String>,
    response_id: Option<String>,
    response_model: Option<String>,
    finish_reasons: Vec<String>,
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_read_tokens: Option<u64>,
    cache_creation_tokens: Option<u64>,
    reasoning_tokens: Option<u64>,
    dimensions: Option<usize>,
    time_to_first_chunk: Option<f64>,
    error_type: Option<String>,
    error: Option<String>,
}

/// A GenAI client span being recorded.
#[derive(Debug)]
pub(crate) struct LlmSpan {
    call: CallSpan,
    span_context: SpanContext,
    operation: Operation,
    /// The operation as the crate named it (`chat`, `generate_content`), the span name's first word.
    operation_name: String,
    /// The span started without a model (rig-agent opens its turn span before its provider layer
    /// records provider and model): its name and identity are set when it ends.
    identity_pending: bool,
    stream: bool,
    seen: Seen,
}

fn is_llm_operation(name: &str) -> Option<Operation> {
    match name {
        "chat" | "generate_content" | "text_completion" => Some(Operation::Chat),
        "embeddings" => Some(Operation::Embeddings),
        _ => None,
    }
}

fn string_of(value: &Value) -> Cow<'_, str> {
    value.as_str()
}

fn u64_of(value: &Value) -> Option<u64> {
    match value {
        Value::I64(n) => u64::try_from(*n).ok(),
        Value::F64(n) if *n >= 0.0 => Some(*n as u64),
        Value::String(s) => s.as_str().parse().ok(),
        _ => None,
    }
}

/// The spec's key for a non-spec one the crates use; `None` to drop it.
fn renamed(key: &str) -> Option<&'static str> {
    Some(match key {
        "gen_ai.usage.reasoning_tokens" => GEN_AI_USAGE_REASONING_OUTPUT_TOKENS,
        "gen_ai.usage.tool_use_prompt_tokens" => "waxell.llm.tool_use_prompt_tokens",
        "rig.provider_request_id" => "waxell.llm.provider_request_id",
        "rig.completion_parent" => return None,
        _ => return None,
    })
}

/// An LLM span's OpenTelemetry span: started, or to be started on the recording thread.
#[derive(Debug)]
#[allow(
    clippy::large_enum_variant,
    reason = "held in the boxed `LlmSpan`; boxing again would cost a second allocation per call"
)]
enum CallSpan {
    Started(CallTelemetry),
    Later(LaterSpan),
}

impl CallSpan {
    /// The started call, starting it now if it was left for later (on the recording thread).
    fn started(&mut self) -> &mut CallTelemetry {
        if let Self::Later(later) = self {
            let parent = later
                .ids
                .as_ref()
                .map_or_else(Context::current, |ids| ids.parent.clone());
            let call = later.start(&parent);
            *self = Self::Started(call);
        }
        match self {
            Self::Started(call) => call,
            Self::Later(_) => unreachable!("started just above"),
        }
    }

    fn set_attribute(&mut self, attribute: KeyValue) {
        match self {
            Self::Started(call) => call.context().span().set_attribute(attribute),
            Self::Later(later) => later
                .builder
                .attributes
                .get_or_insert_with(Vec::new)
                .push(attribute),
        }
    }

    fn add_exception(&mut self, at: SystemTime, attributes: Vec<KeyValue>) {
        match self {
            Self::Started(call) => {
                call.context()
                    .span()
                    .add_event_with_timestamp("exception", at, attributes)
            }
            Self::Later(later) => later.exceptions.push((at, attributes)),
        }
    }

    fn add_link(&mut self, span_context: SpanContext, attributes: Vec<KeyValue>) {
        match self {
            Self::Started(call) => call.context().span().add_link(span_context, attributes),
            Self::Later(later) => later.links.push((span_context, attributes)),
        }
    }

    fn is_recording(&self) -> bool {
        match self {
            Self::Started(call) => call.context().span().is_recording(),
            Self::Later(later) => later.ids.as_ref().is_some_and(|ids| ids.context.is_sampled()),
        }
    }

    fn ended_at_time(&mut self, at: Instant, wall: SystemTime) {
        match self {
            Self::Started(call) => call.ended_at_time(at, wall),
            Self::Later(later) => later.ended = Some((at, wall)),
        }
    }
}

/// An LLM span not started yet: what its start needs and what arrived for it meanwhile. Under waxell's
/// own provider (parent-based sampling) its ids are handed out when the crate opens it, and the SDK span
/// is started with them, as of then, on the recording thread: the crate's call does not wait for the
/// span's start, only for the ids (see `telemetry::SpanIds`).
#[derive(Debug)]
struct LaterSpan {
    tracer: BridgeTracer,
    builder: SpanBuilder,
    /// The ids handed out; `None` when the span is started at once with the SDK's own.
    ids: Option<SpanIds>,
    provider: Provider,
    model: String,
    operation: Operation,
    capture: bool,
    exceptions: Vec<(SystemTime, Vec<KeyValue>)>,
    links: Vec<(SpanContext, Vec<KeyValue>)>,
    ended: Option<(Instant, SystemTime)>,
}

impl LaterSpan {
    /// Start the span under `parent` and replay what arrived for it meanwhile.
    fn start(&mut self, parent: &Context) -> CallTelemetry {
        let builder = std::mem::take(&mut self.builder);
        let inner = match &self.ids {
            Some(ids) => with_preset_ids(ids, || self.tracer.build_with_context(builder, parent)),
            None => self.tracer.build_with_context(builder, parent),
        };
        let cx = parent.with_span(inner);
        {
            let span = cx.span();
            for (at, attributes) in self.exceptions.drain(..) {
                span.add_event_with_timestamp("exception", at, attributes);
            }
            for (span_context, attributes) in self.links.drain(..) {
                span.add_link(span_context, attributes);
            }
        }
        let mut call = CallTelemetry::adopt(cx, self.operation, &self.provider, &self.model, self.capture);
        if let Some(ids) = &self.ids {
            call.began_at(ids.started);
        }
        if let Some((at, wall)) = self.ended {
            call.ended_at_time(at, wall);
        }
        call
    }
}

impl Tracer for GenAiTracer {
    type Span = GenAiSpan;

    fn build_with_context(&self, mut builder: SpanBuilder, parent_cx: &Context) -> GenAiSpan {
        let attributes = builder.attributes.take().unwrap_or_default();
        let find = |key: &str| {
            attributes
                .iter()
                .find(|kv| kv.key.as_str() == key)
                .map(|kv| &kv.value)
        };
        let op_name = find(GEN_AI_OPERATION_NAME).map(|op| string_of(op).into_owned());
        if op_name.as_deref() == Some(OP_INVOKE_AGENT) && !parent_cx.has_active_span() {
            // An agent runtime's run started as an explicit root (rig-agent does, when no `tracing` span
            // is current) inside waxell-instrumented code: it belongs to the trace it runs in.
            let current = Context::current();
            if is_agent_span(&current) {
                // Directly in an `#[agent]`: the same run, recorded once, by the `#[agent]`.
                return GenAiSpan::Inert(current.span().span_context().clone());
            }
            if current.has_active_span() {
                // In a `#[tool]` or `#[step]`: a sub-agent, nested where it runs.
                builder.attributes = Some(attributes);
                return self.build_with_context(builder, &current);
            }
        }
        if op_name.as_deref() == Some(OP_EXECUTE_TOOL) {
            if let Some(state) = crate::telemetry::state_for(parent_cx) {
                return GenAiSpan::Tool(ToolSpan::build(
                    &self.inner,
                    builder,
                    attributes,
                    parent_cx,
                    state,
                ));
            }
        }
        let operation = op_name.as_deref().and_then(is_llm_operation);
        let state = crate::telemetry::state_for(parent_cx);
        let (Some(operation), Some(state)) = (operation, state) else {
            builder.attributes = Some(attributes);
            return GenAiSpan::Plain(self.inner.build_with_context(builder, parent_cx));
        };
        let provider_name = find(GEN_AI_PROVIDER_NAME)
            .map(|v| string_of(v).into_owned())
            .unwrap_or_else(|| "openai".to_owned());
        let model = find(GEN_AI_REQUEST_MODEL)
            .map(|v| string_of(v).into_owned())
            .unwrap_or_default();
        let stream = matches!(find(GEN_AI_REQUEST_STREAM), Some(Value::Bool(true)));

        let mut seen = Seen::default();
        // `gen_ai.operation.name` stays as the crate recorded it (`generate_content` is a spec value).
        let mut kept = Vec::with_capacity(attributes.len() + 6);
        for kv in attributes {
            if let Some(kv) = seen.observe(kv) {
                kept.push(kv);
            }
        }
        let identity_pending = model.is_empty();
        if !identity_pending {
            kept.extend(CallTelemetry::identity_mirror(operation, &provider_name));
        }
        let operation_name = op_name.unwrap_or_else(|| operation.name().to_owned());
        builder.name = if model.is_empty() {
            operation_name.clone().into()
        } else {
            format!("{operation_name} {model}").into()
        };
        builder.span_kind = Some(opentelemetry::trace::SpanKind::Client);
        builder.attributes = Some(kept);
        let provider = Provider::new(provider_name);
        seen.provider_name = Some(provider.name().to_owned());
        let ids = SpanIds::for_child_of(parent_cx.clone(), &state);
        if let Some(ids) = &ids {
            builder.start_time.get_or_insert(ids.start_time);
        }
        let ahead = ids.as_ref().map(|ids| ids.context.clone());
        let mut later = LaterSpan {
            tracer: self.inner,
            builder,
            ids,
            provider,
            model,
            operation,
            capture: state.capture.content,
            exceptions: Vec::new(),
            links: Vec::new(),
            ended: None,
        };
        let (call, span_context) = match ahead {
            // The span starts on the recording thread when the crate ends it (see `LaterSpan`).
            Some(span_context) => (CallSpan::Later(later), span_context),
            None => {
                let call = later.start(parent_cx);
                let span_context = call.context().span().span_context().clone();
                (CallSpan::Started(call), span_context)
            }
        };
        GenAiSpan::Llm(Box::new(LlmSpan {
            call,
            span_context,
            operation,
            operation_name,
            identity_pending,
            stream,
            seen,
        }))
    }
}

/// Whether the active span of `cx` is an `#[agent]`'s.
fn is_agent_span(cx: &Context) -> bool {
    cx.get::<crate::spans::AgentRun>()
        .is_some_and(|run| run.cx.span().span_context().span_id() == cx.span().span_context().span_id())
}

impl Seen {
    /// Keep what the end needs; return the attribute to set now (renamed), or `None` to hold it back
    /// (content, re-captured under waxell's policy; usage and response identity, set with their mirrors).
    fn observe(&mut self, kv: KeyValue) -> Option<KeyValue> {
        let key = kv.key.as_str();
        let text = || Some(kv.value.as_str().into_owned());
        let seen = self;
        match key {
            GEN_AI_INPUT_MESSAGES => seen.input_messages = text(),
            GEN_AI_OUTPUT_MESSAGES => seen.output_messages = text(),
            GEN_AI_SYSTEM_INSTRUCTIONS => seen.system_instructions = text(),
            GEN_AI_TOOL_DEFINITIONS => seen.tool_definitions = text(),
            GEN_AI_RESPONSE_ID => seen.response_id = text(),
            GEN_AI_RESPONSE_MODEL => seen.response_model = text(),
            GEN_AI_RESPONSE_FINISH_REASONS => {
                seen.finish_reasons = match &kv.value {
                    Value::Array(opentelemetry::Array::String(values)) => {
                        values.iter().map(|v| v.as_str().to_owned()).collect()
                    }
                    // genai records a JSON array as a string.
                    other => serde_json::from_str::<Vec<String>>(&other.as_str())
                        .unwrap_or_else(|_| vec![other.as_str().into_owned()]),
                };
            }
            GEN_AI_USAGE_INPUT_TOKENS => seen.input_tokens = u64_of(&kv.value),
            GEN_AI_USAGE_OUTPUT_TOKENS => seen.output_tokens = u64_of(&kv.value),
            GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS => seen.cache_read_tokens = u64_of(&kv.value),
            GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS => seen.cache_creation_tokens = u64_of(&kv.value),
            GEN_AI_USAGE_REASONING_OUTPUT_TOKENS | "gen_ai.usage.reasoning_tokens" => {
                seen.reasoning_tokens = u64_of(&kv.value)
            }
            "gen_ai.embeddings.dimension.count" => {
                seen.dimensions = u64_of(&kv.value).and_then(|n| usize::try_from(n).ok());
                return Some(kv);
            }
            GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK => {
                seen.time_to_first_chunk = match kv.value {
                    Value::F64(seconds) => Some(seconds),
                    _ => None,
                };
            }
            ERROR_TYPE => seen.error_type = text(),
            "error.message" | "exception.message" => seen.error = text(),
            _ if is_bridge_bookkeeping(key) => return None,
            _ => {
                if let Some(spec) = renamed(key) {
                    return Some(KeyValue::new(spec, kv.value));
                }
                if key.starts_with("rig.") {
                    return None;
                }
                return Some(kv);
            }
        }
        None
    }
}

/// tracing-opentelemetry's own bookkeeping (source location, thread, target, busy/idle times): outside the
/// GenAI conventions, and a source path names the build machine.
fn is_bridge_bookkeeping(key: &str) -> bool {
    key.starts_with("otel.")
        || key.starts_with("code.")
        || key.starts_with("thread.")
        || matches!(key, "target" | "busy_ns" | "idle_ns" | "level")
}

/// An agent runtime's `execute_tool` span: named `execute_tool {tool}` once the tool is known, with the
/// OpenInference and waxell tool attributes, and its arguments and result captured under waxell's content
/// policy (scrubbed, truncated) like a `#[tool]`'s.
pub(crate) struct ToolSpan {
    inner: BridgeSpan,
    state: std::sync::Arc<crate::telemetry::State>,
}

impl std::fmt::Debug for ToolSpan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolSpan")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl ToolSpan {
    fn build(
        tracer: &BridgeTracer,
        mut builder: SpanBuilder,
        attributes: Vec<KeyValue>,
        parent_cx: &Context,
        state: std::sync::Arc<crate::telemetry::State>,
    ) -> Self {
        let mut kept = vec![
            KeyValue::new(OI_SPAN_KIND, OI_KIND_TOOL),
            KeyValue::new(WAXELL_SPAN_TYPE, "tool"),
        ];
        let mut name = None;
        for kv in attributes {
            if kv.key.as_str() == GEN_AI_TOOL_NAME {
                name = Some(kv.value.as_str().into_owned());
            }
            kept.extend(tool_attributes(&state, kv));
        }
        if let Some(name) = name {
            builder.name = format!("{OP_EXECUTE_TOOL} {name}").into();
        }
        builder.attributes = Some(kept);
        Self {
            inner: tracer.build_with_context(builder, parent_cx),
            state,
        }
    }

    fn set_attribute(&mut self, attribute: KeyValue) {
        use opentelemetry::trace::Span as _;
        if attribute.key.as_str() == GEN_AI_TOOL_NAME {
            self.inner
                .update_name(format!("{OP_EXECUTE_TOOL} {}", attribute.value.as_str()));
        }
        for kv in tool_attributes(&self.state, attribute) {
            self.inner.set_attribute(kv);
        }
    }
}

/// One attribute of a tool span as waxell records it: bookkeeping dropped, the tool's name mirrored,
/// arguments and result only when content may be captured, scrubbed.
fn tool_attributes(state: &crate::telemetry::State, kv: KeyValue) -> Vec<KeyValue> {
    let key = kv.key.as_str();
    if is_bridge_bookkeeping(key) {
        return Vec::new();
    }
    match key {
        GEN_AI_TOOL_NAME => {
            let name = kv.value.as_str().into_owned();
            vec![
                KeyValue::new(OI_TOOL_NAME, name.clone()),
                KeyValue::new(WAXELL_TOOL_NAME, name),
                kv,
            ]
        }
        GEN_AI_TOOL_TYPE => vec![
            KeyValue::new(WAXELL_TOOL_TYPE, kv.value.as_str().into_owned()),
            kv,
        ],
        GEN_AI_TOOL_CALL_ARGUMENTS | GEN_AI_TOOL_CALL_RESULT => {
            if !state.capture.content {
                return Vec::new();
            }
            let text = state.content(&kv.value.as_str());
            let mirror = if key == GEN_AI_TOOL_CALL_ARGUMENTS {
                OI_INPUT_VALUE
            } else {
                OI_OUTPUT_VALUE
            };
            vec![
                KeyValue::new(kv.key.clone(), text.clone()),
                KeyValue::new(mirror, text),
            ]
        }
        _ => vec![kv],
    }
}

impl LlmSpan {
    fn end(&mut self) {
        let seen = std::mem::take(&mut self.seen);
        let call = self.call.started();
        if self.identity_pending {
            let provider = seen.provider_name.as_deref().unwrap_or("openai");
            let model = seen.request_model.as_deref().unwrap_or_default();
            call.identify(self.operation, &self.operation_name, provider, model);
        }
        if let Some(error_type) = &seen.error_type {
            let message = seen.error.clone().unwrap_or_else(|| error_type.clone());
            call.failed(error_type, &message, None);
            return;
        }
        let usage = seen.input_tokens.map(|input| {
            let mut usage = Usage::new(input, seen.output_tokens.unwrap_or(0));
            if let Some(cached) = seen.cache_read_tokens {
                usage = usage.with_cached_tokens(cached);
            }
            if let Some(written) = seen.cache_creation_tokens {
                usage = usage.with_cache_creation_tokens(written);
            }
            if let Some(reasoning) = seen.reasoning_tokens {
                usage = usage.with_reasoning_tokens(reasoning);
            }
            usage
        });
        let response_model = seen.response_model.clone().unwrap_or_default();
        if self.operation == Operation::Embeddings {
            call.succeeded_embeddings(&response_model, usage.as_ref(), seen.dimensions);
            return;
        }
        let request = request_of(&seen);
        call.set_offered_tools(request.tool_names());
        call.record_input(&request);
        let mut response = response_of(&seen);
        response.usage = usage;
        response.model = response_model;
        let stats = self.stream.then(|| StreamStats {
            time_to_first_chunk: seen.time_to_first_chunk.map(std::time::Duration::from_secs_f64),
            chunks: 0,
        });
        call.succeeded(&response, stats);
    }
}

/// The request as far as the crate recorded it (content only when its own capture was on).
fn request_of(seen: &Seen) -> ChatRequest {
    let mut messages = Vec::new();
    if let Some(system) = seen.system_instructions.as_deref().and_then(parts_text) {
        messages.push(Message::system(system));
    }
    if let Some(Json::Array(input)) = seen
        .input_messages
        .as_deref()
        .and_then(|s| serde_json::from_str(s).ok())
    {
        messages.extend(input.iter().flat_map(message_of));
    }
    let tools: Vec<Tool> = seen
        .tool_definitions
        .as_deref()
        .and_then(|s| serde_json::from_str::<Vec<Json>>(s).ok())
        .unwrap_or_default()
        .iter()
        .map(|tool| {
            let function = tool.get("function").unwrap_or(tool);
            Tool {
                kind: "function".to_owned(),
                function: FunctionDefinition {
                    name: str_of(function, "name"),
                    description: function
                        .get("description")
                        .and_then(Json::as_str)
                        .map(str::to_owned),
                    parameters: function.get("parameters").cloned(),
                    strict: None,
                },
            }
        })
        .collect();
    ChatRequest::new(messages).tools(tools)
}

fn str_of(value: &Json, key: &str) -> String {
    value
        .get(key)
        .and_then(Json::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// The text of system instructions recorded as parts (`[{"type":"text","content":...}]`) or a string.
fn parts_text(recorded: &str) -> Option<String> {
    match serde_json::from_str::<Json>(recorded) {
        Ok(Json::Array(parts)) => {
            let texts: Vec<&str> = parts
                .iter()
                .filter_map(|p| p.get("content").and_then(Json::as_str))
                .collect();
            (!texts.is_empty()).then(|| texts.join("\n"))
        }
        _ => Some(recorded.to_owned()),
    }
}

fn tool_call_of(part: &Json) -> ToolCall {
    let arguments = match part.get("arguments") {
        Some(Json::String(text)) => text.clone(),
        Some(other) => other.to_string(),
        None => String::new(),
    };
    ToolCall::function(str_of(part, "id"), str_of(part, "name"), arguments)
}

/// One spec `ChatMessage{role, parts}` as request messages (a tool response part becomes a tool message).
fn message_of(message: &Json) -> Vec<Message> {
    let parts = message
        .get("parts")
        .and_then(Json::as_array)
        .cloned()
        .unwrap_or_default();
    let text: Vec<&str> = parts
        .iter()
        .filter(|p| p.get("type").and_then(Json::as_str) == Some("text"))
        .filter_map(|p| p.get("content").and_then(Json::as_str))
        .collect();
    let text = (!text.is_empty()).then(|| text.join("\n"));
    let calls: Vec<ToolCall> = parts
        .iter()
        .filter(|p| p.get("type").and_then(Json::as_str) == Some("tool_call"))
        .map(tool_call_of)
        .collect();
    let responses: Vec<Message> = parts
        .iter()
        .filter(|p| p.get("type").and_then(Json::as_str) == Some("tool_call_response"))
        .map(|p| {
            let response = match p.get("response").or_else(|| p.get("result")) {
                Some(Json::String(text)) => text.clone(),
                Some(other) => other.to_string(),
                None => String::new(),
            };
            Message::tool(str_of(p, "id"), response)
        })
        .collect();
    match message.get("role").and_then(Json::as_str) {
        Some("system") => vec![Message::system(text.unwrap_or_default())],
        Some("assistant") if !calls.is_empty() => {
            let mut assistant = Message::assistant_tool_calls(calls);
            if let Message::Assistant { content, .. } = &mut assistant {
                *content = text;
            }
            vec![assistant]
        }
        Some("assistant") => vec![Message::assistant(text.unwrap_or_default())],
        Some("tool") => responses,
        _ if !responses.is_empty() => responses,
        _ => vec![Message::user(text.unwrap_or_default())],
    }
}

/// The answer as far as the crate recorded it: output messages (when its capture was on) and finish
/// reasons.
fn response_of(seen: &Seen) -> ChatResponse {
    let outputs: Vec<Json> = seen
        .output_messages
        .as_deref()
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or_default();
    let mut choices: Vec<Choice> = outputs
        .iter()
        .enumerate()
        .map(|(index, output)| {
            let message = message_of(output).pop();
            let (content, tool_calls) = match message {
                Some(Message::Assistant {
                    content, tool_calls, ..
                }) => (content, tool_calls),
                Some(other) => (other.text().map(str::to_owned), Vec::new()),
                None => (None, Vec::new()),
            };
            let finish_reason = output
                .get("finish_reason")
                .and_then(Json::as_str)
                .map(|reason| {
                    if reason == "tool_call" {
                        "tool_calls"
                    } else {
                        reason
                    }
                    .to_owned()
                })
                .or_else(|| seen.finish_reasons.get(index).cloned());
            Choice {
                index: u32::try_from(index).unwrap_or(u32::MAX),
                message: AssistantMessage {
                    content,
                    tool_calls,
                    ..AssistantMessage::default()
                },
                finish_reason,
            }
        })
        .collect();
    if choices.is_empty() {
        choices = seen
            .finish_reasons
            .iter()
            .enumerate()
            .map(|(index, reason)| Choice {
                index: u32::try_from(index).unwrap_or(u32::MAX),
                message: AssistantMessage::default(),
                finish_reason: Some(reason.clone()),
            })
            .collect();
    }
    ChatResponse {
        id: seen.response_id.clone().unwrap_or_default(),
        model: String::new(),
        created: 0,
        choices,
        usage: None,
        system_fingerprint: None,
    }
}

impl opentelemetry::trace::Span for GenAiSpan {
    fn add_event_with_timestamp<T>(&mut self, name: T, timestamp: SystemTime, attributes: Vec<KeyValue>)
    where
        T: Into<Cow<'static, str>>,
    {
        match self {
            Self::Plain(span) => span.add_event_with_timestamp(name, timestamp, attributes),
            Self::Inert(_) => {}
            Self::Tool(span) => {
                // Only exceptions, their messages scrubbed: a tool's error can quote its arguments.
                if name.into() == "exception" {
                    let attributes = attributes
                        .into_iter()
                        .map(|kv| {
                            let text = span.state.content(&kv.value.as_str());
                            KeyValue::new(kv.key, text)
                        })
                        .collect();
                    span.inner
                        .add_event_with_timestamp("exception", timestamp, attributes);
                }
            }
            Self::Llm(span) => {
                // Events may carry content (`gen_ai.client.inference.operation.details`); waxell
                // records content as attributes under its own policy instead.
                // Log events of the HTTP stack below (hyper's connection debug lines) are not part
                // of the call's record either; only exceptions are kept.
                if name.into() == "exception" {
                    span.call.add_exception(timestamp, attributes);
                }
            }
        }
    }

    fn span_context(&self) -> &SpanContext {
        match self {
            Self::Plain(span) => span.span_context(),
            Self::Llm(span) => &span.span_context,
            Self::Inert(span_context) => span_context,
            Self::Tool(span) => span.inner.span_context(),
        }
    }

    fn is_recording(&self) -> bool {
        match self {
            Self::Plain(span) => span.is_recording(),
            Self::Llm(span) => span.call.is_recording(),
            Self::Inert(_) => false,
            Self::Tool(span) => span.inner.is_recording(),
        }
    }

    fn set_attribute(&mut self, attribute: KeyValue) {
        match self {
            Self::Plain(span) => span.set_attribute(attribute),
            Self::Llm(span) => match attribute.key.as_str() {
                // Identity recorded after the start (rig-agent's provider layer adopting the turn span):
                // kept for the end, never set twice.
                GEN_AI_PROVIDER_NAME => span.seen.provider_name = Some(attribute.value.as_str().into_owned()),
                GEN_AI_REQUEST_MODEL => span.seen.request_model = Some(attribute.value.as_str().into_owned()),
                GEN_AI_OPERATION_NAME => {}
                _ => {
                    if let Some(kept) = span.seen.observe(attribute) {
                        span.call.set_attribute(kept);
                    }
                }
            },
            Self::Tool(span) => span.set_attribute(attribute),
            Self::Inert(_) => {}
        }
    }

    fn set_status(&mut self, status: Status) {
        match self {
            Self::Plain(span) => span.set_status(status),
            Self::Llm(span) => {
                if let Status::Error { description } = status {
                    span.seen.error_type.get_or_insert_with(|| "_OTHER".to_owned());
                    span.seen.error.get_or_insert_with(|| description.into_owned());
                }
            }
            Self::Tool(span) => {
                let status = match status {
                    Status::Error { description } => Status::error(span.state.content(&description)),
                    other => other,
                };
                span.inner.set_status(status);
            }
            Self::Inert(_) => {}
        }
    }

    fn update_name<T>(&mut self, new_name: T)
    where
        T: Into<Cow<'static, str>>,
    {
        // An LLM span keeps its `{operation} {model}` name.
        if let Self::Plain(span) = self {
            span.update_name(new_name);
        }
    }

    fn add_link(&mut self, span_context: SpanContext, attributes: Vec<KeyValue>) {
        match self {
            Self::Plain(span) => span.add_link(span_context, attributes),
            Self::Llm(span) => span.call.add_link(span_context, attributes),
            Self::Tool(span) => span.inner.add_link(span_context, attributes),
            Self::Inert(_) => {}
        }
    }

    fn end_with_timestamp(&mut self, timestamp: SystemTime) {
        match self {
            Self::Plain(span) => span.end_with_timestamp(timestamp),
            Self::Tool(span) => span.inner.end_with_timestamp(timestamp),
            Self::Inert(_) => {}
            Self::Llm(span) => {
                // The parsing, pricing and scrubbing run on the recording thread (`crate::deferred`);
                // the span still ends at `timestamp`.
                span.call.ended_at_time(Instant::now(), timestamp);
                let span_context = span.span_context.clone();
                if let Self::Llm(mut ending) = std::mem::replace(self, Self::Inert(span_context)) {
                    crate::deferred::defer(move || {
                        let _cx = ending.call.started().context().clone().attach();
                        ending.end();
                    });
                }
            }
        }
    }
}
