//! An OpenAI-compatible server on 127.0.0.1 that behaves like a model doing the demo's task, for live-mode
//! tests: each answer is built from the request it gets, not read from a queue.
//!
//! - Offered a `run_code` tool and no tool result yet: it calls `run_code` with an analysis of the numbers
//!   in the user message that has a bug (a wrong column name), so the sandbox reports a `KeyError`.
//! - The last tool result is an error: it calls `run_code` again with the fixed script, which saves the
//!   chart and the CSV under the file names the system prompt asks for.
//! - The last tool result reports success: it answers with a short summary.
//! - No tools offered (the evaluator): a plain answer.
//!
//! Non-streamed and streamed (`"stream": true`, server-sent events, usage chunk on request) alike.

use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::post;
use serde_json::{json, Value};

use crate::ServerThread;

/// One request the fake model received.
#[derive(Debug, Clone)]
pub struct ModelRequest {
    /// The `Authorization` header, if any.
    pub authorization: Option<String>,
    pub body: Value,
}

/// The fake model; stops when dropped.
pub struct FakeModel {
    received: Arc<Mutex<Vec<ModelRequest>>>,
    server: ServerThread,
}

impl FakeModel {
    pub fn start() -> Self {
        let received = Arc::new(Mutex::new(Vec::new()));
        let state = Arc::clone(&received);
        let server = ServerThread::spawn(move |listener, stop| async move {
            let app = axum::Router::new()
                .route("/v1/chat/completions", post(answer))
                .with_state(state);
            let _ = axum::serve(listener, app).with_graceful_shutdown(stop).await;
        });
        Self { received, server }
    }

    /// The base URL to give an OpenAI-compatible client (`http://127.0.0.1:PORT/v1`).
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.server.addr)
    }

    pub fn port(&self) -> u16 {
        self.server.addr.port()
    }

    pub fn received(&self) -> Vec<ModelRequest> {
        self.received.lock().unwrap().clone()
    }
}

/// What the model decided to say.
enum Reply {
    Text(String),
    RunCode(String),
}

async fn answer(
    State(received): State<Arc<Mutex<Vec<ModelRequest>>>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Ok(request) = serde_json::from_slice::<Value>(&body) else {
        return error(400, "the body is not JSON");
    };
    let number = {
        let mut received = received.lock().unwrap();
        received.push(ModelRequest {
            authorization: headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
            body: request.clone(),
        });
        received.len()
    };
    let Some(model) = request["model"].as_str().map(str::to_owned) else {
        return error(400, "no model named");
    };
    let reply = match decide(&request) {
        Ok(reply) => reply,
        Err(message) => return error(400, &message),
    };
    let id = format!("chatcmpl-fake-{number}");
    let usage = json!({"prompt_tokens": 100 + number * 10, "completion_tokens": 20 + number, "total_tokens": 120 + number * 11});
    if request["stream"].as_bool() == Some(true) {
        let with_usage = request["stream_options"]["include_usage"].as_bool() == Some(true);
        return sse(stream_payloads(
            &id,
            &model,
            &reply,
            with_usage.then_some(usage),
            number,
        ));
    }
    let (message, finish) = match &reply {
        Reply::Text(text) => (json!({"role": "assistant", "content": text}), "stop"),
        Reply::RunCode(code) => (
            json!({"role": "assistant", "content": null, "tool_calls": [{
                "id": format!("call_fake_{number}"), "type": "function",
                "function": {"name": "run_code", "arguments": json!({"code": code}).to_string()}
            }]}),
            "tool_calls",
        ),
    };
    let body = json!({
        "id": id, "object": "chat.completion", "created": 1_700_000_000, "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": usage,
    });
    Response::builder()
        .status(200)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap()
}

fn decide(request: &Value) -> Result<Reply, String> {
    let messages = request["messages"].as_array().ok_or("no messages")?;
    let offers_run_code = request["tools"]
        .as_array()
        .is_some_and(|tools| tools.iter().any(|t| t["function"]["name"] == "run_code"));
    if !offers_run_code {
        return Ok(Reply::Text(
            "The sales grew steadily through the year; the execution was reliable and the analysis recovered \
             from its first error."
                .to_owned(),
        ));
    }
    let text_of = |role: &str| {
        messages
            .iter()
            .filter(|m| m["role"] == role)
            .filter_map(|m| m["content"].as_str())
            .collect::<Vec<_>>()
            .join("\n")
    };
    let last_tool_result = messages
        .iter()
        .rev()
        .find(|m| m["role"] == "tool")
        .and_then(|m| m["content"].as_str());
    match last_tool_result {
        None => Ok(Reply::RunCode(buggy_script(&last_number_list(&text_of("user"))?))),
        Some(result) if result.starts_with("OK") => Ok(Reply::Text(
            "The analysis ran: sales trend upward over the year. The chart and the CSV are saved.".to_owned(),
        )),
        Some(_) => {
            let system = text_of("system");
            let chart = quoted_file(&system, ".png").ok_or("the system prompt names no .png file")?;
            let csv = quoted_file(&system, ".csv").ok_or("the system prompt names no .csv file")?;
            Ok(Reply::RunCode(fixed_script(
                &last_number_list(&text_of("user"))?,
                &chart,
                &csv,
            )))
        }
    }
}

/// The numbers of the last `[...]` list in `text` (the sales in the user message).
fn last_number_list(text: &str) -> Result<Vec<f64>, String> {
    let start = text.rfind('[').ok_or("no list of numbers in the user message")?;
    let end = text[start..].find(']').ok_or("unterminated list")? + start;
    text[start + 1..end]
        .split(',')
        .map(|n| n.trim().parse::<f64>().map_err(|e| format!("{n:?}: {e}")))
        .collect()
}

/// The first `'name.ext'` quoted in `text`.
fn quoted_file(text: &str, ext: &str) -> Option<String> {
    text.split('\'')
        .skip(1)
        .step_by(2)
        .find(|part| part.ends_with(ext) && !part.contains(' '))
        .map(str::to_owned)
}

fn buggy_script(sales: &[f64]) -> String {
    format!("import pandas as pd\ndf = pd.DataFrame({{'sales': {sales:?}}})\nprint(df['Sales'].describe())\n")
}

fn fixed_script(sales: &[f64], chart: &str, csv: &str) -> String {
    format!(
        r#"import pandas as pd
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
df = pd.DataFrame({{"sales": {sales:?}}})
df["growth_pct"] = df["sales"].pct_change() * 100
print(f"mean={{df['sales'].mean():.2f}} median={{df['sales'].median():.2f}} std={{df['sales'].std():.2f}}")
print(f"min={{df['sales'].min():.0f}} max={{df['sales'].max():.0f}}")
print(f"month-over-month growth: {{df['growth_pct'].mean():.2f}}% on average")
trend = "upward" if df["sales"].iloc[-1] > df["sales"].iloc[0] else "downward"
print(f"trend: {{trend}}")
fig, ax = plt.subplots()
ax.plot(df["sales"])
fig.savefig("{chart}")
df.to_csv("{csv}", index=False)
"#
    )
}

/// The reply as Chat Completions chunks, the way OpenAI streams them.
fn stream_payloads(id: &str, model: &str, reply: &Reply, usage: Option<Value>, number: usize) -> Vec<String> {
    let chunk = |delta: Value, finish: Option<&str>| {
        json!({
            "id": id, "object": "chat.completion.chunk", "created": 1_700_000_000, "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        })
        .to_string()
    };
    let mut payloads = vec![chunk(json!({"role": "assistant", "content": ""}), None)];
    let pieces = |s: &str| -> Vec<String> {
        let chars: Vec<char> = s.chars().collect();
        chars.chunks(40).map(|c| c.iter().collect()).collect()
    };
    let finish = match reply {
        Reply::Text(text) => {
            for piece in pieces(text) {
                payloads.push(chunk(json!({"content": piece}), None));
            }
            "stop"
        }
        Reply::RunCode(code) => {
            payloads.push(chunk(
                json!({"tool_calls": [{"index": 0, "id": format!("call_fake_{number}"), "type": "function",
                    "function": {"name": "run_code", "arguments": ""}}]}),
                None,
            ));
            for piece in pieces(&json!({"code": code}).to_string()) {
                payloads.push(chunk(
                    json!({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}),
                    None,
                ));
            }
            "tool_calls"
        }
    };
    payloads.push(chunk(json!({}), Some(finish)));
    if let Some(usage) = usage {
        payloads.push(
            json!({"id": id, "object": "chat.completion.chunk", "created": 1_700_000_000, "model": model,
                   "choices": [], "usage": usage})
            .to_string(),
        );
    }
    payloads.push("[DONE]".to_owned());
    payloads
}

fn sse(payloads: Vec<String>) -> Response {
    let body: String = payloads.iter().map(|p| format!("data: {p}\n\n")).collect();
    Response::builder()
        .status(200)
        .header("content-type", "text/event-stream")
        .body(Body::from(body))
        .unwrap()
}

fn error(status: u16, message: &str) -> Response {
    Response::builder()
        .status(StatusCode::from_u16(status).unwrap())
        .header("content-type", "application/json")
        .body(Body::from(
            json!({"error": {"message": message, "type": "invalid_request_error"}}).to_string(),
        ))
        .unwrap()
}
