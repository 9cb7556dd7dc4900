//! waxell: observability for AI agents.
#![forbid(unsafe_code)]

pub mod llm;
pub mod sandbox;
pub mod semconv;
pub(crate) mod telemetry;
