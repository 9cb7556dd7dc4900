//! Assembling a streamed response: the complete [`ChatResponse`] from its chunks.

use std::collections::BTreeMap;

use super::types::{AssistantMessage, ChatChunk, ChatResponse, Choice, ToolCall, Usage};

/// Builds the complete response from chunks: text is concatenated, tool-call fragments are joined by
/// their `index`, the last usage wins.
#[derive(Debug, Default)]
pub(crate) struct Assembler {
    id: String,
    model: String,
    created: u64,
    system_fingerprint: Option<String>,
    choices: BTreeMap<u32, PartialChoice>,
    usage: Option<Usage>,
}

#[derive(Debug, Default)]
struct PartialChoice {
    content: Option<String>,
    refusal: Option<String>,
    tool_calls: BTreeMap<u32, ToolCall>,
    finish_reason: Option<String>,
}

impl Assembler {
    pub(crate) fn push(&mut self, chunk: &ChatChunk) {
        if self.id.is_empty() {
            self.id.clone_from(&chunk.id);
        }
        if self.model.is_empty() {
            self.model.clone_from(&chunk.model);
        }
        if self.created == 0 {
            self.created = chunk.created;
        }
        if chunk.system_fingerprint.is_some() {
            self.system_fingerprint.clone_from(&chunk.system_fingerprint);
        }
        if chunk.usage.is_some() {
            self.usage = chunk.usage;
        }
        for choice in &chunk.choices {
            let partial = self.choices.entry(choice.index).or_default();
            if let Some(text) = &choice.delta.content {
                partial.content.get_or_insert_with(String::new).push_str(text);
            }
            if let Some(text) = &choice.delta.refusal {
                partial.refusal.get_or_insert_with(String::new).push_str(text);
            }
            for fragment in &choice.delta.tool_calls {
                let call = partial
                    .tool_calls
                    .entry(fragment.index)
                    .or_insert_with(|| ToolCall::function("", "", ""));
                if let Some(id) = fragment.id.as_deref().filter(|id| !id.is_empty()) {
                    id.clone_into(&mut call.id);
                }
                if let Some(function) = &fragment.function {
                    // The name arrives whole in the first fragment; some servers repeat it later.
                    if let Some(name) = function
                        .name
                        .as_deref()
                        .filter(|name| *name != call.function.name)
                    {
                        call.function.name.push_str(name);
                    }
                    if let Some(arguments) = &function.arguments {
                        call.function.arguments.push_str(arguments);
                    }
                }
            }
            if choice.finish_reason.is_some() {
                partial.finish_reason.clone_from(&choice.finish_reason);
            }
        }
    }

    /// Every choice seen so far has a finish reason.
    pub(crate) fn is_finished(&self) -> bool {
        !self.choices.is_empty() && self.choices.values().all(|choice| choice.finish_reason.is_some())
    }

    pub(crate) fn finish(self) -> ChatResponse {
        let choices = self
            .choices
            .into_iter()
            .map(|(index, partial)| Choice {
                index,
                message: AssistantMessage {
                    content: partial.content,
                    tool_calls: partial.tool_calls.into_values().collect(),
                    refusal: partial.refusal,
                    ..AssistantMessage::default()
                },
                finish_reason: partial.finish_reason,
            })
            .collect();
        ChatResponse {
            id: self.id,
            model: self.model,
            created: self.created,
            choices,
            usage: self.usage,
            system_fingerprint: self.system_fingerprint,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::types::FunctionCall;

    fn chunk(json: serde_json::Value) -> ChatChunk {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn text_and_parallel_tool_call_fragments_are_joined() {
        let mut assembler = Assembler::default();
        for json in [
            serde_json::json!({"id": "c1", "model": "m", "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Let me "}}]}),
            serde_json::json!({"id": "c1", "choices": [{"index": 0, "delta": {"content": "check."}}]}),
            serde_json::json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_a", "type": "function", "function": {"name": "run_python", "arguments": "{\"co"}}]}}]}),
            serde_json::json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 1, "id": "call_b", "function": {"name": "search", "arguments": "{}"}}]}}]}),
            serde_json::json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "de\": 1}"}}]}}]}),
            serde_json::json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
            serde_json::json!({"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}),
        ] {
            assembler.push(&chunk(json));
        }
        assert!(assembler.is_finished());
        let response = assembler.finish();
        assert_eq!(response.id, "c1");
        assert_eq!(response.text(), Some("Let me check."));
        assert_eq!(
            response.tool_calls(),
            [
                ToolCall {
                    id: "call_a".into(),
                    kind: "function".into(),
                    function: FunctionCall {
                        name: "run_python".into(),
                        arguments: "{\"code\": 1}".into()
                    }
                },
                ToolCall::function("call_b", "search", "{}"),
            ]
        );
        assert_eq!(response.usage, Some(Usage::new(10, 5)));
    }
}
