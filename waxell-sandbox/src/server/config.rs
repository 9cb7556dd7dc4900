//! The server's limits and security settings ([`ServerConfig`]) and the protocol constants its
//! planes share.

use std::time::Duration;

/// `envdVersion` this server reports: current envd, so SDKs use octet-stream uploads and no `username`.
pub(crate) const ENVD_VERSION: &str = "0.6.13";

/// Limits and security settings of the server. Closed by default: [`ServerConfig::new`] makes up a
/// random API key (read it with [`ServerConfig::api_key`]), accepts only loopback `Host` names and
/// refuses browser origins; [`ServerConfig::without_auth`] opens the control plane for tests.
#[derive(Clone)]
#[non_exhaustive]
pub struct ServerConfig {
    /// Required value of `X-API-KEY` on the control plane. `None` (only through
    /// [`ServerConfig::without_auth`]) accepts any key or none. Either way every sandbox gets an
    /// envd access token and a traffic token that its data-plane requests must carry.
    pub api_key: Option<String>,
    /// `Host` values accepted (DNS-rebinding defence). An entry with a port (`localhost:3000`,
    /// `[::1]:3000`) matches exactly; one without (`localhost`) matches that name on any port.
    /// Compared case-insensitively.
    pub allowed_hosts: Vec<String>,
    /// Browser origins allowed to call the server (`http://localhost:8888`). Requests with any
    /// other `Origin`, or with `Sec-Fetch-Site: cross-site`/`same-site`, get 403. Empty by default.
    pub allowed_origins: Vec<String>,
    /// Live sandboxes at most; creating one more answers 429.
    pub max_sandboxes: usize,
    /// Largest upload body accepted (envd `/files`); larger ones answer 413.
    pub max_body_bytes: usize,
    /// Largest JSON request body accepted (create, `/execute`, RPCs); larger ones answer 413.
    /// Never more than `max_body_bytes`.
    pub max_json_bytes: usize,
    /// Open connections at most; one more is answered 503 and closed.
    pub max_connections: usize,
    /// Longest a client may take to send a request's headers, and longest an idle keep-alive
    /// connection is kept.
    pub header_timeout: Duration,
    /// Longest a client may take to send a whole request body.
    pub body_timeout: Duration,
    /// Longest a write to a client may stay blocked (a client that stopped reading); then the
    /// connection is dropped.
    pub write_timeout: Duration,
    /// Output an `/execute` stream may hold for a client that reads slower than the code prints;
    /// past it the stream is cut (and the code interrupted).
    pub max_stream_buffer_bytes: usize,
    /// Entries a `ListDir` may return (all levels together) and entries a `Stat` may look through.
    pub max_list_entries: usize,
    /// Sandbox lifetime when create does not say (E2B: 300 s).
    pub default_timeout: Duration,
    /// Longest lifetime create or set-timeout may ask for (E2B Pro: 24 h).
    pub max_timeout: Duration,
    /// Silence after which `/execute` writes a `keepalive` line. A failing write is how the server
    /// notices a client that went away, and then interrupts its code (E2B: 5 s).
    pub keepalive_interval: Duration,
    /// Serve the E2B SDKs' debug mode: requests for sandbox `debug_sandbox_id` create it on first use.
    /// The SDKs send no key and no token in debug mode, so this works only without auth.
    pub debug_sandbox: bool,
    /// How often expired sandboxes are looked for.
    pub reap_interval: Duration,
    /// Where paused sandboxes and snapshots are kept (their files and a JSON record each). Set,
    /// they survive a restart of the server; `None` (the default): a private temporary directory
    /// removed with the server, so nothing paused outlives it.
    pub state_dir: Option<std::path::PathBuf>,
    /// Bytes of `/home/user` one pause, snapshot or fork may save; past it the operation fails
    /// (507) and the sandbox keeps running.
    pub max_saved_bytes: u64,
    /// Paused sandboxes kept at most (each holds up to `max_saved_bytes` on disk).
    pub max_paused: usize,
    /// Snapshots kept at most (each holds up to `max_saved_bytes` on disk).
    pub max_snapshots: usize,
    /// What a pause asking for memory (E2B's default) gets from a backend that keeps files only:
    /// `false` (the default) pauses the files and says so in the `Waxell-Pause` and `Warning`
    /// headers and the log; `true` refuses it with 501.
    pub refuse_memory_pause: bool,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            api_key: Some(generate_api_key()),
            allowed_hosts: ["localhost", "127.0.0.1", "[::1]"].map(String::from).to_vec(),
            allowed_origins: Vec::new(),
            max_sandboxes: 16,
            max_body_bytes: 64 * 1024 * 1024,
            max_json_bytes: 4 * 1024 * 1024,
            max_connections: 256,
            header_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(60),
            write_timeout: Duration::from_secs(30),
            max_stream_buffer_bytes: 8 * 1024 * 1024,
            max_list_entries: 10_000,
            default_timeout: Duration::from_secs(300),
            max_timeout: Duration::from_secs(24 * 3600),
            keepalive_interval: Duration::from_secs(5),
            debug_sandbox: false,
            reap_interval: Duration::from_millis(500),
            state_dir: None,
            max_saved_bytes: 256 * 1024 * 1024,
            max_paused: 64,
            max_snapshots: 64,
            refuse_memory_pause: false,
        }
    }
}

impl std::fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerConfig")
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("allowed_hosts", &self.allowed_hosts)
            .field("allowed_origins", &self.allowed_origins)
            .field("max_sandboxes", &self.max_sandboxes)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("max_json_bytes", &self.max_json_bytes)
            .field("max_connections", &self.max_connections)
            .field("header_timeout", &self.header_timeout)
            .field("body_timeout", &self.body_timeout)
            .field("write_timeout", &self.write_timeout)
            .field("max_stream_buffer_bytes", &self.max_stream_buffer_bytes)
            .field("max_list_entries", &self.max_list_entries)
            .field("default_timeout", &self.default_timeout)
            .field("max_timeout", &self.max_timeout)
            .field("keepalive_interval", &self.keepalive_interval)
            .field("debug_sandbox", &self.debug_sandbox)
            .field("state_dir", &self.state_dir)
            .field("max_saved_bytes", &self.max_saved_bytes)
            .field("max_paused", &self.max_paused)
            .field("max_snapshots", &self.max_snapshots)
            .field("refuse_memory_pause", &self.refuse_memory_pause)
            .finish_non_exhaustive()
    }
}

/// A new random API key in the shape E2B's JS SDK insists on (`e2b_` and hex).
pub(crate) fn generate_api_key() -> String {
    use rand::Rng;
    let bytes: [u8; 20] = rand::rng().random();
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("e2b_{hex}")
}

impl ServerConfig {
    /// Default limits and a random API key (see [`ServerConfig::api_key`]).
    pub fn new() -> Self {
        Self::default()
    }
    /// The `X-API-KEY` clients must send, if auth is on.
    pub fn api_key(&self) -> Option<&str> {
        self.api_key.as_deref()
    }
    /// Require this `X-API-KEY`.
    pub fn with_api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
        self
    }
    /// Accept any `X-API-KEY` or none (tests, and the SDKs' debug mode). Sandboxes still get
    /// data-plane tokens, and the `Host` and origin checks stay.
    pub fn without_auth(mut self) -> Self {
        self.api_key = None;
        self
    }
    /// Accept these `Host` values (replacing the default loopback names); see
    /// [`ServerConfig::allowed_hosts`].
    pub fn with_allowed_hosts<I: IntoIterator<Item = S>, S: Into<String>>(mut self, hosts: I) -> Self {
        self.allowed_hosts = hosts.into_iter().map(Into::into).collect();
        self
    }
    /// Also accept this `Host` value.
    pub fn allow_host(mut self, host: impl Into<String>) -> Self {
        self.allowed_hosts.push(host.into());
        self
    }
    /// Let a page of this browser origin call the server.
    pub fn allow_origin(mut self, origin: impl Into<String>) -> Self {
        self.allowed_origins.push(origin.into());
        self
    }
    /// Allow at most this many live sandboxes.
    pub fn with_max_sandboxes(mut self, n: usize) -> Self {
        self.max_sandboxes = n;
        self
    }
    /// Refuse uploads larger than this (413); JSON bodies are capped at the smaller of this and
    /// `max_json_bytes`.
    pub fn with_max_body_bytes(mut self, n: usize) -> Self {
        self.max_body_bytes = n;
        self
    }
    /// Refuse JSON request bodies larger than this (413).
    pub fn with_max_json_bytes(mut self, n: usize) -> Self {
        self.max_json_bytes = n;
        self
    }
    /// Keep at most this many connections open.
    pub fn with_max_connections(mut self, n: usize) -> Self {
        self.max_connections = n;
        self
    }
    /// Time a client has to send a request's headers (and an idle connection is kept).
    pub fn with_header_timeout(mut self, timeout: Duration) -> Self {
        self.header_timeout = timeout;
        self
    }
    /// Time a client has to send a request body.
    pub fn with_body_timeout(mut self, timeout: Duration) -> Self {
        self.body_timeout = timeout;
        self
    }
    /// Time a write to a client may stay blocked before the connection is dropped.
    pub fn with_write_timeout(mut self, timeout: Duration) -> Self {
        self.write_timeout = timeout;
        self
    }
    /// Output an `/execute` stream may hold for a slow reader.
    pub fn with_max_stream_buffer_bytes(mut self, n: usize) -> Self {
        self.max_stream_buffer_bytes = n;
        self
    }
    /// Entries a listing may return, and a `Stat` may look through.
    pub fn with_max_list_entries(mut self, n: usize) -> Self {
        self.max_list_entries = n;
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
    /// Serve E2B's debug-mode sandbox `debug_sandbox_id` (only without auth).
    pub fn with_debug_sandbox(mut self, enabled: bool) -> Self {
        self.debug_sandbox = enabled;
        self
    }

    /// Keep paused sandboxes and snapshots in this directory, so they survive a restart.
    pub fn with_state_dir(mut self, dir: impl Into<std::path::PathBuf>) -> Self {
        self.state_dir = Some(dir.into());
        self
    }
    /// Save at most this many bytes of `/home/user` per pause, snapshot or fork.
    pub fn with_max_saved_bytes(mut self, n: u64) -> Self {
        self.max_saved_bytes = n;
        self
    }
    /// Keep at most this many paused sandboxes.
    pub fn with_max_paused(mut self, n: usize) -> Self {
        self.max_paused = n;
        self
    }
    /// Keep at most this many snapshots.
    pub fn with_max_snapshots(mut self, n: usize) -> Self {
        self.max_snapshots = n;
        self
    }
    /// Refuse (501) pauses that ask for memory the backend cannot keep, instead of pausing files.
    pub fn with_refuse_memory_pause(mut self, refuse: bool) -> Self {
        self.refuse_memory_pause = refuse;
        self
    }

    /// The cap on JSON bodies actually applied.
    pub(crate) fn json_limit(&self) -> usize {
        self.max_json_bytes.min(self.max_body_bytes)
    }
}

/// Shortest lifetime create or set-timeout accepts.
pub(crate) const MIN_TIMEOUT: Duration = Duration::from_secs(1);
