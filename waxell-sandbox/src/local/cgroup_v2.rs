//! The cgroup v2 (unified hierarchy) writer: our own subtree `<base>/waxell-sandbox/<sandbox id>`
//! with `memory.max` (+ `memory.swap.max = 0`), `pids.max` and `cpu.max`.
//!
//! `<base>` is the hierarchy's root when running as root, or the nearest cgroup delegated to this
//! user (systemd's `user@UID.service` subtree) when rootless. Everything takes the hierarchy's
//! mount point as a parameter, so the tests run it against a directory tree shaped like cgroupfs.
//! Reading back: `memory.events` (`oom_kill N`) and `pids.events` (`max N`).

use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Our subtree under the base cgroup.
pub(crate) const SUBTREE: &str = "waxell-sandbox";
/// The controllers we use, in the order they are reported.
pub(crate) const WANTED: [&str; 3] = ["memory", "pids", "cpu"];

/// Which of `WANTED` a base cgroup can hand to its children.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Controllers {
    pub(crate) memory: bool,
    pub(crate) pids: bool,
    pub(crate) cpu: bool,
}

impl Controllers {
    fn parse(list: &str) -> Self {
        let has = |name| list.split_whitespace().any(|c| c == name);
        Self {
            memory: has("memory"),
            pids: has("pids"),
            cpu: has("cpu"),
        }
    }

    fn enabled(&self) -> impl Iterator<Item = &'static str> + '_ {
        WANTED.into_iter().zip([self.memory, self.pids, self.cpu]).filter_map(|(n, on)| on.then_some(n))
    }

    pub(crate) fn any(&self) -> bool {
        self.memory || self.pids || self.cpu
    }

    pub(crate) fn missing(&self) -> Vec<&'static str> {
        WANTED.into_iter().zip([self.memory, self.pids, self.cpu]).filter_map(|(n, on)| (!on).then_some(n)).collect()
    }
}

/// Limits written into each sandbox's group.
#[derive(Debug, Clone, Copy)]
pub(crate) struct V2Limits {
    pub(crate) memory_bytes: u64,
    pub(crate) max_processes: u64,
    /// CPUs worth of time per period (1.0 = one core).
    pub(crate) cpus: f64,
}

/// `<base>/waxell-sandbox`, prepared so its children get the controllers.
#[derive(Debug, Clone)]
pub(crate) struct V2Parent {
    dir: PathBuf,
    controllers: Controllers,
}

/// The controllers the base can pass on (its `cgroup.controllers`).
pub(crate) fn available(base: &Path) -> io::Result<Controllers> {
    Ok(Controllers::parse(&fs::read_to_string(base.join("cgroup.controllers"))?))
}

impl V2Parent {
    /// Enable the wanted controllers for `base`'s children, create our subtree and enable them
    /// there too. Fails naming the file when the kernel refuses (e.g. EBUSY: `base` has processes
    /// of its own, the "no internal processes" rule).
    pub(crate) fn prepare(base: &Path) -> io::Result<Self> {
        let controllers = available(base)?;
        if !controllers.any() {
            return Err(io::Error::other(format!(
                "{} offers none of the memory, pids and cpu controllers",
                base.display()
            )));
        }
        enable_for_children(base, &controllers)?;
        let dir = base.join(SUBTREE);
        match fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(annotate(e, &dir)),
        }
        enable_for_children(&dir, &controllers)?;
        Ok(Self { dir, controllers })
    }

    pub(crate) fn controllers(&self) -> &Controllers {
        &self.controllers
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Create one sandbox's group with its limits. The group is removed again if a write fails.
    pub(crate) fn create(&self, name: &str, limits: V2Limits) -> io::Result<V2Group> {
        let dir = self.dir.join(name);
        fs::create_dir(&dir).map_err(|e| annotate(e, &dir))?;
        let group = V2Group { dir };
        if self.controllers.memory {
            group.write("memory.max", &limits.memory_bytes.to_string())?;
            // No swap: the cap is a real cap. Absent when the kernel has no swap accounting.
            if group.dir.join("memory.swap.max").exists() || !is_cgroupfs(&group.dir) {
                group.write("memory.swap.max", "0")?;
            }
        }
        if self.controllers.pids {
            group.write("pids.max", &limits.max_processes.to_string())?;
        }
        if self.controllers.cpu {
            let period: u64 = 100_000;
            let quota = ((period as f64) * limits.cpus).round().max(1000.0) as u64;
            group.write("cpu.max", &format!("{quota} {period}"))?;
        }
        Ok(group)
    }

    /// Remove groups left by dead host processes (names start with the owner's pid).
    pub(crate) fn sweep_stale(&self) {
        let Ok(entries) = fs::read_dir(&self.dir) else { return };
        for entry in entries.flatten() {
            if entry.path().is_dir() && crate::naming::owner_is_dead(&entry.file_name().to_string_lossy()) {
                V2Group { dir: entry.path() }.remove();
            }
        }
    }
}

fn enable_for_children(dir: &Path, controllers: &Controllers) -> io::Result<()> {
    let file = dir.join("cgroup.subtree_control");
    let current = Controllers::parse(&fs::read_to_string(&file).unwrap_or_default());
    let wanted: Vec<String> = controllers
        .enabled()
        .filter(|c| !current.enabled().any(|x| x == *c))
        .map(|c| format!("+{c}"))
        .collect();
    if wanted.is_empty() {
        return Ok(());
    }
    fs::write(&file, wanted.join(" ")).map_err(|e| annotate(e, &file))
}

fn annotate(e: io::Error, path: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

/// Whether `path` is on a cgroup2 file system (the tests use a plain directory tree instead).
pub(crate) fn is_cgroupfs(path: &Path) -> bool {
    const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;
    // f_type's integer type differs between architectures.
    #[allow(clippy::unnecessary_cast)]
    rustix::fs::statfs(path).is_ok_and(|s| s.f_type as i64 == CGROUP2_SUPER_MAGIC)
}

/// One sandbox's v2 group. Removal kills every process in it first.
#[derive(Debug)]
pub(crate) struct V2Group {
    dir: PathBuf,
}

impl V2Group {
    #[cfg(test)]
    fn dir(&self) -> &Path {
        &self.dir
    }

    fn write(&self, file: &str, value: &str) -> io::Result<()> {
        let path = self.dir.join(file);
        fs::write(&path, value).map_err(|e| annotate(e, &path))
    }

    fn read_key(&self, file: &str, key: &str) -> u64 {
        fs::read_to_string(self.dir.join(file))
            .unwrap_or_default()
            .lines()
            .find_map(|line| line.strip_prefix(key)?.strip_prefix(' '))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    }

    /// The group's `cgroup.procs`, for the child to join with before exec.
    pub(crate) fn procs_path(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    /// OOM kills in this group (`memory.events`: `oom_kill N`).
    pub(crate) fn oom_kills(&self) -> u64 {
        self.read_key("memory.events", "oom_kill")
    }

    /// Forks refused at `pids.max` (`pids.events`: `max N`).
    pub(crate) fn pid_cap_events(&self) -> u64 {
        self.read_key("pids.events", "max")
    }

    /// Whether `pids.current` has reached `pids.max`, or a fork was refused there since creation.
    pub(crate) fn pids_max_reached(&self) -> bool {
        let read = |f: &str| {
            fs::read_to_string(self.dir.join(f)).ok().and_then(|s| s.trim().parse::<u64>().ok())
        };
        let at_cap = matches!((read("pids.current"), read("pids.max")), (Some(c), Some(m)) if c >= m);
        at_cap || self.pid_cap_events() > 0
    }

    /// Host pids of the live processes in the group.
    pub(crate) fn pids(&self) -> Vec<u32> {
        fs::read_to_string(self.procs_path())
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .filter(|pid| crate::local::watchdog::process_alive(*pid))
            .collect()
    }

    /// Kill every process: `cgroup.kill` (Linux 5.14+) where present, then SIGKILL whatever is
    /// still listed until the group is empty.
    pub(crate) fn kill_all(&self) {
        let kill_file = self.dir.join("cgroup.kill");
        if kill_file.exists() {
            let _ = fs::write(&kill_file, "1");
        }
        for _ in 0..500 {
            let pids = self.pids();
            if pids.is_empty() {
                return;
            }
            for pid in pids {
                crate::local::watchdog::sigkill(pid);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        tracing::warn!(group = %self.dir.display(), "processes survived SIGKILL for 1 s");
    }

    /// Kill everything and remove the group (retrying while the kernel releases it). Idempotent.
    pub(crate) fn remove(&self) {
        if !self.dir.exists() {
            return;
        }
        self.kill_all();
        for _ in 0..250 {
            match fs::remove_dir(&self.dir) {
                Ok(()) => return,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return,
                // A plain directory standing in for cgroupfs keeps the files we wrote.
                Err(_) if !is_cgroupfs(&self.dir) => {
                    let _ = fs::remove_dir_all(&self.dir);
                    return;
                }
                Err(_) => std::thread::sleep(Duration::from_millis(2)),
            }
        }
        tracing::warn!(group = %self.dir.display(), "could not remove sandbox cgroup");
    }
}

impl Drop for V2Group {
    fn drop(&mut self) {
        self.remove();
    }
}

/// The unified hierarchy's mount point when the host runs it with the controllers we need
/// (`cgroup.controllers` at the root lists some of memory/pids/cpu), else `None` (v1 or hybrid).
pub(crate) fn unified_root(mount: &Path) -> Option<PathBuf> {
    available(mount).ok().filter(Controllers::any).map(|_| mount.to_path_buf())
}

/// For a non-root user: the nearest ancestor of our own cgroup (`self_cgroup`, the `0::` line of
/// `/proc/self/cgroup`) that is delegated to `euid` (owned by it, as systemd does for everything
/// below `user@UID.service`) and offers controllers. Not our own cgroup: one with processes cannot
/// pass controllers on. Children created there can be joined, since we can write the common
/// ancestor's `cgroup.procs`.
pub(crate) fn delegated_base(mount: &Path, self_cgroup: &str, euid: u32) -> Option<PathBuf> {
    let own = mount.join(self_cgroup.trim().trim_start_matches('/'));
    let owned = |p: &Path| fs::metadata(p).is_ok_and(|m| m.uid() == euid);
    for ancestor in own.ancestors().skip(1) {
        if !ancestor.starts_with(mount) || ancestor == mount {
            return None;
        }
        if !(owned(ancestor) && owned(&ancestor.join("cgroup.procs")) && owned(&ancestor.join("cgroup.subtree_control"))) {
            return None;
        }
        if available(ancestor).is_ok_and(|c| c.any()) {
            return Some(ancestor.to_path_buf());
        }
    }
    None
}

/// Our own cgroup v2 path (the `0::` line of `/proc/self/cgroup`).
pub(crate) fn self_cgroup() -> Option<String> {
    fs::read_to_string("/proc/self/cgroup")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory tree shaped like a unified cgroupfs mount: the root offers the controllers and
    /// nothing is enabled for children yet.
    fn fake_root() -> PathBuf {
        let root = std::env::temp_dir().join(format!("waxell-cgv2-test-{}-{}", std::process::id(), rand_suffix()));
        fs::create_dir_all(&root).unwrap();
        fs::write(root.join("cgroup.controllers"), "cpuset cpu io memory hugetlb pids rdma misc\n").unwrap();
        fs::write(root.join("cgroup.subtree_control"), "").unwrap();
        fs::write(root.join("cgroup.procs"), "1\n").unwrap();
        root
    }

    fn rand_suffix() -> u32 {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        N.fetch_add(1, Ordering::Relaxed)
    }

    fn limits() -> V2Limits {
        V2Limits {
            memory_bytes: 256 << 20,
            max_processes: 64,
            cpus: 0.5,
        }
    }

    #[test]
    fn limits_are_written_into_our_own_subtree() {
        let root = fake_root();
        let parent = V2Parent::prepare(&root).unwrap();
        // Controllers enabled for the root's children and for our subtree's children.
        for dir in [root.clone(), root.join(SUBTREE)] {
            let enabled = fs::read_to_string(dir.join("cgroup.subtree_control")).unwrap();
            assert_eq!(enabled, "+memory +pids +cpu", "{}", dir.display());
        }
        let group = parent.create("4242-0-abcde", limits()).unwrap();
        let dir = root.join(SUBTREE).join("4242-0-abcde");
        assert_eq!(group.dir(), dir);
        let read = |f: &str| fs::read_to_string(dir.join(f)).unwrap();
        assert_eq!(read("memory.max"), (256u64 << 20).to_string());
        assert_eq!(read("memory.swap.max"), "0");
        assert_eq!(read("pids.max"), "64");
        assert_eq!(read("cpu.max"), "50000 100000");
        assert_eq!(group.procs_path(), dir.join("cgroup.procs"));
        drop(group);
        assert!(!dir.exists(), "the group is removed on drop");
        fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn only_offered_controllers_are_used() {
        let root = fake_root();
        fs::write(root.join("cgroup.controllers"), "memory pids\n").unwrap();
        let parent = V2Parent::prepare(&root).unwrap();
        assert_eq!(parent.controllers().missing(), ["cpu"]);
        let group = parent.create("4242-1-abcde", limits()).unwrap();
        assert!(!group.dir().join("cpu.max").exists());
        assert!(group.dir().join("memory.max").exists());
        drop(group);
        fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn oom_and_pid_cap_events_are_read_back() {
        let root = fake_root();
        let parent = V2Parent::prepare(&root).unwrap();
        let group = parent.create("4242-2-abcde", limits()).unwrap();
        assert_eq!(group.oom_kills(), 0);
        assert!(!group.pids_max_reached());
        // What the kernel writes after one OOM kill and three refused forks.
        fs::write(
            group.dir().join("memory.events"),
            "low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 0\n",
        )
        .unwrap();
        fs::write(group.dir().join("pids.events"), "max 3\n").unwrap();
        assert_eq!(group.oom_kills(), 1);
        assert_eq!(group.pid_cap_events(), 3);
        assert!(group.pids_max_reached());
        fs::write(group.dir().join("pids.events"), "max 0\n").unwrap();
        fs::write(group.dir().join("pids.current"), "64\n").unwrap();
        assert!(group.pids_max_reached(), "pids.current at pids.max");
        drop(group);
        fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn cleanup_kills_the_members_and_removes_the_group() {
        let root = fake_root();
        let parent = V2Parent::prepare(&root).unwrap();
        let group = parent.create("4242-3-abcde", limits()).unwrap();
        let mut member = std::process::Command::new("sleep").arg("60").spawn().unwrap();
        fs::write(group.procs_path(), format!("{}\n", member.id())).unwrap();
        fs::write(group.dir().join("cgroup.kill"), "0").unwrap();
        assert_eq!(group.pids(), [member.id()]);
        let dir = group.dir().to_owned();
        group.remove();
        // cgroup.kill was used, and the member is dead (killed by the fallback SIGKILL here,
        // since a plain file does not kill anything).
        let status = member.wait().unwrap();
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(9));
        assert!(!dir.exists());
        drop(group);
        fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn stale_groups_of_dead_owners_are_swept() {
        let root = fake_root();
        let parent = V2Parent::prepare(&root).unwrap();
        // pid 2^22 + 1 is above pid_max's ceiling: never a live process.
        let stale = parent.dir().join("4194305-0-abcde");
        fs::create_dir(&stale).unwrap();
        let live = parent.create(&format!("{}-9-abcde", std::process::id()), limits()).unwrap();
        parent.sweep_stale();
        assert!(!stale.exists());
        assert!(live.dir().exists());
        drop(live);
        fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn a_base_with_processes_refusing_controllers_is_an_error_naming_the_file() {
        let root = fake_root();
        // Stand-in for EBUSY: the subtree_control file cannot be written.
        fs::remove_file(root.join("cgroup.subtree_control")).unwrap();
        fs::create_dir(root.join("cgroup.subtree_control")).unwrap();
        let error = V2Parent::prepare(&root).unwrap_err().to_string();
        assert!(error.contains("cgroup.subtree_control"), "{error}");
        fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn the_delegated_base_is_found_above_our_own_cgroup() {
        let root = fake_root();
        let euid = rustix::process::geteuid().as_raw();
        let user = "user.slice/user-1000.slice";
        let service = format!("{user}/user@1000.service");
        let own = format!("{service}/app.slice/app-term.scope");
        for dir in [user.to_owned(), service.clone(), format!("{service}/app.slice"), own.clone()] {
            let dir = root.join(dir);
            fs::create_dir_all(&dir).unwrap();
            fs::write(dir.join("cgroup.controllers"), "cpu memory pids\n").unwrap();
            fs::write(dir.join("cgroup.subtree_control"), "").unwrap();
            fs::write(dir.join("cgroup.procs"), "").unwrap();
        }
        let chown = |p: &Path, uid| {
            let _ = rustix::fs::chown(p, Some(rustix::fs::Uid::from_raw(uid)), None);
        };
        // user-1000.slice belongs to root; the service and everything below it to the user.
        if euid == 0 {
            for f in ["", "cgroup.procs", "cgroup.subtree_control"] {
                chown(&root.join(user).join(f), 4242);
            }
        }
        let own_path = format!("/{own}");
        assert_eq!(
            delegated_base(&root, &own_path, euid),
            Some(root.join(&service).join("app.slice")),
            "the nearest delegated ancestor"
        );
        // app.slice passes nothing on: the next one up that does.
        fs::write(root.join(&service).join("app.slice/cgroup.controllers"), "").unwrap();
        assert_eq!(delegated_base(&root, &own_path, euid), Some(root.join(&service)));
        if euid == 0 {
            // Up to the root-owned user slice, nothing further.
            fs::write(root.join(&service).join("cgroup.controllers"), "").unwrap();
            assert_eq!(delegated_base(&root, &own_path, euid), None);
        }
        // Not delegated at all: nothing.
        assert_eq!(delegated_base(&root, &format!("/{own}"), euid.wrapping_add(1)), None);
        fs::remove_dir_all(root).unwrap();
    }
}
