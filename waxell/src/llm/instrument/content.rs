//! Captured content of a call: the request's and the response's messages and tool definitions, in the
//! GenAI form (`gen_ai.input.messages`, ...) and OpenInference's flattened one (`llm.input_messages.*`).

use opentelemetry::KeyValue;
use serde_json::json;

use super::saturating_i64;
use crate::llm::types::{ChatRequest, ChatResponse, Message, ToolCall};
use crate::semconv::*;
use crate::telemetry;

/// The longest a single captured message part (text, arguments, tool result) may be on a span. Parts are
/// truncated one by one before serialising, so the attribute stays valid JSON.
pub(super) const MAX_PART_CHARS: usize = 8192;

/// Attribute budgets of OpenInference's flattened lists. A span keeps 128 attributes (the SDK's default
/// limit) and silently drops the rest; about 50 are the call's own, so the lists share the remainder.
const MAX_FLAT_INPUT_ATTRIBUTES: usize = 36;
const MAX_FLAT_OUTPUT_ATTRIBUTES: usize = 16;
const MAX_FLAT_TOOLS: usize = 12;

/// Captured input: `gen_ai.input.messages`, `gen_ai.tool.definitions`, and `input.value`.
pub(super) fn input_content(request: &ChatRequest) -> Vec<KeyValue> {
    let messages: Vec<_> = request.messages.iter().map(input_message).collect();
    let messages = serde_json::Value::Array(messages).to_string();
    let mut attributes = vec![
        KeyValue::new(GEN_AI_INPUT_MESSAGES, messages.clone()),
        KeyValue::new(OI_INPUT_VALUE, messages),
        KeyValue::new(OI_INPUT_MIME_TYPE, MIME_JSON),
    ];
    if !request.tools.is_empty() {
        let definitions: Vec<_> = request
            .tools
            .iter()
            .map(|tool| {
                let mut definition = json!({"type": tool.kind, "name": tool.function.name});
                if let Some(description) = &tool.function.description {
                    definition["description"] = preview(description).into();
                }
                if let Some(parameters) = &tool.function.parameters {
                    definition["parameters"] = parameters.clone();
                }
                definition
            })
            .collect();
        attributes.push(KeyValue::new(
            GEN_AI_TOOL_DEFINITIONS,
            serde_json::Value::Array(definitions).to_string(),
        ));
    }
    attributes.extend(flat_input_messages(&request.messages));
    for (index, tool) in request.tools.iter().take(MAX_FLAT_TOOLS).enumerate() {
        let mut function = json!({"name": tool.function.name});
        if let Some(description) = &tool.function.description {
            function["description"] = preview(description).into();
        }
        if let Some(parameters) = &tool.function.parameters {
            function["parameters"] = parameters.clone();
        }
        let schema = json!({"type": tool.kind, "function": function});
        attributes.push(KeyValue::new(
            format!("{OI_LLM_TOOLS}.{index}.tool.json_schema"),
            schema.to_string(),
        ));
    }
    attributes
}

/// One message in OpenInference's flattened form, under `{prefix}.{index}.message.*`.
struct FlatMessage<'a> {
    role: &'a str,
    content: Option<&'a str>,
    tool_call_id: Option<&'a str>,
    tool_calls: &'a [ToolCall],
}

impl<'a> FlatMessage<'a> {
    fn of_request(message: &'a Message) -> Self {
        let (content, tool_call_id, tool_calls): (Option<&str>, Option<&str>, &[ToolCall]) = match message {
            Message::System { content, .. } | Message::User { content, .. } => (Some(content), None, &[]),
            Message::Assistant {
                content, tool_calls, ..
            } => (content.as_deref(), None, tool_calls),
            Message::Tool {
                tool_call_id,
                content,
            } => (Some(content), Some(tool_call_id), &[]),
        };
        Self {
            role: message.role(),
            content,
            tool_call_id,
            tool_calls,
        }
    }

    fn attribute_count(&self) -> usize {
        1 + usize::from(self.content.is_some())
            + usize::from(self.tool_call_id.is_some())
            + 3 * self.tool_calls.len()
    }

    fn attributes(&self, prefix: &str, index: usize, out: &mut Vec<KeyValue>) {
        let key = |suffix: &str| format!("{prefix}.{index}.message.{suffix}");
        out.push(KeyValue::new(key("role"), self.role.to_owned()));
        if let Some(content) = self.content {
            out.push(KeyValue::new(key("content"), preview(content)));
        }
        if let Some(id) = self.tool_call_id {
            out.push(KeyValue::new(key("tool_call_id"), id.to_owned()));
        }
        for (j, call) in self.tool_calls.iter().enumerate() {
            let call_key = |suffix: &str| key(&format!("tool_calls.{j}.tool_call.{suffix}"));
            out.push(KeyValue::new(call_key("id"), call.id.clone()));
            out.push(KeyValue::new(
                call_key("function.name"),
                call.function.name.clone(),
            ));
            out.push(KeyValue::new(
                call_key("function.arguments"),
                preview(&call.function.arguments),
            ));
        }
    }
}

/// `llm.input_messages.*`: the most recent messages that fit the budget, re-indexed from 0 (the latest
/// turn is what explains this call), and how many older ones were left out.
fn flat_input_messages(messages: &[Message]) -> Vec<KeyValue> {
    let flat: Vec<_> = messages.iter().map(FlatMessage::of_request).collect();
    let mut budget = MAX_FLAT_INPUT_ATTRIBUTES;
    let mut first_kept = flat.len();
    while first_kept > 0 && flat[first_kept - 1].attribute_count() <= budget {
        first_kept -= 1;
        budget -= flat[first_kept].attribute_count();
    }
    let mut attributes = Vec::new();
    for (index, message) in flat[first_kept..].iter().enumerate() {
        message.attributes(OI_LLM_INPUT_MESSAGES, index, &mut attributes);
    }
    if first_kept > 0 {
        attributes.push(KeyValue::new(
            WAXELL_LLM_INPUT_MESSAGES_OMITTED,
            saturating_i64(first_kept as u64),
        ));
    }
    attributes
}

/// Captured output: `gen_ai.output.messages` and `output.value` (the text alone when the answer is plain
/// text, the messages JSON otherwise).
pub(super) fn output_content(response: &ChatResponse) -> Vec<KeyValue> {
    let messages: Vec<_> = response
        .choices
        .iter()
        .map(|choice| {
            let mut parts = Vec::new();
            if let Some(text) = &choice.message.content {
                parts.push(text_part(text));
            }
            parts.extend(choice.message.tool_calls.iter().map(tool_call_part));
            json!({
                "role": "assistant",
                "parts": parts,
                "finish_reason": normalised_finish_reason(choice.finish_reason.as_deref()),
            })
        })
        .collect();
    let messages = serde_json::Value::Array(messages).to_string();
    let (value, mime) = match (response.text(), response.tool_calls()) {
        (Some(text), []) => (preview(text), MIME_TEXT),
        _ => (messages.clone(), MIME_JSON),
    };
    let mut attributes = vec![
        KeyValue::new(GEN_AI_OUTPUT_MESSAGES, messages),
        KeyValue::new(OI_OUTPUT_VALUE, value),
        KeyValue::new(OI_OUTPUT_MIME_TYPE, mime),
    ];
    // `llm.output_messages.*`, one per choice, while the budget lasts.
    let mut budget = MAX_FLAT_OUTPUT_ATTRIBUTES;
    for (index, choice) in response.choices.iter().enumerate() {
        let message = FlatMessage {
            role: "assistant",
            content: choice.message.content.as_deref(),
            tool_call_id: None,
            tool_calls: &choice.message.tool_calls,
        };
        if message.attribute_count() > budget {
            break;
        }
        budget -= message.attribute_count();
        message.attributes(OI_LLM_OUTPUT_MESSAGES, index, &mut attributes);
    }
    attributes
}

/// One request message in the spec's `ChatMessage{role, parts}` shape.
fn input_message(message: &Message) -> serde_json::Value {
    let parts = match message {
        Message::System { content, .. } | Message::User { content, .. } => vec![text_part(content)],
        Message::Assistant {
            content, tool_calls, ..
        } => content
            .iter()
            .map(|text| text_part(text))
            .chain(tool_calls.iter().map(tool_call_part))
            .collect(),
        Message::Tool {
            tool_call_id,
            content,
        } => vec![json!({"type": "tool_call_response", "id": tool_call_id, "response": preview(content)})],
    };
    json!({"role": message.role(), "parts": parts})
}

fn text_part(text: &str) -> serde_json::Value {
    json!({"type": "text", "content": preview(text)})
}

/// Arguments are embedded as JSON when they parse (as the spec's example shows), else as a string.
fn tool_call_part(call: &ToolCall) -> serde_json::Value {
    let arguments = preview(&call.function.arguments);
    let arguments = serde_json::from_str::<serde_json::Value>(&arguments).unwrap_or(arguments.into());
    json!({"type": "tool_call", "id": call.id, "name": call.function.name, "arguments": arguments})
}

/// The output-message schema's finish reasons: `stop|length|content_filter|tool_call|error`.
fn normalised_finish_reason(reason: Option<&str>) -> &str {
    match reason {
        Some("tool_calls" | "function_call") => "tool_call",
        Some(other) => other,
        None => "stop",
    }
}

pub(super) fn preview(text: &str) -> String {
    telemetry::content_preview(text, MAX_PART_CHARS)
}
