//! One sandbox interface for every backend (the local `waxell-sandbox`, E2B's cloud, a `waxell-sandbox
//! serve` over E2B's protocol), auto-instrumented at this boundary.
//!
//! Backends implement [`SandboxBackend`] and [`SandboxSession`]; users hold a [`Sandbox`], whose methods
//! emit spans (`execute_tool {backend}.run_code`, ...) that nest under the caller's `#[tool]` span.

mod instrumented;
mod process;
mod types;

pub use instrumented::Sandbox;
pub use process::{
    CommandOutput, ProcessControl, ProcessEvent, ProcessExit, ProcessOutput, ProcessSignal, ProcessSpec,
    PtySize, SandboxProcess,
};
pub use types::{
    CodeContext, EntryInfo, Execution, ExecutionError, ExecutionResult, FsEvent, FsEventKind, LimitKind,
    Logs, OutputCallback, OutputMessage, ResultCallback, RunOptions, SandboxError, SandboxMetrics,
    SandboxOptions, SandboxSnapshot, WatchOptions,
};

use async_trait::async_trait;

/// Creates sandboxes of one kind.
#[async_trait]
pub trait SandboxBackend: Send + Sync {
    /// Short backend name recorded on spans: `local`, `e2b`.
    fn name(&self) -> &'static str;

    /// Create a new sandbox.
    async fn create(&self, options: &SandboxOptions) -> Result<Box<dyn SandboxSession>, SandboxError>;

    /// The backend as its own type, for a server that uses what only that backend offers (keeping
    /// a sandbox's memory across a pause). The default: not offered.
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        None
    }
}

/// A running directory watch ([`SandboxSession::watch_dir`]). Events that happened before a call
/// are never missed: [`DirWatch::take_events`] returns everything that happened up to the call.
#[async_trait]
pub trait DirWatch: Send {
    /// The events since the last call, without waiting for new ones (E2B's polled
    /// `GetWatcherEvents`).
    async fn take_events(&mut self) -> Result<Vec<FsEvent>, SandboxError>;
    /// Wait until at least one event is queued, then return all queued (E2B's streamed `WatchDir`).
    async fn next_events(&mut self) -> Result<Vec<FsEvent>, SandboxError>;
}

/// One live sandbox of some backend. Use it through [`Sandbox`], which instruments every call.
#[async_trait]
pub trait SandboxSession: Send + Sync {
    /// The sandbox's id.
    fn sandbox_id(&self) -> &str;

    /// The sandbox as its backend's own type (see [`SandboxBackend::as_any`]). The default: not
    /// offered.
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        None
    }

    /// What isolates the code, recorded on spans as `waxell.sandbox.runtime` (`bubblewrap`, `runc`,
    /// `runsc`, ...); `None` when the backend does not know (a remote service).
    fn runtime(&self) -> Option<&str> {
        None
    }

    /// Whether this sandbox runs `language` (E2B's names), so a server can refuse a run before its
    /// output starts streaming. The default accepts every language and lets the run say.
    fn check_language(&self, _language: &str) -> Result<(), SandboxError> {
        Ok(())
    }

    /// Run code; errors raised by the code come back in [`Execution::error`], not as `Err`.
    async fn run_code(&self, code: &str, options: &RunOptions) -> Result<Execution, SandboxError>;

    /// Create a new, independent execution context.
    async fn create_context(
        &self,
        language: Option<&str>,
        cwd: Option<&str>,
    ) -> Result<CodeContext, SandboxError>;
    /// The contexts this sandbox has.
    async fn list_contexts(&self) -> Result<Vec<CodeContext>, SandboxError>;
    /// Restart a context: its state is lost, its id kept.
    async fn restart_context(&self, context_id: &str) -> Result<(), SandboxError>;
    /// Remove a context and its state.
    async fn remove_context(&self, context_id: &str) -> Result<(), SandboxError>;

    /// Write a file; relative paths are inside the sandbox's working directory.
    async fn write_file(&self, path: &str, data: &[u8]) -> Result<EntryInfo, SandboxError>;
    /// Read a whole file.
    async fn read_file(&self, path: &str) -> Result<Vec<u8>, SandboxError>;
    /// List a directory (not recursive).
    async fn list_files(&self, path: &str) -> Result<Vec<EntryInfo>, SandboxError>;
    /// Create a directory and any missing parents: `true` when it was created, `false` when it
    /// already existed (E2B's `files.make_dir`). The default says the backend cannot.
    async fn make_dir(&self, path: &str) -> Result<bool, SandboxError> {
        Err(SandboxError::Other(format!(
            "make_dir {path}: not supported by this sandbox backend"
        )))
    }
    /// Rename or move a file or directory, creating the destination's missing parents (E2B's
    /// `files.rename`); returns the entry at its new path. The default says the backend cannot.
    async fn rename(&self, from: &str, to: &str) -> Result<EntryInfo, SandboxError> {
        Err(SandboxError::Other(format!(
            "rename {from} to {to}: not supported by this sandbox backend"
        )))
    }
    /// Remove a file, or a directory with everything in it (E2B's `files.remove`). The default
    /// says the backend cannot.
    async fn remove(&self, path: &str) -> Result<(), SandboxError> {
        Err(SandboxError::Other(format!(
            "remove {path}: not supported by this sandbox backend"
        )))
    }

    /// Write a file with user metadata (E2B's `files.write(..., metadata=...)`): the metadata
    /// replaces what the file carried, and an empty map clears it. The default writes the file
    /// and says the backend cannot keep metadata when there is any.
    async fn write_file_with_metadata(
        &self,
        path: &str,
        data: &[u8],
        metadata: &std::collections::BTreeMap<String, String>,
    ) -> Result<EntryInfo, SandboxError> {
        if !metadata.is_empty() {
            return Err(SandboxError::Other(format!(
                "write {path} with metadata: not supported by this sandbox backend"
            )));
        }
        self.write_file(path, data).await
    }

    /// Watch a directory for changes (E2B's `files.watch_dir`). The watch ends when the returned
    /// value is dropped. The default says the backend cannot.
    async fn watch_dir(&self, path: &str, options: WatchOptions) -> Result<Box<dyn DirWatch>, SandboxError> {
        let _ = options;
        Err(SandboxError::Other(format!(
            "watch_dir {path}: not supported by this sandbox backend"
        )))
    }

    /// Start a process (a command, or a shell on a pseudo-terminal) in the sandbox, under the same
    /// isolation and limits as its code. The default says the backend cannot.
    async fn start_process(&self, spec: &ProcessSpec) -> Result<SandboxProcess, SandboxError> {
        let _ = spec;
        Err(SandboxError::Unsupported {
            backend: "current",
            operation: "start_process",
        })
    }

    /// Reset the sandbox's lifetime to `timeout` from now.
    async fn set_timeout(&self, timeout: std::time::Duration) -> Result<(), SandboxError>;

    /// Kill the sandbox and everything in it.
    async fn kill(&self) -> Result<(), SandboxError>;

    /// Pause the sandbox: it stops using CPU and memory and keeps its files until
    /// [`SandboxSession::resume`] (E2B's pause; what else it keeps is the backend's: E2B's cloud
    /// keeps memory, `waxell-sandbox serve` files only). The default says the backend cannot.
    async fn pause(&self) -> Result<(), SandboxError> {
        Err(SandboxError::Other(
            "pause: not supported by this sandbox backend".into(),
        ))
    }

    /// Resume a paused sandbox, with a lifetime of `timeout` from now. The default says the
    /// backend cannot.
    async fn resume(&self, timeout: std::time::Duration) -> Result<(), SandboxError> {
        let _ = timeout;
        Err(SandboxError::Other(
            "resume: not supported by this sandbox backend".into(),
        ))
    }

    /// Snapshot the sandbox, named `name` if given (E2B's `create_snapshot`): its files, and its
    /// memory where the server keeps it (`waxell-sandbox serve` under gVisor); the sandbox keeps
    /// running. New sandboxes start from the snapshot with its id as their template. The
    /// default says the backend cannot.
    async fn snapshot(&self, name: Option<&str>) -> Result<SandboxSnapshot, SandboxError> {
        let _ = name;
        Err(SandboxError::Unsupported {
            backend: "current",
            operation: "snapshot",
        })
    }

    /// Start `count` new sandboxes with this one's files (and memory where the server keeps it),
    /// each living `timeout` (E2B's `fork`); this one keeps running. One result per fork asked for, so a fork that failed never hides the
    /// ones that started (and must be killed); `Err` when none was tried (this sandbox is gone, a
    /// bad count). The default says the backend cannot.
    async fn fork(
        &self,
        count: usize,
        timeout: std::time::Duration,
    ) -> Result<Vec<Result<Box<dyn SandboxSession>, SandboxError>>, SandboxError> {
        let _ = (count, timeout);
        Err(SandboxError::Unsupported {
            backend: "current",
            operation: "fork",
        })
    }

    /// The sandbox's resource use now. The default says the backend cannot measure it.
    async fn metrics(&self) -> Result<SandboxMetrics, SandboxError> {
        Err(SandboxError::Other(
            "metrics: not supported by this sandbox backend".into(),
        ))
    }
}
