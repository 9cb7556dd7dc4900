//! Request and response types of the Chat Completions API, as OpenAI-compatible servers speak it.
//!
//! Requests serialise to the wire format unchanged; responses deserialise leniently (missing optional
//! fields default) because compatible servers (Ollama, vLLM, llama.cpp, OpenRouter) omit different ones.

use serde::{Deserialize, Serialize, Serializer};
use serde_json::{Map, Value};

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
    /// Set by the client: `true` for [`Client::chat_stream`](super::Client::chat_stream).
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

/// A function tool offered to the model.
///
/// ```
/// use waxell::llm::Tool;
/// use serde_json::json;
///
/// let tool = Tool::function(
///     "run_python",
///     "Run a Python script in the sandbox and return its stdout.",
///     json!({"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]}),
/// );
/// assert_eq!(tool.function.name, "run_python");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tool {
    /// Always `function`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The function's name, description and argument schema.
    pub function: FunctionDefinition,
}

impl Tool {
    /// A function tool with a JSON Schema for its arguments.
    pub fn function(name: impl Into<String>, description: impl Into<String>, parameters: Value) -> Self {
        Self {
            kind: "function".to_owned(),
            function: FunctionDefinition {
                name: name.into(),
                description: Some(description.into()),
                parameters: Some(parameters),
                strict: None,
            },
        }
    }
}

/// Name, description and argument schema of a function tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionDefinition {
    /// The name the model calls the function by.
    pub name: String,
    /// What the function does, for the model to decide when to call it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// JSON Schema of the arguments object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Value>,
    /// OpenAI's strict mode: the arguments must match `parameters` exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

/// Whether and which tool the model must call.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ToolChoice {
    /// The model decides whether to call a tool (the server's default when tools are offered).
    Auto,
    /// The model must not call a tool.
    None,
    /// The model must call at least one tool.
    Required,
    /// Force a call to this function.
    Function(String),
}

impl Serialize for ToolChoice {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Auto => serializer.serialize_str("auto"),
            Self::None => serializer.serialize_str("none"),
            Self::Required => serializer.serialize_str("required"),
            Self::Function(name) => {
                serde_json::json!({"type": "function", "function": {"name": name}}).serialize(serializer)
            }
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

/// A tool call the model made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The id to quote in the [`Message::tool`] result of this call.
    pub id: String,
    /// Always `function`.
    #[serde(rename = "type", default = "function_kind")]
    pub kind: String,
    /// The function called and its arguments.
    pub function: FunctionCall,
}

fn function_kind() -> String {
    "function".to_owned()
}

impl ToolCall {
    /// A function call with raw JSON `arguments`.
    pub fn function(id: impl Into<String>, name: impl Into<String>, arguments: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            kind: function_kind(),
            function: FunctionCall {
                name: name.into(),
                arguments: arguments.into(),
            },
        }
    }

    /// The arguments parsed as JSON.
    pub fn parse_arguments<T: serde::de::DeserializeOwned>(&self) -> serde_json::Result<T> {
        serde_json::from_str(&self.function.arguments)
    }
}

/// Function name and its arguments as the model wrote them (a JSON string, not always valid JSON).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionCall {
    /// The function to call.
    pub name: String,
    /// Its arguments as a JSON string, exactly as the model wrote them (may be invalid JSON).
    #[serde(default)]
    pub arguments: String,
}

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
