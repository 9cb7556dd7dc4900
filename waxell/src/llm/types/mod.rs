//! Request and response types of the Chat Completions API, as OpenAI-compatible servers speak it.
//!
//! Requests serialise to the wire format unchanged; responses deserialise leniently (missing optional
//! fields default) because compatible servers (Ollama, vLLM, llama.cpp, OpenRouter) omit different ones.

mod chunk;
mod request;
mod response;
mod tool;

pub use self::chunk::{ChatChunk, ChunkChoice, Delta, FunctionCallDelta, ToolCallDelta};
pub use self::request::{ChatRequest, Message, ResponseFormat, StreamOptions};
pub use self::response::{
    AssistantMessage, ChatResponse, Choice, CompletionTokensDetails, PromptTokensDetails, Usage,
};
pub use self::tool::{FunctionCall, FunctionDefinition, Tool, ToolCall, ToolChoice};
