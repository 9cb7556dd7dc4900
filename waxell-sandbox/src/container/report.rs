//! What a container backend enforces, per engine and runtime: the counterpart of the local
//! backend's host report ([`crate::HostReport`]), for `waxell-sandbox doctor --backend docker`
//! and `serve`'s start-up line. Built from what the backend decided (engine, runtime, limits,
//! languages), so it says what this backend does, not what an engine could do.

use std::fmt;

use crate::config::Limits;
use crate::kernel::Languages;
use crate::report::{write_checks, Check, Feature, Status};

use super::spec::MAX_TERMINALS;

/// The layers and limits a container backend has in force, and which it holds only in part.
#[derive(Debug, Clone)]
pub struct ContainerReport {
    /// "Docker Engine" or "Podman".
    pub engine: String,
    /// The runtime that isolates the code (`runc`, `runsc`, ...).
    pub runtime: String,
    /// One check per layer or limit.
    pub checks: Vec<Check>,
}

impl ContainerReport {
    /// `memory`: whether a pause keeps the sandbox's memory, or why not.
    pub(super) fn build(
        podman: bool,
        runtime: &str,
        own_pts: bool,
        limits: &Limits,
        languages: &Languages,
        memory: Result<(), &str>,
    ) -> Self {
        let gvisor = super::spec::is_gvisor(runtime);
        let mib = |bytes: u64| bytes >> 20;
        let mut checks = Vec::new();
        let mut push = |feature, status, detail: String| {
            checks.push(Check {
                feature,
                status,
                detail,
                fix: None,
            })
        };
        push(
            Feature::User,
            Status::Enforced,
            "uid and gid 1000 in the container, every capability dropped; the kernel refuses to start as root".into(),
        );
        push(
            Feature::Namespaces,
            Status::Enforced,
            if gvisor {
                "the engine's pid, net, ipc, uts and mount namespaces, and gVisor's own kernel (the sentry) \
                 between the code and the host's"
                    .into()
            } else {
                "the engine's pid, net, ipc, uts and mount namespaces; private IPC".into()
            },
        );
        push(
            Feature::Seccomp,
            Status::Enforced,
            if gvisor {
                "our profile (the local backend's policy), on pid 1 through the engine and on every exec through a \
                 shim that installs it first; gVisor has no 32-bit entry; a negative nice value is refused"
                    .into()
            } else {
                "our profile (the local backend's policy) through the engine, for x86_64, x86 and x32: the 32-bit \
                 entry is filtered too"
                    .into()
            },
        );
        push(Feature::Network, Status::Enforced, "no network (NetworkMode=none), loopback only".into());
        push(
            Feature::ReadOnlyRuntime,
            Status::Enforced,
            "the image's root file system, read-only".into(),
        );
        push(
            Feature::PrivateTmp,
            Status::Enforced,
            format!("/tmp: a tmpfs volume of {} MiB", mib(limits.tmp_bytes)),
        );
        push(
            Feature::ScratchSize,
            Status::Enforced,
            format!("/home/user: a tmpfs volume of {} MiB", mib(limits.scratch_bytes)),
        );
        push(
            Feature::InodeCap,
            Status::Enforced,
            format!(
                "{} inodes on each writable file system (host tmpfs volumes, so the cap holds under every runtime)",
                limits.tmpfs_inodes
            ),
        );
        push(
            Feature::NoNewPrivileges,
            Status::Enforced,
            "no-new-privileges: setuid binaries grant nothing".into(),
        );
        push(
            Feature::MemoryLimit,
            Status::Enforced,
            if gvisor {
                format!(
                    "{} MiB of the guest's memory: pid 1 kills the largest process past it (reported as out of \
                     memory, the sandbox keeps working); the container's cgroup caps the sentry above that",
                    mib(limits.memory_bytes)
                )
            } else {
                format!(
                    "cgroup: {} MiB for the whole container, no swap; OOM kills reported",
                    mib(limits.memory_bytes)
                )
            },
        );
        if gvisor {
            push(
                Feature::ProcessLimit,
                Status::Partial,
                format!(
                    "RLIMIT_NPROC {} inside gVisor; on its ptrace platform a fork bomb grows the sentry's host tasks \
                     until the container's pids cap ends the whole sandbox (reported as a dead kernel; the host and \
                     other sandboxes are unaffected)",
                    limits.max_processes
                ),
            );
        } else {
            push(
                Feature::ProcessLimit,
                Status::Enforced,
                format!("pids cgroup: {} processes and threads", limits.max_processes),
            );
        }
        push(
            Feature::CpuQuota,
            Status::Enforced,
            format!("cgroup: {} cores (NanoCpus)", limits.cpus),
        );
        push(
            Feature::FileSize,
            Status::Enforced,
            format!("RLIMIT_FSIZE {} MiB", mib(limits.max_file_bytes)),
        );
        if gvisor {
            push(
                Feature::KernelPools,
                Status::Enforced,
                "gVisor's own AIO, keys, message queues and pseudo-terminals: the host's pools are never reached"
                    .into(),
            );
        } else if podman && !own_pts {
            push(
                Feature::KernelPools,
                Status::Partial,
                "AIO answered ENOSYS, keys and message queues refused; but pseudo-terminals come from the host's \
                 shared pool (kernel.pty.max less its reserve): Podman mounts its own devpts at /dev/pts, and this \
                 process is not root, so it cannot bind a capped one of its own there; code can open them until the \
                 pool is empty (as root, Docker Engine, or runsc, holds them)"
                    .into(),
            );
        } else {
            let how = if podman {
                "a devpts instance of its own, bound at /dev/pts"
            } else {
                "a devpts volume"
            };
            push(
                Feature::KernelPools,
                Status::Enforced,
                format!(
                    "AIO answered ENOSYS, keys and message queues refused, at most {MAX_TERMINALS} pseudo-terminals \
                     ({how} with max=)"
                ),
            );
        }
        push(
            Feature::KernelProtocol,
            Status::Enforced,
            if gvisor {
                "a run ends only once the interpreter's main thread is back waiting for requests, seen by pid 1 \
                 (ptrace: gVisor's /proc shows no thread's system call)"
            } else {
                "a run ends only once the interpreter's main thread is back waiting for requests, seen from the host"
            }
            .into(),
        );
        if gvisor {
            push(
                Feature::FileMetadata,
                Status::Partial,
                "kept in a store volume by inode (gVisor's gofer refuses extended attributes on the volumes): the \
                 code sees no user.e2b.* attributes, and at most 16,384 files carry metadata"
                    .into(),
            );
        } else {
            push(
                Feature::FileMetadata,
                Status::Enforced,
                "user.e2b.* extended attributes, as envd keeps them".into(),
            );
        }
        push(
            Feature::Processes,
            Status::Enforced,
            "commands and terminals are execs in the sandbox's container, under the same limits as code".into(),
        );
        let available: Vec<&str> = languages.available().iter().map(|l| l.name()).collect();
        let limited: Vec<String> = languages
            .limited()
            .iter()
            .map(|(language, why)| format!("{}: {why}", language.name()))
            .collect();
        push(
            Feature::Languages,
            if limited.is_empty() {
                Status::Enforced
            } else {
                Status::Partial
            },
            if limited.is_empty() {
                available.join(", ")
            } else {
                format!("{}; limited: {}", available.join(", "), limited.join("; "))
            },
        );
        match memory {
            Ok(()) => push(
                Feature::PauseMemory,
                Status::Enforced,
                "a pause checkpoints the sandbox (gVisor through the engine): processes, commands, terminals and \
                 variables come back on resume"
                    .into(),
            ),
            Err(why) => push(
                Feature::PauseMemory,
                Status::Partial,
                format!("a pause keeps the files only, kernels restart on resume: {why}"),
            ),
        }
        Self {
            engine: if podman { "Podman" } else { "Docker Engine" }.to_owned(),
            runtime: runtime.to_owned(),
            checks,
        }
    }

    /// The line for `feature`, if the report has one.
    pub fn check(&self, feature: Feature) -> Option<&Check> {
        self.checks.iter().find(|c| c.feature == feature)
    }

    /// Whether `feature` is fully in force.
    pub fn enforces(&self, feature: Feature) -> bool {
        self.check(feature).is_some_and(|c| c.status == Status::Enforced)
    }

    /// One line for a person: the engine, the runtime and what is held only in part.
    pub fn summary(&self) -> String {
        let partial: Vec<&str> = self
            .checks
            .iter()
            // Not isolation: what the code can do, and what a pause keeps.
            .filter(|c| c.status != Status::Enforced && !matches!(c.feature, Feature::Languages | Feature::PauseMemory))
            .map(|c| c.feature.label())
            .collect();
        format!(
            "container sandbox, {} with {}{}",
            self.engine,
            self.runtime,
            if partial.is_empty() {
                String::new()
            } else {
                format!("; held in part: {} (see `waxell-sandbox doctor`)", partial.join(", "))
            }
        )
    }
}

impl fmt::Display for ContainerReport {
    /// The report for a person: one line per layer and limit.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.summary())?;
        write_checks(f, &self.checks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn under_runc_everything_is_held_and_under_gvisor_the_report_names_what_is_not() {
        let limits = Limits::default();
        let languages = Languages::python_only();
        let files_only = Err("the runtime is not gVisor");
        let runc = ContainerReport::build(false, "runc", false, &limits, &languages, files_only);
        for check in runc.checks.iter().filter(|c| c.feature != Feature::PauseMemory) {
            assert_eq!(check.status, Status::Enforced, "{check:?}");
        }
        let pause = runc.check(Feature::PauseMemory).unwrap();
        assert_eq!(pause.status, Status::Partial);
        assert!(pause.detail.starts_with("a pause keeps the files only") && pause.detail.ends_with("the runtime is not gVisor"), "{}", pause.detail);
        let engine_runsc = ContainerReport::build(false, "runsc", false, &limits, &languages, Ok(()));
        assert!(engine_runsc.enforces(Feature::PauseMemory));
        assert!(runc.check(Feature::KernelPools).unwrap().detail.contains("16 pseudo-terminals"));
        assert_eq!(runc.summary(), "container sandbox, Docker Engine with runc");

        let podman_runc = ContainerReport::build(true, "runc", true, &limits, &languages, files_only);
        assert_eq!(podman_runc.check(Feature::KernelPools).unwrap().status, Status::Enforced);
        let podman_rootless = ContainerReport::build(true, "runc", false, &limits, &languages, files_only);
        assert_eq!(podman_rootless.check(Feature::KernelPools).unwrap().status, Status::Partial);

        let runsc = ContainerReport::build(true, "runsc", false, &limits, &languages, files_only);
        let partial: Vec<Feature> = runsc
            .checks
            .iter()
            .filter(|c| c.status != Status::Enforced)
            .map(|c| c.feature)
            .collect();
        assert_eq!(
            partial,
            [Feature::ProcessLimit, Feature::FileMetadata, Feature::PauseMemory]
        );
        assert_eq!(
            runsc.summary(),
            "container sandbox, Podman with runsc; held in part: process limit, file metadata \
             (see `waxell-sandbox doctor`)"
        );
        let printed = runsc.to_string();
        assert!(printed.contains("[partial] process limit"), "{printed}");
        assert!(printed.contains("[ok     ] inode cap"), "{printed}");
    }
}
