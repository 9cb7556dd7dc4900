//! A local kernel: the bwrap launcher child, its pipes and how it is interrupted and killed.

use std::io::{self, BufRead, BufReader};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::process::Child;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;
use waxell::sandbox::SandboxError;

use crate::local::zygote::Forked;
use crate::kernel::{append_tail, ExitInfo, KernelProcess, MainThread, ProcessControl, ReadyInfo, StderrTail};

/// A kernel over a local launcher child with piped stdin, stdout and stderr.
pub(crate) fn attach(mut child: Child) -> Result<KernelProcess, SandboxError> {
    let stdin: OwnedFd = child.stdin.take().expect("stdin piped").into();
    let stdout: OwnedFd = child.stdout.take().expect("stdout piped").into();
    let stderr: OwnedFd = child.stderr.take().expect("stderr piped").into();
    attach_pipes(child, None, [stdin, stdout, stderr])
}

/// A kernel forked from the zygote into the sandbox `holder` (its bwrap) holds open, over the pipes
/// made for it (`stdio`: the host's ends of its stdin, stdout and stderr).
pub(crate) fn attach_forked(holder: Child, forked: Forked, stdio: [OwnedFd; 3]) -> Result<KernelProcess, SandboxError> {
    attach_pipes(holder, Some(forked.exit), stdio)
}

fn attach_pipes(
    child: Child,
    forked_exit: Option<BufReader<UnixStream>>,
    [stdin, stdout, stderr]: [OwnedFd; 3],
) -> Result<KernelProcess, SandboxError> {
    let request_ino = rustix::fs::fstat(&stdin).map_err(io::Error::from)?.st_ino;
    let stderr_tail: StderrTail = Arc::new(Mutex::new(String::new()));
    let mut process = LocalChild {
        child,
        reaped: false,
        holder_reaped: false,
        forked_exit,
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
    Ok(KernelProcess::from_parts(
        Box::new(process),
        Box::pin(to_kernel),
        Box::pin(from_kernel),
        stderr_tail,
    ))
}

/// A local bwrap launcher child (for a forked kernel, the bwrap holding its sandbox open).
struct LocalChild {
    child: Child,
    /// The kernel's exit is known: the launcher has been waited for (its pid must not be signalled
    /// any more), or for a forked kernel the zygote reported it.
    reaped: bool,
    /// A forked kernel's holder has been waited for.
    holder_reaped: bool,
    /// A forked kernel: where the zygote writes `exit <wait status>` (zygote.rs).
    forked_exit: Option<BufReader<UnixStream>>,
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
    async fn main_thread(&self) -> MainThread {
        let (Some((pid, _)), Some(fd)) = (&self.interpreter, self.request_fd) else {
            return MainThread::Idle; // nothing to check against: fall back to believing `done`
        };
        let syscall = match std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/syscall")) {
            Ok(syscall) => syscall,
            // Gone: the run ends through EOF anyway.
            Err(e) if e.kind() == io::ErrorKind::NotFound => return MainThread::Busy,
            // Unreadable: a rootless host without CAP_SYS_PTRACE when the cell made itself
            // non-dumpable. Believe `done` rather than fail every run (docs/sandbox.md, limits).
            Err(e) => {
                tracing::debug!("cannot check the interpreter's main thread: {e}");
                return MainThread::Idle;
            }
        };
        let mut fields = syscall.split_whitespace();
        let in_read = fields.next() == Some(libc::SYS_read.to_string().as_str());
        let on_fd = fields.next() == Some(format!("{fd:#x}").as_str());
        let pipe = std::fs::read_link(format!("/proc/{pid}/fd/{fd}"))
            .map(|target| target.as_os_str() == format!("pipe:[{}]", self.request_ino).as_str())
            .unwrap_or(false);
        if in_read && on_fd && pipe {
            MainThread::Idle
        } else {
            MainThread::Busy
        }
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
        if self.forked_exit.is_some() {
            self.kill_holder();
        } else if !self.reaped {
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
        if let Some(exit) = &mut self.forked_exit {
            if !self.reaped {
                match read_forked_exit(exit, limit) {
                    Some(status @ Some(_)) => {
                        self.exit_status = status;
                        self.reaped = true;
                    }
                    // The zygote ended, not necessarily the kernel: gone is what counts then.
                    Some(None) => {
                        let kernel = self.inner_pids.first().copied();
                        self.reaped = kernel.is_none_or(|(pid, started)| process_start_time(pid) != Some(started));
                    }
                    None => {}
                }
            }
            return;
        }
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

impl LocalChild {
    /// SIGKILL the holder's process group: its pid namespace, and the kernel in it, end with it.
    fn kill_holder(&mut self) {
        if self.holder_reaped {
            return;
        }
        if let Some(pgid) = rustix::process::Pid::from_raw(self.child.id() as i32) {
            let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
        }
        let _ = self.child.kill();
        let deadline = std::time::Instant::now() + Duration::from_millis(500);
        while !self.holder_reaped {
            match self.child.try_wait() {
                Ok(Some(_)) | Err(_) => self.holder_reaped = true,
                Ok(None) if std::time::Instant::now() >= deadline => {
                    tracing::warn!(pid = self.child.id(), "sandbox holder did not exit after SIGKILL");
                    return;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(1)),
            }
        }
    }
}

/// The zygote's `exit <wait status>` line, waited for up to `limit`: `Some(status)` once the
/// kernel's end is known (`Some(None)` if the zygote ended first), `None` while it runs. The status
/// reads as bubblewrap's would (128 + the signal for a killed kernel).
fn read_forked_exit(exit: &mut BufReader<UnixStream>, limit: Duration) -> Option<Option<std::process::ExitStatus>> {
    use std::os::unix::process::ExitStatusExt;
    let socket = exit.get_ref();
    let set = if limit.is_zero() {
        socket.set_nonblocking(true)
    } else {
        socket.set_nonblocking(false).and_then(|()| socket.set_read_timeout(Some(limit)))
    };
    if set.is_err() {
        return Some(None);
    }
    let mut line = String::new();
    match exit.read_line(&mut line) {
        Ok(0) => Some(None),
        Ok(_) => {
            let status: i32 = line.trim_end().strip_prefix("exit ")?.parse().ok()?;
            let code = if status & 0x7f != 0 { 128 + (status & 0x7f) } else { (status >> 8) & 0xff };
            Some(Some(std::process::ExitStatus::from_raw(code << 8)))
        }
        Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => None,
        Err(_) => Some(None),
    }
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
