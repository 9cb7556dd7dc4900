//! The only `unsafe` in the crate: starting the launcher with inherited fds, cgroup membership and
//! rlimits applied between `fork` and `exec`, from one long-lived thread.
//!
//! Why a dedicated thread: bwrap's `--die-with-parent` uses `PR_SET_PDEATHSIG`, whose "parent" is the
//! *thread* that forked. Spawning from a tokio blocking-pool thread would kill the sandbox when that
//! thread retires, so every spawn goes through one thread that lives as long as the process.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};

/// A resource limit applied to the launcher (and inherited by everything in the sandbox).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rlimit {
    pub(crate) resource: libc::__rlimit_resource_t,
    pub(crate) soft: u64,
    pub(crate) hard: u64,
}

/// What the child gets between `fork` and `exec`.
#[derive(Debug, Default)]
pub(crate) struct ChildSetup {
    /// `(fd in the parent, fd number in the child)`; the child copy is inheritable.
    pub(crate) inherit: Vec<(OwnedFd, RawFd)>,
    /// Pre-opened `cgroup.procs` files; the child writes "0" to each to join before exec.
    pub(crate) cgroup_procs: Vec<OwnedFd>,
    pub(crate) rlimits: Vec<Rlimit>,
}

/// Child fd numbers must stay below this; inherited fds are first moved above it.
const TARGET_FD_CEILING: RawFd = 64;

impl ChildSetup {
    /// Runs in the forked child: async-signal-safe calls only, no allocation.
    fn apply(&self) -> io::Result<()> {
        // Phase 1: move every source fd above the targets so no dup2 clobbers a source not yet moved.
        let mut moved = [0 as RawFd; 16];
        if self.inherit.len() > moved.len() {
            return Err(io::Error::from_raw_os_error(libc::EMFILE));
        }
        for (slot, (fd, _)) in moved.iter_mut().zip(&self.inherit) {
            // SAFETY: fcntl on an fd we own; F_DUPFD_CLOEXEC only allocates a new descriptor.
            let copy = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, TARGET_FD_CEILING) };
            if copy < 0 {
                return Err(io::Error::last_os_error());
            }
            *slot = copy;
        }
        // Phase 2: place them; dup2's copy does not carry CLOEXEC, so it survives exec.
        for (copy, (_, target)) in moved.iter().zip(&self.inherit) {
            // SAFETY: both are valid descriptor numbers; target < TARGET_FD_CEILING <= copy.
            if unsafe { libc::dup2(*copy, *target) } < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        for fd in &self.cgroup_procs {
            // SAFETY: writes two bytes from a static buffer to an fd we own.
            if unsafe { libc::write(fd.as_raw_fd(), b"0\n".as_ptr().cast(), 2) } < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        for limit in &self.rlimits {
            let value = libc::rlimit {
                rlim_cur: limit.soft,
                rlim_max: limit.hard,
            };
            // SAFETY: setrlimit reads a valid, initialised struct.
            if unsafe { libc::setrlimit(limit.resource, &value) } < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

struct SpawnJob {
    command: Command,
    reply: tokio::sync::oneshot::Sender<io::Result<Child>>,
}

fn spawner() -> &'static Mutex<mpsc::Sender<SpawnJob>> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<SpawnJob>>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnJob>();
        std::thread::Builder::new()
            .name("waxell-sandbox-spawner".into())
            .spawn(move || {
                for mut job in rx {
                    let _ = job.reply.send(job.command.spawn());
                }
            })
            .expect("spawning the sandbox spawner thread");
        Mutex::new(tx)
    })
}

/// Spawn `command` from the long-lived spawner thread with `setup` applied in the child.
/// The child gets its own process group so the whole launcher can be signalled at once.
pub(crate) async fn spawn(mut command: Command, setup: ChildSetup) -> io::Result<Child> {
    command.process_group(0);
    // SAFETY: `ChildSetup::apply` only makes async-signal-safe syscalls (fcntl, dup2, write,
    // setrlimit) on data prepared before the fork and never allocates.
    unsafe {
        command.pre_exec(move || setup.apply());
    }
    let (reply, result) = tokio::sync::oneshot::channel();
    spawner()
        .lock()
        .map_err(|_| io::Error::other("sandbox spawner lock poisoned"))?
        .send(SpawnJob { command, reply })
        .map_err(|_| io::Error::other("sandbox spawner thread is gone"))?;
    result
        .await
        .map_err(|_| io::Error::other("sandbox spawner thread dropped the request"))?
}
