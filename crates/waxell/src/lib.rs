//! waxell: observability for AI agents.
#![forbid(unsafe_code)]

pub mod sandbox;
pub mod semconv;
pub(crate) mod telemetry;
