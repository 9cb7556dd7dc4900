//! `waxell-sandbox serve`: any [`SandboxBackend`] (the local one by default) over E2B's protocol, so
//! E2B's official SDKs and waxell's own `waxell::e2b` client can use it.
//!
//! One port serves all three planes, routed like E2B's proxy routes `localhost`/IP hosts: requests
//! with an `E2b-Sandbox-Port` header go to that sandbox port (49999 = Code Interpreter, 49983 =
//! envd, picked by `E2b-Sandbox-Id`); requests without it go to the control plane (`/sandboxes`,
//! `/v2/sandboxes`). Point the Python SDK at it with `E2B_API_URL=http://HOST:PORT`,
//! `E2B_SANDBOX_URL=http://HOST:PORT` and `E2B_API_KEY=<the server's key>`; see `docs/e2b.md`.
//!
//! Closed by default, in layers: an API key on the control plane ([`ServerConfig::new`] makes one
//! up), per-sandbox tokens on the data plane, a `Host` allow-list and no browser origins on every
//! request (guard.rs), and bounds on everything a client controls: connections, header and body
//! time and size, blocked writes (conn.rs), listings and buffered output.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use waxell_sandbox::server::{router, serve, ServerConfig};
//! use waxell_sandbox::{LocalBackend, LocalConfig};
//!
//! let backend = Arc::new(LocalBackend::new(LocalConfig::default())?);
//! let config = ServerConfig::new();
//! println!("E2B_API_KEY={}", config.api_key().unwrap_or_default());
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! let app = router(backend, config.clone());
//! serve(listener, app, &config, async { let _ = tokio::signal::ctrl_c().await; }).await?;
//! # Ok(()) }
//! ```

mod body;
mod code;
mod config;
mod conn;
mod connect;
mod control;
mod envd;
mod error;
mod execute;
mod guard;
mod lifecycle;
mod listing;
mod logs;
mod process;
mod registry;
mod saved;
mod signature;
mod state;
mod store;
mod watchers;

use std::sync::Arc;

use axum::extract::Request;
use axum::response::IntoResponse;
use axum::Router;
use tower::ServiceExt;
use waxell::sandbox::SandboxBackend;

pub use config::ServerConfig;
pub use conn::serve;
pub use error::ApiError;
use registry::Registry;
use state::AppState;

// The protocol's types are defined once, in waxell, for the client and this server.
use waxell::e2b::wire::SANDBOX_PORT_HEADER;
pub use waxell::e2b::wire::{CODE_INTERPRETER_PORT, DEBUG_SANDBOX_ID, ENVD_PORT};
/// The E2B-compatible server for `backend`: control plane and both data planes on one router.
/// Must be called inside a Tokio runtime (it starts the task that kills expired sandboxes; the task
/// ends when the router and every clone of it are dropped).
///
/// # Panics
/// When the state directory (`config.state_dir`, or a temporary one) cannot be made; see
/// [`try_router`].
pub fn router(backend: Arc<dyn SandboxBackend>, config: ServerConfig) -> Router {
    try_router(backend, config).unwrap_or_else(|e| panic!("{e}"))
}

/// [`router`], or an error naming the state directory that cannot be made or read.
pub fn try_router(backend: Arc<dyn SandboxBackend>, config: ServerConfig) -> Result<Router, String> {
    let registry = Registry::new(backend, config.clone()).map_err(|e| match &config.state_dir {
        Some(dir) => format!("state directory {}: {e}", dir.display()),
        None => format!("temporary state directory: {e}"),
    })?;
    registry::spawn_reaper(Arc::downgrade(&registry), config.reap_interval);
    let state = Arc::new(AppState { config, registry });
    let control = control::router(state.clone());
    let code = code::router(state.clone());
    let envd = envd::router(state.clone());
    let routes = Router::new().fallback(move |request: Request| {
        let (control, code, envd) = (control.clone(), code.clone(), envd.clone());
        async move {
            let target = match sandbox_port(&request) {
                // A signed file URL carries no sandbox headers: its signature names the sandbox.
                Ok(None) if is_signed_file_request(&request) => envd,
                Ok(None) => control,
                Ok(Some(CODE_INTERPRETER_PORT)) => code,
                Ok(Some(ENVD_PORT)) => envd,
                Ok(Some(port)) => {
                    return ApiError::proxy_port_closed(port).into_response();
                }
                Err(e) => return e.into_response(),
            };
            match target.oneshot(request).await {
                Ok(response) => response,
                Err(never) => match never {},
            }
        }
    });
    Ok(routes.layer(axum::middleware::from_fn_with_state(state, guard::check_request)))
}

/// Whether a pause on a server of `backend` keeps a sandbox's memory (E2B's default pause), not
/// only its files: the container backend under gVisor on Docker Engine (docs/e2b.md).
pub fn pause_keeps_memory(backend: &dyn SandboxBackend) -> bool {
    crate::pool::keeps_memory(backend).is_some()
}

/// `/files?...&signature=...`: E2B's signed download or upload URL.
fn is_signed_file_request(request: &Request) -> bool {
    request.uri().path() == "/files"
        && request
            .uri()
            .query()
            .is_some_and(|query| query.split('&').any(|pair| pair.starts_with("signature=")))
}

/// The `E2b-Sandbox-Port` of a request, if any.
fn sandbox_port(request: &Request) -> Result<Option<u16>, ApiError> {
    let Some(value) = request.headers().get(SANDBOX_PORT_HEADER) else {
        return Ok(None);
    };
    value
        .to_str()
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .map(Some)
        .ok_or_else(|| ApiError::bad_request(format!("invalid {SANDBOX_PORT_HEADER} header: {value:?}")))
}
