//! Host side of one kernel: the JSON-lines protocol (`protocol.rs`), one run with its timeout
//! (interrupt, then kill) and output caps (`run.rs`). Everything the kernel sends is untrusted
//! (user code can write to the protocol fd): lines are size-capped, parsed strictly, and messages
//! for other executions are ignored.
//!
//! The protocol is transport-neutral: the local backend talks to a bwrap child over pipes, the
//! container backend to an exec'd process over the Engine API's attached streams; both hand
//! [`KernelProcess::from_parts`] the streams and a [`ProcessControl`], which is what differs (how
//! to interrupt, confirm `done`, learn how it ended and kill).

mod language;
mod protocol;
mod run;

use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use waxell::sandbox::RunOptions;

use crate::config::Limits;
use protocol::LineReader;
pub use language::{Language, Languages};
pub(crate) use protocol::{KernelReader, KernelWriter, ReadyInfo};

/// The kernel script every backend runs (`kernel.py`), the same file for all of them.
pub(crate) const KERNEL_SOURCE: &str = include_str!("kernel.py");
/// The file name the kernel is compiled under, which its tracebacks name.
pub(crate) const KERNEL_PATH: &str = "/opt/waxell/kernel.py";
/// Runs the kernel passed as argv[1]: its source, or `@` and its code object (`marshal`, zlib,
/// base64: what the container backend's image probe makes with the image's Python, `probe.py`).
/// It first leads its own process group, which pid 1 kills as a whole (see `init.py`).
#[cfg(any(feature = "container", test))]
pub(crate) const KERNEL_BOOT: &str = "import os,sys\ntry: os.setsid()\nexcept OSError: pass\n\
f='/opt/waxell/kernel.py';a=sys.argv.pop(1)\n\
if a[:1]=='@':import marshal,zlib,binascii;c=marshal.loads(zlib.decompress(binascii.a2b_base64(a[1:])))\n\
else:c=compile(a,f,'exec')\n\
exec(c,{'__name__':'__main__','__file__':f})";

/// A kernel's own stderr kept for error messages.
const STDERR_TAIL_LIMIT: usize = 8 << 10;

/// Why an execution ended without the kernel's `done`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Abort {
    Timeout,
    OutputHardCap,
}

/// Per-execution limits and the hooks the sandbox provides.
pub(crate) struct ExecLimits {
    pub(crate) timeout: Duration,
    pub(crate) grace: Duration,
    pub(crate) hard_cap_bytes: usize,
    pub(crate) memory_bytes: u64,
}

impl ExecLimits {
    /// The limits of one run: the run's own timeout, else the backend's `run_timeout`.
    pub(crate) fn for_run(
        options: &RunOptions,
        run_timeout: Duration,
        grace: Duration,
        limits: &Limits,
    ) -> Self {
        Self {
            timeout: options.timeout.unwrap_or(run_timeout),
            grace,
            hard_cap_bytes: limits.output_hard_bytes,
            memory_bytes: limits.memory_bytes,
        }
    }
}

/// Where a kernel's own stderr (the launcher's or engine's messages) is collected, size-capped.
pub(crate) type StderrTail = Arc<Mutex<String>>;

/// Counts OOM kills in the sandbox (e.g. the local backend's memory cgroup).
pub(crate) trait OomCounter: Send + Sync {
    fn oom_kills(&self) -> u64;
}

/// How a kernel ended on its own (its protocol output closed).
pub(crate) struct ExitInfo {
    /// The process was killed by the OOM killer (when the backend can tell).
    pub(crate) oom_killed: bool,
    /// Exit status or the launcher's first error line, for `KernelDied`.
    pub(crate) detail: String,
}

/// What a check of the interpreter's main thread found (`ProcessControl::main_thread`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MainThread {
    /// Blocked reading its requests: between cells, no cell code running.
    Idle,
    /// Anywhere else: a cell runs.
    Busy,
    /// The check could not tell in time (under gVisor pid 1 checks, and can answer slowly on a
    /// loaded host).
    #[cfg_attr(not(feature = "container"), allow(dead_code))]
    Unknown,
}

/// The process behind one kernel: a local bwrap child or an exec in a container.
#[async_trait::async_trait]
pub(crate) trait ProcessControl: Send + Sync {
    /// Whether it has exited (cheap, non-blocking; `false` when unknown).
    fn has_exited(&mut self) -> bool;
    /// Its protocol output closed: wait briefly for the exit and say how it ended.
    async fn exit_info(&mut self, stderr_tail: &str) -> ExitInfo;
    /// Interrupt the running cell (SIGINT: KeyboardInterrupt, the state survives).
    fn interrupt(&self) -> io::Result<()>;
    /// Wait (briefly) until every signal sent so far has reached the kernel: one sent through a
    /// relay (a container's pid 1) could otherwise land in the next cell, after the cell it was
    /// meant for ended by itself.
    async fn signals_delivered(&self) {}
    /// Whether the interpreter's main thread is idle between cells (a `done` is only believed
    /// then); `Idle` when the backend has no way to tell.
    async fn main_thread(&self) -> MainThread {
        MainThread::Idle
    }
    /// Kill it and everything it started; idempotent.
    fn kill(&mut self);
    /// After `ready`: its pid inside the sandbox and its request fd, what a restore of a checkpoint
    /// reconnects to (`None`: not known, or the backend does not checkpoint).
    #[cfg_attr(not(all(feature = "server", feature = "container")), allow(dead_code, reason = "the server's memory pause, with the container backend"))]
    fn identity(&self) -> Option<(u32, i32)> {
        None
    }
    /// Let go of it without killing it: it lives on in a checkpoint of its sandbox.
    #[cfg_attr(not(all(feature = "server", feature = "container")), allow(dead_code, reason = "the server's memory pause, with the container backend"))]
    fn forget(&mut self) {}
    /// After `ready`: the kernel's pid inside its namespace and its request fd.
    fn on_ready(&mut self, _ready: &ReadyInfo) {}
    /// Host pids of the interpreter and its init (local backend only).
    fn set_inner_pids(&mut self, _pids: [u32; 2]) {}
    /// After `ready`: find the interpreter among the host's processes where the backend can (a
    /// container under runc, with the engine on this host), so `main_thread_idle` can check it.
    #[cfg(feature = "container")]
    async fn locate_on_host(&mut self) {}
}

/// One running interpreter (one bwrap launcher process tree, or one exec in a container).
pub struct KernelProcess {
    process: Box<dyn ProcessControl>,
    to_kernel: KernelWriter,
    from_kernel: LineReader,
    stderr_tail: StderrTail,
    /// False once killed or dead: the context must start a new kernel.
    alive: bool,
    /// An execution whose `done` was never read (its caller's future was dropped).
    unfinished: Option<u64>,
    /// The kernel's `started` for `unfinished` was read: it may be interrupted now.
    unfinished_started: bool,
    /// `done` frames not followed by an idle main thread (written by cell code).
    forged_done: u64,
}

impl std::fmt::Debug for KernelProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelProcess")
            .field("alive", &self.alive)
            .finish()
    }
}

impl KernelProcess {
    /// A kernel reached through any transport; `stderr_tail` is filled by whoever reads its stderr.
    pub(crate) fn from_parts(
        process: Box<dyn ProcessControl>,
        to_kernel: KernelWriter,
        from_kernel: KernelReader,
        stderr_tail: StderrTail,
    ) -> Self {
        Self {
            process,
            to_kernel,
            from_kernel: LineReader::new(from_kernel),
            stderr_tail,
            alive: true,
            unfinished: None,
            unfinished_started: false,
            forged_done: 0,
        }
    }

    /// Whether the kernel has exited (a cheap, non-blocking check).
    pub(crate) fn has_exited(&mut self) -> bool {
        !self.alive || self.process.has_exited()
    }

    pub(crate) fn set_inner_pids(&mut self, pids: [u32; 2]) {
        self.process.set_inner_pids(pids);
    }

    #[cfg(feature = "container")]
    pub(crate) async fn locate_on_host(&mut self) {
        self.process.locate_on_host().await;
    }

    pub(crate) fn is_alive(&self) -> bool {
        self.alive
    }

    fn stderr_tail(&self) -> String {
        self.stderr_tail
            .lock()
            .map(|t| t.trim().to_owned())
            .unwrap_or_default()
    }
}

impl KernelProcess {
    /// Its pid inside the sandbox and its request fd (see [`ProcessControl::identity`]).
    #[cfg_attr(not(all(feature = "server", feature = "container")), allow(dead_code, reason = "the server's memory pause, with the container backend"))]
    pub(crate) fn identity(&self) -> Option<(u32, i32)> {
        self.alive.then(|| self.process.identity()).flatten()
    }

    /// Let go of it without killing it (see [`ProcessControl::forget`]).
    #[cfg_attr(not(all(feature = "server", feature = "container")), allow(dead_code, reason = "the server's memory pause, with the container backend"))]
    pub(crate) fn forget(&mut self) {
        self.alive = false;
        self.unfinished = None;
        self.process.forget();
    }

    /// Kill the kernel (see [`ProcessControl::kill`]); later runs need a new one.
    pub(crate) fn kill(&mut self) {
        self.alive = false;
        self.unfinished = None;
        self.process.kill();
    }
}

impl Drop for KernelProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

pub(crate) fn append_tail(tail: &StderrTail, bytes: &[u8]) {
    let mut tail = tail.lock().unwrap_or_else(|e| e.into_inner());
    if tail.len() < STDERR_TAIL_LIMIT {
        tail.push_str(&String::from_utf8_lossy(bytes));
    }
}
