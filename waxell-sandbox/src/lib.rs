//! # waxell-sandbox: a local, isolated, stateful Python sandbox
//!
//! [`LocalBackend`] implements waxell's backend-neutral [`waxell::sandbox::SandboxBackend`]; wrap it
//! in [`waxell::sandbox::Sandbox`] to get the instrumented, E2B-shaped API:
//!
//! ```no_run
//! # async fn demo() -> Result<(), waxell::sandbox::SandboxError> {
//! use waxell::sandbox::{RunOptions, Sandbox, SandboxOptions};
//! use waxell_sandbox::{LocalBackend, LocalConfig};
//!
//! let backend = LocalBackend::new(LocalConfig::default().with_pool_size(2))?;
//! let sandbox = Sandbox::create(&backend, &SandboxOptions::default()).await?;
//! sandbox.run_code("x = 41", &RunOptions::default()).await?;
//! let execution = sandbox.run_code("x + 1", &RunOptions::default()).await?;
//! assert_eq!(execution.text(), Some("42"));
//! # Ok(()) }
//! ```
//!
//! ## Isolation (see `docs/sandbox.md` for the full security model)
//! Each sandbox is a bubblewrap instance. Started by root, it has no user namespace and `setpriv`
//! drops it to a per-sandbox non-zero uid; started by any other user (rootless mode), bubblewrap
//! makes a user namespace in which the sandbox is that user (never host uid 0, not even through a
//! mapping). Either way it has no capabilities and no-new-privs. It has private pid/net/ipc/uts/cgroup
//! namespaces (no network at all, loopback included), a read-only `/usr` and Python installation, a
//! private size-capped `/tmp`, scratch at `/home/user` (as root its own size-capped tmpfs), a cleared
//! environment, three seccomp programs (deny list, `clone3` -> ENOSYS, x32 guard), cgroup v1 or v2
//! memory/pids/cpu limits (or, without a usable cgroup, rlimits and a host-side memory watchdog)
//! and rlimits. [`LocalBackend::capabilities`] reports what is in force on this host and why the
//! rest is not (`waxell-sandbox doctor` prints it). Linux only: elsewhere [`LocalBackend::new`]
//! fails with `Unavailable`. Host-side file access uses `openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS)`.
//!
//! ## Execution
//! A JSON-lines kernel (`src/kernel.py`) keeps the interpreter state between runs, returns the last
//! expression's rich representations and matplotlib figures as PNG, streams output as written, and
//! turns a timeout into `KeyboardInterrupt` (state kept), then a kill after a grace period. Timeouts,
//! OOM kills and truncated output are reported in [`waxell::sandbox::Execution::error`] as
//! `TimeoutError`, `OutOfMemory`, `OutputTruncated` (and `KernelDied` for any other crash).
//!
//! Where isolation cannot be set up, [`LocalBackend::new`] fails with
//! [`waxell::sandbox::SandboxError::Unavailable`] naming the missing piece (e.g. "bubblewrap not
//! found: run scripts/setup-sandbox.sh ..."). There is no unisolated fallback.

#![deny(unsafe_code)]
#![warn(missing_docs)]

//! ## Layout
//! A shared core that every backend uses, and one folder per backend implementing the core's
//! one trait (`backend.rs`, see docs/sandbox.md "Adding a backend"):
//! * core: `backend.rs` (the trait), `session/` (a live sandbox: contexts, runs, files, lifetime),
//!   `pool.rs` (the warm pool), `kernel/` (the JSON-lines kernel protocol), `command/` (a
//!   process's output, input, signals and terminal on the host), `config.rs` (limits,
//!   timeouts, pool size), `paths.rs`, `naming.rs`;
//! * backends: `local/` (bubblewrap, seccomp, cgroups, rootless, watchdog, uid leases, host
//!   report), `container/` (Docker/Podman, gVisor);
//! * `server/`: the E2B-compatible HTTP server in front of any backend.
//!
//! No core module imports a backend.

mod config;
#[cfg(feature = "server")]
pub mod server;

/// Declares the Linux-only items: the one place the platform is decided. Elsewhere
/// `local/unsupported.rs` stands in, and [`LocalBackend::new`] reports `Unavailable`.
macro_rules! linux_only {
    ($($item:item)*) => { $( #[cfg(target_os = "linux")] $item )* };
}

mod local;
mod report;

linux_only! {
    mod backend;
    mod command;
    mod kernel;
    mod metadata;
    mod naming;
    mod paths;
    mod pool;
    // An unisolated backend: only for testing the core.
    #[cfg(test)]
    mod process;
    mod session;
    mod seccomp_bpf;
    mod syscall_policy;
    mod watch;
    // Containers reuse the kernel protocol (kernel/), hence Linux-only for now.
    #[cfg(feature = "container")]
    pub mod container;
    #[cfg(feature = "container")]
    pub use container::{removals_settled, ContainerConfig, ContainerReport};

    pub use local::{
        cgroup_subtree_dir, default_venv_python, PythonRuntime, SandboxRoot, PYTHON_ENV_VAR, SANDBOX_ROOT_ENV_VAR,
    };

    /// Creates isolated local Python sandboxes (bubblewrap + seccomp + cgroups), optionally from
    /// a warm pool of pre-started interpreters. Cheap to clone; the pool is shared.
    pub type LocalBackend = pool::Pooled<local::Local>;
    /// One live local sandbox. Dropping it (or [`waxell::sandbox::SandboxSession::kill`]) kills
    /// every process in it and removes its cgroups and scratch directory.
    pub type LocalSandbox = session::Session<local::Local>;
    /// Creates sandboxes as containers of a Docker-compatible engine. Cheap to clone; the warm
    /// pool is shared.
    #[cfg(feature = "container")]
    pub type ContainerBackend = pool::Pooled<container::Container>;
    /// One live container sandbox. Dropping it (or [`waxell::sandbox::SandboxSession::kill`])
    /// removes the container.
    #[cfg(feature = "container")]
    pub type ContainerSandbox = session::Session<container::Container>;
    pub use backend::Backend;
    pub use kernel::{Language, Languages};
    pub use pool::Pooled;
    pub use session::{Session, DEFAULT_CONTEXT_ID};
}

#[cfg(not(target_os = "linux"))]
pub use local::{LocalBackend, LocalSandbox, DEFAULT_CONTEXT_ID};

pub use config::{BackendOptions, Limits, SandboxConfig};
pub use local::{HostReport, IsolationMode, LocalConfig, LocalOptions};
pub use report::{Check, Feature, Status};
