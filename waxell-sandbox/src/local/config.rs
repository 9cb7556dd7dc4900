//! The local backend's own options (on top of [`SandboxConfig`]'s limits, pool and timeouts).

use std::path::PathBuf;
use std::time::Duration;

use crate::config::{BackendOptions, SandboxConfig};

/// Configuration of a [`crate::LocalBackend`]: [`SandboxConfig`] with [`LocalOptions`]
/// (`config.uid_base`, `config.python`, ... read and write the local options directly).
pub type LocalConfig = SandboxConfig<LocalOptions>;

/// What only the local backend has: the interpreter, the uid range and the scratch root.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct LocalOptions {
    /// Interpreter to run; `None` = `WAXELL_SANDBOX_PYTHON`, then the setup script's venv, then the
    /// system python3.
    pub python: Option<PathBuf>,
    /// Sandbox uids are `uid_base .. uid_base + uid_span` (never 0), leased uniquely across the
    /// host's processes. The default, `0x7000_0000 ..+ 65536`, lies above shadow's subordinate-id
    /// ranges (`SUB_UID_MAX` 600100000), LXD's and systemd-nspawn's (up to `0x6FFFFFFF`) and below
    /// systemd's foreign range (`0x7FFE0000`); `LocalBackend::new` checks it against `/etc/subuid`,
    /// `/etc/subgid` and `/etc/passwd`.
    pub uid_base: u32,
    /// How many uids the backend may lease from `uid_base` on (also the most sandboxes at once, as root).
    pub uid_span: u32,
    /// Parent of the per-sandbox scratch directories (default: `$TMPDIR/waxell-sandbox`).
    pub scratch_root: Option<PathBuf>,
    /// Fork Python kernels from one prepared interpreter (a zygote) instead of starting each anew:
    /// they share its pages, so each takes a few MiB of its own and is ready in milliseconds. Off,
    /// every kernel is its own interpreter, started by bubblewrap (docs/sandbox.md, "Kernels forked
    /// from a zygote"), as rootless kernels still are.
    pub fork_kernels: bool,
}

impl Default for LocalOptions {
    fn default() -> Self {
        Self {
            python: None,
            uid_base: 0x7000_0000,
            uid_span: 65_536,
            scratch_root: None,
            fork_kernels: true,
        }
    }
}

impl BackendOptions for LocalOptions {
    const READY_TIMEOUT: Duration = Duration::from_secs(30);
}

impl SandboxConfig<LocalOptions> {
    /// Run this Python interpreter instead of looking one up (`WAXELL_SANDBOX_PYTHON`, venv, python3).
    pub fn with_python(mut self, python: impl Into<PathBuf>) -> Self {
        self.backend.python = Some(python.into());
        self
    }
}
