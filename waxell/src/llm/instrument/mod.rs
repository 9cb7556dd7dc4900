//! The `chat {model}` span, metrics and tool-call decisions of one call. Everything telemetry-related
//! about a call lives here, so the client code stays about the call itself.
//!
//! Nothing here can fail or panic into the caller: attribute values are built from data already in hand,
//! and serialisation problems only drop the attribute concerned.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use opentelemetry::trace::{SpanBuilder, SpanKind, Status, TraceContextExt};
use opentelemetry::{Context, KeyValue};

use super::pricing::PriceTable;
use super::provider::Provider;
use super::types::{ChatRequest, ChatResponse, Usage};
use crate::semconv::*;
use crate::telemetry;

mod attributes;
mod content;
mod metrics;

use self::attributes::{finish_reasons, openinference_provider, openinference_system, request_parameters};
use self::content::{input_content, output_content, preview, MAX_PART_CHARS};
use self::metrics::Instruments;

/// `gen_ai.operation.name` values a recorded call can have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Operation {
    Chat,
    Embeddings,
}

impl Operation {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Chat => OP_CHAT,
            Self::Embeddings => OP_EMBEDDINGS,
        }
    }

    fn openinference_kind(self) -> &'static str {
        match self {
            Self::Chat => OI_KIND_LLM,
            Self::Embeddings => OI_KIND_EMBEDDING,
        }
    }
}

/// Keys not (yet) in `semconv`: embeddings are only recorded here.
const OP_EMBEDDINGS: &str = "embeddings";
const OI_KIND_EMBEDDING: &str = "EMBEDDING";
const OI_EMBEDDING_MODEL_NAME: &str = "embedding.model_name";
const GEN_AI_EMBEDDINGS_DIMENSION_COUNT: &str = "gen_ai.embeddings.dimension.count";

/// Timing of a streamed response.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct StreamStats {
    pub(crate) time_to_first_chunk: Option<Duration>,
    pub(crate) chunks: usize,
}

/// The telemetry of one call in flight. Ends its span exactly once: through [`Self::succeeded`],
/// [`Self::failed`], or, if the caller dropped the call midway, on drop (marked `waxell.cancelled`).
/// With observation switched off it is born ended, so it records nothing.
#[derive(Debug)]
pub(crate) struct CallTelemetry {
    cx: Context,
    started: Instant,
    request_model: String,
    /// Attributes shared by both metrics.
    metric_attributes: Vec<KeyValue>,
    offered_tools: Vec<String>,
    prices: Arc<PriceTable>,
    capture: bool,
    /// Usage reported outside the response (see `LlmCall::set_usage`); wins over the response's.
    usage_override: Option<Usage>,
    /// When the call ended, if it is recorded later (see [`Self::ended_at`]); else it ends when recorded.
    end_time: Option<(Instant, SystemTime)>,
    ended: bool,
}

impl CallTelemetry {
    /// Start the span as a child of the caller's current context. `request.model` is already resolved.
    pub(crate) fn start(provider: &Provider, operation: Operation, request: &ChatRequest) -> Self {
        let model = request.model_name().unwrap_or_default();
        let Some(capture) = Self::capture_if_enabled() else {
            return Self::disabled(provider, model);
        };
        let mut attributes = Vec::with_capacity(24);
        attributes.push(KeyValue::new(GEN_AI_REQUEST_STREAM, request.stream));
        attributes.extend(request_parameters(request));
        if capture {
            attributes.extend(input_content(request));
        }
        let mut call = Self::open(provider, operation, model, attributes, capture);
        call.offered_tools = request.tool_names();
        call
    }

    /// Start the span with only what identifies the call (sampling sees the same attributes as with
    /// [`Self::start`]); [`Self::describe`] adds the request later. For a caller that sends the request
    /// first and describes it while it is on the wire.
    #[cfg(feature = "async-openai")]
    pub(crate) fn open_request(provider: &Provider, operation: Operation, model: &str, stream: bool) -> Self {
        let Some(capture) = Self::capture_if_enabled() else {
            return Self::disabled(provider, model);
        };
        let attributes = vec![KeyValue::new(GEN_AI_REQUEST_STREAM, stream)];
        Self::open(provider, operation, model, attributes, capture)
    }

    /// The request's parameters, captured content and offered tools, on a span from [`Self::open_request`].
    #[cfg(feature = "async-openai")]
    pub(crate) fn describe(&mut self, request: &ChatRequest) {
        if self.ended {
            return;
        }
        let mut attributes = request_parameters(request);
        if self.capture {
            attributes.extend(input_content(request));
        }
        self.cx.span().set_attributes(attributes);
        self.offered_tools = request.tool_names();
    }

    /// Start an `embeddings {model}` span for these inputs.
    pub(crate) fn start_embeddings(provider: &Provider, model: &str, inputs: &[String]) -> Self {
        let Some(capture) = Self::capture_if_enabled() else {
            return Self::disabled(provider, model);
        };
        let mut attributes = vec![KeyValue::new(OI_EMBEDDING_MODEL_NAME, model.to_owned())];
        if capture {
            let inputs: Vec<_> = inputs.iter().map(|text| preview(text)).collect();
            attributes.push(KeyValue::new(
                OI_INPUT_VALUE,
                serde_json::Value::from(inputs).to_string(),
            ));
            attributes.push(KeyValue::new(OI_INPUT_MIME_TYPE, MIME_JSON));
        }
        Self::open(provider, Operation::Embeddings, model, attributes, capture)
    }

    /// `None` when observation is off (`WAXELL_OBSERVE=false`), else whether content may be captured.
    fn capture_if_enabled() -> Option<bool> {
        telemetry::current().map(|state| state.capture.content)
    }

    /// A call that runs in the caller's context and records nothing.
    fn disabled(provider: &Provider, model: &str) -> Self {
        let mut call = Self::recording(Context::current(), provider, model, Vec::new(), false);
        call.ended = true;
        call
    }

    /// [`Self::open_request`] for a span whose ids its request already carries (see
    /// [`telemetry::SpanIds`]): started now, on the recording thread, as of when the call began.
    #[cfg(feature = "async-openai")]
    pub(crate) fn open_request_ahead(
        provider: &Provider,
        operation: Operation,
        model: &str,
        stream: bool,
        ids: &telemetry::SpanIds,
    ) -> Self {
        let Some(state) = telemetry::state_for(&ids.parent) else {
            return Self::disabled(provider, model);
        };
        let attributes = vec![KeyValue::new(GEN_AI_REQUEST_STREAM, stream)];
        let capture = state.capture.content;
        let mut call = Self::open_with(provider, operation, model, attributes, capture, |builder| {
            state.start_with_ids(builder, ids)
        });
        call.started = ids.started;
        call
    }

    /// Start the span with the attributes every operation shares plus `extra`.
    fn open(
        provider: &Provider,
        operation: Operation,
        model: &str,
        extra: Vec<KeyValue>,
        capture: bool,
    ) -> Self {
        Self::open_with(
            provider,
            operation,
            model,
            extra,
            capture,
            telemetry::start_current,
        )
    }

    /// [`Self::open`], the span started by `start`.
    fn open_with(
        provider: &Provider,
        operation: Operation,
        model: &str,
        extra: Vec<KeyValue>,
        capture: bool,
        start: impl FnOnce(SpanBuilder) -> Context,
    ) -> Self {
        // Sampling-relevant attributes go into the builder, so a sampler can see them.
        let mut identity = Self::identity(operation, provider, model);
        if let Some(server) = &provider.server {
            identity.push(KeyValue::new(SERVER_ADDRESS, server.host.clone()));
            identity.push(KeyValue::new(SERVER_PORT, i64::from(server.port)));
        }
        let mut attributes = identity.clone();
        attributes.extend([
            KeyValue::new(OI_SPAN_KIND, operation.openinference_kind()),
            KeyValue::new(WAXELL_SPAN_TYPE, WAXELL_SPAN_TYPE_LLM_CALL),
            KeyValue::new(OI_LLM_SYSTEM, openinference_system(&provider.name)),
            KeyValue::new(OI_LLM_PROVIDER, openinference_provider(&provider.name)),
        ]);
        if provider.dry_run {
            attributes.push(KeyValue::new(WAXELL_DRY_RUN, true));
        }
        attributes.extend(extra);

        let cx = start(
            SpanBuilder::from_name(format!("{} {model}", operation.name()))
                .with_kind(SpanKind::Client)
                .with_attributes(attributes),
        );
        Self::recording(cx, provider, model, identity, capture)
    }

    /// `gen_ai.operation.name`, `gen_ai.provider.name` and `gen_ai.request.model`: the attributes that
    /// identify a call, on its span and on both metrics.
    fn identity(operation: Operation, provider: &Provider, model: &str) -> Vec<KeyValue> {
        Self::identity_named(operation, &provider.name, model)
    }

    fn identity_named(operation: Operation, provider: &str, model: &str) -> Vec<KeyValue> {
        vec![
            KeyValue::new(GEN_AI_OPERATION_NAME, operation.name()),
            KeyValue::new(GEN_AI_PROVIDER_NAME, provider.to_owned()),
            KeyValue::new(GEN_AI_REQUEST_MODEL, model.to_owned()),
        ]
    }

    /// The provider and model of a span that did not know them when it started (rig-agent's turn span,
    /// which rig's provider layer fills in later): its name, identity attributes and their OpenInference
    /// mirrors, and the metrics' attributes.
    #[cfg(feature = "tracing")]
    pub(crate) fn identify(&mut self, operation: Operation, span_name: &str, provider: &str, model: &str) {
        let span = self.cx.span();
        if !model.is_empty() {
            span.update_name(format!("{span_name} {model}"));
        }
        let mut attributes = vec![
            KeyValue::new(GEN_AI_PROVIDER_NAME, provider.to_owned()),
            KeyValue::new(GEN_AI_REQUEST_MODEL, model.to_owned()),
        ];
        attributes.extend(Self::identity_mirror(operation, provider));
        span.set_attributes(attributes);
        model.clone_into(&mut self.request_model);
        self.metric_attributes = Self::identity_named(operation, provider, model);
    }

    /// A call in flight whose span `cx` holds.
    fn recording(
        cx: Context,
        provider: &Provider,
        model: &str,
        metric_attributes: Vec<KeyValue>,
        capture: bool,
    ) -> Self {
        Self {
            cx,
            started: Instant::now(),
            request_model: model.to_owned(),
            metric_attributes,
            offered_tools: Vec::new(),
            prices: Arc::clone(&provider.prices),
            capture,
            usage_override: None,
            end_time: None,
            ended: false,
        }
    }

    /// Take over a span another instrumentation started (a `tracing` span with GenAI fields, see
    /// `integrations::genai_spans`): `cx` holds it. Content is added at the end with
    /// [`Self::record_input`], once the other side has recorded it.
    #[cfg(feature = "tracing")]
    pub(crate) fn adopt(
        cx: Context,
        operation: Operation,
        provider: &Provider,
        model: &str,
        capture: bool,
    ) -> Self {
        let identity = Self::identity(operation, provider, model);
        Self::recording(cx, provider, model, identity, capture)
    }

    /// The tools the request offered (the options of a `tool_call:{name}` decision).
    #[cfg(feature = "tracing")]
    pub(crate) fn set_offered_tools(&mut self, tools: Vec<String>) {
        self.offered_tools = tools;
    }

    /// The request's captured content (when the policy allows), on a span started elsewhere.
    #[cfg(feature = "tracing")]
    pub(crate) fn record_input(&mut self, request: &ChatRequest) {
        if self.capture && !self.ended {
            self.cx.span().set_attributes(input_content(request));
        }
    }

    /// The attributes every span of this operation carries besides the GenAI identity (OpenInference
    /// kind and model, waxell's span type).
    #[cfg(feature = "tracing")]
    pub(crate) fn identity_mirror(operation: Operation, provider: &str) -> Vec<KeyValue> {
        vec![
            KeyValue::new(OI_SPAN_KIND, operation.openinference_kind()),
            KeyValue::new(WAXELL_SPAN_TYPE, WAXELL_SPAN_TYPE_LLM_CALL),
            KeyValue::new(OI_LLM_SYSTEM, openinference_system(provider)),
            KeyValue::new(OI_LLM_PROVIDER, openinference_provider(provider)),
        ]
    }

    /// Usage reported outside the response; used instead of the response's.
    pub(crate) fn set_usage(&mut self, usage: Usage) {
        self.usage_override = Some(usage);
    }

    /// The context to run the call in: the span is current there, and the transport propagates it.
    pub(crate) fn context(&self) -> &Context {
        &self.cx
    }

    /// The call ended at `at` (its answer arrived), whenever it is recorded: the span's end, the decision's
    /// time and the duration metric use it.
    #[cfg(feature = "async-openai")]
    pub(crate) fn ended_at(&mut self, at: Instant) {
        let wall = SystemTime::now()
            .checked_sub(at.elapsed())
            .unwrap_or_else(SystemTime::now);
        self.end_time = Some((at, wall));
    }

    /// The call began at `at` (its span was started later, under ids handed out then).
    #[cfg(feature = "tracing")]
    pub(crate) fn began_at(&mut self, at: Instant) {
        self.started = at;
    }

    /// [`Self::ended_at`] with the wall-clock time already known.
    #[cfg(feature = "tracing")]
    pub(crate) fn ended_at_time(&mut self, at: Instant, wall: SystemTime) {
        self.end_time = Some((at, wall));
    }

    /// OpenInference's `llm.model_name`: the model that answered, else the one asked for. Set once, at the
    /// end (the SDK keeps every value set for a key, so setting it at the start too would export two).
    fn model_mirror(&self, response_model: &str) -> KeyValue {
        let model = if response_model.is_empty() {
            &self.request_model
        } else {
            response_model
        };
        KeyValue::new(OI_LLM_MODEL_NAME, model.to_owned())
    }

    /// End the span at the time set by [`Self::ended_at`], else now.
    fn end_span(&self) {
        match self.end_time {
            Some((_, wall)) => self.cx.span().end_with_timestamp(wall),
            None => self.cx.span().end(),
        }
    }

    fn duration(&self) -> Duration {
        match self.end_time {
            Some((at, _)) => at.saturating_duration_since(self.started),
            None => self.started.elapsed(),
        }
    }

    /// Record a successful response and end the span.
    pub(crate) fn succeeded(&mut self, response: &ChatResponse, stream: Option<StreamStats>) {
        if self.ended {
            return;
        }
        self.ended = true;
        let span = self.cx.span();
        let mut attributes = vec![
            KeyValue::new(GEN_AI_RESPONSE_ID, response.id.clone()),
            KeyValue::new(GEN_AI_RESPONSE_FINISH_REASONS, finish_reasons(response)),
        ];
        attributes.push(self.model_mirror(&response.model));
        if !response.model.is_empty() {
            attributes.push(KeyValue::new(GEN_AI_RESPONSE_MODEL, response.model.clone()));
            self.metric_attributes
                .push(KeyValue::new(GEN_AI_RESPONSE_MODEL, response.model.clone()));
        }
        let usage = self.usage_override.or(response.usage);
        if let Some(usage) = &usage {
            attributes.extend(self.usage_attributes(usage, &response.model));
        }
        if let Some(stats) = stream {
            attributes.push(KeyValue::new(
                WAXELL_LLM_CHUNK_COUNT,
                saturating_i64(stats.chunks as u64),
            ));
            if let Some(ttfc) = stats.time_to_first_chunk {
                attributes.push(KeyValue::new(
                    GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK,
                    ttfc.as_secs_f64(),
                ));
            }
        }
        if self.capture {
            attributes.extend(output_content(response));
        }
        span.set_attributes(attributes);

        self.record_tool_call_decision(response);
        self.record_metrics(usage.as_ref(), stream, None);
        self.end_span();
    }

    /// Record an embeddings response and end the span.
    pub(crate) fn succeeded_embeddings(
        &mut self,
        response_model: &str,
        usage: Option<&Usage>,
        dimensions: Option<usize>,
    ) {
        if self.ended {
            return;
        }
        self.ended = true;
        let span = self.cx.span();
        let usage = self.usage_override.or(usage.copied());
        let mut attributes = vec![self.model_mirror(response_model)];
        if !response_model.is_empty() {
            attributes.push(KeyValue::new(GEN_AI_RESPONSE_MODEL, response_model.to_owned()));
            self.metric_attributes
                .push(KeyValue::new(GEN_AI_RESPONSE_MODEL, response_model.to_owned()));
        }
        if let Some(usage) = &usage {
            attributes.extend(self.usage_attributes(usage, response_model));
        }
        if let Some(dimensions) = dimensions {
            attributes.push(KeyValue::new(
                GEN_AI_EMBEDDINGS_DIMENSION_COUNT,
                saturating_i64(dimensions as u64),
            ));
        }
        span.set_attributes(attributes);
        self.record_metrics(usage.as_ref(), None, None);
        self.end_span();
    }

    /// Record a failure and end the span.
    pub(crate) fn failed(&mut self, error_type: &str, message: &str, stream: Option<StreamStats>) {
        if self.ended {
            return;
        }
        self.ended = true;
        let span = self.cx.span();
        span.set_attribute(self.model_mirror(""));
        span.set_attribute(KeyValue::new(ERROR_TYPE, error_type.to_owned()));
        if let Some(stats) = stream {
            span.set_attribute(KeyValue::new(
                WAXELL_LLM_CHUNK_COUNT,
                saturating_i64(stats.chunks as u64),
            ));
        }
        // The server's message can quote the prompt back, so it goes through the scrubber too.
        span.set_status(Status::error(telemetry::content_preview(message, MAX_PART_CHARS)));
        self.record_metrics(None, stream, Some(error_type.to_owned()));
        self.end_span();
    }

    /// Token counts (GenAI and OpenInference) and the cost of `usage`.
    fn usage_attributes(&self, usage: &Usage, response_model: &str) -> Vec<KeyValue> {
        let mut attributes = Vec::with_capacity(9);
        attributes.extend([
            KeyValue::new(GEN_AI_USAGE_INPUT_TOKENS, saturating_i64(usage.prompt_tokens)),
            KeyValue::new(
                GEN_AI_USAGE_OUTPUT_TOKENS,
                saturating_i64(usage.completion_tokens),
            ),
            KeyValue::new(OI_LLM_TOKEN_COUNT_PROMPT, saturating_i64(usage.prompt_tokens)),
            KeyValue::new(
                OI_LLM_TOKEN_COUNT_COMPLETION,
                saturating_i64(usage.completion_tokens),
            ),
            KeyValue::new(
                OI_LLM_TOKEN_COUNT_TOTAL,
                saturating_i64(usage.prompt_tokens.saturating_add(usage.completion_tokens)),
            ),
        ]);
        if let Some(cached) = usage.cached_tokens() {
            attributes.push(KeyValue::new(
                GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
                saturating_i64(cached),
            ));
            attributes.push(KeyValue::new(
                OI_LLM_TOKEN_COUNT_PROMPT_CACHE_READ,
                saturating_i64(cached),
            ));
        }
        if let Some(written) = usage.cache_creation_tokens() {
            attributes.push(KeyValue::new(
                GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS,
                saturating_i64(written),
            ));
            attributes.push(KeyValue::new(
                OI_LLM_TOKEN_COUNT_PROMPT_CACHE_WRITE,
                saturating_i64(written),
            ));
        }
        if let Some(reasoning) = usage.reasoning_tokens() {
            attributes.push(KeyValue::new(
                GEN_AI_USAGE_REASONING_OUTPUT_TOKENS,
                saturating_i64(reasoning),
            ));
            attributes.push(KeyValue::new(
                OI_LLM_TOKEN_COUNT_COMPLETION_REASONING,
                saturating_i64(reasoning),
            ));
        }
        // The answering model's price, else the requested one's (a router may not echo the name).
        let priced_model = [response_model, self.request_model.as_str()]
            .into_iter()
            .find(|model| !model.is_empty() && self.prices.price(model).is_some());
        if let Some(cost) = priced_model.and_then(|model| self.prices.cost(model, usage)) {
            attributes.push(KeyValue::new(WAXELL_LLM_COST, cost));
            attributes.push(KeyValue::new(OI_LLM_COST_TOTAL, cost));
        }
        attributes
    }

    /// `tool_call:{name}` for one call, `tool_calls` for parallel calls, with the offered tools as
    /// options (as the Python SDK does). Recorded as a child of the chat span: the model decided there.
    fn record_tool_call_decision(&self, response: &ChatResponse) {
        let calls = response.tool_calls();
        let (name, chosen) = match calls {
            [] => return,
            [call] => (
                format!("{DECISION_TOOL_CALL_PREFIX}{}", call.function.name),
                call.function.name.clone(),
            ),
            calls => (
                DECISION_PARALLEL_TOOL_CALLS.to_owned(),
                calls
                    .iter()
                    .map(|call| call.function.name.as_str())
                    .collect::<Vec<_>>()
                    .join(","),
            ),
        };
        // A synchronous call: the guard is dropped before any await.
        let _guard = self.cx.clone().attach();
        let at = self.end_time.map(|(_, wall)| wall);
        crate::decision::record(&name, &self.offered_tools, &chosen, None, None, at);
    }

    fn record_metrics(&self, usage: Option<&Usage>, stream: Option<StreamStats>, error_type: Option<String>) {
        let instruments = Instruments::current();
        let mut attributes = self.metric_attributes.clone();
        if let Some(error_type) = error_type {
            attributes.push(KeyValue::new(ERROR_TYPE, error_type));
        }
        instruments
            .duration
            .record(self.duration().as_secs_f64(), &attributes);
        if let Some(ttfc) = stream.and_then(|stats| stats.time_to_first_chunk) {
            instruments
                .time_to_first_chunk
                .record(ttfc.as_secs_f64(), &attributes);
        }
        if let Some(usage) = usage {
            for (token_type, count) in [
                ("input", usage.prompt_tokens),
                ("output", usage.completion_tokens),
            ] {
                let mut attributes = attributes.clone();
                attributes.push(KeyValue::new(GEN_AI_TOKEN_TYPE, token_type));
                instruments.tokens.record(count, &attributes);
            }
        }
    }
}

impl Drop for CallTelemetry {
    fn drop(&mut self) {
        if !self.ended {
            // The caller dropped the future or stream before the call completed.
            let span = self.cx.span();
            span.set_attribute(self.model_mirror(""));
            span.set_attribute(KeyValue::new(WAXELL_CANCELLED, true));
            self.end_span();
        }
    }
}

pub(super) fn saturating_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}
