//! `waxell ui` (feature `ui`): a local web app that shows agent runs (a run list; a run as a tree and a
//! timeline; an LLM call as its chat, a sandbox cell as its code, output and charts, a decision with its
//! options, reasoning, scores) and is at once an OTLP/HTTP receiver (protobuf and JSON, port 4318) and a
//! follower of the embedded default's trace files (`.waxell/traces/*.jsonl`). Spans are kept in an
//! embedded store on disk ([redb](https://docs.rs/redb)), pruned after a retention period.
//!
//! Loopback only by default; any other listen address needs a token (printed in the URL, then kept in a
//! cookie), and every request with a foreign `Host` header or from another site is refused. Span content
//! is only ever shown as text. See `docs/ui.md`.
//!
//! ```no_run
//! let ui = waxell::ui::UiServer::start(waxell::ui::UiOptions::default())?;
//! println!("{}", ui.url());
//! ui.run_until_ctrl_c();
//! # Ok::<(), waxell::ui::UiError>(())
//! ```

mod follow;
#[cfg(feature = "grpc")]
mod grpc;
mod http;
mod ingest;
pub mod model;
pub mod store;
mod wire;

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use model::{RunFilter, RunSummary, SpanRecord};
pub use store::{Store, StoreError};

/// How `waxell ui` runs.
#[derive(Debug, Clone)]
pub struct UiOptions {
    /// Where the web app listens (default 127.0.0.1:4320).
    pub listen: SocketAddr,
    /// Where the OTLP/HTTP receiver listens (default 127.0.0.1:4318); `None`: no receiver.
    pub otlp: Option<SocketAddr>,
    /// Where the OTLP/gRPC receiver listens (default 127.0.0.1:4317), when built with the feature `grpc`
    /// (without it this is ignored); `None`: no gRPC receiver.
    pub otlp_grpc: Option<SocketAddr>,
    /// The store's file (default `.waxell/ui/store.redb`).
    pub store: PathBuf,
    /// Trace directories (their `*.jsonl` files) and files to import and follow (default `.waxell/traces`).
    pub follow: Vec<PathBuf>,
    /// How often followed files are read again (default 300 ms).
    pub poll: Duration,
    /// Runs that started longer ago than this are deleted (default 30 days); `None` keeps everything.
    pub retention: Option<Duration>,
    /// The access token. Required (and generated when `None`) if an address is not loopback; on loopback
    /// only checked when set.
    pub token: Option<String>,
    /// Host names (besides `localhost` and IP addresses) that requests may name in their `Host` header.
    pub allowed_hosts: Vec<String>,
}

impl Default for UiOptions {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 4320)),
            otlp: Some(SocketAddr::from(([127, 0, 0, 1], 4318))),
            otlp_grpc: Some(SocketAddr::from(([127, 0, 0, 1], 4317))),
            store: PathBuf::from(".waxell/ui/store.redb"),
            follow: vec![PathBuf::from(".waxell/traces")],
            poll: Duration::from_millis(300),
            retention: Some(Duration::from_secs(30 * 24 * 3600)),
            token: None,
            allowed_hosts: Vec::new(),
        }
    }
}

/// Why the UI could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UiError {
    /// The store could not be opened (another `waxell ui` may hold it).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// An address could not be bound.
    #[error("listening on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// What the operating system reported.
        source: std::io::Error,
    },
    /// The async runtime could not start, or no random token could be made.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// A running UI. Dropping it stops it.
#[derive(Debug)]
pub struct UiServer {
    ui_addr: SocketAddr,
    otlp_addr: Option<SocketAddr>,
    grpc_addr: Option<SocketAddr>,
    token: Option<String>,
    ingest: Arc<ingest::Ingest>,
    stop: Arc<AtomicBool>,
    shutdown: Arc<tokio::sync::Notify>,
    follower: Option<std::thread::JoinHandle<()>>,
    runtime: Option<tokio::runtime::Runtime>,
    url_file: Option<PathBuf>,
}

fn random_token() -> std::io::Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; 24];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(model::hex(&bytes))
}

fn bind(addr: SocketAddr) -> Result<TcpListener, UiError> {
    let listener = TcpListener::bind(addr).map_err(|source| UiError::Listen { addr, source })?;
    listener
        .set_nonblocking(true)
        .map_err(|source| UiError::Listen { addr, source })?;
    Ok(listener)
}

pub(crate) fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or_default()
}

impl UiServer {
    /// Open the store, bind the addresses, and serve in the background (own threads).
    pub fn start(options: UiOptions) -> Result<Self, UiError> {
        let store = Arc::new(Store::open(&options.store)?);
        let otlp_grpc = options.otlp_grpc.filter(|_| cfg!(feature = "grpc"));
        let exposed = !options.listen.ip().is_loopback()
            || options.otlp.is_some_and(|a| !a.ip().is_loopback())
            || otlp_grpc.is_some_and(|a| !a.ip().is_loopback());
        let token = match options.token.clone().filter(|t| !t.is_empty()) {
            Some(t) => Some(t),
            None if exposed => Some(random_token()?),
            None => None,
        };
        let ui_listener = bind(options.listen)?;
        let ui_addr = ui_listener.local_addr()?;
        let otlp_listener = options.otlp.map(bind).transpose()?;
        let otlp_addr = otlp_listener.as_ref().map(TcpListener::local_addr).transpose()?;
        let grpc_listener = otlp_grpc.map(bind).transpose()?;
        let grpc_addr = grpc_listener.as_ref().map(TcpListener::local_addr).transpose()?;

        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("waxell-ui")
            .enable_all()
            .build()?;
        let shutdown = Arc::new(tokio::sync::Notify::new());
        let security = Arc::new(http::Security {
            token: token.clone(),
            allowed_hosts: options.allowed_hosts.clone(),
            cookie: format!("waxell_ui_{}", ui_addr.port()),
        });
        let ingest = Arc::new(ingest::Ingest::start(store.clone())?);
        let app = http::app(ingest.clone(), security.clone());
        let otlp = http::otlp(ingest.clone(), security.clone());
        {
            let _entered = runtime.enter();
            let listener = tokio::net::TcpListener::from_std(ui_listener)?;
            let stop = shutdown.clone();
            runtime.spawn(async move {
                let _ = axum::serve(listener, app)
                    .with_graceful_shutdown(async move { stop.notified().await })
                    .await;
            });
            if let Some(l) = otlp_listener {
                let listener = tokio::net::TcpListener::from_std(l)?;
                let stop = shutdown.clone();
                runtime.spawn(async move {
                    let _ = axum::serve(listener, otlp)
                        .with_graceful_shutdown(async move { stop.notified().await })
                        .await;
                });
            }
            #[cfg(feature = "grpc")]
            if let Some(l) = grpc_listener {
                let listener = tokio::net::TcpListener::from_std(l)?;
                let stop = shutdown.clone();
                runtime.spawn(grpc::serve(listener, ingest.clone(), security, async move {
                    stop.notified().await
                }));
            }
            #[cfg(not(feature = "grpc"))]
            let _ = (grpc_listener, security);
        }

        let stop = Arc::new(AtomicBool::new(false));
        let follower = {
            let (store, stop) = (store.clone(), stop.clone());
            let mut follower = follow::Follower::new(options.follow.clone());
            let (poll, retention) = (options.poll, options.retention);
            std::thread::Builder::new()
                .name("waxell-ui-follow".into())
                .spawn(move || {
                    let mut last_sweep: Option<std::time::Instant> = None;
                    while !stop.load(Ordering::Relaxed) {
                        if let Some(keep) = retention {
                            if last_sweep.is_none_or(|t| t.elapsed() > Duration::from_secs(60)) {
                                let cutoff = now_ns().saturating_sub(keep.as_nanos() as u64);
                                if let Err(e) = store.delete_before(cutoff) {
                                    crate::console::current().message(format_args!("ui: retention: {e}"));
                                }
                                last_sweep = Some(std::time::Instant::now());
                            }
                        }
                        if let Err(e) = follower.poll(&store) {
                            crate::console::current().message(format_args!("ui: importing trace files: {e}"));
                        }
                        if let Err(e) = store.sync() {
                            crate::console::current().message(format_args!("ui: saving the store: {e}"));
                        }
                        std::thread::sleep(poll);
                    }
                })?
        };
        // Beside the store, the base URL, for links to runs (`waxell::export::ui_run_url`); removed at stop.
        let url_file = options
            .store
            .parent()
            .map(|dir| dir.join("url"))
            .filter(|file| std::fs::write(file, format!("http://{}\n", shown(ui_addr))).is_ok());
        Ok(Self {
            url_file,
            ui_addr,
            otlp_addr,
            grpc_addr,
            token,
            ingest,
            stop,
            shutdown,
            follower: Some(follower),
            runtime: Some(runtime),
        })
    }

    /// The web app's address.
    pub fn addr(&self) -> SocketAddr {
        self.ui_addr
    }

    /// The OTLP receiver's address, if it runs.
    pub fn otlp_addr(&self) -> Option<SocketAddr> {
        self.otlp_addr
    }

    /// The access token, if one is required.
    pub fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    /// The web app's base URL (no token), e.g. `http://127.0.0.1:4320`. An unspecified listen address
    /// (0.0.0.0) is shown as 127.0.0.1.
    pub fn base_url(&self) -> String {
        format!("http://{}", shown(self.ui_addr))
    }

    /// The URL to open: the base URL, with `?token=` when a token is required.
    pub fn url(&self) -> String {
        match &self.token {
            Some(t) => format!("{}/?token={t}", self.base_url()),
            None => format!("{}/", self.base_url()),
        }
    }

    /// The page of one run (`trace_id` in hex).
    pub fn run_url(&self, trace_id: &str) -> String {
        format!("{}/runs/{trace_id}", self.base_url())
    }

    /// The OTLP/gRPC endpoint (`http://127.0.0.1:4317`), if that receiver runs (feature `grpc`).
    pub fn otlp_grpc_endpoint(&self) -> Option<String> {
        self.grpc_addr.map(|a| format!("http://{}", shown(a)))
    }

    /// The value for `OTEL_EXPORTER_OTLP_ENDPOINT`, if the receiver runs.
    pub fn otlp_endpoint(&self) -> Option<String> {
        self.otlp_addr.map(|a| format!("http://{}", shown(a)))
    }

    /// The store (to query it in process), once every OTLP request answered before this call is in it.
    pub fn store(&self) -> &Store {
        self.ingest.settled()
    }

    /// Wait until every OTLP request answered before this call is in the store (the receivers answer once a
    /// request is queued for the store's writer, which takes milliseconds).
    pub fn wait_stored(&self) {
        self.ingest.settled();
    }

    /// Serve until Ctrl-C (or SIGTERM), then stop.
    pub fn run_until_ctrl_c(mut self) {
        if let Some(rt) = &self.runtime {
            rt.block_on(async {
                #[cfg(unix)]
                {
                    use tokio::signal::unix::{signal, SignalKind};
                    match signal(SignalKind::terminate()) {
                        Ok(mut term) => {
                            tokio::select! {
                                _ = tokio::signal::ctrl_c() => {}
                                _ = term.recv() => {}
                            }
                        }
                        Err(_) => {
                            let _ = tokio::signal::ctrl_c().await;
                        }
                    }
                }
                #[cfg(not(unix))]
                let _ = tokio::signal::ctrl_c().await;
            });
        }
        self.stop_now();
    }

    /// Stop serving and following; the store is closed when the last user lets go.
    pub fn shutdown(mut self) {
        self.stop_now();
    }

    fn stop_now(&mut self) {
        if let Some(file) = self.url_file.take() {
            // Only if it is still ours: another UI may have started on the same directory since.
            let ours = format!("http://{}\n", shown(self.ui_addr));
            if std::fs::read_to_string(&file).is_ok_and(|text| text == ours) {
                let _ = std::fs::remove_file(file);
            }
        }
        self.stop.store(true, Ordering::Relaxed);
        self.shutdown.notify_waiters();
        if let Some(f) = self.follower.take() {
            let _ = f.join();
        }
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_timeout(Duration::from_secs(2));
        }
        // What the receivers answered is written before the store is saved.
        self.ingest.stop();
        if let Err(e) = self.ingest.settled().sync() {
            crate::console::current().message(format_args!("ui: saving the store: {e}"));
        }
    }
}

impl Drop for UiServer {
    fn drop(&mut self) {
        self.stop_now();
    }
}

fn shown(addr: SocketAddr) -> SocketAddr {
    if addr.ip().is_unspecified() {
        SocketAddr::from(([127, 0, 0, 1], addr.port()))
    } else {
        addr
    }
}
