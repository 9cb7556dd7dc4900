//! Host side of one kernel: the JSON-lines protocol, per-run timeouts (interrupt, then kill) and
//! output caps. Everything the kernel sends is untrusted (user code can write to the protocol fd):
//! lines are size-capped, parsed strictly, and messages for other executions are ignored.
//!
//! The protocol is transport-neutral: the local backend talks to a bwrap child over pipes
//! ([`KernelProcess::attach`]), the container backend to an exec'd process over the Engine API's
//! attached streams ([`KernelProcess::from_parts`]); [`ProcessControl`] is what differs (how to
//! interrupt, confirm `done`, learn how it ended and kill).

use std::collections::BTreeMap;
use std::io;
use std::os::fd::OwnedFd;
use std::pin::Pin;
use std::process::Child;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::cgroup::Cgroup;
use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::unix::pipe;
use tokio::time::Instant;
use waxell::sandbox::{Execution, ExecutionError, ExecutionResult, OutputMessage, RunOptions, SandboxError};

/// Largest `ready` line accepted.
const READY_LINE_LIMIT: usize = 64 << 10;
/// Largest line read while draining an abandoned execution.
const ABANDONED_LINE_LIMIT: usize = 64 << 20;
/// How long the main thread may take to go idle after a real `done`.
const DONE_CONFIRM_LIMIT: Duration = Duration::from_millis(250);
/// bwrap's own stderr kept for error messages.
const STDERR_TAIL_LIMIT: usize = 8 << 10;

#[derive(Debug, Clone, Deserialize)]
pub(crate) struct ReadyInfo {
    pub(crate) pid: u32,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) prefix: String,
    /// The kernel's fd of the request pipe. Trusted: `ready` comes before any cell code runs.
    pub(crate) request_fd: i32,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum KernelMessage {
    Ready(ReadyInfo),
    /// The kernel began running the cell: from now on an interrupt ends it with a `done`.
    Started {
        id: Option<u64>,
    },
    Stream {
        id: Option<u64>,
        name: String,
        text: String,
    },
    Result {
        id: Option<u64>,
        is_main: bool,
        data: serde_json::Map<String, serde_json::Value>,
    },
    Error {
        id: Option<u64>,
        name: String,
        value: String,
        traceback: String,
    },
    Done {
        id: Option<u64>,
        execution_count: u64,
        #[serde(default)]
        truncated: bool,
    },
}

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
        limits: &crate::config::Limits,
    ) -> Self {
        Self {
            timeout: options.timeout.unwrap_or(run_timeout),
            grace,
            hard_cap_bytes: limits.output_hard_bytes,
            memory_bytes: limits.memory_bytes,
        }
    }
}

/// Protocol input of a kernel (its stdin).
pub(crate) type KernelWriter = Pin<Box<dyn AsyncWrite + Send>>;
/// Protocol output of a kernel (its stdout).
pub(crate) type KernelReader = Pin<Box<dyn AsyncRead + Send>>;
/// Where a kernel's own stderr (the launcher's or engine's messages) is collected, size-capped.
pub(crate) type StderrTail = Arc<Mutex<String>>;

/// Counts OOM kills in the sandbox (the local backend's memory cgroup).
pub(crate) trait OomCounter: Send + Sync {
    fn oom_kills(&self) -> u64;
}

impl OomCounter for Cgroup {
    fn oom_kills(&self) -> u64 {
        Cgroup::oom_kills(self)
    }
}

/// How a kernel ended on its own (its protocol output closed).
pub(crate) struct ExitInfo {
    /// The process was killed by the OOM killer (when the backend can tell).
    pub(crate) oom_killed: bool,
    /// Exit status or the launcher's first error line, for `KernelDied`.
    pub(crate) detail: String,
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
    /// Whether the interpreter's main thread is idle between cells (a `done` is only believed
    /// then); `true` when the backend cannot tell.
    fn main_thread_idle(&self) -> bool {
        true
    }
    /// Kill it and everything it started; idempotent.
    fn kill(&mut self);
    /// After `ready`: the kernel's pid inside its namespace and its request fd.
    fn on_ready(&mut self, _ready: &ReadyInfo) {}
    /// Host pids of the interpreter and its init (local backend only).
    fn set_inner_pids(&mut self, _pids: [u32; 2]) {}
}

/// Reads newline-terminated lines with a size cap, cancel-safely (state lives in `self`).
struct LineReader {
    pipe: KernelReader,
    buf: Vec<u8>,
    scanned: usize,
}

impl LineReader {
    async fn next_line(&mut self, limit: usize) -> io::Result<Option<Vec<u8>>> {
        loop {
            if let Some(pos) = self.buf[self.scanned..].iter().position(|&b| b == b'\n') {
                let end = self.scanned + pos;
                let line = self.buf[..end].to_vec();
                self.buf.drain(..=end);
                self.scanned = 0;
                return Ok(Some(line));
            }
            self.scanned = self.buf.len();
            if self.buf.len() > limit {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("protocol line over {limit} bytes"),
                ));
            }
            let mut chunk = [0u8; 64 << 10];
            let n = self.pipe.read(&mut chunk).await?;
            if n == 0 {
                return Ok(None);
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

/// One running interpreter (one bwrap launcher process tree, or one exec in a container).
pub(crate) struct KernelProcess {
    process: Box<dyn ProcessControl>,
    /// Host pid of the local launcher (bwrap), for the identity check.
    launcher_pid: Option<u32>,
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
            .field("launcher_pid", &self.launcher_pid)
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
            launcher_pid: None,
            to_kernel,
            from_kernel: LineReader {
                pipe: from_kernel,
                buf: Vec::new(),
                scanned: 0,
            },
            stderr_tail,
            alive: true,
            unfinished: None,
            unfinished_started: false,
            forged_done: 0,
        }
    }

    /// A local launcher child with piped stdin, stdout and stderr.
    pub(crate) fn attach(mut child: Child) -> Result<Self, SandboxError> {
        let stdin: OwnedFd = child.stdin.take().expect("stdin piped").into();
        let request_ino = rustix::fs::fstat(&stdin).map_err(io::Error::from)?.st_ino;
        let stdout: OwnedFd = child.stdout.take().expect("stdout piped").into();
        let stderr: OwnedFd = child.stderr.take().expect("stderr piped").into();
        let stderr_tail: StderrTail = Arc::new(Mutex::new(String::new()));
        let launcher_pid = child.id();
        let mut process = LocalChild {
            child,
            reaped: false,
            inner_pids: Vec::new(),
            exit_status: None,
            request_ino,
            request_fd: None,
            interpreter: None,
        };
        let (to_kernel, from_kernel) =
            match (pipe::Sender::from_owned_fd(stdin), pipe::Receiver::from_owned_fd(stdout)) {
                (Ok(to), Ok(from)) => (to, from),
                (Err(e), _) | (_, Err(e)) => {
                    process.kill();
                    return Err(e.into());
                }
            };
        match pipe::Receiver::from_owned_fd(stderr) {
            Ok(mut stderr) => {
                let tail = stderr_tail.clone();
                tokio::spawn(async move {
                    let mut chunk = [0u8; 4096];
                    while let Ok(n) = stderr.read(&mut chunk).await {
                        if n == 0 {
                            break;
                        }
                        append_tail(&tail, &chunk[..n]);
                    }
                });
            }
            Err(e) => {
                process.kill();
                return Err(e.into());
            }
        }
        let mut kernel = Self::from_parts(
            Box::new(process),
            Box::pin(to_kernel),
            Box::pin(from_kernel),
            stderr_tail,
        );
        kernel.launcher_pid = Some(launcher_pid);
        Ok(kernel)
    }

    /// Whether the kernel has exited (a cheap, non-blocking check).
    pub(crate) fn has_exited(&mut self) -> bool {
        !self.alive || self.process.has_exited()
    }

    /// Host pid of the bwrap launcher (0 for kernels that are not local children).
    pub(crate) fn launcher_pid(&self) -> u32 {
        self.launcher_pid.unwrap_or(0)
    }

    pub(crate) fn set_inner_pids(&mut self, pids: [u32; 2]) {
        self.process.set_inner_pids(pids);
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

    pub(crate) async fn wait_ready(&mut self, timeout: Duration) -> Result<ReadyInfo, SandboxError> {
        let line = match tokio::time::timeout(timeout, self.from_kernel.next_line(READY_LINE_LIMIT)).await {
            Ok(Ok(Some(line))) => line,
            Ok(Ok(None)) | Ok(Err(_)) => {
                self.kill();
                // Give the stderr reader a moment to collect bwrap's message.
                tokio::time::sleep(Duration::from_millis(20)).await;
                return Err(SandboxError::Unavailable(format!(
                    "the sandbox failed to start: {}",
                    non_empty(self.stderr_tail(), "no error output")
                )));
            }
            Err(_) => {
                self.kill();
                return Err(SandboxError::Timeout(format!(
                    "the sandbox did not become ready within {timeout:?}"
                )));
            }
        };
        match serde_json::from_slice::<KernelMessage>(&line) {
            Ok(KernelMessage::Ready(info)) => {
                self.process.on_ready(&info);
                Ok(info)
            }
            _ => {
                self.kill();
                Err(SandboxError::Protocol {
                    message: "expected the kernel's ready message".into(),
                    received: String::from_utf8_lossy(&line).chars().take(200).collect(),
                })
            }
        }
    }

    fn interrupt(&self) -> io::Result<()> {
        self.process.interrupt()
    }

    fn main_thread_idle(&self) -> bool {
        self.process.main_thread_idle()
    }

    /// A `done` for the current run is real only if the main thread then goes idle (within
    /// `DONE_CONFIRM_LIMIT`, the real kernel gets there in microseconds, and past `until` by at
    /// most 50 ms, so a flood of forged frames cannot hold off the run's timeout while a real
    /// `done` just at the deadline is still confirmed).
    async fn confirm_done(&mut self, until: Instant) -> bool {
        let now = Instant::now();
        let deadline = (now + DONE_CONFIRM_LIMIT).min(until.max(now + Duration::from_millis(50)));
        loop {
            if self.main_thread_idle() {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    async fn send(&mut self, message: serde_json::Value) -> io::Result<()> {
        let mut line = serde_json::to_vec(&message).map_err(io::Error::other)?;
        line.push(b'\n');
        self.to_kernel.write_all(&line).await
    }

    /// Set environment variables (and optionally the working directory) for all later executions.
    pub(crate) async fn configure(
        &mut self,
        env: &BTreeMap<String, String>,
        cwd: Option<&str>,
    ) -> Result<(), SandboxError> {
        self.send(serde_json::json!({"type": "setenv", "env": env, "cwd": cwd}))
            .await?;
        Ok(())
    }

    /// If an earlier `execute` was abandoned mid-run (its future dropped, e.g. a client went away),
    /// interrupt that cell and read up to its `done`, so the next run starts clean. Kills the kernel
    /// if it does not finish within `grace`.
    pub(crate) async fn settle_abandoned(&mut self, grace: Duration) {
        let Some(id) = self.unfinished.take() else { return };
        // Not started yet: the interrupt waits for its `started` (see `execute`).
        let mut signalled = false;
        if self.unfinished_started {
            if self.interrupt().is_err() {
                self.kill();
                return;
            }
            signalled = true;
        }
        let deadline = Instant::now() + grace;
        loop {
            let line = tokio::select! {
                line = self.from_kernel.next_line(ABANDONED_LINE_LIMIT) => line,
                _ = tokio::time::sleep_until(deadline) => break,
            };
            match line {
                Ok(Some(line)) => match serde_json::from_slice(&line) {
                    Ok(KernelMessage::Started { id: Some(started) }) if started == id && !signalled => {
                        if self.interrupt().is_err() {
                            break;
                        }
                        signalled = true;
                    }
                    Ok(KernelMessage::Done { id: Some(done), .. })
                        if done == id && self.confirm_done(deadline).await =>
                    {
                        return;
                    }
                    _ => {}
                },
                _ => break,
            }
        }
        self.kill();
    }

    /// Run one cell. Errors of the code, timeouts, OOM and truncation come back in the
    /// `Execution`; `Err` means the kernel could not be talked to at all.
    pub(crate) async fn execute(
        &mut self,
        code: &str,
        options: &RunOptions,
        limits: &ExecLimits,
        cgroup: &dyn OomCounter,
    ) -> Result<Execution, SandboxError> {
        // Unguessable: a frame cell code writes for a later run cannot name it.
        let id = unguessable_id();
        let oom_before = cgroup.oom_kills();
        let mut execution = Execution::default();
        let mut truncated = false;
        let mut received = 0usize;
        let mut interrupted = false;
        let mut abort = None;
        self.send(serde_json::json!({"type": "execute", "id": id, "code": code, "env": options.env_vars}))
            .await
            .map_err(|e| SandboxError::Transport(format!("sending to the kernel: {e}")))?;
        // Cleared when `done` is read; still set if this future is dropped before that.
        self.unfinished = Some(id);
        self.unfinished_started = false;
        // The timeout passed before the kernel started the cell: interrupt when it does.
        let mut interrupt_on_start = false;
        let mut deadline = Instant::now() + limits.timeout;
        let finished = loop {
            let line = tokio::select! {
                line = self.from_kernel.next_line(limits.hard_cap_bytes) => line,
                _ = tokio::time::sleep_until(deadline) => {
                    if interrupted {
                        abort = Some(Abort::Timeout);
                        break false;
                    }
                    interrupted = true;
                    // Interrupt first: KeyboardInterrupt ends the cell and the state survives. Before the
                    // kernel's `started`, a SIGINT could land between its reading the request and starting
                    // it and drop the request (no `done`, so a kill): wait for `started` (within the grace).
                    if self.unfinished_started {
                        let _ = self.interrupt();
                    } else {
                        interrupt_on_start = true;
                    }
                    deadline = Instant::now() + limits.grace;
                    continue;
                }
            };
            let line = match line {
                Ok(Some(line)) => line,
                Ok(None) => break false,
                Err(_) => {
                    abort = Some(Abort::OutputHardCap);
                    break false;
                }
            };
            received += line.len() + 1;
            if received > limits.hard_cap_bytes {
                abort = Some(Abort::OutputHardCap);
                break false;
            }
            let Ok(message) = serde_json::from_slice::<KernelMessage>(&line) else {
                tracing::debug!("ignoring a malformed kernel message");
                continue;
            };
            match message {
                KernelMessage::Started { id: Some(mid) } if mid == id && !self.unfinished_started => {
                    self.unfinished_started = true;
                    if interrupt_on_start {
                        let _ = self.interrupt();
                    }
                }
                KernelMessage::Stream {
                    id: Some(mid),
                    name,
                    text,
                } if mid == id => {
                    let error = name == "stderr";
                    let callback = if error {
                        &options.on_stderr
                    } else {
                        &options.on_stdout
                    };
                    if let Some(callback) = callback {
                        callback(&OutputMessage {
                            line: text.clone(),
                            error,
                        });
                    }
                    if error {
                        execution.logs.stderr.push(text)
                    } else {
                        execution.logs.stdout.push(text)
                    }
                }
                KernelMessage::Result {
                    id: Some(mid),
                    is_main,
                    data,
                } if mid == id => {
                    let result = to_execution_result(data, is_main);
                    if let Some(callback) = &options.on_result {
                        callback(&result);
                    }
                    execution.results.push(result);
                }
                KernelMessage::Error {
                    id: Some(mid),
                    name,
                    value,
                    traceback,
                } if mid == id => {
                    execution.error = Some(ExecutionError {
                        name,
                        value,
                        traceback,
                    });
                }
                KernelMessage::Done {
                    id: Some(mid),
                    execution_count,
                    truncated: t,
                } if mid == id => {
                    if !self.confirm_done(deadline).await {
                        self.forged_done += 1;
                        tracing::warn!(
                            forged = self.forged_done,
                            "ignoring a forged `done` frame (the interpreter's main thread is still busy)"
                        );
                        continue;
                    }
                    execution.execution_count = Some(execution_count);
                    truncated = t;
                    self.unfinished = None;
                    break true;
                }
                _ => {}
            }
        };
        let mut oom = cgroup.oom_kills() > oom_before;
        if !finished {
            let mut detail = String::from("no exit status");
            if abort.is_none() {
                // The kernel went away by itself: let it exit so its status is the real one.
                let exit = self.process.exit_info(&self.stderr_tail()).await;
                oom |= exit.oom_killed;
                detail = exit.detail;
            }
            self.kill();
            execution.error = Some(death_report(abort, oom, limits, detail));
            return Ok(execution);
        }
        if interrupted {
            let traceback = execution.error.take().map(|e| e.traceback).unwrap_or_default();
            execution.error = Some(report(
                "TimeoutError",
                format!(
                    "execution exceeded the {:?} timeout and was interrupted (KeyboardInterrupt); the state is kept",
                    limits.timeout
                ),
                traceback,
            ));
        } else if oom && execution.error.is_none() {
            execution.error = Some(report(
                "OutOfMemory",
                format!(
                    "a process of this execution was killed for exceeding the sandbox's {} MiB memory limit",
                    limits.memory_bytes >> 20
                ),
                String::new(),
            ));
        } else if truncated && execution.error.is_none() {
            execution.error = Some(report(
                "OutputTruncated",
                "the output exceeded the sandbox's output limit and was truncated".into(),
                String::new(),
            ));
        }
        Ok(execution)
    }

}

fn death_report(abort: Option<Abort>, oom: bool, limits: &ExecLimits, detail: String) -> ExecutionError {
    {
        match (abort, oom) {
            (Some(Abort::Timeout), _) => report(
                "TimeoutError",
                format!(
                    "execution exceeded the {:?} timeout, ignored the interrupt for {:?} and was killed; the state \
                     is lost and the context restarts on the next run",
                    limits.timeout, limits.grace
                ),
                String::new(),
            ),
            (Some(Abort::OutputHardCap), _) => report(
                "OutputTruncated",
                format!(
                    "the execution produced more than {} bytes of output and was killed; the state is lost and the \
                     context restarts on the next run",
                    limits.hard_cap_bytes
                ),
                String::new(),
            ),
            (None, true) => report(
                "OutOfMemory",
                format!(
                    "the interpreter exceeded the sandbox's {} MiB memory limit and was killed; the state is lost \
                     and the context restarts on the next run",
                    limits.memory_bytes >> 20
                ),
                String::new(),
            ),
            (None, false) => report(
                "KernelDied",
                format!(
                    "the interpreter exited unexpectedly ({detail}); the state is lost and the context restarts on \
                     the next run"
                ),
                String::new(),
            ),
        }
    }

}

impl KernelProcess {
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

fn append_tail(tail: &StderrTail, bytes: &[u8]) {
    let mut tail = tail.lock().unwrap_or_else(|e| e.into_inner());
    if tail.len() < STDERR_TAIL_LIMIT {
        tail.push_str(&String::from_utf8_lossy(bytes));
    }
}

/// A local bwrap launcher child.
struct LocalChild {
    child: Child,
    /// The launcher has been waited for; its pid must not be signalled any more.
    reaped: bool,
    /// Host pids (with start times) of the interpreter and of bwrap's init, waited for on kill.
    inner_pids: Vec<(u32, u64)>,
    /// The launcher's exit status once reaped.
    exit_status: Option<std::process::ExitStatus>,
    /// Inode of the request pipe (host -> kernel) and the kernel's fd for it (from `ready`).
    request_ino: u64,
    request_fd: Option<i32>,
    /// The interpreter's host pid and a pidfd on it: interrupts are SIGINT through the pidfd (never
    /// a recycled pid), and `done` is believed only while this process's main thread is idle.
    interpreter: Option<(u32, OwnedFd)>,
}

#[async_trait::async_trait]
impl ProcessControl for LocalChild {
    fn has_exited(&mut self) -> bool {
        self.reap_within(Duration::ZERO);
        self.reaped
    }

    async fn exit_info(&mut self, stderr_tail: &str) -> ExitInfo {
        self.reap_within(Duration::from_millis(100));
        // bwrap's first error line, else its exit status (bwrap exits with 128 + signal when the
        // interpreter was killed, e.g. 152 for SIGXCPU). OOM kills are counted by the cgroup.
        let detail = match (stderr_tail.lines().next(), self.exit_status) {
            (Some(line), _) if !line.is_empty() => line.to_owned(),
            (_, Some(status)) => status.to_string(),
            _ => "no exit status".to_owned(),
        };
        ExitInfo {
            oom_killed: false,
            detail,
        }
    }

    /// SIGINT to the interpreter (KeyboardInterrupt in the cell; the state survives).
    fn interrupt(&self) -> io::Result<()> {
        let Some((_, pidfd)) = &self.interpreter else {
            return Err(io::Error::other("the interpreter's pid is unknown"));
        };
        rustix::process::pidfd_send_signal(pidfd, rustix::process::Signal::INT).map_err(io::Error::from)
    }

    /// Whether the interpreter's main thread is blocked reading the request pipe: where the kernel
    /// waits between cells, and where no cell code runs. Seen from the host (`/proc`), so a `done`
    /// frame written by cell code, from any thread, cannot fake it.
    fn main_thread_idle(&self) -> bool {
        let (Some((pid, _)), Some(fd)) = (&self.interpreter, self.request_fd) else {
            return true; // nothing to check against: fall back to believing `done`
        };
        let syscall = match std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/syscall")) {
            Ok(syscall) => syscall,
            // Gone: the run ends through EOF anyway.
            Err(e) if e.kind() == io::ErrorKind::NotFound => return false,
            // Unreadable: a rootless host without CAP_SYS_PTRACE when the cell made itself
            // non-dumpable. Believe `done` rather than fail every run (docs/sandbox.md, limits).
            Err(e) => {
                tracing::debug!("cannot check the interpreter's main thread: {e}");
                return true;
            }
        };
        let mut fields = syscall.split_whitespace();
        let in_read = fields.next() == Some(libc::SYS_read.to_string().as_str());
        let on_fd = fields.next() == Some(format!("{fd:#x}").as_str());
        let pipe = std::fs::read_link(format!("/proc/{pid}/fd/{fd}"))
            .map(|target| target.as_os_str() == format!("pipe:[{}]", self.request_ino).as_str())
            .unwrap_or(false);
        in_read && on_fd && pipe
    }

    fn on_ready(&mut self, ready: &ReadyInfo) {
        self.request_fd = Some(ready.request_fd);
    }

    fn set_inner_pids(&mut self, pids: [u32; 2]) {
        self.interpreter = rustix::process::Pid::from_raw(pids[0] as i32)
            .and_then(|pid| rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok())
            .map(|fd| (pids[0], fd));
        self.inner_pids = pids
            .iter()
            .filter_map(|&pid| Some((pid, process_start_time(pid)?)))
            .collect();
    }

    /// SIGKILL the launcher's process group; with `--die-with-parent` and the pid namespace the whole
    /// tree goes. Reaps the launcher so no zombie stays.
    fn kill(&mut self) {
        if !self.reaped {
            if let Some(pgid) = rustix::process::Pid::from_raw(self.child.id() as i32) {
                let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
            }
            let _ = self.child.kill();
            self.reap_within(Duration::from_millis(500));
            if !self.reaped {
                tracing::warn!(
                    pid = self.child.id(),
                    "sandbox launcher did not exit after SIGKILL"
                );
            }
        }
        // The pid namespace collapses asynchronously once bwrap's init dies; wait for the interpreter
        // and the init so "killed" means gone. Identified by pid *and* start time, so a recycled pid
        // is never waited for (and nothing here signals them).
        for (pid, started) in std::mem::take(&mut self.inner_pids) {
            let deadline = std::time::Instant::now() + Duration::from_secs(1);
            while process_start_time(pid) == Some(started) {
                if std::time::Instant::now() >= deadline {
                    tracing::warn!(
                        pid,
                        "sandboxed process did not exit after its namespace was killed"
                    );
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
}

impl LocalChild {
    /// Wait up to `limit` for the launcher to exit and record its status.
    fn reap_within(&mut self, limit: Duration) {
        let deadline = std::time::Instant::now() + limit;
        while !self.reaped {
            match self.child.try_wait() {
                Ok(Some(status)) => {
                    self.exit_status = Some(status);
                    self.reaped = true;
                }
                // Only possible if the child was already reaped: nothing left to wait for.
                Err(_) => self.reaped = true,
                Ok(None) if std::time::Instant::now() >= deadline => return,
                Ok(None) => std::thread::sleep(Duration::from_millis(1)),
            }
        }
    }
}

/// A fresh 63-bit run id nobody can predict: SipHash, keyed randomly per process, over a counter.
/// Both ends parse JSON integers exactly, so the full width is safe.
fn unguessable_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    static KEYS: std::sync::OnceLock<std::collections::hash_map::RandomState> = std::sync::OnceLock::new();
    let mut hasher = KEYS.get_or_init(Default::default).build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    hasher.finish() >> 1
}

/// Start time (clock ticks since boot) of a live, non-zombie process; `None` once it is gone.
fn process_start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised command name: state is field 3, starttime field 22.
    let mut fields = stat.rsplit(')').next()?.split_whitespace();
    if fields.next()? == "Z" {
        return None;
    }
    fields.nth(18)?.parse().ok()
}

fn report(name: &str, value: String, traceback: String) -> ExecutionError {
    ExecutionError {
        name: name.into(),
        value,
        traceback,
    }
}

fn non_empty(text: String, fallback: &str) -> String {
    if text.is_empty() {
        fallback.to_owned()
    } else {
        text
    }
}

/// E2B's server strips the quotes around a string's repr (`'hi'` -> `hi`); do the same so agents see
/// the same `text` on both backends.
fn strip_surrounding_quotes(text: String) -> String {
    let bytes = text.as_bytes();
    match (bytes.first(), bytes.last()) {
        (Some(&first), Some(&last))
            if bytes.len() >= 2 && first == last && (first == b'\'' || first == b'"') =>
        {
            text[1..text.len() - 1].to_owned()
        }
        _ => text,
    }
}

/// Map a kernel MIME bundle onto E2B's result fields.
fn to_execution_result(data: serde_json::Map<String, serde_json::Value>, is_main: bool) -> ExecutionResult {
    let mut result = ExecutionResult::default();
    result.is_main_result = is_main;
    for (mime, value) in data {
        let text = || value.as_str().map(str::to_owned);
        match mime.as_str() {
            "text/plain" => result.text = text().map(strip_surrounding_quotes),
            "text/html" => result.html = text(),
            "text/markdown" => result.markdown = text(),
            "image/svg+xml" => result.svg = text(),
            "image/png" => result.png = text(),
            "image/jpeg" => result.jpeg = text(),
            "application/pdf" => result.pdf = text(),
            "text/latex" => result.latex = text(),
            "application/json" => result.json = Some(value),
            "application/javascript" => result.javascript = text(),
            _ => {
                result.extra.insert(mime, value);
            }
        }
    }
    result
}
