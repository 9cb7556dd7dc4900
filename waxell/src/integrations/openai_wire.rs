//! OpenAI's wire formats (Chat Completions, Embeddings, Responses) read leniently into the
//! recording API's types, for integrations that only see HTTP bodies.

use serde_json::Value;

use crate::llm::{
    AssistantMessage, ChatRequest, ChatResponse, Choice, FunctionDefinition, Message, Tool, ToolCall, Usage,
};

/// Text of a `content` that is a string or an array of parts (`{"type": "text"|"input_text"|
/// "output_text", "text": ...}`); other parts (images, audio) are left out.
pub(crate) fn content_text(content: &Value) -> Option<String> {
    match content {
        Value::String(text) => Some(text.clone()),
        Value::Array(parts) => {
            let texts: Vec<&str> = parts
                .iter()
                .filter_map(|part| part.get("text").and_then(Value::as_str))
                .collect();
            (!texts.is_empty()).then(|| texts.join("\n"))
        }
        _ => None,
    }
}

fn string(value: &Value, key: &str) -> String {
    value
        .get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

fn tool_call(call: &Value) -> ToolCall {
    let function = call.get("function").unwrap_or(call);
    ToolCall::function(
        call.get("id")
            .or_else(|| call.get("call_id"))
            .and_then(Value::as_str)
            .unwrap_or_default(),
        string(function, "name"),
        match function.get("arguments") {
            Some(Value::String(arguments)) => arguments.clone(),
            Some(other) => other.to_string(),
            None => String::new(),
        },
    )
}

fn message(value: &Value) -> Option<Message> {
    let text = || value.get("content").and_then(content_text).unwrap_or_default();
    Some(match value.get("role")?.as_str()? {
        "system" | "developer" => Message::system(text()),
        "user" => Message::user(text()),
        "assistant" => {
            let calls: Vec<ToolCall> = value
                .get("tool_calls")
                .and_then(Value::as_array)
                .map(|calls| calls.iter().map(tool_call).collect())
                .unwrap_or_default();
            let content = value.get("content").and_then(content_text);
            match (content, calls.is_empty()) {
                (Some(text), true) => Message::assistant(text),
                (content, _) => {
                    let mut message = Message::assistant_tool_calls(calls);
                    if let Message::Assistant { content: slot, .. } = &mut message {
                        *slot = content;
                    }
                    message
                }
            }
        }
        "tool" => Message::tool(string(value, "tool_call_id"), text()),
        _ => return None,
    })
}

fn function_tool(name: String, description: Option<&Value>, parameters: Option<&Value>) -> Tool {
    Tool {
        kind: "function".to_owned(),
        function: FunctionDefinition {
            name,
            description: description.and_then(Value::as_str).map(str::to_owned),
            parameters: parameters.cloned(),
            strict: None,
        },
    }
}

/// Copy the sampling parameters both APIs share.
fn parameters(body: &Value, request: &mut ChatRequest) {
    request.temperature = body.get("temperature").and_then(Value::as_f64);
    request.top_p = body.get("top_p").and_then(Value::as_f64);
    request.frequency_penalty = body.get("frequency_penalty").and_then(Value::as_f64);
    request.presence_penalty = body.get("presence_penalty").and_then(Value::as_f64);
    request.seed = body.get("seed").and_then(Value::as_i64);
    let u32_of = |key: &str| {
        body.get(key)
            .and_then(Value::as_u64)
            .and_then(|n| u32::try_from(n).ok())
    };
    request.max_tokens = u32_of("max_tokens").or(u32_of("max_output_tokens"));
    request.max_completion_tokens = u32_of("max_completion_tokens");
    request.n = u32_of("n");
    request.stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    if let Some(stop) = body.get("stop") {
        request.stop = match stop {
            Value::String(one) => vec![one.clone()],
            Value::Array(many) => many.iter().filter_map(Value::as_str).map(str::to_owned).collect(),
            _ => Vec::new(),
        };
    }
}

/// A Chat Completions request body.
/// The model and the stream flag of a Chat Completions or Responses request body: what its span must
/// have from the start. Reads nothing else (the rest of the body is skipped, not built).
pub(crate) fn request_head(body: &[u8]) -> (String, bool) {
    #[derive(serde::Deserialize, Default)]
    struct Head {
        #[serde(default)]
        model: String,
        #[serde(default)]
        stream: Option<bool>,
    }
    let head: Head = serde_json::from_slice(body).unwrap_or_default();
    (head.model, head.stream.unwrap_or(false))
}

pub(crate) fn chat_request(body: &Value) -> ChatRequest {
    let mut request = ChatRequest::new(
        body.get("messages")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(message),
    );
    request.model = body.get("model").and_then(Value::as_str).map(str::to_owned);
    request.tools = body
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|tool| {
            let function = tool.get("function")?;
            Some(function_tool(
                string(function, "name"),
                function.get("description"),
                function.get("parameters"),
            ))
        })
        .collect();
    parameters(body, &mut request);
    request
}

/// A Responses API request body: `instructions` become a system message, `input` (a string or items)
/// the conversation.
pub(crate) fn responses_request(body: &Value) -> ChatRequest {
    let mut messages = Vec::new();
    if let Some(instructions) = body.get("instructions").and_then(Value::as_str) {
        messages.push(Message::system(instructions));
    }
    match body.get("input") {
        Some(Value::String(text)) => messages.push(Message::user(text.clone())),
        Some(Value::Array(items)) => {
            for item in items {
                match item.get("type").and_then(Value::as_str) {
                    Some("function_call") => {
                        messages.push(Message::assistant_tool_calls([tool_call(item)]));
                    }
                    Some("function_call_output") => messages.push(Message::tool(
                        string(item, "call_id"),
                        item.get("output").and_then(content_text).unwrap_or_default(),
                    )),
                    _ => messages.extend(message(item)),
                }
            }
        }
        _ => {}
    }
    let mut request = ChatRequest::new(messages);
    request.model = body.get("model").and_then(Value::as_str).map(str::to_owned);
    request.tools = body
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|tool| tool.get("type").and_then(Value::as_str) == Some("function"))
        .map(|tool| {
            function_tool(
                string(tool, "name"),
                tool.get("description"),
                tool.get("parameters"),
            )
        })
        .collect();
    parameters(body, &mut request);
    request
}

/// A Responses API response object as a one-choice chat response.
pub(crate) fn responses_response(body: &Value) -> ChatResponse {
    let mut text: Option<String> = None;
    let mut calls = Vec::new();
    for item in body.get("output").and_then(Value::as_array).into_iter().flatten() {
        match item.get("type").and_then(Value::as_str) {
            Some("message") => {
                if let Some(part) = item.get("content").and_then(content_text) {
                    text.get_or_insert_with(String::new).push_str(&part);
                }
            }
            Some("function_call") => calls.push(tool_call(item)),
            _ => {}
        }
    }
    let finish_reason = if !calls.is_empty() {
        "tool_calls"
    } else if body.get("status").and_then(Value::as_str) == Some("incomplete") {
        "length"
    } else {
        "stop"
    };
    let usage = body.get("usage").map(|usage| {
        let count = |key: &str| usage.get(key).and_then(Value::as_u64).unwrap_or(0);
        let mut parsed = Usage::new(count("input_tokens"), count("output_tokens"));
        if let Some(cached) = usage
            .pointer("/input_tokens_details/cached_tokens")
            .and_then(Value::as_u64)
        {
            parsed = parsed.with_cached_tokens(cached);
        }
        if let Some(reasoning) = usage
            .pointer("/output_tokens_details/reasoning_tokens")
            .and_then(Value::as_u64)
        {
            parsed = parsed.with_reasoning_tokens(reasoning);
        }
        parsed
    });
    ChatResponse {
        id: string(body, "id"),
        model: string(body, "model"),
        created: body.get("created_at").and_then(Value::as_u64).unwrap_or(0),
        choices: vec![Choice {
            index: 0,
            message: AssistantMessage {
                content: text,
                tool_calls: calls,
                ..AssistantMessage::default()
            },
            finish_reason: Some(finish_reason.to_owned()),
        }],
        usage,
        system_fingerprint: None,
    }
}

/// The inputs of an embeddings request (`input`: a string or strings; token arrays are not text).
pub(crate) fn embeddings_inputs(body: &Value) -> Vec<String> {
    match body.get("input") {
        Some(Value::String(text)) => vec![text.clone()],
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        _ => Vec::new(),
    }
}

/// `(model, usage, dimensions)` of an embeddings response.
pub(crate) fn embeddings_outcome(body: &Value) -> (String, Option<Usage>, Option<usize>) {
    let usage = body
        .get("usage")
        .map(|usage| Usage::new(usage.get("prompt_tokens").and_then(Value::as_u64).unwrap_or(0), 0));
    let dimensions = body
        .pointer("/data/0/embedding")
        .and_then(Value::as_array)
        .map(Vec::len);
    (string(body, "model"), usage, dimensions)
}

/// `error.type` and message of an error body (`{"error": {"message", "type", "code"}}`), else the status.
pub(crate) fn error_of(status: u16, body: &[u8]) -> (String, String) {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let error = parsed.as_ref().and_then(|body| body.get("error"));
    let field = |key: &str| {
        error
            .and_then(|e| e.get(key))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let error_type = field("code")
        .or_else(|| field("type"))
        .unwrap_or_else(|| status.to_string());
    let message = field("message").unwrap_or_else(|| String::from_utf8_lossy(body).into_owned());
    (error_type, format!("HTTP {status}: {message}"))
}
