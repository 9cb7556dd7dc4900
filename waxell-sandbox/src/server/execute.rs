//! The `/execute` NDJSON stream: one JSON object per line, flushed as the code produces output,
//! `keepalive` lines during silence, `end_of_execution` last. A client that goes away (the
//! keepalive write fails and hyper drops the body) gets its code interrupted, with the state kept.
//! Output waiting for a slow client is bounded: past the cap the stream is cut (the client sees a
//! stream without `end_of_execution`) and the code interrupted, instead of the server buffering
//! whatever the code prints.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::body::{Body, Bytes};
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use waxell::e2b::wire::line;
use waxell::sandbox::{Execution, ExecutionResult, OutputMessage, RunOptions, SandboxError, SandboxSession};

use super::error::ApiError;

/// Where a run goes.
#[derive(Clone, Debug)]
pub(crate) enum Target {
    /// The default Python context.
    Default,
    /// A context by id (checked to exist before the stream starts).
    Context(String),
    /// The default context of a language (`None`: Python).
    Language(Option<String>),
}

impl Target {
    fn options(&self) -> RunOptions {
        match self {
            Target::Default | Target::Language(None) => RunOptions::new(),
            Target::Context(id) => RunOptions::new().with_context(id.clone()),
            Target::Language(Some(language)) => RunOptions::new().with_language(language.clone()),
        }
    }
}

const END_OF_EXECUTION: &[u8] = b"{\"type\": \"end_of_execution\"}\n";
const KEEPALIVE: &[u8] = b"{\"type\": \"keepalive\"}\n";
/// Sent by the run when the sandbox is gone: the body ends in an error (never a line of output:
/// every line the stream sends ends in a newline).
const SANDBOX_GONE: &[u8] = b"\0sandbox gone";

/// Timeout of the empty run that interrupts an abandoned execution (see [`interrupt_abandoned`]).
const INTERRUPT_RUN_TIMEOUT: Duration = Duration::from_millis(1);

fn ndjson_line(value: Value) -> Bytes {
    let mut bytes = serde_json::to_vec(&value).unwrap_or_default();
    bytes.push(b'\n');
    Bytes::from(bytes)
}

fn timestamp() -> String {
    humantime::format_rfc3339_micros(SystemTime::now()).to_string()
}

fn output_line(message: &OutputMessage) -> Bytes {
    let kind = if message.error { line::STDERR } else { line::STDOUT };
    ndjson_line(json!({"type": kind, "text": message.line, "timestamp": timestamp()}))
}

fn result_line(result: &ExecutionResult) -> Bytes {
    let mut value = serde_json::to_value(result).unwrap_or_else(|_| json!({}));
    value["type"] = json!(line::RESULT);
    ndjson_line(value)
}

/// The lines after the streamed output: results no callback delivered, the error, the count.
fn closing_lines(outcome: Result<Execution, SandboxError>, streamed_results: usize) -> Vec<Bytes> {
    let mut lines = Vec::new();
    match outcome {
        Ok(execution) => {
            lines.extend(execution.results.iter().skip(streamed_results).map(result_line));
            if let Some(error) = execution.error {
                lines.push(ndjson_line(json!({
                    "type": line::ERROR,
                    "name": error.name,
                    "value": error.value,
                    "traceback": error.traceback,
                })));
            }
            if let Some(count) = execution.execution_count {
                lines.push(ndjson_line(
                    json!({"type": line::NUMBER_OF_EXECUTIONS, "execution_count": count}),
                ));
            }
        }
        Err(e) => {
            let name = ApiError::execution_error_name(&e);
            lines.push(ndjson_line(json!({
                "type": line::ERROR,
                "name": name,
                "value": e.to_string(),
                "traceback": "",
            })));
        }
    }
    lines.push(Bytes::from_static(END_OF_EXECUTION));
    lines
}

/// The sending side of a stream's lines, counting the bytes not yet taken by the response body.
#[derive(Clone)]
struct Outbox {
    tx: mpsc::UnboundedSender<Bytes>,
    buffered: Arc<AtomicUsize>,
    overflow: Arc<AtomicBool>,
    cap: usize,
}

impl Outbox {
    /// Past the cap too: the marker that ends the stream.
    fn send_unbounded(&self, bytes: Bytes) {
        let _ = self.tx.send(bytes);
    }

    fn send(&self, bytes: Bytes) {
        if self.overflow.load(Ordering::SeqCst) {
            return;
        }
        let before = self.buffered.fetch_add(bytes.len(), Ordering::SeqCst);
        if before + bytes.len() > self.cap {
            self.overflow.store(true, Ordering::SeqCst);
            // An empty chunk wakes the body so it sees the overflow without waiting for a keepalive.
            let _ = self.tx.send(Bytes::new());
            return;
        }
        let _ = self.tx.send(bytes);
    }
}

/// Start the run and answer with its stream.
///
/// The sandbox interface reports the execution count only when the run ends, so
/// `number_of_executions` comes just before `end_of_execution` rather than first; the SDKs accept
/// it anywhere.
pub(crate) fn stream(
    session: Arc<dyn SandboxSession>,
    code: String,
    target: Target,
    env_vars: std::collections::BTreeMap<String, String>,
    keepalive: Duration,
    max_buffer_bytes: usize,
) -> Response {
    let (tx, rx) = mpsc::unbounded_channel::<Bytes>();
    let tx = Outbox {
        tx,
        buffered: Arc::new(AtomicUsize::new(0)),
        overflow: Arc::new(AtomicBool::new(false)),
        cap: max_buffer_bytes,
    };
    let buffered = tx.buffered.clone();
    let streamed_results = Arc::new(AtomicUsize::new(0));
    let mut options = target.options();
    options.env_vars = env_vars;
    let out = tx.clone();
    options = options.on_stdout(move |m| {
        out.send(output_line(m));
    });
    let out = tx.clone();
    options = options.on_stderr(move |m| {
        out.send(output_line(m));
    });
    let (out, counter) = (tx.clone(), streamed_results.clone());
    options = options.on_result(move |r| {
        counter.fetch_add(1, Ordering::SeqCst);
        out.send(result_line(r));
    });
    let run_session = session.clone();
    let run = tokio::spawn(async move {
        let outcome = run_session.run_code(&code, &options).await;
        if let Err(SandboxError::NotFound(message)) = &outcome {
            // The sandbox was killed (or expired) mid-run: end the stream broken, as E2B's does, so
            // the SDKs report the kill instead of a run that ended.
            tracing::info!(%message, "sandbox gone mid-execution; cutting the stream");
            tx.send_unbounded(Bytes::from_static(SANDBOX_GONE));
            return;
        }
        for bytes in closing_lines(outcome, streamed_results.load(Ordering::SeqCst)) {
            tx.send(bytes);
        }
    });
    let state = StreamState {
        rx,
        buffered,
        max_buffer_bytes,
        keepalive,
        guard: AbandonGuard {
            run: Some(run),
            session,
            target,
            finished: false,
        },
    };
    let body = futures_util::stream::unfold(state, |mut state| async move {
        if state.guard.finished {
            return None;
        }
        let bytes = match tokio::time::timeout(state.keepalive, state.rx.recv()).await {
            Ok(Some(bytes)) if bytes.is_empty() => {
                // The overflow marker: everything sent before it has been delivered. Cut the
                // stream; dropping the body (the guard) interrupts the code.
                tracing::warn!(
                    limit = state.max_buffer_bytes,
                    "client reads /execute output slower than the code prints it; cutting the stream"
                );
                let message = format!(
                    "more than {} bytes of output waiting for a client that does not read them",
                    state.max_buffer_bytes
                );
                return Some((Err(std::io::Error::other(message)), state));
            }
            Ok(Some(bytes)) if bytes.as_ref() == SANDBOX_GONE => {
                state.guard.finished = true;
                let message = "the sandbox was killed while the code was running";
                return Some((Err(std::io::Error::other(message)), state));
            }
            Ok(Some(bytes)) => {
                state.buffered.fetch_sub(bytes.len(), Ordering::SeqCst);
                bytes
            }
            // The run task ended without END_OF_EXECUTION: it panicked. Say so, then end the stream.
            Ok(None) => {
                state.guard.finished = true;
                let failed = Err(SandboxError::Other("the execution task failed".into()));
                let bytes: Bytes = closing_lines(failed, 0).concat().into();
                return Some((Ok::<_, std::io::Error>(bytes), state));
            }
            Err(_) => Bytes::from_static(KEEPALIVE),
        };
        if bytes.as_ref() == END_OF_EXECUTION {
            state.guard.finished = true;
        }
        Some((Ok(bytes), state))
    });
    ([(CONTENT_TYPE, "application/x-ndjson")], Body::from_stream(body)).into_response()
}

struct StreamState {
    rx: mpsc::UnboundedReceiver<Bytes>,
    /// Bytes sent and not yet received; shared with the [`Outbox`].
    buffered: Arc<AtomicUsize>,
    max_buffer_bytes: usize,
    keepalive: Duration,
    guard: AbandonGuard,
}

/// Dropped with the response body. If that happens before `end_of_execution` was handed to hyper,
/// the client went away mid-run: stop the run and interrupt its code.
struct AbandonGuard {
    run: Option<JoinHandle<()>>,
    session: Arc<dyn SandboxSession>,
    target: Target,
    finished: bool,
}

impl Drop for AbandonGuard {
    fn drop(&mut self) {
        let Some(run) = self.run.take() else { return };
        if self.finished || run.is_finished() {
            return;
        }
        tracing::info!(sandbox = %self.session.sandbox_id(), "client left mid-execution; interrupting");
        let (session, target) = (self.session.clone(), self.target.clone());
        tokio::spawn(async move {
            run.abort();
            let _ = run.await;
            interrupt_abandoned(session.as_ref(), &target).await;
        });
    }
}

/// Interrupt whatever the context is still running, keeping its state.
///
/// The sandbox interface has no interrupt call. Dropping the abandoned run released the context; an
/// empty run on it now makes the backend deal with the abandoned code at once rather than when the
/// next client happens to run something: the local backend interrupts and drains an abandoned cell
/// before any run, and the 1 ms timeout makes backends that only interrupt on a run's timeout (an
/// E2B sandbox behind `waxell::e2b`, which drops its connection) interrupt as well.
async fn interrupt_abandoned(session: &dyn SandboxSession, target: &Target) {
    let options = target.options().with_timeout(INTERRUPT_RUN_TIMEOUT);
    match session.run_code("", &options).await {
        Ok(_) => tracing::debug!(sandbox = %session.sandbox_id(), "abandoned execution interrupted"),
        Err(e) => {
            tracing::warn!(sandbox = %session.sandbox_id(), error = %e, "interrupting an abandoned execution failed")
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use async_trait::async_trait;
    use futures_util::StreamExt;
    use waxell::sandbox::{CodeContext, EntryInfo};

    use super::*;

    /// A session whose run prints `lines` lines of 1 KiB at once, then waits until it is dropped
    /// (aborted) or `released`, recording whether an interrupt run came.
    struct Printer {
        lines: usize,
        interrupted: Arc<AtomicBool>,
    }

    #[async_trait]
    impl SandboxSession for Printer {
        fn sandbox_id(&self) -> &str {
            "printer"
        }
        async fn run_code(&self, code: &str, options: &RunOptions) -> Result<Execution, SandboxError> {
            if code.is_empty() {
                self.interrupted.store(true, Ordering::SeqCst);
                return Ok(Execution::default());
            }
            if code == "killed" {
                // The sandbox is killed while this run prints.
                if let Some(callback) = &options.on_stdout {
                    callback(&OutputMessage {
                        line: "before\n".into(),
                        error: false,
                    });
                }
                return Err(SandboxError::NotFound("sandbox printer was killed".into()));
            }
            let message = OutputMessage {
                line: "x".repeat(1024),
                error: false,
            };
            for _ in 0..self.lines {
                if let Some(callback) = &options.on_stdout {
                    callback(&message);
                }
            }
            std::future::pending::<()>().await;
            unreachable!()
        }
        async fn create_context(
            &self,
            _: Option<&str>,
            _: Option<&str>,
        ) -> Result<CodeContext, SandboxError> {
            unimplemented!()
        }
        async fn list_contexts(&self) -> Result<Vec<CodeContext>, SandboxError> {
            unimplemented!()
        }
        async fn restart_context(&self, _: &str) -> Result<(), SandboxError> {
            unimplemented!()
        }
        async fn remove_context(&self, _: &str) -> Result<(), SandboxError> {
            unimplemented!()
        }
        async fn write_file(&self, _: &str, _: &[u8]) -> Result<EntryInfo, SandboxError> {
            unimplemented!()
        }
        async fn read_file(&self, _: &str) -> Result<Vec<u8>, SandboxError> {
            unimplemented!()
        }
        async fn list_files(&self, _: &str) -> Result<Vec<EntryInfo>, SandboxError> {
            unimplemented!()
        }
        async fn set_timeout(&self, _: Duration) -> Result<(), SandboxError> {
            unimplemented!()
        }
        async fn kill(&self) -> Result<(), SandboxError> {
            unimplemented!()
        }
    }

    /// A sandbox killed mid-run ends the stream broken after the output so far (no error line, no
    /// `end_of_execution`), so E2B's SDKs report the kill rather than a finished run.
    #[tokio::test]
    async fn a_sandbox_killed_mid_run_ends_the_stream_with_an_error() {
        let session = Arc::new(Printer {
            lines: 0,
            interrupted: Arc::new(AtomicBool::new(false)),
        });
        let response = stream(
            session,
            "killed".into(),
            Target::Default,
            Default::default(),
            Duration::from_secs(60),
            1 << 20,
        );
        let mut body = response.into_body().into_data_stream();
        let mut text = Vec::new();
        let error = loop {
            match body.next().await.expect("the body ends in an error, not cleanly") {
                Ok(chunk) => text.extend_from_slice(&chunk),
                Err(e) => break e,
            }
        };
        let text = String::from_utf8(text).unwrap();
        assert!(text.contains("before"), "{text}");
        assert!(
            !text.contains("end_of_execution") && !text.contains("\"error\""),
            "{text}"
        );
        assert!(error.to_string().contains("killed"), "{error}");
    }

    /// Output a client has not taken yet is capped: past the cap the body ends in an error (the
    /// connection is cut) after what was buffered before, and the code is interrupted.
    #[tokio::test]
    async fn output_past_the_buffer_cap_cuts_the_stream_and_interrupts() {
        let interrupted = Arc::new(AtomicBool::new(false));
        let session = Arc::new(Printer {
            lines: 1000,
            interrupted: interrupted.clone(),
        });
        let cap = 64 * 1024;
        let response = stream(
            session,
            "print".into(),
            Target::Default,
            Default::default(),
            Duration::from_secs(60),
            cap,
        );
        // The client reads nothing while the code prints ~1 MiB.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut body = response.into_body().into_data_stream();
        let mut delivered = 0;
        let error = loop {
            match body.next().await.expect("the body ends in an error, not cleanly") {
                Ok(chunk) => delivered += chunk.len(),
                Err(e) => break e,
            }
        };
        assert!(
            delivered <= cap,
            "{delivered} bytes delivered past a {cap} byte cap"
        );
        assert!(
            delivered > cap / 2,
            "what was buffered before the cap is delivered: {delivered}"
        );
        assert!(error.to_string().contains("does not read"), "{error}");
        drop(body);
        for _ in 0..100 {
            if interrupted.load(Ordering::SeqCst) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the abandoned run was not interrupted");
    }
}
