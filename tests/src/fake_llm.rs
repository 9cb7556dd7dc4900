//! A fake LLM provider on 127.0.0.1 for the LLM-crate integration tests (async-openai, rig, genai) and
//! their benchmarks, answered from a script, with every request recorded. It speaks three wire formats:
//! OpenAI's (Chat Completions as JSON or SSE, Embeddings, the Responses API) under `/v1/`, Anthropic
//! Messages (`POST /v1/messages`, JSON or named SSE events) and Gemini (`POST
//! /v1beta/models/{model}:generateContent` and `:streamGenerateContent?alt=sse`). Like the real
//! services, the Anthropic and Gemini routes refuse a request without their auth headers.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;
use axum::routing::post;
use serde_json::{json, Value};

use crate::ServerThread;

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum LlmReply {
    /// This status and JSON body.
    Json(u16, Value),
    /// `text/event-stream` with these `data:` payloads (then `data: [DONE]` when `done`), each chunk
    /// sent `gap` after the previous one.
    Sse {
        events: Vec<Value>,
        done: bool,
        gap: Duration,
    },
    /// `text/event-stream` of named events (`event: {name}` then `data: {json}`), as Anthropic sends
    /// them, each sent `gap` after the previous one.
    Events {
        events: Vec<(String, Value)>,
        gap: Duration,
    },
}

/// A request as the server received it.
#[derive(Debug, Clone)]
pub struct LlmRequest {
    pub path: String,
    pub headers: HeaderMap,
    pub body: Value,
}

#[derive(Default)]
struct Script {
    replies: VecDeque<LlmReply>,
    /// Answer every request with this when the queue is empty (benchmarks).
    repeat: Option<LlmReply>,
    received: Vec<LlmRequest>,
    delay: Duration,
}

/// The server; stopped when dropped.
pub struct FakeLlm {
    server: ServerThread,
    script: Arc<Mutex<Script>>,
}

impl FakeLlm {
    /// Serve these replies in order; a request beyond them gets a 500 naming the problem.
    pub fn start(replies: Vec<LlmReply>) -> Self {
        Self::start_with(replies, None, Duration::ZERO)
    }

    /// One gpt-4o-mini answer, "Bonjour !": what the examples' dry runs talk to.
    pub fn greeting() -> Self {
        Self::start(vec![LlmReply::Json(
            200,
            chat_completion("gpt-4o-mini", Some("Bonjour !"), &[], (12, 4)),
        )])
    }

    /// Answer every request with `reply` after `delay` (a fixed round trip for benchmarks).
    pub fn repeating(reply: LlmReply, delay: Duration) -> Self {
        Self::start_with(Vec::new(), Some(reply), delay)
    }

    fn start_with(replies: Vec<LlmReply>, repeat: Option<LlmReply>, delay: Duration) -> Self {
        let script = Arc::new(Mutex::new(Script {
            replies: replies.into(),
            repeat,
            received: Vec::new(),
            delay,
        }));
        let state = Arc::clone(&script);
        let server = ServerThread::spawn(move |listener, stop| async move {
            let app = axum::Router::new()
                .route("/v1/{*path}", post(answer))
                .route("/v1beta/{*path}", post(answer))
                .with_state(state);
            axum::serve(listener, app)
                .with_graceful_shutdown(stop)
                .await
                .unwrap();
        });
        Self { server, script }
    }

    /// `http://127.0.0.1:{port}/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.server.addr)
    }

    /// `http://127.0.0.1:{port}/v1beta/`, the Gemini API's base.
    pub fn gemini_base_url(&self) -> String {
        format!("http://{}/v1beta/", self.server.addr)
    }

    pub fn port(&self) -> u16 {
        self.server.addr.port()
    }

    pub fn received(&self) -> Vec<LlmRequest> {
        self.script.lock().unwrap().received.clone()
    }
}

async fn answer(
    State(script): State<Arc<Mutex<Script>>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if let Some(refusal) = refuse(&uri, &headers, &body) {
        return refusal;
    }
    let (reply, delay) = {
        let mut script = script.lock().unwrap();
        script.received.push(LlmRequest {
            path: uri.path().to_owned(),
            headers,
            body,
        });
        let reply = script.replies.pop_front().or_else(|| script.repeat.clone());
        (reply, script.delay)
    };
    if !delay.is_zero() {
        precise_sleep(delay).await;
    }
    let Some(reply) = reply else {
        return json_response(
            500,
            json!({"error": {"message": format!("fake server: no reply scripted for {uri}")}}),
        );
    };
    match reply {
        LlmReply::Json(status, body) => json_response(status, body),
        LlmReply::Sse { events, done, gap } => {
            let mut frames: Vec<String> = events.iter().map(|event| format!("data: {event}\n\n")).collect();
            if done {
                frames.push("data: [DONE]\n\n".to_owned());
            }
            event_stream(frames, gap)
        }
        LlmReply::Events { events, gap } => event_stream(
            events
                .iter()
                .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n"))
                .collect(),
            gap,
        ),
    }
}

/// What the real Anthropic and Gemini services answer to a request missing what they require.
fn refuse(uri: &Uri, headers: &HeaderMap, body: &Value) -> Option<Response> {
    let path = uri.path();
    let has = |name: &str| headers.get(name).is_some_and(|v| !v.is_empty());
    if path == "/v1/messages" {
        let problem = if !has("x-api-key") {
            Some((401, "authentication_error", "x-api-key header is required"))
        } else if !has("anthropic-version") {
            Some((
                400,
                "invalid_request_error",
                "anthropic-version: header is required",
            ))
        } else if body.get("max_tokens").and_then(Value::as_u64).is_none() {
            Some((400, "invalid_request_error", "max_tokens: Field required"))
        } else {
            None
        };
        return problem.map(|(status, kind, message)| {
            json_response(
                status,
                json!({"type": "error", "error": {"type": kind, "message": message}}),
            )
        });
    }
    // Gemini takes the key as a header or as the `key` query parameter (rig sends the latter).
    let key_in_query = uri.query().is_some_and(|query| {
        query
            .split('&')
            .any(|pair| pair.starts_with("key=") && pair.len() > 4)
    });
    if path.starts_with("/v1beta/models/") && !has("x-goog-api-key") && !key_in_query {
        return Some(json_response(
            403,
            json!({"error": {"code": 403, "status": "PERMISSION_DENIED",
                "message": "Method doesn't allow unregistered callers. Please use an API Key."}}),
        ));
    }
    None
}

/// Wait `delay` to within the OS timer's precision. tokio's timer rounds up to whole milliseconds, so
/// its "1 ms" lasts 1-2 ms by phase: a benchmark's fixed round trip would carry ±0.5 ms of noise.
async fn precise_sleep(delay: Duration) {
    tokio::task::spawn_blocking(move || std::thread::sleep(delay))
        .await
        .expect("a sleep does not panic");
}

fn event_stream(frames: Vec<String>, gap: Duration) -> Response {
    let stream = futures_util::stream::unfold(
        (frames.into_iter(), true),
        move |(mut frames, first)| async move {
            let frame = frames.next()?;
            if !first && !gap.is_zero() {
                precise_sleep(gap).await;
            }
            Some((Ok::<_, std::io::Error>(Bytes::from(frame)), (frames, false)))
        },
    );
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(stream))
        .unwrap()
}

fn json_response(status: u16, body: Value) -> Response {
    Response::builder()
        .status(StatusCode::from_u16(status).unwrap())
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap()
}

/// A chat completion with text, or with tool calls `(id, name, arguments)` when `calls` is not empty.
pub fn chat_completion(
    model: &str,
    text: Option<&str>,
    calls: &[(&str, &str, Value)],
    usage: (u64, u64),
) -> Value {
    let tool_calls: Vec<Value> = calls
        .iter()
        .map(|(id, name, arguments)| json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments.to_string()}}))
        .collect();
    let mut message = json!({"role": "assistant", "content": text});
    if !tool_calls.is_empty() {
        message["tool_calls"] = Value::Array(tool_calls);
    }
    json!({
        "id": "chatcmpl-fake", "object": "chat.completion", "created": 1_700_000_000, "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": null,
            "finish_reason": if calls.is_empty() { "stop" } else { "tool_calls" }}],
        "usage": {"prompt_tokens": usage.0, "completion_tokens": usage.1, "total_tokens": usage.0 + usage.1,
            "prompt_tokens_details": {"cached_tokens": 0}, "completion_tokens_details": {"reasoning_tokens": 0}},
    })
}

/// The chunks of a streamed chat completion: the text in pieces, or one tool call in two argument
/// fragments, then the finish reason and a usage chunk.
pub fn chat_chunks(
    model: &str,
    text: Option<&str>,
    call: Option<(&str, &str, Value)>,
    usage: (u64, u64),
) -> Vec<Value> {
    let chunk = |delta: Value, finish: Option<&str>| {
        json!({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1_700_000_000, "model": model,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]})
    };
    let mut chunks = vec![chunk(json!({"role": "assistant", "content": ""}), None)];
    if let Some(text) = text {
        for word in text.split_inclusive(' ') {
            chunks.push(chunk(json!({"content": word}), None));
        }
    }
    let finish = if let Some((id, name, arguments)) = call {
        let arguments = arguments.to_string();
        let (head, tail) = arguments.split_at(arguments.len() / 2);
        chunks.push(chunk(json!({"tool_calls": [{"index": 0, "id": id, "type": "function", "function": {"name": name, "arguments": head}}]}), None));
        chunks.push(chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": tail}}]}),
            None,
        ));
        "tool_calls"
    } else {
        "stop"
    };
    chunks.push(chunk(json!({}), Some(finish)));
    chunks.push(json!({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1_700_000_000, "model": model,
        "choices": [], "usage": {"prompt_tokens": usage.0, "completion_tokens": usage.1, "total_tokens": usage.0 + usage.1}}));
    chunks
}

/// Token counts as Anthropic and Gemini report them.
#[derive(Debug, Clone, Copy, Default)]
pub struct WireUsage {
    /// Anthropic: `input_tokens`, which excludes cache reads and writes. Gemini: `promptTokenCount`,
    /// which includes the cached tokens.
    pub input: u64,
    pub output: u64,
    /// Anthropic `cache_read_input_tokens`; Gemini `cachedContentTokenCount`.
    pub cache_read: u64,
    /// Anthropic `cache_creation_input_tokens` (Gemini has none).
    pub cache_creation: u64,
}

fn anthropic_usage(usage: WireUsage, output: u64) -> Value {
    json!({"input_tokens": usage.input, "output_tokens": output,
        "cache_read_input_tokens": usage.cache_read, "cache_creation_input_tokens": usage.cache_creation,
        "service_tier": "standard"})
}

/// An Anthropic Messages response: a text block and/or `tool_use` blocks `(id, name, input)`.
pub fn anthropic_message(
    model: &str,
    text: Option<&str>,
    calls: &[(&str, &str, Value)],
    usage: WireUsage,
) -> Value {
    let mut content: Vec<Value> = text
        .map(|text| json!({"type": "text", "text": text}))
        .into_iter()
        .collect();
    content.extend(
        calls
            .iter()
            .map(|(id, name, input)| json!({"type": "tool_use", "id": id, "name": name, "input": input})),
    );
    json!({
        "id": "msg_fake01", "type": "message", "role": "assistant", "model": model, "content": content,
        "stop_reason": if calls.is_empty() { "end_turn" } else { "tool_use" }, "stop_sequence": null,
        "usage": anthropic_usage(usage, usage.output),
    })
}

/// The named events of a streamed Anthropic message: `message_start` (input usage), a text block in
/// `text_delta`s, a `tool_use` block whose input arrives as two `input_json_delta` fragments, a `ping`,
/// `message_delta` (stop reason, output usage) and `message_stop`.
pub fn anthropic_events(
    model: &str,
    text: Option<&str>,
    call: Option<(&str, &str, Value)>,
    usage: WireUsage,
) -> Vec<(String, Value)> {
    let mut events = vec![(
        "message_start",
        json!({"type": "message_start", "message": {"id": "msg_fake01", "type": "message", "role": "assistant",
            "model": model, "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": anthropic_usage(usage, 1)}}),
    )];
    let mut index = 0;
    if let Some(text) = text {
        events.push((
            "content_block_start",
            json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}),
        ));
        events.push(("ping", json!({"type": "ping"})));
        for word in text.split_inclusive(' ') {
            events.push((
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": word}}),
            ));
        }
        events.push((
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    }
    if let Some((id, name, input)) = &call {
        events.push((
            "content_block_start",
            json!({"type": "content_block_start", "index": index,
                "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}),
        ));
        let input = input.to_string();
        let (head, tail) = input.split_at(input.len() / 2);
        for part in ["", head, tail] {
            events.push((
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": part}}),
            ));
        }
        events.push((
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        ));
    }
    events.push((
        "message_delta",
        json!({"type": "message_delta",
            "delta": {"stop_reason": if call.is_some() { "tool_use" } else { "end_turn" }, "stop_sequence": null},
            "usage": {"output_tokens": usage.output}}),
    ));
    events.push(("message_stop", json!({"type": "message_stop"})));
    events
        .into_iter()
        .map(|(name, data)| (name.to_owned(), data))
        .collect()
}

fn gemini_usage(usage: WireUsage) -> Value {
    let mut metadata = json!({"promptTokenCount": usage.input, "candidatesTokenCount": usage.output,
        "totalTokenCount": usage.input + usage.output,
        "promptTokensDetails": [{"modality": "TEXT", "tokenCount": usage.input}]});
    if usage.cache_read > 0 {
        metadata["cachedContentTokenCount"] = json!(usage.cache_read);
    }
    metadata
}

fn gemini_candidate(parts: Vec<Value>, finish: Option<&str>) -> Value {
    let mut candidate = json!({"content": {"role": "model", "parts": parts}, "index": 0});
    if let Some(finish) = finish {
        candidate["finishReason"] = json!(finish);
    }
    candidate
}

/// A Gemini `generateContent` response: a text part and/or `functionCall` parts `(name, args)`.
pub fn gemini_response(model: &str, text: Option<&str>, calls: &[(&str, Value)], usage: WireUsage) -> Value {
    let mut parts: Vec<Value> = text.map(|text| json!({"text": text})).into_iter().collect();
    parts.extend(
        calls
            .iter()
            .map(|(name, args)| json!({"functionCall": {"name": name, "args": args}})),
    );
    json!({"candidates": [gemini_candidate(parts, Some("STOP"))], "usageMetadata": gemini_usage(usage),
        "modelVersion": model, "responseId": "fake-gemini-response"})
}

/// The `data:` chunks of `streamGenerateContent?alt=sse`: the text in pieces (each with the running
/// usage, as Gemini sends it), then a `functionCall` part with `finishReason` and the final usage.
pub fn gemini_chunks(
    model: &str,
    text: Option<&str>,
    call: Option<(&str, Value)>,
    usage: WireUsage,
) -> Vec<Value> {
    let chunk = |parts: Vec<Value>, finish: Option<&str>, usage: WireUsage| {
        json!({"candidates": [gemini_candidate(parts, finish)], "usageMetadata": gemini_usage(usage),
            "modelVersion": model, "responseId": "fake-gemini-response"})
    };
    let running = WireUsage { output: 0, ..usage };
    let mut chunks: Vec<Value> = text
        .into_iter()
        .flat_map(|text| text.split_inclusive(' '))
        .map(|word| chunk(vec![json!({"text": word})], None, running))
        .collect();
    let last = call
        .map(|(name, args)| vec![json!({"functionCall": {"name": name, "args": args}})])
        .unwrap_or_else(|| vec![json!({"text": ""})]);
    chunks.push(chunk(last, Some("STOP"), usage));
    chunks
}
