//! The call as the crate recorded it on its `tracing` span, rebuilt as a request and a response for waxell's
//! recorder.

use serde_json::Value as Json;

use super::Seen;
use crate::llm::{
    AssistantMessage, ChatRequest, ChatResponse, Choice, FunctionDefinition, Message, Tool, ToolCall,
};

/// The request as far as the crate recorded it (content only when its own capture was on).
pub(super) fn request_of(seen: &Seen) -> ChatRequest {
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
pub(super) fn response_of(seen: &Seen) -> ChatResponse {
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
