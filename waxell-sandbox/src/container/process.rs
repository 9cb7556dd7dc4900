//! Commands and terminals in a container: each an attached exec as the sandbox user, so it runs
//! under the container's limits (cgroup, pids, seccomp, no network, read-only root) like a kernel.
//! The Engine API cannot signal an exec and reports only a host pid, so the exec starts through
//! the in-sandbox helper, which first prints its pid (then the program's); signals go through the
//! container's pid 1 as the kernel's do. A terminal is the engine's own (`Tty`), resized through
//! the API, and holds one of the sandbox's terminal permits while it runs. Where the engine cannot
//! make one (Podman with runsc), a keeper in the sandbox makes it (`keeper.py`): the exec is a
//! plain one, and a resize is a second exec (`ptyresize.py`). Where the sandbox's memory is
//! checkpointed every command and terminal runs under a keeper, so it outlives its exec.

use std::pin::Pin;
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bollard::exec::{ResizeExecOptions, StartExecOptions, StartExecResults};
use bollard::models::ExecConfig;
use bollard::container::LogOutput;
use bollard::Docker;
use futures_util::StreamExt;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, Mutex};
use waxell::sandbox::{
    ProcessControl, ProcessEvent, ProcessExit, ProcessOutput, ProcessSignal, ProcessSpec, PtySize, SandboxError,
    SandboxProcess,
};

use super::engine::{api_error, Control};
use super::seccomp::SeccompOption;
use crate::backend::SavedProcess;
use crate::command::{exit_of_code, helper_args, PtyPermit};
use crate::paths::HOME_DIR;

/// Events buffered before reading the exec's output waits for the reader.
const EVENTS_BUFFERED: usize = 64;

/// The in-sandbox resizer of a keeper's terminal, and of an engine's that Podman resizes late.
const PTY_RESIZER: &str = include_str!("ptyresize.py");
/// The keeper of a process that outlives its exec, and its relay.
const KEEPER: &str = include_str!("keeper.py");
/// Where the keepers' FIFOs are, one directory per process named by its pid: `/dev/shm` is
/// gVisor's own tmpfs, saved with the sandbox's memory.
const PROCESSES_DIR: &str = "/dev/shm/waxell-processes";

/// Where a terminal comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Terminals {
    /// The engine's own (`Tty` on the exec).
    Engine,
    /// The engine's own, whose resize the engine only queues (Podman: conmon applies it later, so
    /// a program started right after could read the old size): the resizer then sets it too.
    EngineResizedLater,
        /// A keeper in the sandbox (`keeper.py`), in a plain exec.
    Relay,
    /// Every process under a keeper (`keeper.py`), which makes its terminal, in a plain exec: where
    /// the sandbox's memory is checkpointed, so it lives on.
    Keeper,
}

/// Start `spec` in `container` as `user`, under the sandbox's syscall policy (`seccomp`).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn start(
    docker: &Docker,
    container: &str,
    control: Control,
    user: &str,
    spec: &ProcessSpec,
    pty: Option<PtyPermit>,
    terminals: Terminals,
    seccomp: &SeccompOption,
) -> Result<SandboxProcess, SandboxError> {
    let relay = pty.is_some() && matches!(terminals, Terminals::Relay | Terminals::Keeper);
    let tty = pty.is_some() && !relay;
    let with_stdin = pty.is_some() || spec.stdin;
    let mut cmd = vec!["python3".to_owned(), "-I".to_owned()];
        if relay || terminals == Terminals::Keeper {
        let (rows, cols) = pty.as_ref().map_or((0, 0), |p| (p.size.rows, p.size.cols));
        cmd.extend(["-c", KEEPER, "relay", PROCESSES_DIR].map(str::to_owned));
        cmd.extend([u8::from(with_stdin).to_string(), rows.to_string(), cols.to_string()]);
    } else {
        cmd.extend(helper_args(0, tty, true));
    }
    cmd.push(spec.cmd.clone());
    cmd.extend(spec.args.iter().cloned());
    let exec = Exec {
        cmd: seccomp.wrap(cmd),
        env: spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect(),
        cwd: spec.cwd.clone().unwrap_or_else(|| HOME_DIR.to_owned()),
        with_stdin,
        tty,
        relay,
        durable: terminals == Terminals::Keeper,
    };
    run(docker, container, control, user, exec, pty, terminals).await
}

/// Attach to `saved`, a process that lived on in the checkpoint `container` was restored from
/// (keeper.py's `attach`).
pub(crate) async fn attach(
    docker: &Docker,
    container: &str,
    control: Control,
    user: &str,
    saved: &SavedProcess,
    pty: Option<PtyPermit>,
    seccomp: &SeccompOption,
) -> Result<SandboxProcess, SandboxError> {
    let cmd = ["python3", "-I", "-c", KEEPER, "attach"]
        .into_iter()
        .map(str::to_owned)
        .chain([format!("{PROCESSES_DIR}/{}", saved.sandbox_pid)])
        .collect();
    let exec = Exec {
        cmd: seccomp.wrap(cmd),
        env: Vec::new(),
        cwd: HOME_DIR.to_owned(),
        with_stdin: pty.is_some() || saved.stdin,
        tty: false,
        relay: pty.is_some(),
        durable: true,
    };
    run(docker, container, control, user, exec, pty, Terminals::Keeper).await
}

/// An exec to run for a process.
struct Exec {
    cmd: Vec<String>,
    env: Vec<String>,
    cwd: String,
    with_stdin: bool,
    /// The engine gives it a terminal.
    tty: bool,
    /// A relay in the sandbox gives it a terminal: all its output is the terminal's.
    relay: bool,
    /// It runs under a keeper (keeper.py): its end may be the relay's only.
    durable: bool,
}

/// Run `exec` in `container` as `user` and hand over its events and control.
async fn run(
    docker: &Docker,
    container: &str,
    control: Control,
    user: &str,
    exec: Exec,
    pty: Option<PtyPermit>,
    terminals: Terminals,
) -> Result<SandboxProcess, SandboxError> {
    let Exec {
        cmd,
        env,
        cwd,
        with_stdin,
        tty,
        relay,
        durable,
    } = exec;
    let exec = docker
        .create_exec(
            container,
            ExecConfig {
                attach_stdin: Some(with_stdin),
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                tty: Some(tty),
                // Docker takes the first size here; Podman ignores it (the resize below sets it).
                console_size: pty
                    .as_ref()
                    .filter(|_| tty)
                    .map(|p| vec![usize::from(p.size.rows), usize::from(p.size.cols)]),
                cmd: Some(cmd),
                env: Some(env),
                user: Some(user.to_owned()),
                working_dir: Some(cwd),
                ..Default::default()
            },
        )
        .await
        .map_err(|e| api_error("starting the process (exec create)", e))?;
    let started = docker
        .start_exec(
            &exec.id,
            Some(StartExecOptions {
                detach: false,
                tty,
                output_capacity: None,
            }),
        )
        .await
        .map_err(|e| api_error("starting the process (exec start)", e))?;
    let StartExecResults::Attached { output, input } = started else {
        return Err(SandboxError::Protocol {
            message: "the engine started the process detached".into(),
            received: String::new(),
        });
    };
    let output = output.take_until(control.gone());
    // The relay's output is the terminal's (its own errors included, as a terminal shows them).
    let mut output: Output = if relay {
        Box::pin(output.map(|item| {
            item.map(|item| match item {
                LogOutput::StdOut { message } | LogOutput::StdErr { message } => LogOutput::Console { message },
                other => other,
            })
        }))
    } else {
        Box::pin(output)
    };
    // Known before anyone can signal it: the helper prints it before the program starts.
    let (pid, early) = tokio::time::timeout(PID_TIMEOUT, read_pid(&mut output))
        .await
        .map_err(|_| SandboxError::Timeout(format!("the process did not start within {PID_TIMEOUT:?}")))?;
    let pid = Arc::new(AtomicU32::new(pid));
    let last_signal = Arc::new(AtomicI32::new(0));
    let (events, receiver) = mpsc::channel(EVENTS_BUFFERED);
    tokio::spawn(pump(
        docker.clone(),
        exec.id.clone(),
        early,
        output,
        events,
        last_signal.clone(),
        durable.then(|| control.clone()),
    ));
    if let Some(permit) = pty.as_ref().filter(|_| tty) {
        // Podman takes the first size only this way, and (under gVisor) only once the exec runs.
        for attempt in 0..20 {
            match resize(docker, &exec.id, permit.size).await {
                Ok(()) => break,
                Err(e) if attempt == 19 => tracing::debug!("sizing the terminal of exec {}: {e}", exec.id),
                Err(_) => tokio::time::sleep(Duration::from_millis(25)).await,
            }
        }
    }
    Ok(SandboxProcess {
        output: Box::new(Events(receiver)),
        control: Arc::new(ExecControl {
            docker: docker.clone(),
            exec_id: exec.id,
            control,
            pid,
            last_signal,
            input: Mutex::new(Some(input).filter(|_| with_stdin)),
            tty: pty,
            resizer: (relay || terminals == Terminals::EngineResizedLater)
                .then(|| (container.to_owned(), user.to_owned())),
            relay,
            durable,
        }),
    })
}

type Output = Pin<Box<dyn futures_util::Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>>;

/// How long the in-sandbox helper may take to report the program's pid.
const PID_TIMEOUT: Duration = Duration::from_secs(30);

fn event_of(item: LogOutput) -> Option<ProcessEvent> {
    match item {
        LogOutput::StdOut { message } => Some(ProcessEvent::Stdout(message.to_vec())),
        LogOutput::StdErr { message } => Some(ProcessEvent::Stderr(message.to_vec())),
        LogOutput::Console { message } => Some(ProcessEvent::Pty(message.to_vec())),
        LogOutput::StdIn { .. } => None,
    }
}

/// The helper's first line of output, its pid (0 when the output ended first), and the events
/// that came with or before it (the helper's own errors, the program's first bytes).
async fn read_pid(output: &mut Output) -> (u32, Vec<ProcessEvent>) {
    let mut line = Vec::new();
    let mut early = Vec::new();
    while let Some(Ok(item)) = output.next().await {
        match event_of(item) {
            Some(event @ (ProcessEvent::Stdout(_) | ProcessEvent::Pty(_))) => {
                let (ProcessEvent::Stdout(bytes) | ProcessEvent::Pty(bytes)) = &event else { unreachable!() };
                line.extend_from_slice(bytes);
                if let Some(end) = line.iter().position(|b| *b == b'\n') {
                    let pid = String::from_utf8_lossy(&line[..end]).trim().parse().unwrap_or(0);
                    let rest = line[end + 1..].to_vec();
                    if !rest.is_empty() {
                        early.push(match event {
                            ProcessEvent::Pty(_) => ProcessEvent::Pty(rest),
                            _ => ProcessEvent::Stdout(rest),
                        });
                    }
                    return (pid, early);
                }
            }
            Some(other) => early.push(other),
            None => {}
        }
    }
    (0, early)
}

/// The exec's events, then its exit. `severable`: the control of a sandbox whose pid 1 may end
/// the exec before a checkpoint while the process lives on (keeper.py): then the events end
/// without an exit.
async fn pump(
    docker: Docker,
    exec_id: String,
    early: Vec<ProcessEvent>,
    mut output: Output,
    events: mpsc::Sender<ProcessEvent>,
    last_signal: Arc<AtomicI32>,
    severable: Option<Control>,
) {
    let mut open = true;
    for event in early {
        open &= events.send(event).await.is_ok();
    }
    while open {
        let Some(Ok(item)) = output.next().await else { break };
        if let Some(event) = event_of(item) {
            open = events.send(event).await.is_ok();
        }
    }
    let mut code = None;
    for _ in 0..100 {
        match docker.inspect_exec(&exec_id).await {
            Ok(inspect) if inspect.running != Some(true) => {
                code = inspect.exit_code.map(|c| c as i32);
                break;
            }
            Ok(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            Err(_) => break,
        }
    }
    // Killed by pid 1 for the checkpoint (SIGKILL, or gone with the container): its relay only.
    if severable.is_some_and(|control| control.severed()) && matches!(code, None | Some(137)) {
        return;
    }
    let exit = match code {
        Some(code) => exit_of_code(Some(code), last_signal.load(Ordering::Acquire)),
        None => ProcessExit {
            exit_code: -1,
            signal: None,
            error: Some("the sandbox's container ended the process".into()),
        },
    };
    let _ = events.send(ProcessEvent::Exit(exit)).await;
}

async fn resize(docker: &Docker, exec_id: &str, size: PtySize) -> Result<(), SandboxError> {
    let options = ResizeExecOptions {
        height: size.rows,
        width: size.cols,
    };
    docker
        .resize_exec(exec_id, options)
        .await
        .map_err(|e| api_error("resizing the terminal", e))
}

struct Events(mpsc::Receiver<ProcessEvent>);

#[async_trait]
impl ProcessOutput for Events {
    async fn next_event(&mut self) -> Option<ProcessEvent> {
        self.0.recv().await
    }
}

struct ExecControl {
    docker: Docker,
    exec_id: String,
    control: Control,
    /// The program's pid inside the container, once the helper reported it (0 before).
    pid: Arc<AtomicU32>,
    last_signal: Arc<AtomicI32>,
    input: Mutex<Option<Pin<Box<dyn AsyncWrite + Send>>>>,
    /// Held while the process runs.
    tty: Option<PtyPermit>,
    /// The container and user the in-sandbox resizer runs as: for a relayed terminal, and for an
    /// engine's terminal that the engine resizes later.
    resizer: Option<(String, String)>,
    /// The terminal is the relay's: the engine has none to resize.
    relay: bool,
    /// It runs under a keeper (keeper.py): it outlives a checkpoint.
    durable: bool,
}

impl ExecControl {
    /// Resize the program's terminal from inside the sandbox: an exec of the relay's resizer, done
    /// when it returns.
    async fn resize_in_sandbox(&self, container: &str, user: &str, size: PtySize) -> Result<(), SandboxError> {
        let pid = self.pid.load(Ordering::Acquire);
        if pid <= 1 {
            return Err(SandboxError::Other("the terminal has not started yet".into()));
        }
        let cmd = ["python3", "-I", "-c", PTY_RESIZER, "resize"]
            .into_iter()
            .map(str::to_owned)
            .chain([pid.to_string(), size.rows.to_string(), size.cols.to_string()])
            .collect();
        let exec = self
            .docker
            .create_exec(
                container,
                ExecConfig {
                    attach_stdout: Some(true),
                    attach_stderr: Some(true),
                    cmd: Some(cmd),
                    user: Some(user.to_owned()),
                    ..Default::default()
                },
            )
            .await
            .map_err(|e| api_error("resizing the terminal (exec create)", e))?;
        let started = self
            .docker
            .start_exec(&exec.id, None)
            .await
            .map_err(|e| api_error("resizing the terminal (exec start)", e))?;
        let mut said = Vec::new();
        if let StartExecResults::Attached { mut output, .. } = started {
            while let Some(Ok(item)) = output.next().await {
                said.extend_from_slice(&item.into_bytes());
            }
        }
        let code = self
            .docker
            .inspect_exec(&exec.id)
            .await
            .map_err(|e| api_error("resizing the terminal (exec inspect)", e))?
            .exit_code;
        if code == Some(0) {
            Ok(())
        } else {
            Err(SandboxError::Other(format!(
                "resizing the terminal failed (exit {code:?}): {}",
                String::from_utf8_lossy(&said).trim()
            )))
        }
    }
}

#[async_trait]
impl ProcessControl for ExecControl {
    async fn write_stdin(&self, data: &[u8]) -> Result<(), SandboxError> {
        let mut input = self.input.lock().await;
        let Some(input) = input.as_mut() else {
            return Err(SandboxError::InvalidArgument(
                "the process's stdin is closed (start it with stdin enabled to send input)".into(),
            ));
        };
        input.write_all(data).await?;
        input.flush().await?;
        Ok(())
    }

    async fn close_stdin(&self) -> Result<(), SandboxError> {
        if self.tty.is_some() {
            return Err(SandboxError::InvalidArgument(
                "a terminal's input cannot be closed: send Ctrl-D (0x04) instead".into(),
            ));
        }
        if let Some(mut input) = self.input.lock().await.take() {
            // The engine passes the half-close on as the program's end of input.
            let _ = input.shutdown().await;
        }
        Ok(())
    }

    async fn signal(&self, signal: ProcessSignal) -> Result<(), SandboxError> {
        let pid = self.pid.load(Ordering::Acquire);
        if pid <= 1 {
            return Err(SandboxError::Other("the process has not started yet".into()));
        }
        self.last_signal.store(signal.number(), Ordering::Release);
        if self.control.send(signal.number(), pid) {
            Ok(())
        } else {
            Err(SandboxError::NotFound("the sandbox's container has stopped".into()))
        }
    }

    fn durable_pid(&self) -> Option<u32> {
        let pid = self.pid.load(Ordering::Acquire);
        (self.durable && pid > 1).then_some(pid)
    }

    async fn resize(&self, size: PtySize) -> Result<(), SandboxError> {
        if self.tty.is_none() {
            return Err(SandboxError::InvalidArgument(
                "the process has no terminal to resize (start it with a PTY)".into(),
            ));
        }
        if !self.relay {
            resize(&self.docker, &self.exec_id, size).await?;
        }
        match &self.resizer {
            Some((container, user)) => self.resize_in_sandbox(container, user, size).await,
            None => Ok(()),
        }
    }
}
