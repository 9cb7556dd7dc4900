//! E2B sandboxes (E2B's cloud, or any E2B-compatible server such as `waxell-sandbox serve`) as a
//! backend of [`crate::sandbox`], so they are instrumented like every backend.
//!
//! - Control plane (`X-API-KEY`): create (`POST /v2/sandboxes`), connect, set-timeout, kill.
//! - Code Interpreter (port 49999): `run_code` over the streamed NDJSON `/execute`, one fresh
//!   HTTP/1.1 connection per run, callbacks called as lines arrive; contexts.
//! - envd (port 49983): files (`/files`) and listings (Connect `ListDir`).
//!
//! Configuration follows E2B's SDKs ([`E2bConfig::from_env`]): `E2B_API_KEY`, `E2B_DOMAIN`,
//! `E2B_API_URL`, `E2B_SANDBOX_URL`, `E2B_DEBUG`. Requests carry the current OpenTelemetry context
//! as W3C `traceparent`. The API key and sandbox tokens never appear in `Debug` output or spans.
//! See `docs/e2b.md`.

mod config;
mod http;
mod sandbox;
mod stream;

pub use config::{E2bConfig, Secret, DEFAULT_DOMAIN};
pub use sandbox::{E2bBackend, E2bSandbox, DEFAULT_TEMPLATE};

/// Port of the Code Interpreter server inside an E2B sandbox.
pub const CODE_INTERPRETER_PORT: u16 = 49999;
/// Port of envd inside an E2B sandbox.
pub const ENVD_PORT: u16 = 49983;
