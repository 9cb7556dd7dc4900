//! Configuration every backend shares: resource limits, the warm pool, timeouts and the lifetime.
//! A backend adds its own options (`O`): [`crate::LocalConfig`] is `SandboxConfig<LocalOptions>`,
//! [`crate::ContainerConfig`] is `SandboxConfig<ContainerOptions>`.

use std::ops::{Deref, DerefMut};
use std::time::Duration;

/// Pseudo-terminals (E2B's `pty`) one sandbox may hold open at once: they come from a host-wide
/// pool (`kernel.pty.max`), so the host hands them out, never sandboxed code.
pub(crate) const MAX_PTYS: usize = 8;

/// Resource limits of one sandbox (all its contexts share the memory, process and CPU caps).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Limits {
    /// Memory cgroup cap. Exceeding it gets the interpreter OOM-killed, reported as `OutOfMemory`.
    pub memory_bytes: u64,
    /// Processes and threads (cgroup `pids.max`; also RLIMIT_NPROC of the sandbox uid).
    pub max_processes: u64,
    /// CPU quota in cores (cgroup v1 CFS quota).
    pub cpus: f64,
    /// Lifetime CPU seconds of each interpreter (RLIMIT_CPU); when spent the interpreter dies.
    pub cpu_seconds: u64,
    /// Characters of stdout+stderr per execution before the kernel truncates (soft cap).
    pub output_chars: usize,
    /// Raw protocol bytes per execution before the host kills the interpreter (hard cap, also caps
    /// one result such as a PNG).
    pub output_hard_bytes: usize,
    /// Largest file the code may write (RLIMIT_FSIZE) and the host file API reads or writes.
    pub max_file_bytes: u64,
    /// Size of the private `/tmp` tmpfs.
    pub tmp_bytes: u64,
    /// Total size of the scratch directory (`/home/user`), a tmpfs of its own so no sandbox can
    /// fill the host's disk. Its pages count against `memory_bytes` when the code writes them, so
    /// keep it below that cap to get `ENOSPC` rather than an OOM kill.
    pub scratch_bytes: u64,
    /// Open files per process (RLIMIT_NOFILE).
    pub open_files: u64,
    /// Files and directories each of the sandbox's tmpfs mounts (scratch, `/tmp`, `/dev/shm`) may
    /// hold (`nr_inodes`): inodes and dentries are kernel memory, so they are capped like bytes.
    pub tmpfs_inodes: u64,
    /// Pending signals and POSIX timers of the sandbox uid (RLIMIT_SIGPENDING).
    pub pending_signals: u64,
    /// Optional address-space cap (RLIMIT_AS): `MemoryError` instead of an OOM kill. Keep it at
    /// 2-4x `memory_bytes` if set: OpenBLAS fails below ~512 MiB.
    pub address_space_bytes: Option<u64>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory_bytes: 512 << 20,
            max_processes: 128,
            cpus: 1.0,
            cpu_seconds: 600,
            output_chars: 1 << 20,
            output_hard_bytes: 16 << 20,
            max_file_bytes: 64 << 20,
            tmp_bytes: 64 << 20,
            scratch_bytes: 256 << 20,
            open_files: 256,
            tmpfs_inodes: 32_768,
            pending_signals: 1024,
            address_space_bytes: None,
        }
    }
}

/// Configuration of a backend: what every backend has (limits, pool, timeouts, lifetime) plus the
/// backend's own options `O`, whose fields read and write through this value (`config.uid_base`)
/// so each backend's configuration stays one flat value.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SandboxConfig<O> {
    /// Resource caps of each sandbox.
    pub limits: Limits,
    /// Sandboxes started ahead of `create` and kept ready (0 = no pool, every create starts cold).
    pub pool_size: usize,
    /// Modules imported before an interpreter reports ready (e.g. `numpy`, `pandas`,
    /// `matplotlib.pyplot`): a slower pool fill, a faster first cell.
    pub preload: Vec<String>,
    /// Default per-run timeout when `RunOptions::timeout` is unset (then interrupt, then kill after
    /// `interrupt_grace`).
    pub run_timeout: Duration,
    /// After the timeout interrupt, how long the code gets to stop before it is killed.
    pub interrupt_grace: Duration,
    /// Default sandbox lifetime when `SandboxOptions::timeout` is unset (E2B: 300 s).
    pub lifetime: Duration,
    /// How long an interpreter may take to start and report ready.
    pub ready_timeout: Duration,
    /// The backend's own options.
    pub backend: O,
}

/// A backend's own options: their defaults, and the ready timeout that suits the backend.
pub trait BackendOptions: Default + Clone + std::fmt::Debug {
    /// Default of [`SandboxConfig::ready_timeout`].
    const READY_TIMEOUT: Duration;
}

impl<O: BackendOptions> Default for SandboxConfig<O> {
    fn default() -> Self {
        Self {
            limits: Limits::default(),
            pool_size: 0,
            preload: Vec::new(),
            run_timeout: Duration::from_secs(60),
            interrupt_grace: Duration::from_secs(2),
            lifetime: Duration::from_secs(300),
            ready_timeout: O::READY_TIMEOUT,
            backend: O::default(),
        }
    }
}

impl<O: BackendOptions> SandboxConfig<O> {
    /// The defaults: no warm pool, 60 s runs, 300 s lifetime, [`Limits::default`].
    pub fn new() -> Self {
        Self::default()
    }
}

impl<O> SandboxConfig<O> {
    /// Use these resource caps.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }
    /// Keep this many sandboxes started ahead of `create` (0 turns the pool off).
    pub fn with_pool_size(mut self, size: usize) -> Self {
        self.pool_size = size;
        self
    }
    /// Import these modules in every interpreter before it reports ready (replaces the list).
    pub fn with_preload<I: IntoIterator<Item = S>, S: Into<String>>(mut self, modules: I) -> Self {
        self.preload = modules.into_iter().map(Into::into).collect();
        self
    }
    /// Per-run timeout when the run does not set one; on expiry the code gets `KeyboardInterrupt`.
    pub fn with_run_timeout(mut self, timeout: Duration) -> Self {
        self.run_timeout = timeout;
        self
    }
    /// How long interrupted code gets to stop before the interpreter is killed (state then lost).
    pub fn with_interrupt_grace(mut self, grace: Duration) -> Self {
        self.interrupt_grace = grace;
        self
    }
    /// Sandbox lifetime when `create` does not set one; the sandbox is killed when it runs out.
    pub fn with_lifetime(mut self, lifetime: Duration) -> Self {
        self.lifetime = lifetime;
        self
    }
}

impl<O> Deref for SandboxConfig<O> {
    type Target = O;
    fn deref(&self) -> &O {
        &self.backend
    }
}

impl<O> DerefMut for SandboxConfig<O> {
    fn deref_mut(&mut self) -> &mut O {
        &mut self.backend
    }
}

impl Limits {
    /// The defaults: 512 MiB memory, 128 processes, 1 CPU, 600 CPU seconds, 1 Mi output characters.
    pub fn new() -> Self {
        Self::default()
    }
    /// Memory cap in bytes (at least 32 MiB); exceeding it is reported as `OutOfMemory`.
    pub fn with_memory_bytes(mut self, bytes: u64) -> Self {
        self.memory_bytes = bytes;
        self
    }
    /// Most processes plus threads at once.
    pub fn with_max_processes(mut self, n: u64) -> Self {
        self.max_processes = n;
        self
    }
    /// Lifetime CPU seconds of each interpreter; when spent it dies.
    pub fn with_cpu_seconds(mut self, seconds: u64) -> Self {
        self.cpu_seconds = seconds;
        self
    }
    /// CPU quota in cores (fractions allowed, e.g. `0.5`).
    pub fn with_cpus(mut self, cpus: f64) -> Self {
        self.cpus = cpus;
        self
    }
    /// Characters of output per execution before it is truncated (reported as `OutputTruncated`).
    pub fn with_output_chars(mut self, n: usize) -> Self {
        self.output_chars = n;
        self
    }
    /// Raw bytes per execution before the host kills the interpreter (also caps one result).
    pub fn with_output_hard_bytes(mut self, n: usize) -> Self {
        self.output_hard_bytes = n;
        self
    }
    /// Largest file in bytes the code may write and the file API may move.
    pub fn with_max_file_bytes(mut self, n: u64) -> Self {
        self.max_file_bytes = n;
        self
    }
    /// Size in bytes of the private `/tmp`.
    pub fn with_tmp_bytes(mut self, n: u64) -> Self {
        self.tmp_bytes = n;
        self
    }
    /// Size in bytes of `/home/user`; keep it below the memory cap (its pages count against it).
    pub fn with_scratch_bytes(mut self, n: u64) -> Self {
        self.scratch_bytes = n;
        self
    }
    /// Files and directories each tmpfs mount may hold.
    pub fn with_tmpfs_inodes(mut self, n: u64) -> Self {
        self.tmpfs_inodes = n;
        self
    }
    /// Address-space cap in bytes (`None`: none); turns memory exhaustion into `MemoryError`.
    pub fn with_address_space_bytes(mut self, n: Option<u64>) -> Self {
        self.address_space_bytes = n;
        self
    }

    /// Reject limits that would make the sandbox unusable or unsafe, naming the field.
    pub(crate) fn validate(&self) -> Result<(), String> {
        if self.memory_bytes < 32 << 20 {
            return Err(format!(
                "limits.memory_bytes = {} is below the 32 MiB minimum",
                self.memory_bytes
            ));
        }
        if self.max_processes < 8 {
            return Err(format!(
                "limits.max_processes = {} is below 8 (the kernel itself needs threads)",
                self.max_processes
            ));
        }
        if !(self.cpus.is_finite() && self.cpus >= 0.01) {
            return Err(format!("limits.cpus = {} must be at least 0.01", self.cpus));
        }
        if self.output_hard_bytes < 64 << 10 {
            return Err(format!(
                "limits.output_hard_bytes = {} is below 64 KiB",
                self.output_hard_bytes
            ));
        }
        if self.scratch_bytes < 1 << 20 {
            return Err(format!(
                "limits.scratch_bytes = {} is below 1 MiB",
                self.scratch_bytes
            ));
        }
        if self.tmpfs_inodes < 256 {
            return Err(format!(
                "limits.tmpfs_inodes = {} is below 256 (the interpreter itself writes a few files)",
                self.tmpfs_inodes
            ));
        }
        if self.pending_signals < 64 {
            return Err(format!(
                "limits.pending_signals = {} is below 64",
                self.pending_signals
            ));
        }
        if self.open_files < 64 {
            return Err(format!("limits.open_files = {} is below 64", self.open_files));
        }
        Ok(())
    }
}
