//! An instrumented Chat Completions client for any OpenAI-compatible server (OpenAI, OpenRouter,
//! Ollama, vLLM, llama.cpp, ...), with a scripted transport for dry runs.
//!
//! - [`Client`] sends [`ChatRequest`]s with [`Client::chat`] or streams them with
//!   [`Client::chat_stream`]; retries 408/429/5xx (honouring `Retry-After`), times out, and returns
//!   typed [`Error`]s that carry the server's message.
//! - Every call is traced without any code from you: a `chat {model}` client span with the OpenTelemetry
//!   GenAI and OpenInference attributes, token usage and cost ([`PriceTable`]), captured messages (subject
//!   to the SDK's content policy, scrubbed and truncated), the `gen_ai.client.*` metrics, and a
//!   `tool_call:{name}` decision when the model calls a tool. Outgoing requests carry `traceparent`.
//! - A [`ScriptedTransport`] replaces the network with a queue of [`ScriptedReply`]s: the same client,
//!   the same parsing and the same spans, marked `waxell.dry_run=true`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), waxell::llm::Error> {
//! use waxell::llm::{ChatRequest, Client, Message};
//!
//! let client = Client::from_env()?; // OPENAI_API_KEY, OPENAI_BASE_URL
//! let response = client
//!     .chat(ChatRequest::new([Message::user("Hello!")]).model("gpt-4o-mini"))
//!     .await?;
//! println!("{}", response.text().unwrap_or_default());
//! # Ok(()) }
//! ```
//!
//! Configuration, the price table and the full list of recorded attributes: `docs/llm.md`.

mod assemble;
mod client;
mod error;
pub(crate) mod instrument;
mod pricing;
mod provider;
pub mod record;
mod scripted;
mod stream;
mod transport;
mod types;

#[cfg(feature = "async-openai")]
pub(crate) use client::provider_for_host;
pub use client::{Client, ClientBuilder, DEFAULT_BASE_URL, DEFAULT_CONNECT_TIMEOUT, DEFAULT_REQUEST_TIMEOUT};
pub use error::Error;
pub use pricing::{ModelPrice, PriceTable, PRICES_AS_OF};
pub use scripted::{ScriptedReply, ScriptedTransport};
pub use stream::ChatStream;
pub use transport::{DataStream, HttpTransport, ServerAddress, Transport};
pub use types::{
    AssistantMessage, ChatChunk, ChatRequest, ChatResponse, Choice, ChunkChoice, CompletionTokensDetails,
    Delta, FunctionCall, FunctionCallDelta, FunctionDefinition, Message, PromptTokensDetails, ResponseFormat,
    StreamOptions, Tool, ToolCall, ToolCallDelta, ToolChoice, Usage,
};
