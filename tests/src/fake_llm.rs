//! A fake OpenAI-compatible provider on 127.0.0.1 for the LLM-crate integration tests (async-openai,
//! rig, genai) and their benchmarks: Chat Completions (JSON or SSE), Embeddings and the Responses API,
//! answered from a script, with every request recorded.

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
        tokio::time::sleep(delay).await;
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
            let stream = futures_util::stream::unfold(
                (frames.into_iter(), true),
                move |(mut frames, first)| async move {
                    let frame = frames.next()?;
                    if !first && !gap.is_zero() {
                        tokio::time::sleep(gap).await;
                    }
                    Some((Ok::<_, std::io::Error>(Bytes::from(frame)), (frames, false)))
                },
            );
            Response::builder()
                .header("content-type", "text/event-stream")
                .body(Body::from_stream(stream))
                .unwrap()
        }
    }
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
