//! A complete response: its choices and token usage.

use serde::{Deserialize, Serialize};

use super::request::Message;
use super::tool::ToolCall;

/// A complete (non-streamed, or assembled from a stream) response.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ChatResponse {
    /// The server's id of the completion (empty when the server sent none).
    #[serde(default)]
    pub id: String,
    /// The model that actually answered (may carry a version suffix).
    #[serde(default)]
    pub model: String,
    /// Unix time in seconds when the server created the completion (0 when not sent).
    #[serde(default)]
    pub created: u64,
    /// The answers; usually one, more when the request set `n`.
    #[serde(default)]
    pub choices: Vec<Choice>,
    /// Token counts, when the server reports them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// Identifies the backend configuration that answered (OpenAI), when sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_fingerprint: Option<String>,
}

impl ChatResponse {
    /// The text of the first choice, if it has any.
    pub fn text(&self) -> Option<&str> {
        self.choices.first()?.message.content.as_deref()
    }

    /// The tool calls of the first choice (empty when the model answered with text).
    pub fn tool_calls(&self) -> &[ToolCall] {
        self.choices
            .first()
            .map_or(&[], |choice| choice.message.tool_calls.as_slice())
    }

    /// The finish reason of the first choice (`stop`, `length`, `tool_calls`, ...).
    pub fn finish_reason(&self) -> Option<&str> {
        self.choices.first()?.finish_reason.as_deref()
    }

    /// The first choice as a message to append to the conversation for the next turn.
    pub fn to_message(&self) -> Option<Message> {
        let message = &self.choices.first()?.message;
        Some(Message::Assistant {
            content: message.content.clone(),
            tool_calls: message.tool_calls.clone(),
            name: None,
        })
    }
}

/// One alternative answer.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Choice {
    /// Position of this choice among the response's choices.
    #[serde(default)]
    pub index: u32,
    /// The model's turn.
    pub message: AssistantMessage,
    /// Why generation stopped (`stop`, `length`, `tool_calls`, `content_filter`, ...).
    #[serde(default)]
    pub finish_reason: Option<String>,
}

/// The model's turn inside a [`Choice`].
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct AssistantMessage {
    /// Always `assistant`.
    #[serde(default = "assistant_role")]
    pub role: String,
    /// The text of the answer (`None` when the model only called tools or refused).
    #[serde(default)]
    pub content: Option<String>,
    /// The tool calls the model made.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// Set when the model declined for safety reasons.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusal: Option<String>,
}

fn assistant_role() -> String {
    "assistant".to_owned()
}

/// Token counts of one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Usage {
    /// All input tokens, cached ones included.
    #[serde(default)]
    pub prompt_tokens: u64,
    /// All output tokens, reasoning ones included.
    #[serde(default)]
    pub completion_tokens: u64,
    /// Input plus output tokens, as the server reported it.
    #[serde(default)]
    pub total_tokens: u64,
    /// Breakdown of the input tokens (the cached part).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_details: Option<PromptTokensDetails>,
    /// Breakdown of the output tokens (the reasoning part).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_tokens_details: Option<CompletionTokensDetails>,
}

impl Usage {
    /// Usage with these input and output counts (total = their sum).
    pub fn new(prompt_tokens: u64, completion_tokens: u64) -> Self {
        Self {
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens + completion_tokens,
            prompt_tokens_details: None,
            completion_tokens_details: None,
        }
    }
    /// Set the cached subset of the input tokens (read from the provider's prompt cache).
    pub fn with_cached_tokens(mut self, cached_tokens: u64) -> Self {
        self.prompt_tokens_details
            .get_or_insert_with(PromptTokensDetails::default)
            .cached_tokens = Some(cached_tokens);
        self
    }
    /// Set the subset of the input tokens written to the provider's prompt cache (Anthropic's
    /// `cache_creation_input_tokens`), billed at the cache-write price.
    pub fn with_cache_creation_tokens(mut self, cache_creation_tokens: u64) -> Self {
        self.prompt_tokens_details
            .get_or_insert_with(PromptTokensDetails::default)
            .cache_creation_tokens = Some(cache_creation_tokens);
        self
    }
    /// Set the reasoning subset of the output tokens.
    pub fn with_reasoning_tokens(mut self, reasoning_tokens: u64) -> Self {
        self.completion_tokens_details = Some(CompletionTokensDetails {
            reasoning_tokens: Some(reasoning_tokens),
        });
        self
    }
    /// Input tokens served from the provider's prompt cache, when reported.
    pub fn cached_tokens(&self) -> Option<u64> {
        self.prompt_tokens_details?.cached_tokens
    }
    /// Input tokens written to the provider's prompt cache, when reported.
    pub fn cache_creation_tokens(&self) -> Option<u64> {
        self.prompt_tokens_details?.cache_creation_tokens
    }
    /// Output tokens spent on hidden reasoning, when reported.
    pub fn reasoning_tokens(&self) -> Option<u64> {
        self.completion_tokens_details?.reasoning_tokens
    }
}

/// Breakdown of [`Usage::prompt_tokens`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PromptTokensDetails {
    /// Input tokens served from the provider's prompt cache.
    #[serde(default)]
    pub cached_tokens: Option<u64>,
    /// Input tokens written to the provider's prompt cache (not in OpenAI's wire format: set by the
    /// clients and integrations that report it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_creation_tokens: Option<u64>,
}

/// Breakdown of [`Usage::completion_tokens`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CompletionTokensDetails {
    /// Output tokens spent on hidden reasoning (o-series and other reasoning models).
    #[serde(default)]
    pub reasoning_tokens: Option<u64>,
}
