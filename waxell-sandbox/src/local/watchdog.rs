//! Containment without a cgroup (rootless without a delegated cgroup v2 subtree, or a root host
//! with no usable controllers): the sandbox's processes are the descendants of its launchers (each
//! launcher is bwrap, whose pid namespace keeps every process, orphans included, below it), and a
//! host-side thread measures their memory (private resident memory, and the socket and pipe buffers
//! they queued: `kernel_buffers.rs`) and kills the largest process when the total passes the cap,
//! the way the kernel's OOM killer does inside a memory cgroup. Process counts are capped by
//! `RLIMIT_NPROC` inside each interpreter's user namespace (see `rootless.rs`), CPU time by
//! `RLIMIT_CPU`; a CPU *quota* cannot be enforced this way and the host report says so.
//!
//! Idle sandboxes cost next to nothing. Memory grows only while a process of the sandbox runs, so
//! a measure records each process's CPU clock, and until one of those clocks moves (or a launcher
//! is added) the sandbox is not measured again. Those quiet looks, one `clock_gettime` per process,
//! are made for every parked sandbox by one thread (`QuietLooks`), and looks come as seldom as the
//! room left under the cap allows (`next_wait`).

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError, Weak};
use std::time::{Duration, Instant};

use nix::sys::time::TimeSpec;
use nix::time::ClockId;
use rustix::process::{kill_process, Pid, Signal};

/// The shortest wait between two looks at a sandbox (the longest is `LONGEST_WAIT`).
pub(crate) const POLL: Duration = Duration::from_millis(10);

/// The longest wait between two looks, however much room is left.
pub(crate) const LONGEST_WAIT: Duration = Duration::from_millis(100);

/// How fast one host CPU is assumed to fill memory: above the 1.6 GiB/s measured for
/// `MAP_POPULATE` in one process (3.3 GiB/s on two cores), the fastest way to fault pages in.
const FILL_RATE_PER_CPU: f64 = (4u64 << 30) as f64;

/// How old the kernel-buffer measure may grow while the sandbox uses little memory (it costs about
/// twice the process scan: `kernel_buffers.rs`); it is measured at every look once it uses more.
const BUFFERS_MAX_AGE: Duration = Duration::from_millis(40);

#[derive(Debug)]
struct Shared {
    launchers: Mutex<Vec<u32>>,
    /// Bumped under `launchers`' lock by each `add_launcher`: a schedule made before vouches for
    /// nothing the new launcher runs.
    generation: AtomicU64,
    memory_bytes: u64,
    max_processes: u64,
    oom_kills: AtomicU64,
    /// Measures made (for the tests: a still sandbox is not measured).
    measures: AtomicU64,
    stop: AtomicBool,
    park: Mutex<Park>,
    unpark: Condvar,
}

/// How the sandbox's watchdog thread waits between looks.
#[derive(Debug, Default)]
struct Park {
    /// Counts the parks: a quiet look queued for an earlier one is dropped.
    number: u64,
    /// While parked: the clocks the quiet looks compare.
    schedule: Option<Schedule>,
    /// Something may have run that the last measure did not see (a launcher was added, a clock
    /// moved) or the sandbox is going: measure now. Cleared as a measure starts.
    woken: bool,
}

/// What a measure saw of the sandbox's processes' CPU clocks: while none of them moves and no
/// launcher is added, no process of the sandbox ran, so its memory cannot have grown.
#[derive(Debug)]
struct Schedule {
    generation: u64,
    clocks: Vec<(ClockId, TimeSpec)>,
    /// The wait between two looks (`next_wait`).
    wait: Duration,
    /// The kernel buffers were measured after the clocks were read, so the measure holds for as
    /// long as the clocks stay still; else one more measure is due even if nothing runs.
    buffers_fresh: bool,
}

impl Schedule {
    /// True while none of the processes ran since their clocks were read and no launcher was
    /// added. An empty schedule vouches for nothing.
    fn still(&self, shared: &Shared) -> bool {
        !self.clocks.is_empty()
            && shared.generation.load(Ordering::SeqCst) == self.generation
            && self.clocks.iter().all(|(clock, at)| clock.now().is_ok_and(|now| now == *at))
    }
}

/// One sandbox's processes, watched from the host. Drop stops the watchdog and kills them all.
#[derive(Debug)]
pub(crate) struct Watched {
    shared: Arc<Shared>,
    /// Roots that are the sandbox's own processes, not launchers (kernels forked into it from
    /// outside): they count towards the process cap.
    members: Mutex<Vec<u32>>,
}

impl Watched {
    pub(crate) fn new(memory_bytes: u64, max_processes: u64) -> std::io::Result<Self> {
        Self::with_looks(memory_bytes, max_processes, quiet_looks)
    }

    /// `new`, with the quiet looks made by `looks` (`None`: by the watchdog's own thread).
    fn with_looks(
        memory_bytes: u64,
        max_processes: u64,
        looks: fn() -> Option<&'static QuietLooks>,
    ) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            launchers: Mutex::new(Vec::new()),
            generation: AtomicU64::new(0),
            memory_bytes,
            max_processes,
            oom_kills: AtomicU64::new(0),
            measures: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            park: Mutex::new(Park::default()),
            unpark: Condvar::new(),
        });
        let watched = shared.clone();
        std::thread::Builder::new()
            .name("waxell-sandbox-watchdog".into())
            .spawn(move || watch_memory(&watched, looks))?;
        Ok(Self {
            shared,
            members: Mutex::new(Vec::new()),
        })
    }

    /// A launcher (bwrap) started for this sandbox: it and its descendants belong to it.
    pub(crate) fn add_launcher(&self, pid: u32) {
        {
            let mut launchers = lock(&self.shared.launchers);
            launchers.retain(|p| process_alive(*p));
            launchers.push(pid);
            self.shared.generation.fetch_add(1, Ordering::SeqCst);
        }
        self.shared.wake();
    }

    /// A process that joined this sandbox from outside (a forked kernel): it and its descendants
    /// belong to it, and it counts as one of its processes.
    pub(crate) fn add_member(&self, pid: u32) {
        {
            let mut members = lock(&self.members);
            members.retain(|p| process_alive(*p));
            members.push(pid);
        }
        self.add_launcher(pid);
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
        lock(&self.shared.launchers).contains(&pid) && !lock(&self.members).contains(&pid)
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
        self.shared.wake();
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
        descendants(&self.roots().0)
    }

    /// The launchers and their generation, read together.
    fn roots(&self) -> (Vec<u32>, u64) {
        let launchers = lock(&self.launchers);
        (launchers.clone(), self.generation.load(Ordering::SeqCst))
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// Ends the watchdog thread's wait, parked or not: the next measure comes at once.
    fn wake(&self) {
        let mut park = lock(&self.park);
        park.woken = true;
        park.schedule = None;
        self.unpark.notify_all();
    }

    /// Waits `wait`, or less if woken.
    fn rest(&self, wait: Duration) {
        let deadline = Instant::now() + wait;
        let mut park = lock(&self.park);
        while !park.woken && !self.stopped() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            park = self.unpark.wait_timeout(park, left).unwrap_or_else(PoisonError::into_inner).0;
        }
    }

    /// Waits until one of the schedule's processes ran or a launcher is added (or the sandbox
    /// goes), looking every `schedule.wait`: from the shared thread when there is one, else from
    /// this one.
    fn park(self: &Arc<Self>, schedule: Schedule, looks: Option<&QuietLooks>) {
        let wait = schedule.wait;
        let mut park = lock(&self.park);
        if park.woken || self.stopped() {
            return;
        }
        let Some(looks) = looks else {
            drop(park);
            loop {
                self.rest(wait);
                if lock(&self.park).woken || self.stopped() || !schedule.still(self) {
                    return;
                }
            }
        };
        park.number += 1;
        let number = park.number;
        park.schedule = Some(schedule);
        drop(park);
        looks.queue(Arc::downgrade(self), number, wait);
        let mut park = lock(&self.park);
        while !park.woken && !self.stopped() {
            park = self.unpark.wait(park).unwrap_or_else(PoisonError::into_inner);
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How long the next look may wait: as long as the `room` left under the cap cannot fill sooner at
/// `fill_rate` bytes per second, between `POLL` and `LONGEST_WAIT`.
pub(crate) fn next_wait(room: u64, fill_rate: f64) -> Duration {
    Duration::from_secs_f64((room as f64 / fill_rate).min(LONGEST_WAIT.as_secs_f64())).max(POLL)
}

/// The fastest the sandbox's processes can fill memory together: every host CPU at
/// `FILL_RATE_PER_CPU`.
fn fill_rate() -> f64 {
    static CPUS: OnceLock<usize> = OnceLock::new();
    let cpus = *CPUS.get_or_init(|| {
        // Every online CPU, not only those this process may use: a sandbox process can widen its
        // own affinity mask.
        let online = fs::read_to_string("/sys/devices/system/cpu/online").map_or(0, |list| cpu_count(&list));
        online.max(std::thread::available_parallelism().map_or(1, |n| n.get()))
    });
    cpus as f64 * FILL_RATE_PER_CPU
}

/// The CPUs in a kernel CPU list (`0-3,8,10-11`).
fn cpu_count(list: &str) -> usize {
    list.trim()
        .split(',')
        .filter_map(|range| match range.split_once('-') {
            Some((a, b)) => Some(b.parse::<usize>().ok()?.checked_sub(a.parse().ok()?)? + 1),
            None => range.parse::<usize>().ok().map(|_| 1),
        })
        .sum()
}

fn watch_memory(shared: &Arc<Shared>, looks: fn() -> Option<&'static QuietLooks>) {
    let mut measurer = Measurer {
        killed: Vec::new(),
        buffers: crate::local::kernel_buffers::KernelBuffers::new(),
        held: Default::default(),
        buffers_at: None,
    };
    let mut wait = POLL;
    let mut schedule: Option<Schedule> = None;
    while !shared.stopped() {
        let mut force_buffers = false;
        match schedule.take() {
            Some(s) if s.buffers_fresh => shared.park(s, looks()),
            // Still, but with buffers measured before the clocks were read: once more, buffers too.
            Some(s) => {
                shared.rest(s.wait);
                force_buffers = s.still(shared);
            }
            None => shared.rest(wait),
        }
        if shared.stopped() {
            break;
        }
        (wait, schedule) = measurer.measure(shared, force_buffers);
    }
}

/// One sandbox's measures, kept from one look to the next.
struct Measurer {
    /// Processes already killed: a big one can take longer than a look to be torn down, and must
    /// then be neither counted (and killed) again nor make the watchdog kill a second, innocent
    /// process for its memory.
    killed: Vec<u32>,
    buffers: crate::local::kernel_buffers::KernelBuffers,
    held: crate::local::kernel_buffers::Held,
    buffers_at: Option<Instant>,
}

impl Measurer {
    /// One measure, killing past the cap: the wait before the next look, and the clocks that
    /// vouch for the sandbox until they move (none while a killed process is still going, or if a
    /// clock could not be read).
    fn measure(&mut self, shared: &Shared, force_buffers: bool) -> (Duration, Option<Schedule>) {
        lock(&shared.park).woken = false;
        shared.measures.fetch_add(1, Ordering::Relaxed);
        let (roots, generation) = shared.roots();
        // Each clock is read before the process's threads and children are: a thread or child made
        // after the read moves it.
        let found = walk(&roots, cpu_clock);
        let pids: Vec<u32> = found.iter().map(|(pid, _)| *pid).collect();
        self.killed.retain(|pid| pids.contains(pid));
        let live: Vec<u32> = pids.into_iter().filter(|pid| !self.killed.contains(pid)).collect();
        let private: Vec<(u32, u64)> = live.iter().map(|&p| (p, private_bytes(p))).collect();
        let private_total: u64 = private.iter().map(|(_, b)| b).sum();
        // Socket and pipe buffers, which a memory cgroup would charge: each once in the total, and
        // to every process holding them open when choosing whom to kill. Measured at every look
        // once either kind of memory is a good part of the cap, else once the last measure is
        // `BUFFERS_MAX_AGE` old.
        let cap = shared.memory_bytes;
        let busy = self.held.total > cap / 8 || private_total + self.held.total > cap / 2;
        let now = Instant::now();
        let stale = self.buffers_at.is_none_or(|at| now.duration_since(at) >= BUFFERS_MAX_AGE);
        let buffers_fresh = busy || stale || force_buffers;
        if buffers_fresh {
            self.held = self.buffers.measure(&live);
            self.buffers_at = Some(now);
        }
        let total = private_total + self.held.total;
        if total > cap {
            // Like the OOM killer: the biggest process goes, reported as an OOM kill.
            let usage = private
                .into_iter()
                .map(|(p, b)| (p, b + self.held.by_pid.get(&p).copied().unwrap_or(0)));
            // A process already exiting (the code killed its own children, say) gives its memory
            // back before its descriptors, so its buffers still count for a moment: it is neither
            // killed again nor counted as an OOM kill of the next cell, and while the rest is
            // within the cap the next look comes soon.
            let (going, staying): (Vec<_>, Vec<_>) = usage.partition(|(p, _)| exiting(*p));
            let going_bytes: u64 = going.iter().map(|(_, b)| b).sum();
            if !going.is_empty() && total.saturating_sub(going_bytes) <= cap {
                return (POLL, None);
            }
            if let Some((pid, bytes)) = staying.into_iter().max_by_key(|(_, b)| *b) {
                tracing::info!(
                    pid,
                    bytes,
                    total,
                    kernel_buffers = self.held.total,
                    cap,
                    "sandbox memory cap exceeded, killing"
                );
                shared.oom_kills.fetch_add(1, Ordering::SeqCst);
                sigkill(pid);
                self.killed.push(pid);
            }
            return (POLL, None);
        }
        let wait = next_wait(cap - total, fill_rate());
        if !self.killed.is_empty() {
            return (wait, None);
        }
        let clocks: Option<Vec<(ClockId, TimeSpec)>> = found.into_iter().map(|(_, clock)| clock).collect();
        let schedule = clocks.map(|clocks| Schedule {
            generation,
            clocks,
            wait,
            buffers_fresh,
        });
        (wait, schedule)
    }
}

/// A process's CPU clock (the sum over its threads, ended ones included) and its reading now.
/// Linux lets any process read any other's.
fn cpu_clock(pid: u32) -> Option<(ClockId, TimeSpec)> {
    let clock = nix::time::clock_getcpuclockid(nix::unistd::Pid::from_raw(pid as i32)).ok()?;
    Some((clock, clock.now().ok()?))
}

/// Makes the quiet looks of every parked sandbox, from one thread for all: a parked sandbox then
/// costs one `clock_gettime` per process per look, and wakes no thread of its own.
#[derive(Debug)]
struct QuietLooks {
    queue: Mutex<Queue>,
    due: Condvar,
    /// Deadlines are rounded down to ticks counted from here, so that looks due close together
    /// are made at once.
    epoch: Instant,
}

/// Looks by deadline, and a sequence number that keeps equal deadlines apart.
#[derive(Debug, Default)]
struct Queue {
    due: BTreeMap<(Instant, u64), Due>,
    seq: u64,
}

impl Queue {
    fn push(&mut self, deadline: Instant, due: Due) {
        self.seq += 1;
        self.due.insert((deadline, self.seq), due);
    }
}

#[derive(Debug)]
struct Due {
    sandbox: Weak<Shared>,
    park: u64,
    wait: Duration,
}

/// The process's `QuietLooks`, its thread started on first use; `None` (with a warning) if it
/// could not be started, and each watchdog then makes its own quiet looks.
fn quiet_looks() -> Option<&'static QuietLooks> {
    static LOOKS: OnceLock<Option<&'static QuietLooks>> = OnceLock::new();
    *LOOKS.get_or_init(|| {
        let looks: &'static QuietLooks = Box::leak(Box::new(QuietLooks {
            queue: Mutex::new(Queue::default()),
            due: Condvar::new(),
            epoch: Instant::now(),
        }));
        match std::thread::Builder::new()
            .name("waxell-sandbox-quiet-looks".into())
            .spawn(move || looks.run())
        {
            Ok(_) => Some(looks),
            Err(e) => {
                tracing::warn!(error = %e, "cannot start the watchdogs' shared thread; each watchdog looks on its own");
                None
            }
        }
    })
}

impl QuietLooks {
    /// A look at `sandbox` in `wait`, for its park `park`.
    fn queue(&self, sandbox: Weak<Shared>, park: u64, wait: Duration) {
        let deadline = self.deadline(Instant::now() + wait, wait);
        lock(&self.queue).push(deadline, Due { sandbox, park, wait });
        self.due.notify_one();
    }

    /// `at` rounded down to a tick of `POLL`, or of half the wait for long waits (the idle
    /// sandboxes, which wait the longest, then share few ticks): never later than asked.
    fn deadline(&self, at: Instant, wait: Duration) -> Instant {
        let poll = POLL.as_nanos();
        let tick = ((wait / 2).as_nanos() / poll * poll).max(poll);
        let since = at.saturating_duration_since(self.epoch).as_nanos();
        self.epoch + Duration::from_nanos(u64::try_from(since / tick * tick).unwrap_or(u64::MAX))
    }

    fn run(&self) {
        let mut queue = lock(&self.queue);
        loop {
            let now = Instant::now();
            match queue.due.first_key_value().map(|(&(deadline, _), _)| deadline) {
                None => {
                    queue = self.due.wait(queue).unwrap_or_else(PoisonError::into_inner);
                    continue;
                }
                Some(deadline) if deadline > now => {
                    queue = self.due.wait_timeout(queue, deadline - now).unwrap_or_else(PoisonError::into_inner).0;
                    continue;
                }
                Some(_) => {}
            }
            // Every look due by now at once, without holding the queue (watchdogs park meanwhile).
            let mut due = Vec::new();
            while let Some(entry) = queue.due.first_entry() {
                if entry.key().0 > now {
                    break;
                }
                due.push(entry.remove());
            }
            drop(queue);
            due.retain(|d| self.look(d));
            let now = Instant::now();
            queue = lock(&self.queue);
            for d in due {
                queue.push(self.deadline(now + d.wait, d.wait), d);
            }
        }
    }

    /// One quiet look: true if the sandbox is still parked and nothing ran (look again later);
    /// else its thread is woken (if it still waits for this park) and the look dropped.
    fn look(&self, due: &Due) -> bool {
        let Some(sandbox) = due.sandbox.upgrade() else { return false };
        let mut park = lock(&sandbox.park);
        // No schedule: woken already, measuring, or parked on its own.
        let Some(schedule) = park.schedule.as_ref().filter(|_| park.number == due.park) else { return false };
        if !sandbox.stopped() && schedule.still(&sandbox) {
            return true;
        }
        park.woken = true;
        park.schedule = None;
        sandbox.unpark.notify_all();
        false
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
    walk(roots, |_| ()).into_iter().map(|(pid, ())| pid).collect()
}

/// `descendants`, each with what `first` found of it before its state and children were read.
fn walk<T>(roots: &[u32], mut first: impl FnMut(u32) -> T) -> Vec<(u32, T)> {
    let mut out: Vec<(u32, T)> = Vec::new();
    let mut queue: Vec<u32> = roots.to_vec();
    let mut by_parent: Option<HashMap<u32, Vec<u32>>> = None;
    while let Some(pid) = queue.pop() {
        if out.iter().any(|(p, _)| *p == pid) {
            continue;
        }
        let found = first(pid);
        if !process_alive(pid) {
            continue;
        }
        out.push((pid, found));
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

/// True once the process has begun to exit (the kernel's `PF_EXITING`, or a zombie): what it
/// holds is on its way back.
fn exiting(pid: u32) -> bool {
    const PF_EXITING: u64 = 0x4;
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else { return true };
    let mut fields = stat.rsplit(')').next().unwrap_or("").split_whitespace();
    let state = fields.next().unwrap_or("");
    // After the state: ppid, pgrp, session, tty_nr, tpgid, then the flags.
    let flags: u64 = fields.nth(5).and_then(|f| f.parse().ok()).unwrap_or(0);
    state.starts_with(['Z', 'X']) || flags & PF_EXITING != 0
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

    /// A python that allocates and touches 96 MiB when told to on stdin, in a thread of its own
    /// while the main thread waits for it (or in the main thread), then sleeps.
    fn bomb_on_stdin(in_thread: bool) -> std::process::Child {
        let script = if in_thread {
            "import sys, threading, time\n\
             def hog():\n\
             \x20   sys.stdin.readline()\n\
             \x20   b = bytearray(96 << 20); b[::4096] = bytes(len(b[::4096])); time.sleep(30)\n\
             t = threading.Thread(target=hog); t.start()\n\
             print('ready', flush=True)\n\
             t.join()\n"
        } else {
            "import sys, time\n\
             print('ready', flush=True)\n\
             sys.stdin.readline()\n\
             b = bytearray(96 << 20); b[::4096] = bytes(len(b[::4096])); time.sleep(30)\n"
        };
        let mut child = Command::new("python3")
            .args(["-c", script])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line).unwrap();
        assert_eq!(line, "ready\n");
        child
    }

    /// Waits until the watchdog made no measure for 300 ms (it found the sandbox still).
    fn until_still(watched: &Watched) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let before = watched.shared.measures.load(Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(300));
            if watched.shared.measures.load(Ordering::SeqCst) == before {
                return;
            }
            assert!(std::time::Instant::now() < deadline, "the watchdog never found the sandbox still");
        }
    }

    /// The child killed by the watchdog within 10 s, counted as an OOM kill.
    fn killed_by_the_watchdog(watched: &Watched, mut child: std::process::Child) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                panic!("not killed: the watchdog did not measure it");
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(9));
        assert_eq!(watched.oom_kills(), 1);
    }

    #[test]
    fn a_still_sandbox_is_not_measured_until_it_runs() {
        let watched = Watched::new(48 << 20, 1000).unwrap();
        let mut child = bomb_on_stdin(false);
        watched.add_launcher(child.id());
        until_still(&watched);
        let before = watched.shared.measures.load(Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(500));
        assert_eq!(watched.shared.measures.load(Ordering::SeqCst), before, "measured while still");
        std::io::Write::write_all(child.stdin.as_mut().unwrap(), b"go\n").unwrap();
        killed_by_the_watchdog(&watched, child);
    }

    /// The schedule of an empty sandbox, or of one whose processes sleep, does not vouch for a
    /// launcher added since: its processes are measured.
    /// Without the shared thread, each watchdog makes its own quiet looks, and sees the same.
    #[test]
    fn a_watchdog_without_the_shared_thread_looks_on_its_own() {
        let watched = Watched::with_looks(48 << 20, 1000, || None).unwrap();
        let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
        watched.add_launcher(sleeper.id());
        until_still(&watched);
        let mut child = bomb_on_stdin(true);
        watched.add_launcher(child.id());
        until_still(&watched);
        std::io::Write::write_all(child.stdin.as_mut().unwrap(), b"go\n").unwrap();
        killed_by_the_watchdog(&watched, child);
        let _ = sleeper.kill();
        let _ = sleeper.wait();
    }

    #[test]
    fn a_launcher_added_to_an_empty_sandbox_is_measured() {
        for idle_launcher in [false, true] {
            let watched = Watched::new(48 << 20, 1000).unwrap();
            let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
            if idle_launcher {
                watched.add_launcher(sleeper.id());
                until_still(&watched);
            } else {
                std::thread::sleep(Duration::from_millis(300));
            }
            let mut child = bomb_on_stdin(false);
            std::io::Write::write_all(child.stdin.as_mut().unwrap(), b"go\n").unwrap();
            // Let it allocate unseen first: the launcher is added once its memory is there.
            std::thread::sleep(Duration::from_millis(500));
            watched.add_launcher(child.id());
            killed_by_the_watchdog(&watched, child);
            let _ = sleeper.kill();
            let _ = sleeper.wait();
        }
    }

    /// A thread other than the main one wakes (on stdin) in a process whose main thread stays
    /// blocked: the process's clock moves with it, and the memory it takes is measured.
    #[test]
    fn a_thread_that_wakes_in_a_sleeping_process_is_measured() {
        let watched = Watched::new(48 << 20, 1000).unwrap();
        let mut child = bomb_on_stdin(true);
        watched.add_launcher(child.id());
        until_still(&watched);
        std::io::Write::write_all(child.stdin.as_mut().unwrap(), b"go\n").unwrap();
        killed_by_the_watchdog(&watched, child);
    }

    #[test]
    fn the_wait_is_as_long_as_the_room_cannot_fill_sooner() {
        let gib = f64::from(1u32 << 30);
        assert_eq!(next_wait(0, 8.0 * gib), POLL);
        assert_eq!(next_wait(u64::MAX, 8.0 * gib), LONGEST_WAIT);
        // 400 MiB at 8 GiB/s: 48.8 ms.
        let wait = next_wait(400 << 20, 8.0 * gib);
        assert!(wait > Duration::from_millis(48) && wait < Duration::from_millis(49), "{wait:?}");
    }

    #[test]
    fn cpu_lists_are_counted() {
        assert_eq!(cpu_count("0-1\n"), 2);
        assert_eq!(cpu_count("0-3,8,10-11"), 7);
        assert_eq!(cpu_count(""), 0);
    }

    #[test]
    fn quiet_looks_are_never_later_than_their_wait() {
        let looks = QuietLooks {
            queue: Mutex::new(Queue::default()),
            due: Condvar::new(),
            epoch: Instant::now(),
        };
        let now = Instant::now() + Duration::from_millis(1234);
        for wait in [POLL, Duration::from_millis(15), Duration::from_millis(49), LONGEST_WAIT] {
            let deadline = looks.deadline(now + wait, wait);
            assert!(deadline <= now + wait && deadline + POLL.max(wait / 2) > now + wait, "{wait:?}");
            // On a tick, so that looks due together are made together.
            assert_eq!(deadline.duration_since(looks.epoch).as_nanos() % POLL.as_nanos(), 0);
        }
    }

    #[test]
    fn a_running_process_is_not_exiting_and_a_zombie_is() {
        assert!(!exiting(std::process::id()));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        // Not waited for yet: once it has ended it is a zombie until reaped.
        let deadline = Instant::now() + Duration::from_secs(5);
        while !exiting(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(exiting(pid), "an ended, unreaped child is exiting");
        child.wait().unwrap();
    }
}
