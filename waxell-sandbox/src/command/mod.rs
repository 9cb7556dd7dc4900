//! Host side of a process started in a sandbox (E2B's commands and PTYs), the same for every
//! backend that starts one as a host process: its output read into [`ProcessEvent`]s, its stdin,
//! its exit (awaited through a pidfd, no thread per process), its terminal. What differs per
//! backend (how it is launched, how a signal reaches it) comes in a [`Launched`].
//!
//! A PTY is opened here, on the host, and only its terminal end is handed to the process: the
//! local sandbox has no `/dev/ptmx` (pseudo-terminals come from a host-wide pool), so the number
//! of terminals is what the host hands out ([`MAX_PTYS`] per sandbox, [`PtyPermit`]), never what
//! sandboxed code opens.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::pipe;
use tokio::sync::{mpsc, Mutex};
use waxell::sandbox::{
    ProcessControl, ProcessEvent, ProcessExit, ProcessOutput, ProcessSignal, PtySize, SandboxError, SandboxProcess,
};

/// Runs inside the sandbox before a program when the host cannot set everything up itself:
/// `python -I -c HELPER <nproc> <tty> <report pid> program args...`. With `nproc` > 0 it caps the processes
/// (rootless: `RLIMIT_NPROC` counts per user namespace only when set inside it, and the program
/// must not run before the cap); with `tty` = 1 it makes the terminal (its stdin) the controlling
/// one, so job control works and a resize reaches the program as SIGWINCH; with `report pid` = 1
/// its first line of output is its pid (the program's, after exec), for a host that cannot learn
/// it otherwise (a container's exec). It restores the signals Python ignores, so the program gets
/// them, then becomes the program.
pub(crate) const PROCESS_HELPER: &str = r#"import os, sys, signal
nproc, tty, report = int(sys.argv[1]), sys.argv[2] == "1", sys.argv[3] == "1"
if nproc > 0:
    import resource
    resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
for s in (signal.SIGPIPE, signal.SIGXFSZ):
    signal.signal(s, signal.SIG_DFL)
if tty:
    import fcntl, termios
    try:
        os.setsid()
    except OSError:
        pass
    try:
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)
    except OSError:
        pass
if report:
    os.write(1, b"%d\n" % os.getpid())
try:
    os.execvp(sys.argv[4], sys.argv[4:])
except OSError as e:
    sys.stderr.write(f"{sys.argv[4]}: {e.strerror}\n")
    os._exit(127 if isinstance(e, FileNotFoundError) else 126)
"#;

/// The helper's arguments before the program (`nproc` 0: no cap).
pub(crate) fn helper_args(nproc: u64, tty: bool, report_pid: bool) -> [String; 5] {
    let flag = |on: bool| if on { "1" } else { "0" }.to_owned();
    ["-c".into(), PROCESS_HELPER.into(), nproc.to_string(), flag(tty), flag(report_pid)]
}

pub(crate) use crate::config::MAX_PTYS;
/// Bytes read from a process's output at a time (one event at most this large).
const CHUNK: usize = 32 << 10;
/// Events buffered before the reader of a process's output pushes back on it.
const EVENTS_BUFFERED: usize = 64;
/// How long output may still arrive after the process exited (its children may hold the pipes).
const OUTPUT_GRACE: Duration = Duration::from_millis(500);

/// How a backend delivers a signal to a process it launched.
#[async_trait]
pub(crate) trait Signaller: Send + Sync {
    async fn signal(&self, signal: ProcessSignal) -> io::Result<()>;
}

/// The host ends of a started process's standard streams.
pub(crate) enum HostEnds {
    Pipes {
        stdin: Option<OwnedFd>,
        stdout: OwnedFd,
        stderr: OwnedFd,
    },
    Pty(Pty),
}

/// A process a backend launched, handed to [`attach`].
pub(crate) struct Launched {
    /// The host process whose exit is the process's exit (the program itself, or its launcher).
    pub(crate) child: std::process::Child,
    pub(crate) ends: HostEnds,
    pub(crate) signaller: Box<dyn Signaller>,
}

/// One of a sandbox's [`MAX_PTYS`] terminals, held while the process that has it runs. A backend
/// whose terminals come from the host opens one with [`Pty::open`]; one whose engine makes them
/// (a container's exec) just keeps the permit.
pub struct PtyPermit {
    open: Arc<AtomicUsize>,
    /// The size asked for.
    pub(crate) size: PtySize,
}

impl PtyPermit {
    /// A permit for a terminal of `size`, if the sandbox (whose open terminals `open` counts) has
    /// one left.
    pub(crate) fn take(size: PtySize, open: &Arc<AtomicUsize>) -> Result<Self, SandboxError> {
        if open.fetch_add(1, Ordering::AcqRel) >= MAX_PTYS {
            open.fetch_sub(1, Ordering::AcqRel);
            return Err(SandboxError::LimitExceeded {
                limit: waxell::sandbox::LimitKind::Processes,
                message: format!("the sandbox already has {MAX_PTYS} terminals open; kill one first"),
            });
        }
        Ok(Self { open: open.clone(), size })
    }
}

impl Drop for PtyPermit {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A pseudo-terminal opened on the host: the master stays here, the terminal end goes to the
/// process as its stdin, stdout and stderr.
pub(crate) struct Pty {
    master: OwnedFd,
    terminal: Option<OwnedFd>,
    _permit: PtyPermit,
}

impl Pty {
    /// Open the terminal `permit` allows.
    pub(crate) fn open(permit: PtyPermit) -> Result<Self, SandboxError> {
        use rustix::pty::{grantpt, openpt, ptsname, unlockpt, OpenptFlags};
        let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC).map_err(io::Error::from)?;
        grantpt(&master).map_err(io::Error::from)?;
        unlockpt(&master).map_err(io::Error::from)?;
        let name = ptsname(&master, Vec::new()).map_err(io::Error::from)?;
        let terminal = rustix::fs::open(
            name.as_c_str(),
            rustix::fs::OFlags::RDWR | rustix::fs::OFlags::NOCTTY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .map_err(io::Error::from)?;
        set_size(&master, permit.size)?;
        Ok(Self {
            master,
            terminal: Some(terminal),
            _permit: permit,
        })
    }

    /// The terminal end, for the process's stdin, stdout and stderr (each a duplicate).
    pub(crate) fn terminal(&self) -> io::Result<[OwnedFd; 3]> {
        let terminal = self.terminal.as_ref().ok_or_else(|| io::Error::other("terminal end already closed"))?;
        Ok([terminal.try_clone()?, terminal.try_clone()?, terminal.try_clone()?])
    }
}

fn set_size(master: &impl AsFd, size: PtySize) -> io::Result<()> {
    rustix::termios::tcsetwinsize(
        master,
        rustix::termios::Winsize {
            ws_row: size.rows,
            ws_col: size.cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        },
    )
    .map_err(io::Error::from)
}

/// Start reading `launched`'s output and waiting for its exit.
pub(crate) fn attach(launched: Launched) -> Result<SandboxProcess, SandboxError> {
    let Launched {
        child,
        ends,
        signaller,
    } = launched;
    let (events, receiver) = mpsc::channel(EVENTS_BUFFERED);
    let last_signal = Arc::new(AtomicI32::new(0));
    let (input, readers) = match ends {
        HostEnds::Pipes { stdin, stdout, stderr } => {
            let stdin = stdin.map(pipe::Sender::from_owned_fd).transpose()?;
            let stdout = pipe::Receiver::from_owned_fd(stdout)?;
            let stderr = pipe::Receiver::from_owned_fd(stderr)?;
            let readers = vec![
                tokio::spawn(pump_pipe(stdout, events.clone(), ProcessEvent::Stdout)),
                tokio::spawn(pump_pipe(stderr, events.clone(), ProcessEvent::Stderr)),
            ];
            (Input::Pipe(Mutex::new(stdin)), readers)
        }
        HostEnds::Pty(mut pty) => {
            // Only the process holds the terminal end now: its last close is the master's EOF.
            pty.terminal = None;
            rustix::io::ioctl_fionbio(&pty.master, true).map_err(io::Error::from)?;
            // tokio's pipe types are its safe way to register a pollable descriptor; a terminal
            // master reads and writes like a pipe (EIO once the terminal end is closed = EOF).
            let output = pipe::Receiver::from_owned_fd_unchecked(pty.master.try_clone()?)?;
            let input = pipe::Sender::from_owned_fd_unchecked(pty.master.try_clone()?)?;
            let readers = vec![tokio::spawn(pump_pipe(output, events.clone(), ProcessEvent::Pty))];
            (Input::Pty { input: Mutex::new(input), pty }, readers)
        }
    };
    let pidfd = rustix::process::Pid::from_raw(child.id() as i32)
        .ok_or_else(|| io::Error::other("the process has no pid"))
        .and_then(|pid| {
            rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::NONBLOCK).map_err(io::Error::from)
        })?;
    // A pidfd polls readable once the process exited.
    let exited = pipe::Receiver::from_owned_fd_unchecked(pidfd)?;
    tokio::spawn(wait_exit(child, exited, readers, events, last_signal.clone()));
    Ok(SandboxProcess {
        output: Box::new(Events(receiver)),
        control: Arc::new(Control {
            input,
            signaller,
            last_signal,
        }),
    })
}

async fn pump_pipe(mut from: pipe::Receiver, to: mpsc::Sender<ProcessEvent>, kind: fn(Vec<u8>) -> ProcessEvent) {
    let mut buffer = vec![0u8; CHUNK];
    loop {
        match from.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if to.send(kind(buffer[..n].to_vec())).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// Wait for the exit, let the output drain, then send the exit as the last event.
async fn wait_exit(
    mut child: std::process::Child,
    exited: pipe::Receiver,
    readers: Vec<tokio::task::JoinHandle<()>>,
    events: mpsc::Sender<ProcessEvent>,
    last_signal: Arc<AtomicI32>,
) {
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Ok(status),
            Ok(None) => {}
            Err(e) => break Err(e),
        }
        if let Err(e) = exited.readable().await {
            break Err(e);
        }
        // Readable stays set: wait for the reaped status without spinning.
        if matches!(child.try_wait(), Ok(None)) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    for reader in readers {
        let abort = reader.abort_handle();
        if tokio::time::timeout(OUTPUT_GRACE, reader).await.is_err() {
            abort.abort();
        }
    }
    let exit = match status {
        Ok(status) => exit_of(status, last_signal.load(Ordering::Acquire)),
        Err(e) => ProcessExit {
            exit_code: -1,
            signal: None,
            error: Some(format!("cannot wait for the process: {e}")),
        },
    };
    let _ = events.send(ProcessEvent::Exit(exit)).await;
}

/// How a process ended. A launcher (bwrap) reports a child ended by signal N as exit code
/// 128 + N, like a shell; that is believed to be the signal when it is the one we sent.
fn exit_of(status: std::process::ExitStatus, sent: i32) -> ProcessExit {
    if let Some(signal) = status.signal() {
        return ProcessExit::signaled(signal);
    }
    exit_of_code(status.code(), sent)
}

/// How a process ended, from the exit code its launcher or engine reports (`None`: unknown).
pub(crate) fn exit_of_code(code: Option<i32>, sent: i32) -> ProcessExit {
    match code {
        Some(code) if sent != 0 && code == 128 + sent => ProcessExit::signaled(sent),
        Some(code) => ProcessExit::code(code),
        None => ProcessExit::code(-1),
    }
}

struct Events(mpsc::Receiver<ProcessEvent>);

#[async_trait]
impl ProcessOutput for Events {
    async fn next_event(&mut self) -> Option<ProcessEvent> {
        self.0.recv().await
    }
}

enum Input {
    /// `None` once closed (or never opened).
    Pipe(Mutex<Option<pipe::Sender>>),
    Pty { input: Mutex<pipe::Sender>, pty: Pty },
}

struct Control {
    input: Input,
    signaller: Box<dyn Signaller>,
    last_signal: Arc<AtomicI32>,
}

fn io_error(what: &str, e: io::Error) -> SandboxError {
    SandboxError::Other(format!("{what}: {e}"))
}

#[async_trait]
impl ProcessControl for Control {
    async fn write_stdin(&self, data: &[u8]) -> Result<(), SandboxError> {
        match &self.input {
            Input::Pipe(stdin) => {
                let mut stdin = stdin.lock().await;
                let Some(pipe) = stdin.as_mut() else {
                    return Err(SandboxError::InvalidArgument(
                        "the process's stdin is closed (start it with stdin enabled to send input)".into(),
                    ));
                };
                pipe.write_all(data).await.map_err(|e| io_error("writing to the process's stdin", e))
            }
            Input::Pty { input, .. } => input
                .lock()
                .await
                .write_all(data)
                .await
                .map_err(|e| io_error("writing to the terminal", e)),
        }
    }

    async fn close_stdin(&self) -> Result<(), SandboxError> {
        match &self.input {
            Input::Pipe(stdin) => {
                stdin.lock().await.take();
                Ok(())
            }
            Input::Pty { .. } => Err(SandboxError::InvalidArgument(
                "a terminal's input cannot be closed: send Ctrl-D (0x04) instead".into(),
            )),
        }
    }

    async fn signal(&self, signal: ProcessSignal) -> Result<(), SandboxError> {
        self.last_signal.store(signal.number(), Ordering::Release);
        self.signaller
            .signal(signal)
            .await
            .map_err(|e| io_error("signalling the process", e))
    }

    async fn resize(&self, size: PtySize) -> Result<(), SandboxError> {
        match &self.input {
            // The kernel sends SIGWINCH to the terminal's foreground process group.
            Input::Pty { pty, .. } => set_size(&pty.master, size).map_err(|e| io_error("resizing the terminal", e)),
            Input::Pipe(_) => Err(SandboxError::InvalidArgument(
                "the process has no terminal to resize (start it with a PTY)".into(),
            )),
        }
    }
}
