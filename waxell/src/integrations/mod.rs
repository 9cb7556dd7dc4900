//! Instrumentation of LLM crates other than waxell's own client. Each records through
//! [`crate::llm::record`], so a call looks the same in a trace whichever client made it.
//! See `docs/integrations.md`.

#[cfg(feature = "async-openai")]
pub mod async_openai;
#[cfg(feature = "tracing")]
pub(crate) mod genai_spans;
#[cfg(feature = "async-openai")]
mod openai_wire;
