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
//! Each sandbox is a bubblewrap instance started by a root launcher *without* a user namespace, then
//! dropped by `setpriv` to a per-sandbox non-zero uid with no capabilities and no-new-privs (code
//! never runs as host uid 0, not even through a mapping). It has private pid/net/ipc/uts/cgroup
//! namespaces (no network at all, loopback included), a read-only `/usr` and Python installation, a
//! private size-capped `/tmp`, its own size-capped tmpfs as scratch at `/home/user`, a cleared
//! environment, three seccomp programs (deny list, `clone3` -> ENOSYS, x32 guard), cgroup v1
//! memory/pids/cpu limits and rlimits. Host-side file access uses `openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS)`.
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

mod cgroup;
mod config;
#[cfg(feature = "container")]
pub mod container;
mod files;
mod host;
mod kernel;
mod launcher;
mod local;
mod naming;
mod seccomp;
pub mod server;
// The only module with `unsafe`: fork/exec set-up in the child (see its docs).
#[allow(unsafe_code)]
mod spawn;

pub use cgroup::subtree_dir as cgroup_subtree_dir;
pub use config::{Limits, LocalConfig};
#[cfg(feature = "container")]
pub use container::{ContainerBackend, ContainerConfig, ContainerSandbox};
pub use host::{default_venv_python, PythonRuntime, PYTHON_ENV_VAR};
pub use local::{LocalBackend, LocalSandbox, DEFAULT_CONTEXT_ID};
