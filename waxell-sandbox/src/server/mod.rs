//! `waxell-sandbox serve`: any [`SandboxBackend`] (the local one by default) over E2B's protocol, so
//! E2B's official SDKs and waxell's own `waxell::e2b` client can use it.
//!
//! One port serves all three planes, routed like E2B's proxy routes `localhost`/IP hosts: requests
//! with an `E2b-Sandbox-Port` header go to that sandbox port (49999 = Code Interpreter, 49983 =
//! envd, picked by `E2b-Sandbox-Id`); requests without it go to the control plane (`/sandboxes`,
//! `/v2/sandboxes`). Point the Python SDK at it with `E2B_API_URL=http://HOST:PORT`,
//! `E2B_SANDBOX_URL=http://HOST:PORT` and any `E2B_API_KEY`; see `docs/e2b.md`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use waxell_sandbox::server::{router, ServerConfig};
//! use waxell_sandbox::{LocalBackend, LocalConfig};
//!
//! let backend = Arc::new(LocalBackend::new(LocalConfig::default())?);
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! axum::serve(listener, router(backend, ServerConfig::default())).await?;
//! # Ok(()) }
//! ```

mod body;
mod code;
mod control;
mod envd;
mod error;
mod execute;
mod registry;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::response::IntoResponse;
use axum::Router;
use tower::ServiceExt;
use waxell::sandbox::SandboxBackend;

pub use error::ApiError;
use registry::Registry;

/// Port of the Code Interpreter (Jupyter) server inside an E2B sandbox.
pub const CODE_INTERPRETER_PORT: u16 = 49999;
/// Port of envd (files, filesystem RPCs) inside an E2B sandbox.
pub const ENVD_PORT: u16 = 49983;
/// Sandbox id the E2B SDKs use in debug mode (`E2B_DEBUG=true`), where they never call create.
pub const DEBUG_SANDBOX_ID: &str = "debug_sandbox_id";
/// `envdVersion` this server reports: current envd, so SDKs use octet-stream uploads and no `username`.
pub const ENVD_VERSION: &str = "0.6.13";

/// Header naming the sandbox a data-plane request is for.
pub(crate) const SANDBOX_ID_HEADER: &str = "e2b-sandbox-id";
/// Header naming the port inside the sandbox a data-plane request is for.
pub(crate) const SANDBOX_PORT_HEADER: &str = "e2b-sandbox-port";

/// Limits and security settings of the server.
#[derive(Clone)]
#[non_exhaustive]
pub struct ServerConfig {
    /// Required value of `X-API-KEY` on the control plane. When set, every sandbox also gets an
    /// envd access token and a traffic token that its data-plane requests must carry. `None` accepts
    /// any key and issues no tokens: only for servers bound to loopback (the binary enforces that).
    pub api_key: Option<String>,
    /// Live sandboxes at most; creating one more answers 429.
    pub max_sandboxes: usize,
    /// Largest request body accepted (uploads included); larger ones answer 413.
    pub max_body_bytes: usize,
    /// Sandbox lifetime when create does not say (E2B: 300 s).
    pub default_timeout: Duration,
    /// Longest lifetime create or set-timeout may ask for (E2B Pro: 24 h).
    pub max_timeout: Duration,
    /// Silence after which `/execute` writes a `keepalive` line. A failing write is how the server
    /// notices a client that went away, and then interrupts its code (E2B: 5 s).
    pub keepalive_interval: Duration,
    /// Serve the E2B SDKs' debug mode: requests for sandbox `debug_sandbox_id` create it on first use.
    pub debug_sandbox: bool,
    /// How often expired sandboxes are looked for.
    pub reap_interval: Duration,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            api_key: None,
            max_sandboxes: 16,
            max_body_bytes: 64 * 1024 * 1024,
            default_timeout: Duration::from_secs(300),
            max_timeout: Duration::from_secs(24 * 3600),
            keepalive_interval: Duration::from_secs(5),
            debug_sandbox: false,
            reap_interval: Duration::from_millis(500),
        }
    }
}

impl std::fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerConfig")
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("max_sandboxes", &self.max_sandboxes)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("default_timeout", &self.default_timeout)
            .field("max_timeout", &self.max_timeout)
            .field("keepalive_interval", &self.keepalive_interval)
            .field("debug_sandbox", &self.debug_sandbox)
            .finish_non_exhaustive()
    }
}

impl ServerConfig {
    /// Default limits, no API key.
    pub fn new() -> Self {
        Self::default()
    }
    /// Require this `X-API-KEY` (and issue per-sandbox data-plane tokens).
    pub fn with_api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
        self
    }
    /// Allow at most this many live sandboxes.
    pub fn with_max_sandboxes(mut self, n: usize) -> Self {
        self.max_sandboxes = n;
        self
    }
    /// Refuse request bodies larger than this (413).
    pub fn with_max_body_bytes(mut self, n: usize) -> Self {
        self.max_body_bytes = n;
        self
    }
    /// Lifetime of sandboxes whose create gives none.
    pub fn with_default_timeout(mut self, timeout: Duration) -> Self {
        self.default_timeout = timeout;
        self
    }
    /// Longest lifetime create or set-timeout may ask for.
    pub fn with_max_timeout(mut self, timeout: Duration) -> Self {
        self.max_timeout = timeout;
        self
    }
    /// Silence after which `/execute` writes a keepalive line.
    pub fn with_keepalive_interval(mut self, interval: Duration) -> Self {
        self.keepalive_interval = interval;
        self
    }
    /// Serve E2B's debug-mode sandbox `debug_sandbox_id`.
    pub fn with_debug_sandbox(mut self, enabled: bool) -> Self {
        self.debug_sandbox = enabled;
        self
    }
}

/// Shared state of every handler.
pub(crate) struct AppState {
    pub(crate) config: ServerConfig,
    pub(crate) registry: Arc<Registry>,
}

/// The E2B-compatible server for `backend`: control plane and both data planes on one router.
/// Must be called inside a Tokio runtime (it starts the task that kills expired sandboxes; the task
/// ends when the router and every clone of it are dropped).
pub fn router(backend: Arc<dyn SandboxBackend>, config: ServerConfig) -> Router {
    let registry = Registry::new(backend, config.clone());
    registry::spawn_reaper(Arc::downgrade(&registry), config.reap_interval);
    let state = Arc::new(AppState { config, registry });
    let control = control::router(state.clone());
    let code = code::router(state.clone());
    let envd = envd::router(state);
    Router::new().fallback(move |request: Request| {
        let (control, code, envd) = (control.clone(), code.clone(), envd.clone());
        async move {
            let target = match sandbox_port(&request) {
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
    })
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

/// Serve `router` on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
}

/// Shortest lifetime create or set-timeout accepts.
pub(crate) const MIN_TIMEOUT: Duration = Duration::from_secs(1);
