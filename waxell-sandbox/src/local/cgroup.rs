//! Per-sandbox resource limits: cgroup v1 groups (memory, pids, cpu), a cgroup v2 group
//! (`cgroup_v2.rs`), or, where no cgroup can be had, the host-side watchdog (`watchdog.rs`). Which
//! one a backend uses is its [`Limiter`], chosen once from what the host offers (see
//! `capabilities.rs` for the report). Groups are created before the spawn and removed by Drop.
//!
//! Every process of a sandbox (all its contexts) joins the same groups through pre-opened
//! `cgroup.procs` fds written in the child before exec, so no fork escapes the limits.

use std::fs;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::process::{pidfd_open, pidfd_send_signal, Pid, PidfdFlags, Signal};

/// Where the v1 controllers are mounted.
pub(crate) const CGROUP_ROOT: &str = "/sys/fs/cgroup";
/// Our subtree inside each controller.
const SUBTREE: &str = "waxell-sandbox";
const CONTROLLERS: [&str; 3] = ["memory", "pids", "cpu"];

/// How a backend enforces memory, process and CPU limits.
#[derive(Debug, Clone)]
pub(crate) enum Limiter {
    /// cgroup v1 controllers (root, hybrid or legacy hierarchy).
    V1,
    /// Our own subtree in the unified hierarchy: at its root (root) or delegated to us (rootless).
    V2 {
        parent: crate::local::cgroup_v2::V2Parent,
        delegated: bool,
    },
    /// No usable cgroup: rlimits plus the host-side memory watchdog. `why` says what was missing.
    Watchdog { why: String },
}

impl Limiter {
    /// Pick the best the host offers. As root: the unified hierarchy when the host runs it, else
    /// v1; rootless: a subtree delegated to this user. Failures fall back to the watchdog, with the
    /// reason kept for the host report.
    pub(crate) fn detect(rootless: bool) -> Self {
        let mount = Path::new(CGROUP_ROOT);
        let mut why = Vec::new();
        if rootless {
            let euid = rustix::process::geteuid().as_raw();
            match crate::local::cgroup_v2::self_cgroup()
                .and_then(|own| crate::local::cgroup_v2::delegated_base(mount, &own, euid))
            {
                Some(base) => match crate::local::cgroup_v2::V2Parent::prepare(&base) {
                    Ok(parent) => {
                        return Limiter::V2 {
                            parent,
                            delegated: true,
                        }
                    }
                    Err(e) => why.push(format!("the delegated cgroup {} is unusable: {e}", base.display())),
                },
                None => why.push(format!(
                    "no cgroup v2 subtree is delegated to uid {euid} (this process is not inside the user's \
                     systemd manager, or the host has no unified cgroup hierarchy)"
                )),
            }
        } else {
            if crate::local::cgroup_v2::unified_root(mount).is_some() {
                match crate::local::cgroup_v2::V2Parent::prepare(mount) {
                    Ok(parent) => {
                        return Limiter::V2 {
                            parent,
                            delegated: false,
                        }
                    }
                    Err(e) => why.push(format!("cgroup v2: {e}")),
                }
            }
            match check_available() {
                Ok(()) => return Limiter::V1,
                Err(e) => why.push(e),
            }
        }
        Limiter::Watchdog { why: why.join("; ") }
    }

    /// What this limiter enforces, for the host report.
    pub(crate) fn enforcement(&self) -> crate::local::capabilities::LimitEnforcement {
        let mut e = crate::local::capabilities::LimitEnforcement {
            watchdog_poll_ms: crate::local::watchdog::POLL.as_millis(),
            nproc_per_userns: crate::local::rootless::nproc_is_per_userns(),
            ..Default::default()
        };
        match self {
            Limiter::V1 => {
                e.cgroup = Some("cgroup v1".into());
                (e.memory, e.pids, e.cpu) = (true, true, true);
            }
            Limiter::V2 { parent, delegated } => {
                let c = parent.controllers();
                e.cgroup = Some(if *delegated {
                    format!("cgroup v2 (delegated) {}", parent.dir().display())
                } else {
                    format!("cgroup v2 {}", parent.dir().display())
                });
                (e.memory, e.pids, e.cpu) = (c.memory, c.pids, c.cpu);
                e.why = format!("the cgroup does not offer the {} controller(s)", c.missing().join(", "));
            }
            Limiter::Watchdog { why } => e.why = why.clone(),
        }
        e
    }

    /// Remove groups of host processes that died without cleaning up.
    pub(crate) fn sweep_stale(&self) {
        match self {
            Limiter::V1 => sweep_stale(),
            Limiter::V2 { parent, .. } => parent.sweep_stale(),
            Limiter::Watchdog { .. } => {}
        }
    }
}

/// Limits applied through cgroups.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CgroupLimits {
    pub(crate) memory_bytes: u64,
    pub(crate) max_processes: u64,
    /// CPUs worth of time per period (1.0 = one core).
    pub(crate) cpus: f64,
}

/// Check that the v1 controllers we need are mounted and writable; the message says what is missing.
pub(crate) fn check_available() -> Result<(), String> {
    for controller in CONTROLLERS {
        let dir = Path::new(CGROUP_ROOT).join(controller);
        if !dir.join("cgroup.procs").exists() {
            return Err(format!(
                "cgroup v1 controller `{controller}` is not mounted at {}",
                dir.display()
            ));
        }
        let ours = dir.join(SUBTREE);
        if let Err(e) = fs::create_dir_all(&ours) {
            return Err(format!(
                "cannot create {}: {e} (the local sandbox must run as root)",
                ours.display()
            ));
        }
    }
    Ok(())
}

/// One sandbox's limits holder. Drop kills every process still in it and removes its groups.
#[derive(Debug)]
pub(crate) enum Cgroup {
    V1(V1Group),
    V2(crate::local::cgroup_v2::V2Group),
    Watched(crate::local::watchdog::Watched),
}

impl Cgroup {
    pub(crate) fn create(limiter: &Limiter, name: &str, limits: CgroupLimits) -> io::Result<Self> {
        Ok(match limiter {
            Limiter::V1 => Cgroup::V1(V1Group::create(name, limits)?),
            Limiter::V2 { parent, .. } => Cgroup::V2(parent.create(
                name,
                crate::local::cgroup_v2::V2Limits {
                    memory_bytes: limits.memory_bytes,
                    max_processes: limits.max_processes,
                    cpus: limits.cpus,
                },
            )?),
            Limiter::Watchdog { .. } => Cgroup::Watched(crate::local::watchdog::Watched::new(
                limits.memory_bytes,
                limits.max_processes,
            )?),
        })
    }

    /// A launcher was spawned into this sandbox (the watchdog tracks processes by ancestry).
    pub(crate) fn add_launcher(&self, pid: u32) {
        if let Cgroup::Watched(watched) = self {
            watched.add_launcher(pid);
        }
    }

    /// A process that joined the sandbox from outside (a forked kernel; a cgroup it joined itself).
    pub(crate) fn add_member(&self, pid: u32) {
        if let Cgroup::Watched(watched) = self {
            watched.add_member(pid);
        }
    }

    /// `cgroup.procs` files for the child to join before exec (none for the watchdog).
    pub(crate) fn open_procs_files(&self) -> io::Result<Vec<OwnedFd>> {
        match self {
            Cgroup::V1(group) => group.open_procs_files(),
            Cgroup::V2(group) => Ok(vec![fs::OpenOptions::new()
                .write(true)
                .open(group.procs_path())?
                .into()]),
            Cgroup::Watched(_) => Ok(Vec::new()),
        }
    }

    /// How many processes were killed for exceeding the memory cap.
    pub(crate) fn oom_kills(&self) -> u64 {
        match self {
            Cgroup::V1(group) => group.oom_kills(),
            Cgroup::V2(group) => group.oom_kills(),
            Cgroup::Watched(watched) => watched.oom_kills(),
        }
    }

    /// Host pids of every process in the sandbox.
    pub(crate) fn pids(&self) -> Vec<u32> {
        match self {
            Cgroup::V1(group) => group.pids(),
            Cgroup::V2(group) => group.pids(),
            Cgroup::Watched(watched) => watched.pids(),
        }
    }

    pub(crate) fn pids_max_reached(&self) -> bool {
        match self {
            Cgroup::V1(group) => group.pids_max_reached(),
            Cgroup::V2(group) => group.pids_max_reached(),
            Cgroup::Watched(watched) => watched.pids_max_reached(),
        }
    }

    /// SIGKILL everything in the sandbox until it is empty.
    pub(crate) fn kill_all(&self) {
        match self {
            Cgroup::V1(group) => group.kill_all(),
            Cgroup::V2(group) => group.kill_all(),
            Cgroup::Watched(watched) => watched.kill_all(),
        }
    }

    /// Kill everything and remove the groups. Idempotent.
    pub(crate) fn remove(&self) {
        match self {
            Cgroup::V1(group) => group.remove(),
            Cgroup::V2(group) => group.remove(),
            Cgroup::Watched(watched) => watched.remove(),
        }
    }
}

/// One sandbox's v1 groups.
#[derive(Debug)]
pub(crate) struct V1Group {
    dirs: Vec<PathBuf>,
}

impl V1Group {
    fn create(name: &str, limits: CgroupLimits) -> io::Result<Self> {
        let mut group = V1Group { dirs: Vec::new() };
        for controller in CONTROLLERS {
            let dir = Path::new(CGROUP_ROOT).join(controller).join(SUBTREE).join(name);
            fs::create_dir(&dir)?;
            group.dirs.push(dir);
        }
        group.write(
            "memory",
            "memory.limit_in_bytes",
            &limits.memory_bytes.to_string(),
        )?;
        // No swap on the sandbox's pages: the cap is a real cap. Best effort, swap may be absent.
        let _ = group.write("memory", "memory.swappiness", "0");
        group.write("pids", "pids.max", &limits.max_processes.to_string())?;
        let period: u64 = 100_000;
        group.write("cpu", "cpu.cfs_period_us", &period.to_string())?;
        let quota = ((period as f64) * limits.cpus).round().max(1000.0) as u64;
        group.write("cpu", "cpu.cfs_quota_us", &quota.to_string())?;
        Ok(group)
    }

    fn dir(&self, controller: &str) -> &Path {
        let index = CONTROLLERS
            .iter()
            .position(|c| *c == controller)
            .expect("known controller");
        &self.dirs[index]
    }

    fn write(&self, controller: &str, file: &str, value: &str) -> io::Result<()> {
        let path = self.dir(controller).join(file);
        fs::write(&path, value)
            .map_err(|e| io::Error::new(e.kind(), format!("writing {}: {e}", path.display())))
    }

    /// `cgroup.procs` of every controller, opened for the child to join with.
    fn open_procs_files(&self) -> io::Result<Vec<OwnedFd>> {
        self.dirs
            .iter()
            .map(|dir| {
                Ok(fs::OpenOptions::new()
                    .write(true)
                    .open(dir.join("cgroup.procs"))?
                    .into())
            })
            .collect()
    }

    /// How many times the OOM killer has struck in this group.
    fn oom_kills(&self) -> u64 {
        let text = fs::read_to_string(self.dir("memory").join("memory.oom_control")).unwrap_or_default();
        text.lines()
            .find_map(|line| line.strip_prefix("oom_kill "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Host pids of every process in the group.
    fn pids(&self) -> Vec<u32> {
        read_pids(self.dir("pids"))
    }

    fn pids_max_reached(&self) -> bool {
        let read = |f: &str| {
            fs::read_to_string(self.dir("pids").join(f))
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
        };
        matches!((read("pids.current"), read("pids.max")), (Some(c), Some(m)) if c >= m)
    }

    /// SIGKILL everything in the group until it is empty.
    fn kill_all(&self) {
        kill_until_empty(self.dir("pids"));
    }

    /// Kill everything in the groups and remove them. Idempotent.
    fn remove(&self) {
        if self.dirs.len() == CONTROLLERS.len() {
            kill_until_empty(self.dir("pids"));
        }
        for dir in &self.dirs {
            remove_group(dir);
        }
    }
}

impl Drop for V1Group {
    fn drop(&mut self) {
        self.remove();
    }
}

fn read_pids(dir: &Path) -> Vec<u32> {
    fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// SIGKILL every member of the group until it is empty. Immune to pid reuse: a pid read from
/// `cgroup.procs` may belong to another process by the time it is signalled, so each one is opened
/// as a pidfd first and signalled only if that very process is still in this group.
fn kill_until_empty(dir: &Path) {
    for _ in 0..500 {
        let pids = read_pids(dir);
        if pids.is_empty() {
            return;
        }
        let signalled = pids.into_iter().filter(|&pid| kill_member(dir, pid)).count();
        if signalled == 0 {
            return; // what is listed is no longer (or never was) a member
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    tracing::warn!(group = %dir.display(), "processes survived SIGKILL for 1 s");
}

fn kill_member(dir: &Path, pid: u32) -> bool {
    let Some(raw) = Pid::from_raw(pid as i32) else {
        return false;
    };
    // The pidfd names one process for good; the membership check below is about that process
    // (if it died and the pid was recycled, /proc/<pid> is another process in another group).
    let Ok(pidfd) = pidfd_open(raw, PidfdFlags::empty()) else {
        return false;
    };
    if !is_member(dir, pid) {
        return false;
    }
    pidfd_send_signal(&pidfd, Signal::KILL).is_ok()
}

/// Whether `/proc/<pid>/cgroup` places the process in `dir` (a v1 controller's group).
fn is_member(dir: &Path, pid: u32) -> bool {
    let Ok(relative) = dir.strip_prefix(CGROUP_ROOT) else {
        return false;
    };
    let mut parts = relative.components();
    let Some(controller) = parts.next().map(|c| c.as_os_str().to_string_lossy().into_owned()) else {
        return false;
    };
    let group = Path::new("/").join(parts.as_path());
    let Ok(text) = fs::read_to_string(format!("/proc/{pid}/cgroup")) else {
        return false;
    };
    text.lines().any(|line| {
        let mut fields = line.splitn(3, ':');
        let _ = fields.next();
        let controllers = fields.next().unwrap_or("");
        controllers.split(',').any(|c| c == controller)
            && fields.next().map(Path::new) == Some(group.as_path())
    })
}

/// rmdir with retries: the kernel releases a group shortly after its last process is reaped.
fn remove_group(dir: &Path) {
    for _ in 0..250 {
        match fs::remove_dir(dir) {
            Ok(()) => return,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return,
            Err(_) => std::thread::sleep(Duration::from_millis(2)),
        }
    }
    tracing::warn!(group = %dir.display(), "could not remove sandbox cgroup");
}

/// Remove groups left by host processes that died without cleaning up (a panic with abort, SIGKILL).
/// Group names start with the owning host pid.
pub(crate) fn sweep_stale() {
    for controller in CONTROLLERS {
        let root = Path::new(CGROUP_ROOT).join(controller).join(SUBTREE);
        let Ok(entries) = fs::read_dir(&root) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if crate::naming::owner_is_dead(&name) {
                kill_until_empty(&entry.path());
                remove_group(&entry.path());
            }
        }
    }
}

/// The subtree's path for a controller (tests check that nothing is left behind).
pub fn subtree_dir(controller: &str) -> PathBuf {
    Path::new(CGROUP_ROOT).join(controller).join(SUBTREE)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression (pid reuse): a pid listed in a group's `cgroup.procs` that belongs to a process
    /// outside the group, as after the member died and its pid was recycled, is never signalled.
    #[test]
    fn a_listed_pid_outside_the_group_is_not_killed() {
        let mut bystander = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let dir = std::env::temp_dir().join(format!("waxell-cgroup-test-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("cgroup.procs"), format!("{}\n", bystander.id())).unwrap();
        kill_until_empty(&dir);
        let alive = bystander.try_wait().unwrap().is_none();
        let _ = bystander.kill();
        let _ = bystander.wait();
        fs::remove_dir_all(&dir).unwrap();
        assert!(alive, "a process outside the group was killed");
    }
}
