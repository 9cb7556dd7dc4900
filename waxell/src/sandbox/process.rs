//! Processes in a sandbox (E2B's `commands` and `pty`): what to start ([`ProcessSpec`]), what
//! comes back ([`ProcessEvent`]s, the last one the [`ProcessExit`]) and how to steer it while it
//! runs ([`ProcessControl`]). Object-safe, runtime-neutral: a backend hands out boxed halves.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;

use super::SandboxError;

/// A process to start in a sandbox ([`super::SandboxSession::start_process`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProcessSpec {
    /// The program (`/bin/bash`, or a name looked up in the sandbox's `PATH`).
    pub cmd: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Environment variables, added to (and overriding) the sandbox's.
    pub env: BTreeMap<String, String>,
    /// Working directory inside the sandbox; `None` = the home directory.
    pub cwd: Option<String>,
    /// Run it on a pseudo-terminal of this size (its output then comes as [`ProcessEvent::Pty`]).
    pub pty: Option<PtySize>,
    /// Keep its stdin open for [`ProcessControl::write_stdin`]; otherwise it reads end-of-file.
    pub stdin: bool,
}

impl ProcessSpec {
    /// `cmd` with no arguments.
    pub fn new(cmd: impl Into<String>) -> Self {
        Self {
            cmd: cmd.into(),
            ..Self::default()
        }
    }

    /// `bash -l -c command`, the way E2B's `commands.run` starts a command.
    pub fn shell(command: impl Into<String>) -> Self {
        Self::new("/bin/bash").with_args(["-l".to_owned(), "-c".to_owned(), command.into()])
    }

    /// Set the arguments.
    pub fn with_args(mut self, args: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.args = args.into_iter().map(Into::into).collect();
        self
    }

    /// Add an environment variable.
    pub fn with_env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(key.into(), value.into());
        self
    }

    /// Set the working directory.
    pub fn with_cwd(mut self, cwd: impl Into<String>) -> Self {
        self.cwd = Some(cwd.into());
        self
    }

    /// Run on a pseudo-terminal.
    pub fn with_pty(mut self, size: PtySize) -> Self {
        self.pty = Some(size);
        self
    }

    /// Keep stdin open.
    pub fn with_stdin(mut self, stdin: bool) -> Self {
        self.stdin = stdin;
        self
    }

    /// The command line as one string, for spans and messages.
    pub fn command_line(&self) -> String {
        std::iter::once(self.cmd.as_str())
            .chain(self.args.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// A terminal's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PtySize {
    /// Lines.
    pub rows: u16,
    /// Columns.
    pub cols: u16,
}

/// What a running process produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcessEvent {
    /// Bytes written to stdout.
    Stdout(Vec<u8>),
    /// Bytes written to stderr.
    Stderr(Vec<u8>),
    /// Bytes written to the pseudo-terminal (stdout and stderr together).
    Pty(Vec<u8>),
    /// It ended; always the last event.
    Exit(ProcessExit),
}

/// How a process ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessExit {
    /// Its exit code; `-1` when a signal ended it (as E2B reports it).
    pub exit_code: i32,
    /// The signal that ended it, if one did.
    pub signal: Option<i32>,
    /// Why it could not run or be waited for, if so.
    pub error: Option<String>,
}

impl ProcessExit {
    /// A normal exit with `code`.
    pub fn code(code: i32) -> Self {
        Self {
            exit_code: code,
            signal: None,
            error: None,
        }
    }

    /// Ended by `signal`.
    pub fn signaled(signal: i32) -> Self {
        Self {
            exit_code: -1,
            signal: Some(signal),
            error: None,
        }
    }

    /// The status as Go's `os.ProcessState` prints it (what E2B's envd reports): `exit status 1`,
    /// `signal: killed`.
    pub fn status(&self) -> String {
        match self.signal {
            Some(signal) => format!("signal: {}", signal_name(signal)),
            None => format!("exit status {}", self.exit_code),
        }
    }
}

/// Go's names of the signals a sandboxed process usually ends by.
fn signal_name(signal: i32) -> String {
    match signal {
        1 => "hangup".into(),
        2 => "interrupt".into(),
        6 => "aborted".into(),
        9 => "killed".into(),
        11 => "segmentation fault".into(),
        13 => "broken pipe".into(),
        15 => "terminated".into(),
        24 => "CPU time limit exceeded".into(),
        25 => "file size limit exceeded".into(),
        other => format!("signal {other}"),
    }
}

/// A signal to send to a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProcessSignal {
    /// SIGTERM: ask it to end.
    Terminate,
    /// SIGKILL: end it and everything it started.
    Kill,
}

impl ProcessSignal {
    /// The signal's number.
    pub fn number(self) -> i32 {
        match self {
            Self::Terminate => 15,
            Self::Kill => 9,
        }
    }
}

/// The output half of a started process: its events in order, the last one
/// [`ProcessEvent::Exit`], then `None`.
#[async_trait]
pub trait ProcessOutput: Send {
    /// The next event; `None` after the exit was returned.
    async fn next_event(&mut self) -> Option<ProcessEvent>;
}

/// The steering half of a started process (shared: input, signals and resizes may come from other
/// tasks while one reads the output). Dropping the last handle does not stop the process; dropping
/// its [`ProcessOutput`] does not either: [`ProcessControl::signal`] does.
#[async_trait]
pub trait ProcessControl: Send + Sync {
    /// Write to its stdin (or type on its terminal).
    async fn write_stdin(&self, data: &[u8]) -> Result<(), SandboxError>;
    /// Close its stdin (end-of-file). Not for a terminal: type Ctrl-D there.
    async fn close_stdin(&self) -> Result<(), SandboxError>;
    /// Send it a signal.
    async fn signal(&self, signal: ProcessSignal) -> Result<(), SandboxError>;
    /// Resize its terminal (it gets `SIGWINCH`).
    async fn resize(&self, size: PtySize) -> Result<(), SandboxError>;
    /// Its pid inside the sandbox where the backend keeps it across a checkpoint of the sandbox's
    /// memory (it runs on after a restore, and can be attached to again); `None` elsewhere.
    fn durable_pid(&self) -> Option<u32> {
        None
    }
}

/// A started process.
pub struct SandboxProcess {
    /// Its events.
    pub output: Box<dyn ProcessOutput>,
    /// Input, signals and resizes.
    pub control: Arc<dyn ProcessControl>,
}

impl fmt::Debug for SandboxProcess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SandboxProcess").finish_non_exhaustive()
    }
}

impl SandboxProcess {
    /// Read every event until the exit (terminal output counts as stdout). For a process that ends
    /// on its own.
    pub async fn wait(mut self) -> CommandOutput {
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        while let Some(event) = self.output.next_event().await {
            match event {
                ProcessEvent::Stdout(bytes) | ProcessEvent::Pty(bytes) => stdout.extend(bytes),
                ProcessEvent::Stderr(bytes) => stderr.extend(bytes),
                ProcessEvent::Exit(exit) => return CommandOutput { stdout, stderr, exit },
            }
        }
        let exit = ProcessExit {
            exit_code: -1,
            signal: None,
            error: Some("the process's output ended without an exit status".into()),
        };
        CommandOutput { stdout, stderr, exit }
    }
}

/// What a command wrote and how it ended ([`SandboxProcess::wait`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandOutput {
    /// Its stdout (and terminal output).
    pub stdout: Vec<u8>,
    /// Its stderr.
    pub stderr: Vec<u8>,
    /// How it ended.
    pub exit: ProcessExit,
}

impl CommandOutput {
    /// Stdout as text (invalid UTF-8 replaced).
    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// Stderr as text (invalid UTF-8 replaced).
    pub fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }

    /// Whether it exited with code 0.
    pub fn success(&self) -> bool {
        self.exit.exit_code == 0 && self.exit.signal.is_none() && self.exit.error.is_none()
    }
}
