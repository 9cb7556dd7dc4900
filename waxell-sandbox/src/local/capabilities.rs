//! The host report: which isolation layers and which limits a local backend has in force on this
//! host, why the others are not, and how to get them. [`crate::LocalBackend::capabilities`] gives
//! the backend's own; [`crate::LocalBackend::host_report`] probes without making a backend (for
//! `waxell-sandbox doctor`, which prints it with [`std::fmt::Display`]).

//!
//! Platform-neutral: the Linux modules hand it plain facts ([`LimitEnforcement`]).

use std::fmt;

use crate::config::Limits;
use crate::report::{write_checks, Check, Feature, Status};

/// How the host enforces memory, process and CPU limits, as found by `cgroup::Limiter`.
#[derive(Debug, Clone, Default)]
pub(crate) struct LimitEnforcement {
    /// The cgroup in use, e.g. "cgroup v1" or "cgroup v2 /sys/fs/cgroup/waxell-sandbox"; `None`
    /// when there is none and the watchdog and rlimits stand in.
    pub(crate) cgroup: Option<String>,
    pub(crate) memory: bool,
    pub(crate) pids: bool,
    pub(crate) cpu: bool,
    /// Why no cgroup, or why some controllers are missing.
    pub(crate) why: String,
    pub(crate) watchdog_poll_ms: u128,
    /// The kernel counts RLIMIT_NPROC per user namespace (Linux 5.14+).
    pub(crate) nproc_per_userns: bool,
}

/// How the launcher isolates sandboxed code from the host's users.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IsolationMode {
    /// Root launcher, no user namespace; each sandbox drops to its own non-root uid.
    Rootful,
    /// Non-root launcher; bubblewrap makes a user namespace mapping the sandbox to the invoking user.
    Rootless,
}

/// What the local sandbox can enforce on this host.
#[derive(Debug, Clone)]
pub struct HostReport {
    /// `None` when the local sandbox cannot run here at all (see `unavailable`).
    pub mode: Option<IsolationMode>,
    /// Why the local sandbox cannot run here, with the fix.
    pub unavailable: Option<String>,
    /// One check per layer or limit that applies in this mode (empty when the sandbox is unavailable).
    pub checks: Vec<Check>,
}

const LIMITS_FIX: &str = "run as root (cgroup v1 or v2), or on a cgroup v2 host start the program inside a \
                          delegated systemd user scope: `systemd-run --user --scope -p Delegate=yes <command>`";

impl HostReport {
    pub(crate) fn unavailable(reason: String) -> Self {
        Self {
            mode: None,
            unavailable: Some(reason),
            checks: Vec::new(),
        }
    }

    pub(crate) fn build(
        mode: IsolationMode,
        uid: u32,
        enforcement: &LimitEnforcement,
        limits: &Limits,
    ) -> Self {
        let mut checks = Vec::new();
        let mut push = |feature, status, detail: String, fix: Option<&str>| {
            checks.push(Check {
                feature,
                status,
                detail,
                fix: fix.map(str::to_owned),
            })
        };
        let mib = |b: u64| b >> 20;
        match mode {
            IsolationMode::Rootful => push(
                Feature::User,
                Status::Enforced,
                "each sandbox runs as its own non-root uid (setpriv from a root launcher, no user namespace), \
                 never host uid 0"
                    .into(),
                None,
            ),
            IsolationMode::Rootless => {
                push(
                    Feature::User,
                    Status::Enforced,
                    format!(
                        "user namespace: uid {uid} inside maps to the invoking user (uid {uid}), never host uid 0; \
                         no capabilities, no further user namespaces"
                    ),
                    None,
                );
                push(
                    Feature::Groups,
                    Status::Partial,
                    "the invoking user's supplementary groups stay with the sandbox (an unprivileged process \
                     cannot drop them; only the sandbox root's /usr and the Python runtime are visible)"
                        .into(),
                    Some("run it as a user without extra groups, or as root"),
                );
            }
        }
        push(
            Feature::Namespaces,
            Status::Enforced,
            "own pid, mount, ipc, uts and cgroup namespaces (bubblewrap)".into(),
            None,
        );
        push(
            Feature::Seccomp,
            Status::Enforced,
            "deny list (EPERM), clone3 -> ENOSYS, x32 guard".into(),
            None,
        );
        push(
            Feature::Network,
            Status::Enforced,
            "own network namespace without interfaces; only AF_UNIX sockets".into(),
            None,
        );
        push(
            Feature::ReadOnlyRuntime,
            Status::Enforced,
            match mode {
                IsolationMode::Rootful => "the sandbox root at /usr and the Python installation bound read-only".into(),
                IsolationMode::Rootless => {
                    "the sandbox root at /usr and the Python installation bound read-only, the sandbox's root \
                     remounted read-only"
                        .into()
                }
            },
            None,
        );
        push(
            Feature::PrivateTmp,
            Status::Enforced,
            format!(
                "private /tmp tmpfs of {} MiB and {} inodes",
                mib(limits.tmp_bytes),
                limits.tmpfs_inodes
            ),
            None,
        );
        match mode {
            IsolationMode::Rootful => push(
                Feature::ScratchSize,
                Status::Enforced,
                format!(
                    "/home/user is a tmpfs of its own, {} MiB and {} inodes",
                    mib(limits.scratch_bytes),
                    limits.tmpfs_inodes
                ),
                None,
            ),
            IsolationMode::Rootless => push(
                Feature::ScratchSize,
                Status::Enforced,
                format!(
                    "/home/user is a tmpfs of its own, {} MiB and {} inodes, mounted in the sandbox's own user and \
                     mount namespaces (as are /tmp and /dev/shm); its pages count against the memory cgroup when \
                     there is one, not against the watchdog's count",
                    mib(limits.scratch_bytes),
                    limits.tmpfs_inodes
                ),
                None,
            ),
        }
        push(
            Feature::NoNewPrivileges,
            Status::Enforced,
            "no_new_privs set, all capabilities dropped".into(),
            None,
        );
        limit_checks(&mut push, mode, enforcement, limits);
        push(
            Feature::CpuTime,
            Status::Enforced,
            format!("RLIMIT_CPU {} s per process", limits.cpu_seconds),
            None,
        );
        push(
            Feature::FileSize,
            Status::Enforced,
            format!("RLIMIT_FSIZE {} MiB per file", mib(limits.max_file_bytes)),
            None,
        );
        push(
            Feature::Processes,
            Status::Enforced,
            format!(
                "commands and PTYs start like kernels (same namespaces, seccomp, uid, cgroups and rlimits, {}); \
                 terminals are opened by the host, at most {} per sandbox",
                match mode {
                    IsolationMode::Rootful => "RLIMIT_NPROC set before bwrap",
                    IsolationMode::Rootless => "RLIMIT_NPROC set inside the user namespace before the program runs",
                },
                crate::config::MAX_PTYS
            ),
            None,
        );
        Self {
            mode: Some(mode),
            unavailable: None,
            checks,
        }
    }

    /// The report with the read-only runtime line naming the sandbox root (`what`), and saying how
    /// to rebuild it when the host's packages changed after it was built (`stale`).
    pub(crate) fn with_runtime_root(mut self, what: &str, stale: Option<String>) -> Self {
        if let Some(check) = self
            .checks
            .iter_mut()
            .find(|c| c.feature == Feature::ReadOnlyRuntime)
        {
            check.detail = format!("{}; {what}", check.detail);
            if let Some(stale) = stale {
                // Isolation is whole either way; what is missing is programs installed since.
                check.detail = format!("{}; note: {stale}", check.detail);
            }
        }
        self
    }

    /// The report with a line saying which languages contexts run (`available`) and why not the
    /// others (`missing`: each language with the reason and how to get it).
    pub(crate) fn with_languages(mut self, available: &[&str], missing: &[(&str, String)]) -> Self {
        if self.mode.is_none() {
            return self;
        }
        let detail = if missing.is_empty() {
            available.join(", ")
        } else {
            let names: Vec<&str> = missing.iter().map(|(name, _)| *name).collect();
            format!("{}; not {}", available.join(", "), names.join(", "))
        };
        let fix = missing
            .iter()
            .map(|(name, why)| format!("{name}: {why}"))
            .collect::<Vec<_>>();
        self.checks.push(Check {
            feature: Feature::Languages,
            status: if missing.is_empty() {
                Status::Enforced
            } else {
                Status::Partial
            },
            detail,
            fix: (!fix.is_empty()).then(|| fix.join("; ")),
        });
        self
    }

    /// The line for `feature`, if the report has one.
    pub fn check(&self, feature: Feature) -> Option<&Check> {
        self.checks.iter().find(|c| c.feature == feature)
    }

    /// Whether `feature` is fully in force.
    pub fn enforces(&self, feature: Feature) -> bool {
        self.check(feature).is_some_and(|c| c.status == Status::Enforced)
    }

    /// One line for a person: the mode and how the limits are enforced.
    pub fn summary(&self) -> String {
        let Some(mode) = self.mode else {
            return format!(
                "local sandbox unavailable: {}",
                self.unavailable.as_deref().unwrap_or("unknown reason")
            );
        };
        let how = |feature| match self.check(feature) {
            Some(c) if c.status == Status::Missing => "none".to_owned(),
            Some(c) => c
                .detail
                .split([':', ',', '('])
                .next()
                .unwrap_or("")
                .trim()
                .to_owned(),
            None => "?".to_owned(),
        };
        let weak = self
            .checks
            .iter()
            .filter(|c| c.status != Status::Enforced && c.feature != Feature::Languages)
            .count();
        format!(
            "local sandbox, {} mode; memory: {}; processes: {}; cpu quota: {}{}",
            match mode {
                IsolationMode::Rootful => "root",
                IsolationMode::Rootless => "rootless (user namespace)",
            },
            how(Feature::MemoryLimit),
            how(Feature::ProcessLimit),
            how(Feature::CpuQuota),
            if weak == 0 {
                String::new()
            } else {
                format!("; {weak} item(s) weaker than root mode, see `waxell-sandbox doctor`")
            }
        )
    }
}

fn limit_checks(
    push: &mut impl FnMut(Feature, Status, String, Option<&str>),
    mode: IsolationMode,
    e: &LimitEnforcement,
    limits: &Limits,
) {
    let mib = limits.memory_bytes >> 20;
    let (memory, pids, cpu) = (e.memory, e.pids, e.cpu);
    let how = e.cgroup.clone().unwrap_or_default();
    let why = &e.why;
    if memory {
        push(
            Feature::MemoryLimit,
            Status::Enforced,
            format!("{how}: {mib} MiB for the whole sandbox, no swap; OOM kills reported"),
            None,
        );
    } else {
        push(
            Feature::MemoryLimit,
            Status::Partial,
            format!(
                "host-side watchdog: measures the sandbox's private memory and the socket and pipe buffers it \
                 holds, after any of its processes ran, every {} to {} ms (the sooner the closer to the cap), and \
                 kills the largest process past {mib} MiB (reported as out of memory); a fast allocation can \
                 overshoot briefly, and pipes passed away over a socket and closed are not seen (at most {unseen} \
                 MiB per user). No cgroup: {why}",
                e.watchdog_poll_ms,
                crate::local::watchdog::LONGEST_WAIT.as_millis(),
                unseen = unseen_pipe_bytes(limits.open_files) >> 20,
            ),
            Some(LIMITS_FIX),
        );
    }
    if pids {
        push(
            Feature::ProcessLimit,
            Status::Enforced,
            format!("{how}: pids.max {} for the whole sandbox", limits.max_processes),
            None,
        );
    } else if mode == IsolationMode::Rootless && e.nproc_per_userns {
        push(
            Feature::ProcessLimit,
            Status::Partial,
            format!(
                "RLIMIT_NPROC {} per interpreter, counted inside its own user namespace (each context has its own \
                 budget). No cgroup: {why}",
                limits.max_processes
            ),
            Some(LIMITS_FIX),
        );
    } else if mode == IsolationMode::Rootless {
        push(
            Feature::ProcessLimit,
            Status::Missing,
            format!(
                "this kernel (before 5.14) counts RLIMIT_NPROC across all of the user's processes, so it cannot cap \
                 one sandbox. No cgroup: {why}"
            ),
            Some(LIMITS_FIX),
        );
    } else {
        push(
            Feature::ProcessLimit,
            Status::Partial,
            format!(
                "RLIMIT_NPROC {} per sandbox uid. No cgroup: {why}",
                limits.max_processes
            ),
            Some(LIMITS_FIX),
        );
    }
    if cpu {
        push(
            Feature::CpuQuota,
            Status::Enforced,
            format!("{how}: {} CPU(s)", limits.cpus),
            None,
        );
    } else {
        push(
            Feature::CpuQuota,
            Status::Missing,
            format!(
                "no CPU quota: a busy sandbox can use every core (the lifetime CPU budget still ends it). No cgroup: \
                 {why}"
            ),
            Some(LIMITS_FIX),
        );
    }
}

impl fmt::Display for HostReport {
    /// The report for a person: one line per layer and limit, with the fix under what is missing.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(reason) = &self.unavailable {
            writeln!(f, "local sandbox: UNAVAILABLE")?;
            return writeln!(f, "  {reason}");
        }
        writeln!(f, "{}", self.summary())?;
        write_checks(f, &self.checks)
    }
}

/// The most pipe memory the rootless watchdog cannot see (`kernel_buffers.rs`): pipes in flight in
/// socket queues that no process holds. The kernel refuses to send more descriptors once a user
/// has `RLIMIT_NOFILE` in flight (one message may still add `SCM_MAX_FD`, 253).
pub(crate) fn unseen_pipe_bytes(open_files: u64) -> u64 {
    const SCM_MAX_FD: u64 = 253;
    (open_files + SCM_MAX_FD) * crate::syscall_policy::MAX_PIPE_BYTES
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rootless_watchdog_report_says_what_is_weaker_and_how_to_fix_it() {
        let enforcement = LimitEnforcement {
            why: "no cgroup v2 subtree is delegated to uid 1000".into(),
            watchdog_poll_ms: 10,
            nproc_per_userns: true,
            ..Default::default()
        };
        let report = HostReport::build(IsolationMode::Rootless, 1000, &enforcement, &Limits::default());
        assert!(report.enforces(Feature::User));
        assert!(report.enforces(Feature::Seccomp));
        assert!(report.enforces(Feature::Network));
        assert_eq!(
            report.check(Feature::MemoryLimit).unwrap().status,
            Status::Partial
        );
        assert_eq!(report.check(Feature::CpuQuota).unwrap().status, Status::Missing);
        assert!(report.enforces(Feature::ScratchSize));
        let home = &report.check(Feature::ScratchSize).unwrap().detail;
        assert!(home.contains("256 MiB and 32768 inodes"), "{home}");
        for check in &report.checks {
            if check.status != Status::Enforced {
                assert!(check.fix.is_some(), "{:?} has no fix", check.feature);
            }
        }
        let text = report.to_string();
        assert!(text.contains("rootless"), "{text}");
        assert!(text.contains("systemd-run --user --scope"), "{text}");
        assert!(text.contains("delegated to uid 1000"), "{text}");
        let summary = report.summary();
        assert!(summary.contains("memory: host-side watchdog"), "{summary}");
        assert!(summary.contains("cpu quota: none"), "{summary}");
        let memory = &report.check(Feature::MemoryLimit).unwrap().detail;
        assert!(memory.contains("socket and pipe buffers"), "{memory}");
        assert!(memory.contains("at most 31 MiB per user"), "{memory}");
    }

    #[test]
    fn a_rootful_cgroup_report_enforces_everything() {
        let enforcement = LimitEnforcement {
            cgroup: Some("cgroup v1".into()),
            memory: true,
            pids: true,
            cpu: true,
            ..Default::default()
        };
        let report = HostReport::build(IsolationMode::Rootful, 0, &enforcement, &Limits::default());
        for check in &report.checks {
            assert_eq!(check.status, Status::Enforced, "{check:?}");
        }
        assert!(
            report.summary().contains("memory: cgroup v1;"),
            "{}",
            report.summary()
        );
        assert!(!report.summary().contains("doctor"));
    }

    #[test]
    fn an_unavailable_host_says_why() {
        let report = HostReport::unavailable("bubblewrap not found: apt-get install bubblewrap".into());
        assert!(report.summary().contains("apt-get install bubblewrap"));
        assert!(report.to_string().contains("UNAVAILABLE"));
    }

    #[test]
    fn the_report_names_the_languages_and_how_to_get_the_missing_ones() {
        let build = || {
            HostReport::build(
                IsolationMode::Rootful,
                0,
                &LimitEnforcement::default(),
                &Limits::default(),
            )
        };
        let report = build().with_languages(
            &["python", "javascript"],
            &[("r", "/usr/bin/R not found: install R".into())],
        );
        let line = report.check(Feature::Languages).expect("a languages line");
        assert_eq!(line.status, Status::Partial);
        assert_eq!(line.detail, "python, javascript; not r");
        assert_eq!(line.fix.as_deref(), Some("r: /usr/bin/R not found: install R"));
        // A missing language is no weaker isolation: the summary's count leaves it out.
        assert_eq!(report.summary(), build().summary());
    }
}
