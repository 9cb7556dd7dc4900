//! The one trait a backend implements. The core (session and contexts, kernel protocol, warm
//! pool, lifetime, limits, file-operation checks) is written once over it; a backend only says how
//! a sandbox and its kernels start, are limited, are checkpointed and are removed.
//!
//! A backend is a folder (`local/`, `container/`) holding a value that implements [`Backend`]
//! (what it shares across its sandboxes: a launcher, an engine client, its configuration) and its
//! [`Backend::Shell`] (what one sandbox holds: cgroups, mounts and a uid; a container). Its
//! public types are then aliases of the core's: `pub type FooBackend = Pooled<Foo>` (creates
//! sandboxes, keeps the warm pool, implements `SandboxBackend`) and `pub type FooSandbox =
//! Session<Foo>` (one live sandbox, implements `SandboxSession`). docs/sandbox.md, "Adding a
//! backend", walks through it.

use std::collections::BTreeMap;
use std::path::Path;

use async_trait::async_trait;
use waxell::sandbox::{DirWatch, EntryInfo, ProcessSpec, SandboxError, SandboxProcess, WatchOptions};

use crate::command::PtyPermit;
use crate::config::{BackendOptions, SandboxConfig};
use crate::kernel::{KernelProcess, Languages};

/// A sandbox a backend made, with its default kernel ready: what the warm pool holds. Field
/// order = drop order: the kernel goes before the sandbox's resources.
pub struct Prepared<S> {
    pub(crate) kernel: KernelProcess,
    pub(crate) shell: S,
}

/// How one kind of sandbox starts, is limited, is checkpointed and is removed.
///
/// Every method that touches a sandbox gets its [`Backend::Shell`]; the core has already checked
/// that the sandbox is alive and the arguments are valid (language, context, cwd). The process,
/// PTY and checkpoint methods have defaults that answer [`SandboxError::Unsupported`]: a backend
/// overrides them once it has them.
#[async_trait]
pub trait Backend: Send + Sync + Sized + 'static {
    /// The backend's own configuration options (see [`SandboxConfig`]).
    type Options: BackendOptions + Send + Sync;
    /// What one sandbox holds. Dropping it must release everything (kill its processes, remove
    /// its files), so a dropped or crashed-out sandbox leaks nothing.
    type Shell: Send + Sync + 'static;

    /// [`waxell::sandbox::SandboxBackend::name`], and the backend's name in errors: `local`,
    /// `docker`, ...
    const NAME: &'static str;

    /// Limits, pool size, timeouts and lifetime (and the backend's own options).
    fn config(&self) -> &SandboxConfig<Self::Options>;

    /// The languages its sandboxes run. The default: Python alone.
    fn languages(&self) -> &Languages {
        static PYTHON_ONLY: std::sync::OnceLock<Languages> = std::sync::OnceLock::new();
        PYTHON_ONLY.get_or_init(Languages::python_only)
    }

    /// Make a sandbox and start its default kernel (the cold path; the warm pool calls it ahead).
    async fn prepare(&self) -> Result<Prepared<Self::Shell>, SandboxError>;

    /// Start another kernel in the sandbox (a new context, or one replacing a dead kernel). The
    /// core then sets its environment and working directory.
    async fn start_kernel(&self, shell: &Self::Shell) -> Result<KernelProcess, SandboxError>;

    /// After a kernel failed to start with `error`: whether the whole sandbox died (then the core
    /// shuts it down and answers `NotFound`). The default: a failed start says nothing about it.
    async fn has_died(&self, _shell: &Self::Shell, _error: &SandboxError) -> bool {
        false
    }

    /// The sandbox's id.
    fn sandbox_id(shell: &Self::Shell) -> &str;

    /// What isolates the code, for spans (`bubblewrap`, `runc`, `runsc`, ...).
    fn runtime<'a>(&'a self, shell: &'a Self::Shell) -> &'a str;

    /// OOM kills counted so far among the sandbox's processes. 0 (the default) when the backend
    /// learns of them from a kernel's exit instead (`ExitInfo::oom_killed`).
    fn oom_kills(_shell: &Self::Shell) -> u64 {
        0
    }

    /// Kill every process of the sandbox now (its kernels then see end-of-file). Called first when
    /// the sandbox is killed or expires.
    async fn kill_all(&self, shell: &Self::Shell);

    /// Remove what the sandbox holds (called after [`Backend::kill_all`] and after its kernels
    /// were reaped; dropping the shell repeats it harmlessly). The default: nothing more to do.
    async fn remove(&self, _shell: &Self::Shell) {}

    /// Write a file (creating parent directories), at most `limits.max_file_bytes`.
    async fn write_file(&self, shell: &Self::Shell, path: &str, data: &[u8]) -> Result<EntryInfo, SandboxError>;
    /// Read a regular file, at most `limits.max_file_bytes`.
    async fn read_file(&self, shell: &Self::Shell, path: &str) -> Result<Vec<u8>, SandboxError>;
    /// List a directory.
    async fn list_files(&self, shell: &Self::Shell, path: &str) -> Result<Vec<EntryInfo>, SandboxError>;
    /// Make a directory and its parents; `false` when it existed.
    async fn make_dir(&self, shell: &Self::Shell, path: &str) -> Result<bool, SandboxError>;
    /// Rename a file or directory.
    async fn rename(&self, shell: &Self::Shell, from: &str, to: &str) -> Result<EntryInfo, SandboxError>;
    /// Remove a file or a directory tree.
    async fn remove_path(&self, shell: &Self::Shell, path: &str) -> Result<(), SandboxError>;

    /// Replace a file's user metadata (already checked by `metadata::check`). Not
    /// supported by this backend unless it overrides this.
    async fn set_metadata(
        &self,
        _shell: &Self::Shell,
        _path: &str,
        _metadata: &BTreeMap<String, String>,
    ) -> Result<EntryInfo, SandboxError> {
        Err(unsupported::<Self>("file metadata"))
    }

    /// Watch a directory. Not supported by this backend unless it overrides this.
    async fn watch_dir(
        &self,
        _shell: &Self::Shell,
        _path: &str,
        _options: WatchOptions,
    ) -> Result<Box<dyn DirWatch>, SandboxError> {
        Err(unsupported::<Self>("watch_dir"))
    }

    /// Start a process in the sandbox under the same isolation and limits as a kernel. The core
    /// has checked `spec` (cwd, no NUL bytes) and merged the sandbox's environment into it; when
    /// `spec.pty` is set it took one of the sandbox's terminals (`pty`, held as long as the
    /// process runs; `crate::command` opens a host terminal from it). Not supported by this
    /// backend unless it overrides this.
    async fn start_process(
        &self,
        _shell: &Self::Shell,
        _spec: &ProcessSpec,
        _pty: Option<PtyPermit>,
    ) -> Result<SandboxProcess, SandboxError> {
        Err(unsupported::<Self>("start_process"))
    }

    /// What the sandbox uses now (its processes' CPU time and memory, its files' bytes), for
    /// [`waxell::sandbox::SandboxSession::metrics`]. Not supported by this backend unless it
    /// overrides this.
    async fn usage(&self, _shell: &Self::Shell) -> Result<Usage, SandboxError> {
        Err(unsupported::<Self>("metrics"))
    }

    /// Whether [`Backend::checkpoint`] works here (it may depend on the engine and runtime).
    fn keeps_memory(&self) -> bool {
        false
    }

    /// Save the sandbox's whole state (memory, processes, files) into `dir` and stop it, so
    /// [`Backend::restore`] can bring it back; the kernels were idle and are let go of, not killed.
    /// What the backend needs besides `dir` to restore it comes back (kept in the checkpoint). Not
    /// supported by this backend unless it overrides this.
    async fn checkpoint(&self, _shell: &Self::Shell, _dir: &Path) -> Result<BTreeMap<String, String>, SandboxError> {
        Err(unsupported::<Self>("checkpoint"))
    }

    /// Attach to `saved`, a process of a sandbox restored from a checkpoint: its output from now
    /// on, its exit, and control of it (`pty`: the terminal permit, when it has one). Not supported
    /// by this backend unless it overrides this.
    async fn attach_process(
        &self,
        _shell: &Self::Shell,
        _saved: &SavedProcess,
        _pty: Option<PtyPermit>,
    ) -> Result<SandboxProcess, SandboxError> {
        Err(unsupported::<Self>("attach_process"))
    }

    /// A sandbox from `checkpoint` (saved in `dir`), its kernels reconnected (one per entry of
    /// `checkpoint.kernels`, `None` for one that had none). Not supported by this backend unless it
    /// overrides this.
    async fn restore(&self, _checkpoint: &Checkpoint, _dir: &Path) -> Result<Restored<Self::Shell>, SandboxError> {
        Err(unsupported::<Self>("restore"))
    }
}

/// A sandbox restored from a checkpoint ([`Backend::restore`]). Field order = drop order.
#[cfg_attr(not(all(feature = "server", feature = "container")), allow(dead_code, reason = "the server's memory pause, with the container backend"))]
pub struct Restored<S> {
    pub(crate) kernels: Vec<Option<KernelProcess>>,
    pub(crate) shell: S,
}

/// The error of an operation backend `B` does not have.
pub(crate) fn unsupported<B: Backend>(operation: &'static str) -> SandboxError {
    SandboxError::Unsupported {
        backend: B::NAME,
        operation,
    }
}

/// A sandbox's use of its resources at one moment ([`Backend::usage`]); the core turns it into
/// E2B's metrics against the sandbox's limits.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Usage {
    /// CPU time its processes used so far, in seconds (user + system). May drop when a process
    /// exits on backends that sum live processes; the core then reports 0 % for that interval.
    pub(crate) cpu_seconds: f64,
    /// Memory its processes hold, in bytes.
    pub(crate) memory_bytes: u64,
    /// Bytes its writable file systems hold.
    pub(crate) disk_bytes: u64,
}

/// A saved sandbox state ([`Backend::checkpoint`]), restorable by the backend that made it from
/// the directory it was saved in. Kept as JSON beside it (a paused sandbox's record).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Checkpoint {
    /// The backend that made it.
    pub(crate) backend: String,
    /// Its contexts, in listing order, and their kernels.
    pub(crate) kernels: Vec<SavedContext>,
    /// What the backend needs besides the directory.
    pub(crate) state: BTreeMap<String, String>,
    /// The processes that live on in it (commands and terminals), in the order they started.
    #[serde(default)]
    pub(crate) processes: Vec<SavedProcess>,
}

/// A process that lives on in a checkpoint ([`waxell::sandbox::ProcessControl::durable_pid`]),
/// attached to again after a restore ([`Backend::attach_process`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SavedProcess {
    /// Its pid inside the sandbox.
    pub(crate) sandbox_pid: u32,
    /// Its terminal's size when it has one (rows, columns).
    pub(crate) terminal: Option<(u16, u16)>,
    /// Whether its input was open to the caller.
    pub(crate) stdin: bool,
    /// What the caller that started it knows of it (the server: E2B's pid, tag and config).
    pub(crate) owner: serde_json::Value,
}

/// One context of a checkpointed sandbox.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct SavedContext {
    pub(crate) id: String,
    pub(crate) language: String,
    pub(crate) cwd: String,
    /// Its kernel's pid inside the sandbox and request fd; `None`: it had none running (one starts
    /// on its next run).
    pub(crate) kernel: Option<(u32, i32)>,
}
