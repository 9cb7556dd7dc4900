//! The request: its parameters and the conversation's messages.

use serde::{Deserialize, Serialize, Serializer};
use serde_json::{Map, Value};

use super::tool::{Tool, ToolCall, ToolChoice};

/// One Chat Completions request.
///
/// Build it with [`ChatRequest::new`] and the chained setters; every parameter left unset is omitted from
/// the request body, so the server's default applies.
///
/// ```
/// use waxell::llm::{ChatRequest, Message, ResponseFormat};
///
/// let request = ChatRequest::new([
///     Message::system("You answer in JSON."),
///     Message::user("List three primes."),
/// ])
/// .model("gpt-4o-mini")
/// .temperature(0.0)
/// .max_tokens(200)
/// .response_format(ResponseFormat::JsonObject);
/// assert_eq!(request.messages.len(), 2);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[non_exhaustive]
pub struct ChatRequest {
    /// Model name; when `None` the client's default model is used.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The conversation so far.
    pub messages: Vec<Message>,
    /// Function tools the model may call.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<Tool>,
    /// How the model may use `tools`: see [`ToolChoice`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
    /// Whether the model may call several tools in one turn (`None`: the server's default, usually yes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parallel_tool_calls: Option<bool>,
    /// Plain text, JSON mode or a JSON Schema the answer must match.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_format: Option<ResponseFormat>,
    /// Sampling temperature, usually 0 to 2; lower is more deterministic.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Nucleus sampling: only tokens within this cumulative probability (0 to 1) are considered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    /// Most tokens the answer may have; older models and most compatible servers take this one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Newer OpenAI models (o-series, gpt-5) take this instead of `max_tokens`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_completion_tokens: Option<u32>,
    /// Sequences at which the server stops generating (not included in the answer).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stop: Vec<String>,
    /// Ask for deterministic sampling where the server supports it (best effort).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
    /// Penalty (-2 to 2) on tokens by how often they already appeared.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frequency_penalty: Option<f64>,
    /// Penalty (-2 to 2) on tokens that already appeared at all.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub presence_penalty: Option<f64>,
    /// Number of choices to generate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub n: Option<u32>,
    /// End-user identifier forwarded to the provider.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Set by the client: `true` for [`Client::chat_stream`](crate::llm::Client::chat_stream).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub stream: bool,
    /// Set by the client on streamed requests so the final chunk carries token usage.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<StreamOptions>,
    /// Server-specific fields merged into the top level of the body (e.g. vLLM's `top_k`).
    #[serde(flatten, skip_serializing_if = "Map::is_empty")]
    pub extra: Map<String, Value>,
}

impl ChatRequest {
    /// A request with these messages and every parameter unset.
    pub fn new(messages: impl IntoIterator<Item = Message>) -> Self {
        Self {
            messages: messages.into_iter().collect(),
            ..Self::default()
        }
    }

    /// Use this model instead of the client's default.
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }
    /// Append a message.
    pub fn message(mut self, message: Message) -> Self {
        self.messages.push(message);
        self
    }
    /// Offer these tools to the model.
    pub fn tools(mut self, tools: impl IntoIterator<Item = Tool>) -> Self {
        self.tools = tools.into_iter().collect();
        self
    }
    /// How the model may use the tools: see [`ToolChoice`].
    pub fn tool_choice(mut self, choice: ToolChoice) -> Self {
        self.tool_choice = Some(choice);
        self
    }
    /// Whether the model may call several tools in one turn.
    pub fn parallel_tool_calls(mut self, allowed: bool) -> Self {
        self.parallel_tool_calls = Some(allowed);
        self
    }
    /// Ask for plain text, JSON mode or JSON matching a schema.
    pub fn response_format(mut self, format: ResponseFormat) -> Self {
        self.response_format = Some(format);
        self
    }
    /// Sampling temperature, usually 0 to 2.
    pub fn temperature(mut self, temperature: f64) -> Self {
        self.temperature = Some(temperature);
        self
    }
    /// Nucleus-sampling probability mass, 0 to 1.
    pub fn top_p(mut self, top_p: f64) -> Self {
        self.top_p = Some(top_p);
        self
    }
    /// Cap the answer at this many tokens (`max_tokens`).
    pub fn max_tokens(mut self, max_tokens: u32) -> Self {
        self.max_tokens = Some(max_tokens);
        self
    }
    /// Cap the answer at this many tokens with `max_completion_tokens`, which newer OpenAI models require.
    pub fn max_completion_tokens(mut self, max_tokens: u32) -> Self {
        self.max_completion_tokens = Some(max_tokens);
        self
    }
    /// Stop generating at any of these sequences.
    pub fn stop(mut self, sequences: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.stop = sequences.into_iter().map(Into::into).collect();
        self
    }
    /// Seed for best-effort deterministic sampling.
    pub fn seed(mut self, seed: i64) -> Self {
        self.seed = Some(seed);
        self
    }
    /// Frequency penalty, -2 to 2.
    pub fn frequency_penalty(mut self, penalty: f64) -> Self {
        self.frequency_penalty = Some(penalty);
        self
    }
    /// Presence penalty, -2 to 2.
    pub fn presence_penalty(mut self, penalty: f64) -> Self {
        self.presence_penalty = Some(penalty);
        self
    }
    /// Generate this many choices; only the first is recorded as the span's output.
    pub fn n(mut self, choices: u32) -> Self {
        self.n = Some(choices);
        self
    }
    /// End-user identifier forwarded to the provider (for its abuse monitoring).
    pub fn user(mut self, user: impl Into<String>) -> Self {
        self.user = Some(user.into());
        self
    }
    /// Add a server-specific top-level body field.
    pub fn extra(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.extra.insert(key.into(), value.into());
        self
    }

    /// The model this request names, if any (after the client resolved it, always `Some`).
    pub fn model_name(&self) -> Option<&str> {
        self.model.as_deref()
    }

    /// The text of every system message, joined by newlines. Handy in scripted-reply matchers.
    pub fn system_text(&self) -> String {
        self.messages_text(|message| matches!(message, Message::System { .. }))
    }

    /// The text of the last user message, if any.
    pub fn last_user_text(&self) -> Option<&str> {
        self.messages.iter().rev().find_map(|message| match message {
            Message::User { content, .. } => Some(content.as_str()),
            _ => None,
        })
    }

    /// Whether the conversation already contains a tool result (the model is being called back).
    pub fn has_tool_results(&self) -> bool {
        self.messages
            .iter()
            .any(|message| matches!(message, Message::Tool { .. }))
    }

    /// Names of the offered function tools, in order.
    pub fn tool_names(&self) -> Vec<String> {
        self.tools.iter().map(|tool| tool.function.name.clone()).collect()
    }

    fn messages_text(&self, keep: impl Fn(&Message) -> bool) -> String {
        self.messages
            .iter()
            .filter(|message| keep(message))
            .filter_map(Message::text)
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// `stream_options` of a streamed request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamOptions {
    /// Ask for a last chunk carrying the token usage of the whole stream.
    pub include_usage: bool,
}

/// One message of the conversation, tagged by `role` on the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "lowercase")]
#[non_exhaustive]
pub enum Message {
    /// Instructions that steer the model.
    System {
        /// The instructions.
        content: String,
        /// Optional participant name, forwarded as is.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
    },
    /// What the user said.
    User {
        /// The user's text.
        content: String,
        /// Optional participant name, forwarded as is.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
    },
    /// A previous model turn: text, tool calls, or both.
    Assistant {
        /// The text, if the turn had any (`None` for a turn with tool calls only).
        #[serde(default)]
        content: Option<String>,
        /// The tool calls the model made in this turn.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
        /// Optional participant name, forwarded as is.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
    },
    /// The result of running a tool the model called.
    Tool {
        /// The [`ToolCall::id`] this answers.
        tool_call_id: String,
        /// What the tool returned, as text.
        content: String,
    },
}

impl Message {
    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Self::System {
            content: content.into(),
            name: None,
        }
    }
    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::User {
            content: content.into(),
            name: None,
        }
    }
    /// An assistant turn with text only.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::Assistant {
            content: Some(content.into()),
            tool_calls: Vec::new(),
            name: None,
        }
    }
    /// An assistant turn that called tools; send it back before the matching [`Message::tool`] results.
    pub fn assistant_tool_calls(tool_calls: impl IntoIterator<Item = ToolCall>) -> Self {
        Self::Assistant {
            content: None,
            tool_calls: tool_calls.into_iter().collect(),
            name: None,
        }
    }
    /// The result of the tool call `tool_call_id`.
    pub fn tool(tool_call_id: impl Into<String>, content: impl Into<String>) -> Self {
        Self::Tool {
            tool_call_id: tool_call_id.into(),
            content: content.into(),
        }
    }

    /// The wire role: `system`, `user`, `assistant` or `tool`.
    pub fn role(&self) -> &'static str {
        match self {
            Self::System { .. } => "system",
            Self::User { .. } => "user",
            Self::Assistant { .. } => "assistant",
            Self::Tool { .. } => "tool",
        }
    }

    /// The text content, if the message has any.
    pub fn text(&self) -> Option<&str> {
        match self {
            Self::System { content, .. } | Self::User { content, .. } | Self::Tool { content, .. } => {
                Some(content)
            }
            Self::Assistant { content, .. } => content.as_deref(),
        }
    }
}

/// The `response_format` parameter.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ResponseFormat {
    /// Plain text (the default).
    Text,
    /// Any valid JSON object ("JSON mode").
    JsonObject,
    /// JSON matching `schema` ("structured outputs").
    JsonSchema {
        /// A name for the schema (letters, digits, `_` and `-`).
        name: String,
        /// The JSON Schema the answer must match.
        schema: Value,
        /// Whether the server must enforce the schema exactly (OpenAI's strict mode).
        strict: bool,
    },
}

impl ResponseFormat {
    /// The `gen_ai.output.type` this format asks for.
    pub(crate) fn output_type(&self) -> &'static str {
        match self {
            Self::Text => "text",
            Self::JsonObject | Self::JsonSchema { .. } => "json",
        }
    }
}

impl Serialize for ResponseFormat {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let value = match self {
            Self::Text => serde_json::json!({"type": "text"}),
            Self::JsonObject => serde_json::json!({"type": "json_object"}),
            Self::JsonSchema { name, schema, strict } => serde_json::json!({
                "type": "json_schema",
                "json_schema": {"name": name, "schema": schema, "strict": strict},
            }),
        };
        value.serialize(serializer)
    }
}
