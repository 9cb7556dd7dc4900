//! Result shapes shared by every sandbox backend, modelled on E2B Code Interpreter's
//! (`Execution`, `Result`, `Logs`, `ExecutionError`) so agents can switch backends without changes.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// One rich output of a cell: the last expression's value (`is_main_result`) or a displayed object
/// such as a matplotlib figure. Each field holds one MIME representation, as E2B's `Result` does.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ExecutionResult {
    /// `text/plain`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// `text/html`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub html: Option<String>,
    /// `text/markdown`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub markdown: Option<String>,
    /// `image/svg+xml`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub svg: Option<String>,
    /// `image/png`, base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub png: Option<String>,
    /// `image/jpeg`, base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jpeg: Option<String>,
    /// `application/pdf`, base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pdf: Option<String>,
    /// `text/latex`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latex: Option<String>,
    /// `application/json`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json: Option<serde_json::Value>,
    /// `application/javascript`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub javascript: Option<String>,
    /// `e2b/data` (a DataFrame's data).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<serde_json::Value>,
    /// `e2b/chart`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chart: Option<serde_json::Value>,
    /// Any other MIME type, by MIME type.
    #[serde(default)]
    pub extra: BTreeMap<String, serde_json::Value>,
    /// True for the value of the cell's last expression.
    #[serde(default)]
    pub is_main_result: bool,
}

impl ExecutionResult {
    /// The formats this result has, in E2B's names (`text`, `png`, ...), then the `extra` MIME types.
    pub fn formats(&self) -> Vec<String> {
        let named: [(&str, bool); 12] = [
            ("text", self.text.is_some()),
            ("html", self.html.is_some()),
            ("markdown", self.markdown.is_some()),
            ("svg", self.svg.is_some()),
            ("png", self.png.is_some()),
            ("jpeg", self.jpeg.is_some()),
            ("pdf", self.pdf.is_some()),
            ("latex", self.latex.is_some()),
            ("json", self.json.is_some()),
            ("javascript", self.javascript.is_some()),
            ("data", self.data.is_some()),
            ("chart", self.chart.is_some()),
        ];
        named
            .iter()
            .filter(|(_, set)| *set)
            .map(|(name, _)| (*name).to_owned())
            .chain(self.extra.keys().cloned())
            .collect()
    }
}

/// Everything a cell wrote to stdout and stderr, chunk by chunk as it arrived.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Logs {
    /// stdout chunks, in order.
    pub stdout: Vec<String>,
    /// stderr chunks, in order.
    pub stderr: Vec<String>,
}

/// An error raised by the code (or reported by the sandbox about the code: timeout, out of memory,
/// output truncated). `name` is the exception type, e.g. `ZeroDivisionError` or `TimeoutError`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExecutionError {
    /// The exception type, e.g. `ZeroDivisionError`.
    pub name: String,
    /// The exception message.
    pub value: String,
    /// The formatted traceback.
    pub traceback: String,
}

impl fmt::Display for ExecutionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.name, self.value)
    }
}

/// The outcome of one `run_code` call.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Execution {
    /// Rich results: displayed values and the cell's last expression (`is_main_result`).
    pub results: Vec<ExecutionResult>,
    /// Everything written to stdout and stderr.
    pub logs: Logs,
    /// The error the code raised, if any.
    pub error: Option<ExecutionError>,
    /// The context's execution counter after this cell, as Jupyter numbers cells.
    pub execution_count: Option<u64>,
}

impl Execution {
    /// Text of the main result (the cell's last expression), as E2B's `Execution.text`.
    pub fn text(&self) -> Option<&str> {
        self.results
            .iter()
            .find(|r| r.is_main_result)
            .and_then(|r| r.text.as_deref())
    }

    /// All stdout chunks joined.
    pub fn stdout(&self) -> String {
        self.logs.stdout.concat()
    }

    /// All stderr chunks joined.
    pub fn stderr(&self) -> String {
        self.logs.stderr.concat()
    }
}

/// A chunk of stdout or stderr, delivered to a streaming callback as soon as it is written.
#[derive(Debug, Clone, PartialEq)]
pub struct OutputMessage {
    /// The chunk as written (not necessarily a whole line).
    pub line: String,
    /// True for stderr.
    pub error: bool,
}

/// Streaming callback for output chunks.
pub type OutputCallback = Arc<dyn Fn(&OutputMessage) + Send + Sync>;
/// Streaming callback for rich results.
pub type ResultCallback = Arc<dyn Fn(&ExecutionResult) + Send + Sync>;

/// Options of one `run_code` call. `Default` runs Python in the default context with the
/// backend's default timeout.
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct RunOptions {
    /// Language of the default context to run in (`python` when neither this nor `context` is set).
    pub language: Option<String>,
    /// Run in this context instead of the default one.
    pub context_id: Option<String>,
    /// Extra environment variables for this execution only.
    pub env_vars: BTreeMap<String, String>,
    /// Execution timeout; on expiry the code is interrupted and the state survives.
    pub timeout: Option<Duration>,
    /// Called with each stdout chunk as it arrives.
    pub on_stdout: Option<OutputCallback>,
    /// Called with each stderr chunk as it arrives.
    pub on_stderr: Option<OutputCallback>,
    /// Called with each rich result (a chart, a displayed value) as it arrives.
    pub on_result: Option<ResultCallback>,
}

impl RunOptions {
    /// Python in the default context with the backend's default timeout.
    pub fn new() -> Self {
        Self::default()
    }
    /// Run in the default context of this language.
    pub fn with_language(mut self, language: impl Into<String>) -> Self {
        self.language = Some(language.into());
        self
    }
    /// Run in this context (from `create_context`).
    pub fn with_context(mut self, context_id: impl Into<String>) -> Self {
        self.context_id = Some(context_id.into());
        self
    }
    /// Interrupt the code after `timeout`; the context's state survives.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
    /// An environment variable for this execution only.
    pub fn with_env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env_vars.insert(key.into(), value.into());
        self
    }
    /// Stream stdout chunks to `f` as they are written.
    pub fn on_stdout(mut self, f: impl Fn(&OutputMessage) + Send + Sync + 'static) -> Self {
        self.on_stdout = Some(Arc::new(f));
        self
    }
    /// Stream stderr chunks to `f` as they are written.
    pub fn on_stderr(mut self, f: impl Fn(&OutputMessage) + Send + Sync + 'static) -> Self {
        self.on_stderr = Some(Arc::new(f));
        self
    }
    /// Stream rich results to `f` as they are displayed.
    pub fn on_result(mut self, f: impl Fn(&ExecutionResult) + Send + Sync + 'static) -> Self {
        self.on_result = Some(Arc::new(f));
        self
    }
}

impl fmt::Debug for RunOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunOptions")
            .field("language", &self.language)
            .field("context_id", &self.context_id)
            .field("env_vars", &self.env_vars.keys().collect::<Vec<_>>())
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// An execution context: an independent interpreter state inside one sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CodeContext {
    /// The context's id, for [`RunOptions::with_context`].
    pub id: String,
    /// The context's language (`python`).
    pub language: String,
    /// The context's working directory inside the sandbox.
    pub cwd: String,
}

/// One entry of a directory listing inside the sandbox.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntryInfo {
    /// The entry's file name.
    pub name: String,
    /// Path inside the sandbox.
    pub path: String,
    /// Whether the entry is a directory.
    pub is_dir: bool,
    /// Size in bytes (for a directory, what its file system reports, as envd does).
    pub size: u64,
    /// Permission bits (`0o644`); `None` when the backend does not report them.
    #[serde(default)]
    pub mode: Option<u32>,
    /// Last modification time; `None` when the backend does not report it.
    #[serde(default)]
    pub modified: Option<std::time::SystemTime>,
    /// Where the entry points when it is a symbolic link (never followed by the host).
    #[serde(default)]
    pub symlink_target: Option<String>,
    /// User metadata stored with the file ([`SandboxSession::write_file_with_metadata`](super::SandboxSession::write_file_with_metadata);
    /// E2B keeps it as `user.e2b.*` extended attributes).
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
}

/// What happened to an entry under a watched directory (E2B's `FilesystemEventType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum FsEventKind {
    /// Created, or moved in.
    Create,
    /// Its content changed.
    Write,
    /// Deleted.
    Remove,
    /// Renamed or moved away.
    Rename,
    /// Permissions, owner or extended attributes changed.
    Chmod,
}

/// One event of a directory watch ([`SandboxSession::watch_dir`](super::SandboxSession::watch_dir)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsEvent {
    /// The entry's path relative to the watched directory (`sub/file.txt` in a recursive watch).
    pub name: String,
    /// What happened.
    pub kind: FsEventKind,
    /// The entry as it is now, when [`WatchOptions::include_entry`] was asked and it still exists.
    pub entry: Option<EntryInfo>,
}

/// How to watch a directory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WatchOptions {
    /// Watch subdirectories too (also those created after the watch started).
    pub recursive: bool,
    /// Attach the entry's [`EntryInfo`] to each event where it still exists.
    pub include_entry: bool,
}

impl WatchOptions {
    /// Watch subdirectories too.
    pub fn recursive(mut self, recursive: bool) -> Self {
        self.recursive = recursive;
        self
    }

    /// Attach each event's [`EntryInfo`].
    pub fn include_entry(mut self, include_entry: bool) -> Self {
        self.include_entry = include_entry;
        self
    }
}

/// A sandbox's resource use at one moment ([`crate::sandbox::SandboxSession::metrics`]), as E2B
/// reports it: CPUs and their use, memory and disk used against the sandbox's caps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SandboxMetrics {
    /// When it was measured.
    pub timestamp: std::time::SystemTime,
    /// CPUs the sandbox may use (its CPU cap, rounded up).
    pub cpu_count: u32,
    /// CPU used since the previous measurement (since the start for the first), in percent of
    /// `cpu_count` CPUs.
    pub cpu_used_pct: f64,
    /// Memory its processes hold, in bytes.
    pub mem_used: u64,
    /// Its memory cap, in bytes.
    pub mem_total: u64,
    /// Bytes its writable file systems hold.
    pub disk_used: u64,
    /// Their size cap, in bytes.
    pub disk_total: u64,
}

impl SandboxMetrics {
    /// A measurement taken now.
    pub fn new(
        cpu_count: u32,
        cpu_used_pct: f64,
        mem_used: u64,
        mem_total: u64,
        disk_used: u64,
        disk_total: u64,
    ) -> Self {
        Self {
            timestamp: std::time::SystemTime::now(),
            cpu_count,
            cpu_used_pct,
            mem_used,
            mem_total,
            disk_used,
            disk_total,
        }
    }
}

/// A snapshot of a sandbox's files ([`crate::sandbox::SandboxSession::snapshot`]): new sandboxes
/// start from it by naming its id (or one of its names) as their template, as on E2B.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SandboxSnapshot {
    /// The snapshot's id.
    pub id: String,
    /// Its names (the one it was taken with, if any).
    pub names: Vec<String>,
}

impl SandboxSnapshot {
    /// A snapshot with this id and these names.
    pub fn new(id: impl Into<String>, names: Vec<String>) -> Self {
        Self { id: id.into(), names }
    }
}

/// Options for creating a sandbox. Backends ignore what does not apply to them.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct SandboxOptions {
    /// Template (E2B) or environment name.
    pub template: Option<String>,
    /// Lifetime of the sandbox before it is killed.
    pub timeout: Option<Duration>,
    /// Environment variables visible to the code. Nothing of the host's environment is passed otherwise.
    pub env_vars: BTreeMap<String, String>,
    /// Free-form metadata (E2B keeps it with the sandbox).
    pub metadata: BTreeMap<String, String>,
}

impl SandboxOptions {
    /// The backend's defaults.
    pub fn new() -> Self {
        Self::default()
    }
    /// The template (E2B) or environment to start from.
    pub fn with_template(mut self, template: impl Into<String>) -> Self {
        self.template = Some(template.into());
        self
    }
    /// Kill the sandbox after this lifetime.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
    /// An environment variable visible to all code in the sandbox.
    pub fn with_env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env_vars.insert(key.into(), value.into());
        self
    }
    /// Free-form metadata kept with the sandbox.
    pub fn with_metadata(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.metadata.insert(key.into(), value.into());
        self
    }
}

/// Why a sandbox operation failed. Errors of the *code* are not here: they come back in
/// [`Execution::error`].
///
/// Match on the variant to tell what went wrong: a missing sandbox, context or file
/// ([`NotFound`](Self::NotFound), [`ContextNotFound`](Self::ContextNotFound),
/// [`FileNotFound`](Self::FileNotFound)), a limit hit ([`LimitExceeded`](Self::LimitExceeded)),
/// an operation this backend does not have ([`Unsupported`](Self::Unsupported)), a host that lacks
/// what the backend needs ([`Unavailable`](Self::Unavailable)), an isolation check that failed
/// ([`IsolationCheck`](Self::IsolationCheck)) or local I/O ([`Io`](Self::Io)). The strings only
/// explain; no caller needs to parse them.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxError {
    /// The host lacks something the backend needs (a tool, a permission, a kernel feature, an
    /// image); the message names the missing piece and how to get it.
    #[error("sandbox unavailable: {0}")]
    Unavailable(String),
    /// The sandbox does not exist (killed, expired, or never created).
    #[error("sandbox not found: {0}")]
    NotFound(String),
    /// The execution context does not exist.
    #[error("context not found: {0}")]
    ContextNotFound(String),
    /// No file or directory at this path inside the sandbox.
    #[error("invalid path {path:?}: no such file or directory")]
    FileNotFound {
        /// The path as given.
        path: String,
    },
    /// A request or execution took longer than allowed.
    #[error("timed out: {0}")]
    Timeout(String),
    /// The service refused the credentials.
    #[error("authentication failed: {0}")]
    Authentication(String),
    /// The service asked us to slow down and retries ran out.
    #[error("rate limited: {0}")]
    RateLimited(String),
    /// One of the sandbox's limits was hit; `limit` says which.
    #[error("{limit} limit exceeded: {message}")]
    LimitExceeded {
        /// Which limit.
        limit: LimitKind,
        /// What exceeded it, and the limit's value.
        message: String,
    },
    /// This backend does not offer the operation (e.g. processes or snapshots on a backend that
    /// has not implemented them yet).
    #[error("{operation} is not supported by the {backend} backend")]
    Unsupported {
        /// The backend's name (`local`, `docker`, ...).
        backend: &'static str,
        /// The operation, e.g. `start_process`.
        operation: &'static str,
    },
    /// A check that the sandbox is isolated as configured failed (e.g. the code would run as uid 0,
    /// or from another interpreter); the sandbox was not used.
    #[error("sandbox isolation check failed: {0}")]
    IsolationCheck(String),
    /// A path was rejected (outside the sandbox, a symlink, not a regular file).
    #[error("invalid path {path:?}: {reason}")]
    InvalidPath {
        /// The path as given.
        path: String,
        /// Why it was rejected.
        reason: String,
    },
    /// Bad arguments (both a language and a context, an unknown language, ...).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The peer answered something we could not understand; `received` says what.
    #[error("protocol error: {message} (received: {received})")]
    Protocol {
        /// What was wrong.
        message: String,
        /// What arrived (truncated).
        received: String,
    },
    /// Transport failure (connection refused, reset, an error answer of a container engine, ...).
    #[error("transport error: {0}")]
    Transport(String),
    /// Local I/O failure.
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
    /// Anything else, with the backend's message.
    #[error("{0}")]
    Other(String),
}

/// Which limit a [`SandboxError::LimitExceeded`] hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LimitKind {
    /// The size of one file read from or written to the sandbox.
    FileSize,
    /// How many processes the sandbox may run.
    Processes,
    /// The sandbox's memory.
    Memory,
    /// How many sandboxes may exist at once (e.g. the local backend's uid range).
    Sandboxes,
    /// How many directory watches a sandbox (or the host) may hold at once.
    Watches,
}

impl LimitKind {
    /// Short name, as recorded in spans and shown in messages.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::FileSize => "file size",
            Self::Processes => "process",
            Self::Memory => "memory",
            Self::Sandboxes => "sandbox count",
            Self::Watches => "directory watch count",
        }
    }
}

impl fmt::Display for LimitKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl SandboxError {
    /// Short name recorded as `error.type` on spans.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Unavailable(_) => "unavailable",
            Self::NotFound(_) => "not_found",
            Self::ContextNotFound(_) => "context_not_found",
            Self::FileNotFound { .. } => "file_not_found",
            Self::LimitExceeded { .. } => "limit_exceeded",
            Self::Unsupported { .. } => "unsupported",
            Self::IsolationCheck(_) => "isolation_check",
            Self::Timeout(_) => "timeout",
            Self::Authentication(_) => "authentication",
            Self::RateLimited(_) => "rate_limited",
            Self::InvalidPath { .. } => "invalid_path",
            Self::InvalidArgument(_) => "invalid_argument",
            Self::Protocol { .. } => "protocol",
            Self::Transport(_) => "transport",
            Self::Io(_) => "io",
            Self::Other(_) => "other",
        }
    }
}
