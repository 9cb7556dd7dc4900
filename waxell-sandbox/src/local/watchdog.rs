//! Containment without a cgroup (rootless without a delegated cgroup v2 subtree, or a root host
//! with no usable controllers): the sandbox's processes are the descendants of its launchers (each
//! launcher is bwrap, whose pid namespace keeps every process, orphans included, below it), and a
//! host-side thread polls their memory (private resident memory, and the socket and pipe buffers
//! they queued: `kernel_buffers.rs`) and kills the largest process when the total passes the cap,
//! the way the kernel's OOM killer does inside a memory cgroup. Process counts are capped by
//! `RLIMIT_NPROC` inside each interpreter's user namespace (see `rootless.rs`), CPU time by
//! `RLIMIT_CPU`; a CPU *quota* cannot be enforced this way and the host report says so.

use std::collections::HashMap;
use std::fs;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustix::process::{kill_process, Pid, Signal};

/// How often the memory watchdog looks.
pub(crate) const POLL: Duration = Duration::from_millis(10);

/// Polls between two measures of the kernel buffers while the sandbox uses little memory (they
/// cost about twice the process scan: `kernel_buffers.rs`); every poll once it uses more.
const BUFFERS_EVERY: u32 = 4;

#[derive(Debug)]
struct Shared {
    launchers: Mutex<Vec<u32>>,
    memory_bytes: u64,
    max_processes: u64,
    oom_kills: AtomicU64,
    stop: AtomicBool,
}

/// One sandbox's processes, watched from the host. Drop stops the watchdog and kills them all.
#[derive(Debug)]
pub(crate) struct Watched {
    shared: Arc<Shared>,
}

impl Watched {
    pub(crate) fn new(memory_bytes: u64, max_processes: u64) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            launchers: Mutex::new(Vec::new()),
            memory_bytes,
            max_processes,
            oom_kills: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        });
        let watched = shared.clone();
        std::thread::Builder::new()
            .name("waxell-sandbox-watchdog".into())
            .spawn(move || watch_memory(&watched))?;
        Ok(Self { shared })
    }

    /// A launcher (bwrap) started for this sandbox: it and its descendants belong to it.
    pub(crate) fn add_launcher(&self, pid: u32) {
        if let Ok(mut launchers) = self.shared.launchers.lock() {
            launchers.retain(|p| process_alive(*p));
            launchers.push(pid);
        }
    }

    pub(crate) fn pids(&self) -> Vec<u32> {
        self.shared.pids()
    }

    pub(crate) fn oom_kills(&self) -> u64 {
        self.shared.oom_kills.load(Ordering::SeqCst)
    }

    /// Tasks (threads included, as `RLIMIT_NPROC` counts them) below the launchers at the cap.
    pub(crate) fn pids_max_reached(&self) -> bool {
        let tasks: u64 = self
            .shared
            .pids()
            .into_iter()
            .filter(|pid| !self.is_launcher(*pid))
            .map(task_count)
            .sum();
        tasks >= self.shared.max_processes
    }

    fn is_launcher(&self, pid: u32) -> bool {
        self.shared.launchers.lock().is_ok_and(|l| l.contains(&pid))
    }

    pub(crate) fn kill_all(&self) {
        for _ in 0..500 {
            let pids = self.shared.pids();
            if pids.is_empty() {
                return;
            }
            for pid in pids {
                sigkill(pid);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        tracing::warn!("sandbox processes survived SIGKILL for 1 s");
    }

    pub(crate) fn remove(&self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.kill_all();
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.remove();
    }
}

impl Shared {
    fn pids(&self) -> Vec<u32> {
        let roots: Vec<u32> = self.launchers.lock().map(|l| l.clone()).unwrap_or_default();
        descendants(&roots)
    }
}

fn watch_memory(shared: &Shared) {
    // Processes already killed: a big one can take longer than a poll to be torn down, and must then be
    // neither counted (and killed) again nor make the watchdog kill a second, innocent process for its memory.
    let mut killed: Vec<u32> = Vec::new();
    let mut buffers = crate::local::kernel_buffers::KernelBuffers::new();
    let mut held = crate::local::kernel_buffers::Held::default();
    let mut since_measured = BUFFERS_EVERY;
    while !shared.stop.load(Ordering::SeqCst) {
        std::thread::sleep(POLL);
        let pids = shared.pids();
        killed.retain(|pid| pids.contains(pid));
        let live: Vec<u32> = pids.into_iter().filter(|pid| !killed.contains(pid)).collect();
        let private: Vec<(u32, u64)> = live.iter().map(|&p| (p, private_bytes(p))).collect();
        let private_total: u64 = private.iter().map(|(_, b)| b).sum();
        // Socket and pipe buffers, which a memory cgroup would charge: each once in the total, and
        // to every process holding them open when choosing whom to kill. Measured every poll once
        // either kind of memory is a good part of the cap, else every `BUFFERS_EVERY` polls.
        since_measured += 1;
        let busy = held.total > shared.memory_bytes / 8 || private_total + held.total > shared.memory_bytes / 2;
        if busy || since_measured >= BUFFERS_EVERY {
            held = buffers.measure(&live);
            since_measured = 0;
        }
        let usage: Vec<(u32, u64)> = private
            .into_iter()
            .map(|(p, b)| (p, b + held.by_pid.get(&p).copied().unwrap_or(0)))
            .collect();
        let total = private_total + held.total;
        if total <= shared.memory_bytes {
            continue;
        }
        // Like the OOM killer: the biggest process goes, reported as an OOM kill.
        if let Some((pid, bytes)) = usage.into_iter().max_by_key(|(_, b)| *b) {
            tracing::info!(
                pid,
                bytes,
                total,
                kernel_buffers = held.total,
                cap = shared.memory_bytes,
                "sandbox memory cap exceeded, killing"
            );
            shared.oom_kills.fetch_add(1, Ordering::SeqCst);
            sigkill(pid);
            killed.push(pid);
        }
    }
}

/// Private (anonymous) resident memory of a process: `resident - shared` pages of `statm`. Shared
/// libraries are not counted; copy-on-write pages after a fork are counted in every process, so
/// the total errs on the high side.
pub(crate) fn private_bytes(pid: u32) -> u64 {
    let Ok(statm) = fs::read_to_string(format!("/proc/{pid}/statm")) else { return 0 };
    let mut fields = statm.split_whitespace().skip(1).map(|f| f.parse::<u64>().unwrap_or(0));
    let (resident, shared) = (fields.next().unwrap_or(0), fields.next().unwrap_or(0));
    resident.saturating_sub(shared) * page_size()
}

fn page_size() -> u64 {
    rustix::param::page_size() as u64
}

fn task_count(pid: u32) -> u64 {
    fs::read_dir(format!("/proc/{pid}/task")).map(|d| d.count() as u64).unwrap_or(0)
}

/// Live (not zombie) processes among `roots` and below them. Uses each task's `children` list
/// (CONFIG_PROC_CHILDREN), else one scan of `/proc`.
pub(crate) fn descendants(roots: &[u32]) -> Vec<u32> {
    let mut out = Vec::new();
    let mut queue: Vec<u32> = roots.to_vec();
    let mut by_parent: Option<HashMap<u32, Vec<u32>>> = None;
    while let Some(pid) = queue.pop() {
        if out.contains(&pid) || !process_alive(pid) {
            continue;
        }
        out.push(pid);
        match children(pid) {
            Some(kids) => queue.extend(kids),
            None => {
                let map = by_parent.get_or_insert_with(parent_map);
                queue.extend(map.get(&pid).into_iter().flatten());
            }
        }
    }
    out
}

fn children(pid: u32) -> Option<Vec<u32>> {
    let tasks = fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut kids = Vec::new();
    for task in tasks.flatten() {
        let list = fs::read_to_string(task.path().join("children")).ok()?;
        kids.extend(list.split_whitespace().filter_map(|p| p.parse::<u32>().ok()));
    }
    Some(kids)
}

fn parent_map() -> HashMap<u32, Vec<u32>> {
    let mut map: HashMap<u32, Vec<u32>> = HashMap::new();
    for entry in fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = fs::read_to_string(entry.path().join("stat")) else { continue };
        let Some(ppid) = stat.rsplit(')').next().and_then(|r| r.split_whitespace().nth(1)) else {
            continue;
        };
        if let Ok(ppid) = ppid.parse() {
            map.entry(ppid).or_default().push(pid);
        }
    }
    map
}

/// True while the process exists and is not a zombie.
pub(crate) fn process_alive(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat.rsplit(')').next().unwrap_or("").trim_start().starts_with(['Z', 'X']),
        Err(_) => false,
    }
}

pub(crate) fn sigkill(pid: u32) {
    if let Some(pid) = Pid::from_raw(pid as i32) {
        let _ = kill_process(pid, Signal::KILL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn descendants_include_grandchildren_and_skip_zombies() {
        let mut child = Command::new("bash")
            .args(["-c", "sleep 30 & sleep 30 & wait"])
            .spawn()
            .unwrap();
        let root = child.id();
        let mut found = Vec::new();
        for _ in 0..200 {
            found = descendants(&[root]);
            if found.len() == 3 {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(found.len(), 3, "bash and its two sleeps: {found:?}");
        let watched = Watched::new(u64::MAX, 1000).unwrap();
        watched.add_launcher(root);
        watched.kill_all();
        let _ = child.wait();
        // SIGKILL is delivered at once, but a loaded machine may take a moment to tear a process down.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        for pid in found {
            while process_alive(pid) && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            assert!(!process_alive(pid), "{pid} survived kill_all");
        }
    }

    #[test]
    fn the_memory_watchdog_kills_the_biggest_process_and_counts_it() {
        let mut child = Command::new("python3")
            .args(["-c", "import time\nb = bytearray(96 << 20)\nb[::4096] = bytes(len(b[::4096]))\ntime.sleep(30)"])
            .spawn()
            .unwrap();
        let watched = Watched::new(48 << 20, 1000).unwrap();
        watched.add_launcher(child.id());
        let status = child.wait().unwrap();
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(9));
        assert_eq!(watched.oom_kills(), 1);
    }
}
