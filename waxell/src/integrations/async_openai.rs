//! [async-openai](https://crates.io/crates/async-openai): a tower layer at its HTTP chokepoint (the
//! `middleware` feature's `Client::with_http_service`) that records chat completions (streamed or
//! not), embeddings and the Responses API. One line at client construction, no change at call sites:
//!
//! ```no_run
//! use async_openai::{config::OpenAIConfig, Client};
//!
//! let client = Client::with_config(OpenAIConfig::default())
//!     .with_http_service(waxell::integrations::async_openai::service());
//! ```
//!
//! [`service`] is async-openai's default stack (its retry layer over `reqwest`) with waxell's layer
//! outside, so one call with its retries is one span. To keep a stack of your own, put [`WaxellLayer`]
//! outermost in it.
//!
//! Streams are teed: each chunk is handed to the caller as soon as it arrives. The layer keeps each chunk
//! and its arrival time, and reads the `data:` lines once the stream ends. All recording work (request
//! description, response parsing, pricing, scrubbing) runs on waxell's recording thread after the caller
//! has its answer; spans still end when the answer arrived, and flush and shutdown wait for it.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll};
use std::time::Instant;

use async_openai::error::OpenAIError;
use async_openai::middleware::retry::OpenAIRetryLayer;
use async_openai::middleware::{HttpRequestFactory, ReqwestService};
use bytes::{Bytes, BytesMut};
use futures_util::Stream;
use opentelemetry::trace::FutureExt as _;
use reqwest::header::HeaderMap;
use serde_json::Value;
use tower::{Layer, Service, ServiceExt as _};

use super::openai_wire as wire;
use crate::llm::record::{LlmCall, Provider};
use crate::llm::{ChatChunk, PriceTable};

/// async-openai's default HTTP stack (`OpenAIRetryLayer` over a fresh `reqwest::Client`), recorded.
pub fn service() -> WaxellService<async_openai::middleware::retry::OpenAIRetry<ReqwestService>> {
    service_with(reqwest::Client::new())
}

/// [`service`] over your own `reqwest::Client` (proxies, timeouts, TLS settings).
pub fn service_with(
    client: reqwest::Client,
) -> WaxellService<async_openai::middleware::retry::OpenAIRetry<ReqwestService>> {
    WaxellLayer::new().layer(
        tower::ServiceBuilder::new()
            .layer(OpenAIRetryLayer::default())
            .service(ReqwestService::new(client)),
    )
}

/// The tower layer. By default the provider is inferred from the server's host (`openai` for
/// OpenAI, compatible servers and routers, as the GenAI conventions ask) with the built-in prices.
#[derive(Debug, Clone, Default)]
pub struct WaxellLayer {
    provider_name: Option<String>,
    /// Shared by every call's `Provider`, so a custom table is not copied per request.
    prices: Option<Arc<PriceTable>>,
}

impl WaxellLayer {
    /// The layer with the provider inferred from the host and the built-in prices.
    pub fn new() -> Self {
        Self::default()
    }

    /// `gen_ai.provider.name` for every call (e.g. `azure.ai.openai`).
    pub fn with_provider_name(mut self, name: impl Into<String>) -> Self {
        self.provider_name = Some(name.into());
        self
    }

    /// Prices for `waxell.llm.cost` instead of [`PriceTable::defaults`].
    pub fn with_prices(mut self, prices: PriceTable) -> Self {
        self.prices = Some(Arc::new(prices));
        self
    }

    fn provider_for(&self, url: &reqwest::Url) -> Provider {
        let host = url.host_str().unwrap_or_default();
        let name = self
            .provider_name
            .clone()
            .unwrap_or_else(|| crate::llm::provider_for_host(host).to_owned());
        let mut provider = Provider::new(name);
        if let (Some(host), Some(port)) = (url.host_str(), url.port_or_known_default()) {
            provider = provider.with_server(host, port);
        }
        if let Some(prices) = &self.prices {
            provider.prices = Arc::clone(prices);
        }
        provider
    }
}

impl<S> Layer<S> for WaxellLayer {
    type Service = WaxellService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        WaxellService {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service [`WaxellLayer`] wraps around async-openai's HTTP stack.
#[derive(Debug, Clone)]
pub struct WaxellService<S> {
    inner: S,
    layer: WaxellLayer,
}

/// Which API a request is for, from its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Api {
    Chat,
    Embeddings,
    Responses,
}

impl Api {
    fn of(request: &reqwest::Request) -> Option<Self> {
        if request.method() != reqwest::Method::POST {
            return None;
        }
        let path = request.url().path().trim_end_matches('/');
        if path.ends_with("/chat/completions") {
            Some(Self::Chat)
        } else if path.ends_with("/embeddings") {
            Some(Self::Embeddings)
        } else if path.ends_with("/responses") {
            Some(Self::Responses)
        } else {
            None
        }
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

impl<S> Service<HttpRequestFactory> for WaxellService<S>
where
    S: Service<HttpRequestFactory, Response = reqwest::Response> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<OpenAIError> + Send + 'static,
{
    type Response = reqwest::Response;
    type Error = OpenAIError;
    type Future = BoxFuture<Result<reqwest::Response, OpenAIError>>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, factory: HttpRequestFactory) -> Self::Future {
        // The ready service handles this call; a clone takes its place (tower's usual swap).
        let ready = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, ready);
        let layer = self.layer.clone();
        Box::pin(async move {
            if !crate::telemetry::is_enabled() {
                return inner.oneshot(factory).await.map_err(Into::into);
            }
            // Built once to see the URL and body; the first attempt sends it, a retry builds afresh.
            let request = factory.build().await?;
            let Some(api) = Api::of(&request) else {
                let replay = replay(request, factory, HeaderMap::new());
                return inner.oneshot(replay).await.map_err(Into::into);
            };
            let body = request
                .body()
                .and_then(reqwest::Body::as_bytes)
                .map(Bytes::copy_from_slice)
                .unwrap_or_default();
            let provider = layer.provider_for(request.url());
            let (call, request_context) = CallStart::begin(api, provider, &body);
            let mut trace_headers = HeaderMap::new();
            crate::http::insert_trace_headers(&request_context, &mut trace_headers);
            let result = inner
                .oneshot(replay(request, factory, trace_headers))
                .with_context(request_context)
                .await
                .map_err(Into::into);
            let response = match result {
                Ok(response) => response,
                Err(error) => {
                    let (error_type, message) = (transport_error_type(&error), error.to_string());
                    record_later(api, call, body, move |call| call.fail(error_type, &message));
                    return Err(error);
                }
            };
            let is_stream = response
                .headers()
                .get(reqwest::header::CONTENT_TYPE)
                .and_then(|value| value.to_str().ok())
                .is_some_and(|value| value.starts_with("text/event-stream"));
            if response.status().is_success() && is_stream {
                return Ok(tee(response, api, call, body));
            }
            // A complete body: the caller reads all of it anyway, so reading it here costs no wait.
            let (parts, bytes) = read(response).await?;
            let status = parts.status;
            let answer = bytes.clone();
            record_later(api, call, body, move |call| {
                if status.is_success() {
                    finish(api, call, &answer);
                } else {
                    let (error_type, message) = wire::error_of(status.as_u16(), &answer);
                    call.fail(&error_type, &message);
                }
            });
            Ok(reqwest::Response::from(::http::Response::from_parts(
                parts, bytes,
            )))
        })
    }
}

/// How a call's span starts. A chat or Responses call under waxell's own provider gets its span ids
/// now and its span on the recording thread, as of now: the caller waits only for the ids, not for the
/// span's start (about a third of the layer's time on the caller's path, several times more on a CPU that
/// was idle while the previous answer streamed). Elsewhere (embeddings, someone else's provider) the span
/// starts here.
#[allow(clippy::large_enum_variant, reason = "one per call, held in its future")]
enum CallStart {
    Open(LlmCall),
    Later(LaterCall),
}

impl CallStart {
    /// Begin the call; the context to send its request in.
    fn begin(api: Api, provider: Provider, body: &Bytes) -> (Self, opentelemetry::Context) {
        if api != Api::Embeddings {
            if let Some(ids) = crate::telemetry::SpanIds::ahead() {
                let context = ids.request_context();
                let later = LaterCall {
                    provider,
                    body: body.clone(),
                    ids: Some(ids),
                };
                return (Self::Later(later), context);
            }
        }
        let call = open(api, &provider, body);
        let context = call.context().clone();
        (Self::Open(call), context)
    }

    /// The call with its span, on the recording thread.
    fn into_call(self) -> LlmCall {
        match self {
            Self::Open(call) => call,
            Self::Later(mut later) => later.open(),
        }
    }
}

/// A call whose span is opened later (see [`CallStart`]). Dropped unopened (the caller gave up on the
/// call), it is still recorded, cancelled, as an open span would be.
struct LaterCall {
    provider: Provider,
    body: Bytes,
    /// `None` once opened.
    ids: Option<crate::telemetry::SpanIds>,
}

impl LaterCall {
    fn open(&mut self) -> LlmCall {
        let ids = self.ids.take().expect("a later call is opened once");
        let (model, stream) = wire::request_head(&self.body);
        LlmCall::open_ahead(&self.provider, &model, stream, &ids)
    }
}

impl Drop for LaterCall {
    fn drop(&mut self) {
        let Some(ids) = self.ids.take() else {
            return;
        };
        let dropped_at = Instant::now();
        let mut unopened = LaterCall {
            provider: self.provider.clone(),
            body: self.body.clone(),
            ids: Some(ids),
        };
        crate::deferred::defer(move || {
            let mut call = unopened.open();
            call.ended_at(dropped_at);
            // Dropped unfinished: the span says the call was cancelled.
        });
    }
}

/// Start the call's span with what identifies it; [`describe`] adds the rest of the request.
fn open(api: Api, provider: &Provider, body: &[u8]) -> LlmCall {
    match api {
        Api::Chat | Api::Responses => {
            let (model, stream) = wire::request_head(body);
            LlmCall::open(provider, &model, stream)
        }
        Api::Embeddings => {
            let body: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
            LlmCall::start_embeddings(
                provider,
                body.get("model").and_then(Value::as_str).unwrap_or_default(),
                &wire::embeddings_inputs(&body),
            )
        }
    }
}

/// The call ended now: describe the request and record `outcome` on the recording thread, so the caller
/// gets its answer without waiting for the parsing, pricing and scrubbing (see `crate::deferred`).
fn record_later(
    api: Api,
    call: CallStart,
    request_body: Bytes,
    outcome: impl FnOnce(&mut LlmCall) + Send + 'static,
) {
    let ended = Instant::now();
    crate::deferred::defer(move || {
        let mut call = call.into_call();
        call.ended_at(ended);
        // The call's context picks the SDK state (capture policy, scrubber) that applies to it.
        let _cx = call.context().clone().attach();
        describe(api, &mut call, &request_body);
        outcome(&mut call);
    });
}

/// The request's parameters and content on the call's span (embeddings have theirs from the start).
fn describe(api: Api, call: &mut LlmCall, body: &[u8]) {
    let to_request = match api {
        Api::Chat => wire::chat_request,
        Api::Responses => wire::responses_request,
        Api::Embeddings => return,
    };
    if let Ok(body) = serde_json::from_slice::<Value>(body) {
        call.describe(&to_request(&body));
    }
}

fn finish(api: Api, call: &mut LlmCall, bytes: &[u8]) {
    let malformed = |call: &mut LlmCall, error: serde_json::Error| {
        call.fail(
            "malformed_response",
            &format!("the response body is not what the API returns: {error}"),
        );
    };
    match api {
        // Straight into the typed response, no `Value` in between: the caller waits for this parse.
        Api::Chat => match serde_json::from_slice(bytes) {
            Ok(response) => call.finish(&response),
            Err(error) => malformed(call, error),
        },
        Api::Responses => match serde_json::from_slice(bytes) {
            Ok(body) => call.finish(&wire::responses_response(&body)),
            Err(error) => malformed(call, error),
        },
        Api::Embeddings => match serde_json::from_slice(bytes) {
            Ok(body) => {
                let (model, usage, dimensions) = wire::embeddings_outcome(&body);
                call.finish_embeddings(&model, usage, dimensions);
            }
            Err(error) => malformed(call, error),
        },
    }
}

/// The factory the attempts use: the first takes `request` (built once to read its URL and body, so not
/// copied), a retry builds afresh from async-openai's `factory`. Each gets `trace_headers`: the server
/// sees the call's span as the parent (W3C `traceparent`), as with waxell's own client.
fn replay(
    request: reqwest::Request,
    factory: HttpRequestFactory,
    trace_headers: HeaderMap,
) -> HttpRequestFactory {
    let first = Arc::new(Mutex::new(Some(request)));
    HttpRequestFactory::new(move || {
        let built = first
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        let (factory, trace_headers) = (factory.clone(), trace_headers.clone());
        async move {
            let mut request = match built {
                Some(request) => request,
                None => factory.build().await?,
            };
            request.headers_mut().extend(trace_headers);
            Ok(request)
        }
    })
}

async fn read(response: reqwest::Response) -> Result<(::http::response::Parts, Bytes), OpenAIError> {
    let response = ::http::Response::from(response);
    let (parts, body) = response.into_parts();
    let bytes = http_body_util_collect(body).await?;
    Ok((parts, bytes))
}

/// The whole body of a response (reqwest's `Body` is a `http_body::Body`).
async fn http_body_util_collect(body: reqwest::Body) -> Result<Bytes, OpenAIError> {
    let response = reqwest::Response::from(::http::Response::new(body));
    response.bytes().await.map_err(OpenAIError::Reqwest)
}

fn transport_error_type(error: &OpenAIError) -> &'static str {
    match error {
        OpenAIError::Reqwest(e) if e.is_timeout() => "timeout",
        OpenAIError::Reqwest(e) if e.is_connect() => "connection_error",
        OpenAIError::Reqwest(_) => "http_error",
        _ => "_OTHER",
    }
}

/// Hand the response on with its body teed through [`SseTee`].
fn tee(response: reqwest::Response, api: Api, call: CallStart, request_body: Bytes) -> reqwest::Response {
    let response = ::http::Response::from(response);
    let (parts, body) = response.into_parts();
    let chunks = reqwest::Response::from(::http::Response::new(body)).bytes_stream();
    let tee = SseTee {
        inner: Box::pin(chunks),
        recording: Some(StreamRecording {
            api,
            call,
            request_body,
            chunks: Vec::new(),
        }),
    };
    reqwest::Response::from(::http::Response::from_parts(
        parts,
        reqwest::Body::wrap_stream(tee),
    ))
}

type ByteStream = Pin<Box<dyn Stream<Item = Result<Bytes, reqwest::Error>> + Send>>;

/// Passes every byte chunk through unchanged, keeping a reference to it and the time it arrived. When the
/// stream ends (or is dropped), the chunks are read on the recording thread: the caller never waits for
/// the reading, and chunks that arrive together reach the caller together.
struct SseTee {
    inner: ByteStream,
    /// `None` once handed to the recording thread.
    recording: Option<StreamRecording>,
}

/// A streamed call and what its recording needs.
struct StreamRecording {
    api: Api,
    call: CallStart,
    request_body: Bytes,
    /// Every chunk handed on, and when it arrived.
    chunks: Vec<(Bytes, Instant)>,
}

/// How the caller's side of a stream ended.
enum StreamEnd {
    /// The body ended.
    Ended,
    /// Reading the body failed.
    Failed(String),
    /// The caller dropped the stream before its end.
    Dropped,
}

impl StreamRecording {
    /// Read the chunks and end the call on the recording thread.
    fn record_later(self, end: StreamEnd) {
        let Self {
            api,
            call,
            request_body,
            chunks,
        } = self;
        let last_arrived = chunks.last().map(|(_, arrived)| *arrived);
        let ended = Instant::now();
        crate::deferred::defer(move || {
            let mut call = call.into_call();
            call.ended_at(ended);
            let _cx = call.context().clone().attach();
            describe(api, &mut call, &request_body);
            let mut reader = SseReader {
                api,
                call: Some(call),
                line: BytesMut::new(),
                done: false,
            };
            for (bytes, arrived) in chunks {
                reader.observe(&bytes, arrived);
            }
            match end {
                StreamEnd::Ended => reader.end(),
                StreamEnd::Failed(message) => {
                    if let Some(mut call) = reader.call.take() {
                        call.fail("stream_cut", &message);
                    }
                }
                // A caller that stops reading once every choice has finished (without waiting for
                // `[DONE]`) got the whole answer, which ended with its last chunk; a caller that dropped
                // the stream earlier cancelled the call (dropping it says so on the span).
                StreamEnd::Dropped => {
                    if let Some(call) = reader.call.as_mut().filter(|call| call.stream_is_finished()) {
                        if let Some(at) = last_arrived {
                            call.ended_at(at);
                        }
                        reader.end();
                    }
                }
            }
        });
    }
}

/// Reads a stream's SSE `data:` lines into its call.
struct SseReader {
    api: Api,
    /// `None` once the call is recorded.
    call: Option<LlmCall>,
    /// The unfinished last line of the bytes read so far.
    line: BytesMut,
    done: bool,
}

impl SseReader {
    fn observe(&mut self, bytes: &[u8], arrived: Instant) {
        if self.call.is_none() {
            return;
        }
        let mut rest = bytes;
        while let Some(end) = rest.iter().position(|b| *b == b'\n') {
            self.line.extend_from_slice(&rest[..end]);
            rest = &rest[end + 1..];
            let line = std::mem::take(&mut self.line);
            self.data_line(&line, arrived);
        }
        self.line.extend_from_slice(rest);
    }

    fn data_line(&mut self, line: &[u8], arrived: Instant) {
        let Some(data) = line.strip_prefix(b"data:") else {
            return;
        };
        let data = data.strip_suffix(b"\r").unwrap_or(data);
        let data = data.strip_prefix(b" ").unwrap_or(data);
        let Some(call) = self.call.as_mut() else {
            return;
        };
        if data == b"[DONE]" {
            // The client may stop reading here, so the call ends now rather than with the body.
            self.done = true;
            call.ended_at(arrived);
            self.end();
            return;
        }
        let Ok(event) = serde_json::from_slice::<Value>(data) else {
            return;
        };
        if let Some(error) = event.get("error").filter(|_| self.api == Api::Chat) {
            let body = serde_json::json!({ "error": error }).to_string();
            let (error_type, message) = wire::error_of(200, body.as_bytes());
            call.ended_at(arrived);
            call.fail(&error_type, &message);
            self.call = None;
            return;
        }
        match self.api {
            Api::Chat => {
                if let Ok(chunk) = serde_json::from_value::<ChatChunk>(event) {
                    call.chunk_arrived(&chunk, arrived);
                }
            }
            Api::Responses => match event.get("type").and_then(Value::as_str) {
                Some("response.completed" | "response.incomplete") => {
                    if let Some(response) = event.get("response") {
                        call.ended_at(arrived);
                        call.finish(&wire::responses_response(response));
                        self.call = None;
                    }
                }
                Some("response.failed" | "error") => {
                    let code = event
                        .pointer("/response/error/code")
                        .or_else(|| event.get("code"))
                        .and_then(Value::as_str)
                        .unwrap_or("_OTHER")
                        .to_owned();
                    call.ended_at(arrived);
                    call.fail(&code, &event.to_string());
                    self.call = None;
                }
                // Every other event counts as a chunk (the first sets the time to first chunk).
                Some(_) => call.chunk_arrived(&ChatChunk::default(), arrived),
                None => {}
            },
            Api::Embeddings => {}
        }
    }

    /// The body ended: complete if the server said so (or every choice finished), cut otherwise.
    fn end(&mut self) {
        if let Some(mut call) = self.call.take() {
            if self.done || call.stream_is_finished() {
                call.finish_stream();
            } else {
                call.fail(
                    "stream_cut",
                    &format!(
                        "the server closed the stream after {} chunks, before it was done",
                        call.chunks()
                    ),
                );
            }
        }
    }
}

impl Drop for SseTee {
    fn drop(&mut self) {
        if let Some(recording) = self.recording.take() {
            recording.record_later(StreamEnd::Dropped);
        }
    }
}

impl Stream for SseTee {
    type Item = Result<Bytes, reqwest::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        let item = std::task::ready!(this.inner.as_mut().poll_next(cx));
        match &item {
            Some(Ok(bytes)) => {
                if let Some(recording) = this.recording.as_mut() {
                    recording.chunks.push((bytes.clone(), Instant::now()));
                }
            }
            Some(Err(error)) => {
                if let Some(recording) = this.recording.take() {
                    recording.record_later(StreamEnd::Failed(error.to_string()));
                }
            }
            None => {
                if let Some(recording) = this.recording.take() {
                    recording.record_later(StreamEnd::Ended);
                }
            }
        }
        Poll::Ready(item)
    }
}
