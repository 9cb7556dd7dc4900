//! Per-sandbox cgroup v1 groups (memory, pids, cpu), created before the spawn and removed by Drop.
//!
//! This host class mounts the v1 controllers; the v2 hierarchy has none (see
//! `docs/sandbox.md`). Every process of a sandbox (all its contexts) joins the same groups through
//! pre-opened `cgroup.procs` fds written in the child before exec, so no fork escapes the limits.

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
                "cgroup v1 controller `{controller}` is not mounted at {} (the local sandbox needs the v1 memory, \
                 pids and cpu controllers to cap memory, processes and CPU; cgroup v2 is not supported yet)",
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

/// One sandbox's groups. Drop kills every process still in them and removes them.
#[derive(Debug)]
pub(crate) struct Cgroup {
    dirs: Vec<PathBuf>,
}

impl Cgroup {
    pub(crate) fn create(name: &str, limits: CgroupLimits) -> io::Result<Self> {
        let mut group = Cgroup { dirs: Vec::new() };
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
    pub(crate) fn open_procs_files(&self) -> io::Result<Vec<OwnedFd>> {
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
    pub(crate) fn oom_kills(&self) -> u64 {
        let text = fs::read_to_string(self.dir("memory").join("memory.oom_control")).unwrap_or_default();
        text.lines()
            .find_map(|line| line.strip_prefix("oom_kill "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Host pids of every process in the group.
    pub(crate) fn pids(&self) -> Vec<u32> {
        read_pids(self.dir("pids"))
    }

    pub(crate) fn pids_max_reached(&self) -> bool {
        let read = |f: &str| {
            fs::read_to_string(self.dir("pids").join(f))
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
        };
        matches!((read("pids.current"), read("pids.max")), (Some(c), Some(m)) if c >= m)
    }

    /// SIGKILL everything in the group until it is empty.
    pub(crate) fn kill_all(&self) {
        kill_until_empty(self.dir("pids"));
    }
}

impl Cgroup {
    /// Kill everything in the groups and remove them. Idempotent.
    pub(crate) fn remove(&self) {
        if self.dirs.len() == CONTROLLERS.len() {
            kill_until_empty(self.dir("pids"));
        }
        for dir in &self.dirs {
            remove_group(dir);
        }
    }
}

impl Drop for Cgroup {
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
