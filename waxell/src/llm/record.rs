//! Record an LLM call made with any client: the same `chat {model}` span, metrics and decisions as
//! [`Client`](super::Client), which records its own calls through this API.
//!
//! Describe where calls go once with a [`Provider`], start an [`LlmCall`] per request, run the request
//! in [`LlmCall::context`] (so spans the HTTP stack opens nest under the call), then end it with the
//! response, the streamed chunks, or the error:
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use waxell::llm::record::{LlmCall, Provider};
//! use waxell::llm::{ChatRequest, ChatResponse, Message};
//!
//! let provider = Provider::new("anthropic").with_server("api.anthropic.com", 443);
//! let request = ChatRequest::new([Message::user("Hello!")]).model("claude-sonnet-4-5");
//! let mut call = LlmCall::start(&provider, &request);
//! // ... send `request` with your own client, convert its answer ...
//! let response: ChatResponse = serde_json::from_str(r#"{"id": "msg_1", "model": "claude-sonnet-4-5",
//!     "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi!"}, "finish_reason": "stop"}],
//!     "usage": {"prompt_tokens": 9, "completion_tokens": 3}}"#)?;
//! call.finish(&response);
//! # Ok(()) }
//! ```
//!
//! Streams: pass every chunk to [`LlmCall::chunk`] as it passes (it only measures and assembles; it
//! never holds a chunk back), then [`LlmCall::finish_stream`]. Errors: [`LlmCall::fail`] with an
//! `error.type` (an HTTP status, an error code, an exception name). A call dropped before either ends its
//! span marked `waxell.cancelled`.
//!
//! What the span holds does not depend on who made the call: GenAI and OpenInference attributes, token
//! usage (cached and reasoning included), cost from the provider's [`PriceTable`](super::PriceTable), time to first chunk,
//! captured messages under the SDK's content policy (scrubbed, truncated), `server.address`/`server.port`
//! when a server is named, `error.type` on failure, the `gen_ai.client.*` metrics, and a
//! `tool_call:{name}` decision when the model called tools.

use std::time::Instant;

use opentelemetry::Context;

use super::assemble::Assembler;
use super::error::Error;
use super::instrument::{CallTelemetry, Operation, StreamStats};
pub use super::provider::Provider;
use super::types::{ChatChunk, ChatRequest, ChatResponse, Usage};

/// One LLM call being recorded. See the [module documentation](self).
#[derive(Debug)]
pub struct LlmCall {
    telemetry: CallTelemetry,
    started: Instant,
    stream: Option<StreamState>,
}

#[derive(Debug, Default)]
struct StreamState {
    assembler: Assembler,
    stats: StreamStats,
}

impl LlmCall {
    /// Start a chat call (`chat {model}`) as a child of the current OpenTelemetry context. The request's
    /// model must be the one sent (resolve defaults first); `request.stream` marks a streamed call.
    pub fn start(provider: &Provider, request: &ChatRequest) -> Self {
        Self {
            telemetry: CallTelemetry::start(provider, Operation::Chat, request),
            started: Instant::now(),
            stream: request.stream.then(StreamState::default),
        }
    }

    /// Start a chat call knowing only its model and whether it streams; [`LlmCall::describe`] adds the
    /// request. For integrations that send the request first and describe it while it is on the wire.
    #[cfg(feature = "async-openai")]
    pub(crate) fn open(provider: &Provider, model: &str, stream: bool) -> Self {
        Self {
            telemetry: CallTelemetry::open_request(provider, Operation::Chat, model, stream),
            started: Instant::now(),
            stream: stream.then(StreamState::default),
        }
    }

    /// [`LlmCall::open`] on the recording thread, for a call that began when `ids` were handed out and
    /// whose request carried them.
    #[cfg(feature = "async-openai")]
    pub(crate) fn open_ahead(
        provider: &Provider,
        model: &str,
        stream: bool,
        ids: &crate::telemetry::SpanIds,
    ) -> Self {
        Self {
            telemetry: CallTelemetry::open_request_ahead(provider, Operation::Chat, model, stream, ids),
            started: ids.started,
            stream: stream.then(StreamState::default),
        }
    }

    /// The request of a call started with [`LlmCall::open`].
    #[cfg(feature = "async-openai")]
    pub(crate) fn describe(&mut self, request: &ChatRequest) {
        self.telemetry.describe(request);
    }

    /// Start an embeddings call (`embeddings {model}`) for these inputs. End it with
    /// [`LlmCall::finish_embeddings`].
    pub fn start_embeddings(provider: &Provider, model: &str, inputs: &[String]) -> Self {
        Self {
            telemetry: CallTelemetry::start_embeddings(provider, model, inputs),
            started: Instant::now(),
            stream: None,
        }
    }

    /// The context to run the call in: the call's span is current there, so an HTTP client that
    /// propagates trace context sends it as `traceparent`, and spans it opens nest under the call.
    pub fn context(&self) -> &Context {
        self.telemetry.context()
    }

    /// One chunk of a streamed response, as it passes. The first one sets the time to first chunk.
    pub fn chunk(&mut self, chunk: &ChatChunk) {
        self.chunk_arrived(chunk, Instant::now());
    }

    /// [`LlmCall::chunk`] for a chunk read after it was handed on: `arrived` is when it came in.
    pub(crate) fn chunk_arrived(&mut self, chunk: &ChatChunk, arrived: Instant) {
        let started = self.started;
        let state = self.stream.get_or_insert_with(StreamState::default);
        if state.stats.time_to_first_chunk.is_none() {
            state.stats.time_to_first_chunk = Some(arrived.saturating_duration_since(started));
        }
        state.stats.chunks += 1;
        state.assembler.push(chunk);
    }

    /// The call ended at `at` (its answer arrived), for a call recorded after that: its span ends then.
    #[cfg(feature = "async-openai")]
    pub(crate) fn ended_at(&mut self, at: Instant) {
        self.telemetry.ended_at(at);
    }

    /// Chunks seen so far.
    pub fn chunks(&self) -> usize {
        self.stream.as_ref().map_or(0, |state| state.stats.chunks)
    }

    /// Whether every choice seen in the stream so far has its finish reason.
    pub fn stream_is_finished(&self) -> bool {
        self.stream
            .as_ref()
            .is_some_and(|state| state.assembler.is_finished())
    }

    /// End a non-streamed call with its response.
    pub fn finish(&mut self, response: &ChatResponse) {
        let stats = self.stream.as_ref().map(|state| state.stats);
        self.telemetry.succeeded(response, stats);
    }

    /// End a streamed call: the response assembled from the chunks (text joined, tool-call fragments
    /// joined, the last usage), which is also returned.
    pub fn finish_stream(&mut self) -> ChatResponse {
        let state = self.stream.take().unwrap_or_default();
        let response = state.assembler.finish();
        self.telemetry.succeeded(&response, Some(state.stats));
        response
    }

    /// End an embeddings call: the model that answered, the input tokens, and the vector length.
    pub fn finish_embeddings(
        &mut self,
        response_model: &str,
        usage: Option<Usage>,
        dimensions: Option<usize>,
    ) {
        self.telemetry
            .succeeded_embeddings(response_model, usage.as_ref(), dimensions);
    }

    /// End the call as failed: `error_type` becomes `error.type` (low-cardinality: an HTTP status, an
    /// error code, `timeout`), `message` the span status (scrubbed: servers quote prompts back).
    pub fn fail(&mut self, error_type: &str, message: &str) {
        let stats = self.stream.as_ref().map(|state| state.stats);
        self.telemetry.failed(error_type, message, stats);
    }

    /// [`LlmCall::fail`] with one of this crate's [`Error`]s.
    pub fn fail_with(&mut self, error: &Error) {
        self.fail(&error.error_type(), &error.to_string());
    }

    /// Override the usage reported by the response or stream (for clients that report it elsewhere,
    /// e.g. Anthropic's `message_delta`). Applies to the next `finish*`.
    pub fn set_usage(&mut self, usage: Usage) {
        self.telemetry.set_usage(usage);
    }
}
