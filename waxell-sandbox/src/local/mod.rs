//! The local backend: each sandbox is a set of bubblewrap instances (one per context) under
//! seccomp, cgroups (v1 or v2; rlimits and a memory watchdog without them) and a per-sandbox
//! uid, rootful or rootless. This folder only says how a local sandbox and its kernels start
//! (`launcher.rs`, `spawn.rs`, `child.rs`), are limited (`cgroup*.rs`, `watchdog.rs`,
//! `kernel_buffers.rs`, `rootless.rs`, `mounts.rs`, `uid_lease.rs`) and are removed; `host.rs`,
//! `root.rs` (the tree it sees as `/usr`) and `capabilities.rs` report what the host offers. The rest is the crate's shared core
//! (the syscall policy as BPF is `seccomp_bpf.rs`, shared with the gVisor shim).

// Used only by the Linux modules (and the stub's constructor) elsewhere.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
mod capabilities;
mod config;

pub use capabilities::{HostReport, IsolationMode};
pub use config::{LocalConfig, LocalOptions};

linux_only! {
    mod cgroup;
    mod cgroup_v2;
    mod child;
    mod files;
    mod host;
    mod kernel_buffers;
    mod launcher;
    mod mounts;
    mod rootless;
    mod root;
    mod sandbox;
    // The only module with `unsafe`: fork/exec set-up in the child (see its docs).
    #[allow(unsafe_code)]
    mod spawn;
    mod uid_lease;
    mod watch;
    mod usage;
    mod watchdog;
    mod zygote;

    pub use cgroup::subtree_dir as cgroup_subtree_dir;
    pub use host::{default_venv_python, PythonRuntime, PYTHON_ENV_VAR};
    pub use root::{SandboxRoot, ROOT_ENV_VAR as SANDBOX_ROOT_ENV_VAR};
    pub(crate) use sandbox::Local;
}

#[cfg(not(target_os = "linux"))]
mod unsupported;
#[cfg(not(target_os = "linux"))]
pub use unsupported::{LocalBackend, LocalSandbox, DEFAULT_CONTEXT_ID};
