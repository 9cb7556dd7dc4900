//! What a backend's report is made of: one [`Check`] per isolation layer or limit ([`Feature`]),
//! each with its [`Status`]. The local backend's [`crate::HostReport`] and the container backend's
//! report are both lists of these, printed alike.

use std::fmt;

/// Whether a layer or limit is in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// In force as documented.
    Enforced,
    /// In force in a weaker form (the detail says how).
    Partial,
    /// Not in force on this host (the check's `fix` says how to get it).
    Missing,
}

/// The layers and limits the report covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Feature {
    /// The sandbox's identity: never host uid 0.
    User,
    /// The invoking user's supplementary groups (rootless only).
    Groups,
    /// Private pid, net, ipc, uts and cgroup namespaces.
    Namespaces,
    /// The seccomp programs (deny list, `clone3` guard, x32 guard).
    Seccomp,
    /// No network at all, loopback included.
    Network,
    /// `/usr` from the sandbox root (the needed packages' files) and the Python installation, read-only.
    ReadOnlyRuntime,
    /// A private, size-capped `/tmp`.
    PrivateTmp,
    /// Total size of the home directory (`/home/user`).
    ScratchSize,
    /// `no_new_privs`: setuid binaries grant nothing.
    NoNewPrivileges,
    /// The memory cap (cgroup, or rlimits plus the host-side watchdog).
    MemoryLimit,
    /// The process and thread cap.
    ProcessLimit,
    /// The CPU quota in cores.
    CpuQuota,
    /// The lifetime CPU-seconds cap (RLIMIT_CPU).
    CpuTime,
    /// The largest-file cap (RLIMIT_FSIZE).
    FileSize,
    /// Commands and terminals (E2B's process RPCs) under the same isolation as code.
    Processes,
    /// The languages contexts run (their runtimes found on the host).
    Languages,
    /// An inode cap on every writable file system.
    InodeCap,
    /// The host-wide kernel pools (aio, keys, ptys, message queues) out of reach.
    KernelPools,
    /// A run's end cannot be forged by what the code writes.
    KernelProtocol,
    /// E2B's file metadata, kept as envd keeps it.
    FileMetadata,
    /// A pause keeps the sandbox's memory (E2B's default pause), not only its files.
    PauseMemory,
}

impl Feature {
    /// The feature's name in a printed report.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Feature::User => "identity",
            Feature::Groups => "groups",
            Feature::Namespaces => "namespaces",
            Feature::Seccomp => "seccomp",
            Feature::Network => "network",
            Feature::ReadOnlyRuntime => "read-only runtime",
            Feature::PrivateTmp => "private /tmp",
            Feature::ScratchSize => "home size cap",
            Feature::NoNewPrivileges => "no new privileges",
            Feature::MemoryLimit => "memory limit",
            Feature::ProcessLimit => "process limit",
            Feature::CpuQuota => "cpu quota",
            Feature::CpuTime => "cpu time",
            Feature::FileSize => "file size",
            Feature::Processes => "commands and terminals",
            Feature::Languages => "languages",
            Feature::InodeCap => "inode cap",
            Feature::KernelPools => "host kernel pools",
            Feature::KernelProtocol => "kernel protocol",
            Feature::FileMetadata => "file metadata",
            Feature::PauseMemory => "pause with memory",
        }
    }
}

/// One line of the report.
#[derive(Debug, Clone)]
pub struct Check {
    /// The layer or limit checked.
    pub feature: Feature,
    /// Whether it is in force.
    pub status: Status,
    /// What is in force, or why not.
    pub detail: String,
    /// How to get the missing part, when something is missing.
    pub fix: Option<String>,
}

/// The report's lines for a person: one per layer and limit, with the fix under what is missing.
pub(crate) fn write_checks(f: &mut fmt::Formatter<'_>, checks: &[Check]) -> fmt::Result {
    for check in checks {
        let mark = match check.status {
            Status::Enforced => "ok     ",
            Status::Partial => "partial",
            Status::Missing => "MISSING",
        };
        writeln!(f, "  [{mark}] {:<18} {}", check.feature.label(), check.detail)?;
        if let Some(fix) = &check.fix {
            writeln!(f, "            {:<18} fix: {fix}", "")?;
        }
    }
    Ok(())
}
