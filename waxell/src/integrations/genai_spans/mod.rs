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

use crate::llm::instrument::{CallTelemetry, Operation, StreamStats};
use crate::llm::record::Provider;
use crate::llm::Usage;
use crate::semconv::*;
use crate::telemetry::bridge::{BridgeSpan, BridgeTracer};
use crate::telemetry::{with_preset_ids, SpanIds};

mod recorded;
mod tool;

use self::recorded::{request_of, response_of};
pub(crate) use self::tool::ToolSpan;

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
pub(super) struct Seen {
    /// Provider and model recorded after the span started (see `LlmSpan::identity_pending`).
    pub(super) provider_name: Option<String>,
    pub(super) request_model: Option<String>,
    pub(super) input_messages: Option<String>,
    pub(super) output_messages: Option<String>,
    pub(super) system_instructions: Option<String>,
    pub(super) tool_definitions: Option<String>,
    pub(super) response_id: Option<String>,
    pub(super) response_model: Option<String>,
    pub(super) finish_reasons: Vec<String>,
    pub(super) input_tokens: Option<u64>,
    pub(super) output_tokens: Option<u64>,
    pub(super) cache_read_tokens: Option<u64>,
    pub(super) cache_creation_tokens: Option<u64>,
    pub(super) reasoning_tokens: Option<u64>,
    pub(super) dimensions: Option<usize>,
    pub(super) time_to_first_chunk: Option<f64>,
    pub(super) error_type: Option<String>,
    pub(super) error: Option<String>,
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
pub(super) fn is_bridge_bookkeeping(key: &str) -> bool {
    key.starts_with("otel.")
        || key.starts_with("code.")
        || key.starts_with("thread.")
        || matches!(key, "target" | "busy_ns" | "idle_ns" | "level")
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
