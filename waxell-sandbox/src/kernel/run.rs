//! One run of a cell on a kernel: start-up (`ready`), the environment, the execution with its
//! timeout (interrupt, then kill after the grace period) and output caps, and the clean-up of a run
//! whose caller went away.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::time::Instant;
use waxell::sandbox::{Execution, ExecutionError, OutputMessage, RunOptions, SandboxError};

use super::protocol::{non_empty, report, to_execution_result, unguessable_id, KernelMessage};
use super::{Abort, ExecLimits, KernelProcess, Language, MainThread, OomCounter, ReadyInfo};

/// Largest `ready` line accepted.
const READY_LINE_LIMIT: usize = 64 << 10;
/// Largest line read while draining an abandoned execution.
const ABANDONED_LINE_LIMIT: usize = 64 << 20;
/// How long a run may wait for its kernel to start it (a fresh kernel finishing its imports)
/// beyond its own timeout. Bounded, so a kernel that never starts the cell still times out.
const START_ALLOWANCE: Duration = Duration::from_secs(10);
/// How long the kernel may take to set its environment or start a language runtime.
const CONFIGURE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the main thread may take to go idle after a real `done`.
const DONE_CONFIRM_LIMIT: Duration = Duration::from_millis(250);

impl KernelProcess {
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

    /// A `done` for the current run is real only if the main thread then goes idle: checks that
    /// find it busy are repeated for `DONE_CONFIRM_LIMIT` (the real kernel gets there in
    /// microseconds), and past `until` by at most 50 ms, so a flood of forged frames cannot hold
    /// off the run's timeout while a real `done` just at the deadline is still confirmed. Checks
    /// that cannot tell (a slow answer from a container's pid 1 on a loaded host) are repeated up
    /// to `until`: a real `done` is not taken for a forged one, and its result lost, because the
    /// check was slow.
    async fn confirm_done(&mut self, until: Instant) -> bool {
        let now = Instant::now();
        let busy_deadline = (now + DONE_CONFIRM_LIMIT).min(until.max(now + Duration::from_millis(50)));
        let unknown_deadline = until.max(busy_deadline);
        loop {
            let (deadline, pause) = match self.process.main_thread().await {
                MainThread::Idle => return true,
                MainThread::Busy => (busy_deadline, Duration::from_millis(1)),
                MainThread::Unknown => (unknown_deadline, Duration::from_millis(10)),
            };
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(pause).await;
        }
    }

    async fn send(&mut self, message: serde_json::Value) -> io::Result<()> {
        let mut line = serde_json::to_vec(&message).map_err(io::Error::other)?;
        line.push(b'\n');
        self.to_kernel.write_all(&line).await
    }

    /// Set environment variables (and optionally the working directory, made if missing and the
    /// sandbox user may) for all later executions. Only before the first cell: the answer is read
    /// as the next frame, which no cell code can have written yet.
    pub(crate) async fn configure(
        &mut self,
        env: &BTreeMap<String, String>,
        cwd: Option<&str>,
    ) -> Result<(), SandboxError> {
        self.send(serde_json::json!({"type": "setenv", "env": env, "cwd": cwd}))
            .await?;
        self.configured("setting the environment").await
    }

    /// Make the kernel run `language` (it starts the runtime, `runtime` if given). Before the first cell, as `configure`.
    pub(crate) async fn set_language(&mut self, language: Language, runtime: Option<&Path>) -> Result<(), SandboxError> {
        if language == Language::Python {
            return Ok(());
        }
        self.send(serde_json::json!({"type": "language", "language": language.name(), "runtime": runtime}))
            .await?;
        self.configured("starting the language runtime").await
    }

    /// The kernel's `configured` answer (output frames before it, e.g. of a preloaded module, are
    /// skipped).
    async fn configured(&mut self, what: &str) -> Result<(), SandboxError> {
        let read = async {
            loop {
                match self.from_kernel.next_line(READY_LINE_LIMIT).await {
                    Ok(Some(line)) => {
                        if let Ok(KernelMessage::Configured { error }) = serde_json::from_slice(&line) {
                            return Ok(error);
                        }
                    }
                    Ok(None) => return Err(format!("the kernel exited while {what}")),
                    Err(e) => return Err(format!("reading the kernel's answer while {what}: {e}")),
                }
            }
        };
        match tokio::time::timeout(CONFIGURE_TIMEOUT, read).await {
            Ok(Ok(None)) => Ok(()),
            Ok(Ok(Some(error))) => Err(SandboxError::InvalidArgument(error)),
            Ok(Err(message)) => {
                self.kill();
                Err(SandboxError::Unavailable(message))
            }
            Err(_) => {
                self.kill();
                Err(SandboxError::Timeout(format!(
                    "the kernel did not answer within {CONFIGURE_TIMEOUT:?} while {what}"
                )))
            }
        }
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
        // An interrupt for the last cell, relayed and still on its way, must not hit this one.
        self.process.signals_delivered().await;
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
        // Until the kernel's `started` the run may also wait for the kernel to get ready (IPython
        // still importing in a fresh kernel); from `started` on, the run's own timeout counts.
        let mut deadline = Instant::now() + limits.timeout + START_ALLOWANCE;
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
                    if !interrupted {
                        deadline = Instant::now() + limits.timeout;
                    }
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
        } else if oom && execution.error.as_ref().is_none_or(|e| e.name == "KernelDied") {
            // Also a language runtime the OOM killer ended (the kernel reports it died).
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

