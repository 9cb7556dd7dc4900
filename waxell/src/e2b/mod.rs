//! E2B sandboxes (E2B's cloud, or any E2B-compatible server such as `waxell-sandbox serve`) as a
//! backend of [`crate::sandbox`], so they are instrumented like every backend.
//!
//! - Control plane (`X-API-KEY`): create (`POST /v2/sandboxes`), connect, set-timeout, kill;
//!   pause, resume, metrics, snapshots and fork.
//! - Code Interpreter (port 49999): `run_code` over the streamed NDJSON `/execute`, one fresh
//!   HTTP/1.1 connection per run, callbacks called as lines arrive; contexts.
//! - envd (port 49983): files (`/files`) and listings (Connect `ListDir`); commands and terminals
//!   (`process.Process`: `start_process`, a stream of events, with stdin, signals and resizes).
//!
//! Configuration follows E2B's SDKs ([`E2bConfig::from_env`]): `E2B_API_KEY`, `E2B_DOMAIN`,
//! `E2B_API_URL`, `E2B_SANDBOX_URL`, `E2B_DEBUG`. Requests carry the current OpenTelemetry context
//! as W3C `traceparent`. The API key and sandbox tokens never appear in `Debug` output or spans.
//! See `docs/e2b.md`.
//!
//! The client needs the `e2b` feature. [`wire`], the protocol's types that the client and
//! `waxell-sandbox serve` share, needs none.

#[cfg(feature = "e2b")]
mod config;
#[cfg(feature = "e2b")]
mod http;
#[cfg(feature = "e2b")]
mod process;
#[cfg(feature = "e2b")]
mod sandbox;
#[cfg(feature = "e2b")]
mod stream;
pub mod wire;

#[cfg(feature = "e2b")]
pub use config::{E2bConfig, Secret, DEFAULT_DOMAIN};
#[cfg(feature = "e2b")]
pub use sandbox::{E2bBackend, E2bSandbox, DEFAULT_TEMPLATE};
pub use wire::{CODE_INTERPRETER_PORT, ENVD_PORT};
