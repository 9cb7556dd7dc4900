//! The chunks of a streamed response.

use serde::{Deserialize, Serialize};

use super::response::Usage;

/// One server-sent chunk of a streamed response.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ChatChunk {
    /// The completion's id; the same on every chunk of one stream.
    #[serde(default)]
    pub id: String,
    /// The model that answers.
    #[serde(default)]
    pub model: String,
    /// Unix time in seconds when the server created the completion.
    #[serde(default)]
    pub created: u64,
    /// What this chunk adds to each choice (empty on the final usage-only chunk).
    #[serde(default)]
    pub choices: Vec<ChunkChoice>,
    /// Only on the last chunk, when usage was requested; its `choices` is then empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// Identifies the backend configuration that answered (OpenAI), when sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_fingerprint: Option<String>,
}

impl ChatChunk {
    /// The text this chunk adds to the first choice, if any.
    pub fn text_delta(&self) -> Option<&str> {
        self.choices
            .iter()
            .find(|choice| choice.index == 0)?
            .delta
            .content
            .as_deref()
    }
}

/// The part of one choice carried by a [`ChatChunk`].
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ChunkChoice {
    /// The choice this fragment belongs to.
    #[serde(default)]
    pub index: u32,
    /// What this chunk adds to the choice's message.
    #[serde(default)]
    pub delta: Delta,
    /// Set on the choice's last chunk: why generation stopped.
    #[serde(default)]
    pub finish_reason: Option<String>,
}

/// Incremental message content.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Delta {
    /// `assistant` on the first chunk of a choice, else `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// Text to append to the answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// Fragments of tool calls to assemble by `index`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCallDelta>,
    /// Text to append to a refusal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusal: Option<String>,
}

/// A fragment of a tool call: the first fragment of a call carries its id and name, later ones append
/// to its arguments. Fragments of the same call share `index`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ToolCallDelta {
    /// Which tool call of the choice this fragment belongs to.
    pub index: u32,
    /// The call's id (first fragment only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Always `function` when present (first fragment only).
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Name (first fragment only) and a piece of the arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<FunctionCallDelta>,
}

/// The function part of a [`ToolCallDelta`].
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct FunctionCallDelta {
    /// The function's name (first fragment only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// A piece of the arguments' JSON string, to append to the earlier ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<String>,
}
