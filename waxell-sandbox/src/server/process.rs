//! envd's `process.Process` Connect RPCs (E2B's `commands` and `pty`): `Start` and `Connect`
//! (server streams of process events), `List`, `SendInput`, `StreamInput` (a client stream),
//! `CloseStdin`, `SendSignal` and `Update` (a terminal's size).
//!
//! Each sandbox keeps a [`ProcessTable`] of its running processes. One task per process reads its
//! output whether or not anyone listens (a background command never stalls on a full pipe) and
//! hands every event to the streams attached to it (`Start`'s, then any `Connect`s); a process
//! leaves the table when it ends. Pids are the table's own (E2B's are the VM's): each process
//! runs in its own pid namespace, where its real pid says nothing to the client.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Extension, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio::time::Instant;
use waxell::sandbox::{
    ProcessControl, ProcessEvent, ProcessExit, ProcessOutput, ProcessSignal, ProcessSpec, PtySize,
};

use super::conn::BreakOff;
use super::connect::{self, EnvelopeReader};
use super::error::ApiError;
use super::registry::SandboxEntry;
use super::state::AppState;

/// The first pid handed out in a sandbox (small pids look like the sandbox's own daemons).
const FIRST_PID: u32 = 1000;
/// Events queued for one attached stream before the process's reader waits for it.
const STREAM_BUFFER: usize = 256;
/// Keepalive interval when the client asks for none.
const DEFAULT_KEEPALIVE: Duration = Duration::from_secs(50);
/// Header in which the SDKs ask for keepalive events, in seconds.
const KEEPALIVE_HEADER: &str = "keepalive-ping-interval";
/// Connect's deadline header, in milliseconds.
const TIMEOUT_HEADER: &str = "connect-timeout-ms";

/// A sandbox's running processes.
pub(crate) struct ProcessTable {
    inner: Mutex<TableInner>,
}

impl Default for ProcessTable {
    fn default() -> Self {
        Self {
            inner: Mutex::new(TableInner {
                next_pid: FIRST_PID,
                running: BTreeMap::new(),
            }),
        }
    }
}

struct TableInner {
    next_pid: u32,
    running: BTreeMap<u32, Arc<Tracked>>,
}

/// One running process.
struct Tracked {
    pid: u32,
    tag: Option<String>,
    /// Its `ProcessConfig`, as `List` reports it.
    config: Value,
    control: Arc<dyn ProcessControl>,
    listeners: Mutex<Listeners>,
}

#[derive(Default)]
struct Listeners {
    streams: Vec<mpsc::Sender<Value>>,
    /// Its end was sent: nothing may attach any more.
    ended: bool,
}

impl Tracked {
    /// A stream of its events from now on; `None` once it ended.
    fn attach(&self) -> Option<mpsc::Receiver<Value>> {
        let mut listeners = self.listeners.lock().unwrap_or_else(|e| e.into_inner());
        if listeners.ended {
            return None;
        }
        let (sender, receiver) = mpsc::channel(STREAM_BUFFER);
        listeners.streams.push(sender);
        Some(receiver)
    }
}

impl ProcessTable {
    fn lock(&self) -> std::sync::MutexGuard<'_, TableInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Track a started process, attach a first stream, and start reading its output.
    fn insert(
        self: &Arc<Self>,
        tag: Option<String>,
        config: Value,
        control: Arc<dyn ProcessControl>,
        output: Box<dyn ProcessOutput>,
    ) -> (u32, mpsc::Receiver<Value>) {
        let tracked = {
            let mut inner = self.lock();
            let pid = inner.next_pid;
            inner.next_pid = inner.next_pid.wrapping_add(1).max(FIRST_PID);
            let tracked = Arc::new(Tracked {
                pid,
                tag,
                config,
                control,
                listeners: Mutex::default(),
            });
            inner.running.insert(pid, tracked.clone());
            tracked
        };
        let first = tracked.attach().expect("a new process has not ended");
        tokio::spawn(pump(Arc::downgrade(self), tracked.clone(), output));
        (tracked.pid, first)
    }

    fn find(&self, selector: &Selector) -> Result<Arc<Tracked>, ApiError> {
        let inner = self.lock();
        let found = match (selector.pid, selector.tag.as_deref()) {
            (Some(pid), _) => inner.running.get(&pid).cloned(),
            (None, Some(tag)) => inner
                .running
                .values()
                .find(|p| p.tag.as_deref() == Some(tag))
                .cloned(),
            (None, None) => {
                return Err(ApiError::bad_request(
                    "the process selector names neither a pid nor a tag",
                ))
            }
        };
        found.ok_or_else(|| match (selector.pid, &selector.tag) {
            (Some(pid), _) => ApiError::not_found(format!("process with pid {pid} not found")),
            (None, tag) => ApiError::not_found(format!(
                "process with tag {:?} not found",
                tag.as_deref().unwrap_or_default()
            )),
        })
    }

    fn list(&self) -> Vec<Arc<Tracked>> {
        self.lock().running.values().cloned().collect()
    }
}

/// Read a process's events until it ends, handing each to every attached stream.
async fn pump(
    table: std::sync::Weak<ProcessTable>,
    tracked: Arc<Tracked>,
    mut output: Box<dyn ProcessOutput>,
) {
    while let Some(event) = output.next_event().await {
        let (value, last) = match event {
            ProcessEvent::Stdout(bytes) => (json!({"data": {"stdout": BASE64.encode(bytes)}}), false),
            ProcessEvent::Stderr(bytes) => (json!({"data": {"stderr": BASE64.encode(bytes)}}), false),
            ProcessEvent::Pty(bytes) => (json!({"data": {"pty": BASE64.encode(bytes)}}), false),
            ProcessEvent::Exit(exit) => (end_event(&exit), true),
        };
        if last {
            // Gone from the table before its end is seen: a client that reacts to the end finds
            // the pid free, as E2B's does.
            if let Some(table) = table.upgrade() {
                table.lock().running.remove(&tracked.pid);
            }
        }
        let streams = {
            let mut listeners = tracked.listeners.lock().unwrap_or_else(|e| e.into_inner());
            listeners.streams.retain(|s| !s.is_closed());
            listeners.ended |= last;
            if last {
                std::mem::take(&mut listeners.streams)
            } else {
                listeners.streams.clone()
            }
        };
        for stream in streams {
            let _ = stream.send(value.clone()).await;
        }
        if last {
            return;
        }
    }
    if let Some(table) = table.upgrade() {
        table.lock().running.remove(&tracked.pid);
    }
}

/// envd's `EndEvent`: Go's exit code (-1 after a signal), whether it exited on its own, Go's
/// status text (`exit status 1`, `signal: killed`), and as `error` what Go's `Wait` returns: the
/// status again for anything but a clean exit (the SDKs' `CommandExitException.error`).
fn end_event(exit: &ProcessExit) -> Value {
    let status = exit.status();
    let mut end = json!({
        "exitCode": exit.exit_code,
        "exited": exit.signal.is_none() && exit.error.is_none(),
        "status": status,
    });
    if let Some(error) = &exit.error {
        end["error"] = json!(error);
    } else if exit.exit_code != 0 || exit.signal.is_some() {
        end["error"] = json!(status);
    }
    json!({"end": end})
}

// ---- requests (proto3 JSON of spec/envd/process/process.proto) ----

#[derive(Deserialize, Serialize, Default)]
#[serde(default)]
struct ProcessConfig {
    cmd: String,
    args: Vec<String>,
    envs: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cwd: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Pty {
    size: Option<Size>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Size {
    cols: u32,
    rows: u32,
}

impl Pty {
    fn size(&self) -> Result<PtySize, ApiError> {
        let size = self
            .size
            .as_ref()
            .ok_or_else(|| ApiError::bad_request("pty.size is required"))?;
        let fits = |n: u32, what: &str| {
            u16::try_from(n).ok().filter(|n| *n > 0).ok_or_else(|| {
                ApiError::bad_request(format!("pty.size.{what} must be between 1 and 65535, not {n}"))
            })
        };
        Ok(PtySize {
            rows: fits(size.rows, "rows")?,
            cols: fits(size.cols, "cols")?,
        })
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct StartRequest {
    process: Option<ProcessConfig>,
    pty: Option<Pty>,
    tag: Option<String>,
    stdin: Option<bool>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Selector {
    pid: Option<u32>,
    tag: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct SelectRequest {
    process: Option<Selector>,
}

impl SelectRequest {
    fn selector(&self) -> Result<&Selector, ApiError> {
        named(&self.process)
    }
}

/// The process a request names (by pid or tag), or 400 when it names none.
fn named(process: &Option<Selector>) -> Result<&Selector, ApiError> {
    process
        .as_ref()
        .ok_or_else(|| ApiError::bad_request("the request names no process"))
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Input {
    stdin: Option<String>,
    pty: Option<String>,
}

impl Input {
    fn bytes(&self) -> Result<Vec<u8>, ApiError> {
        let encoded = self.stdin.as_deref().or(self.pty.as_deref()).unwrap_or_default();
        BASE64
            .decode(encoded)
            .map_err(|e| ApiError::bad_request(format!("input is not valid base64: {e}")))
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct SendInputRequest {
    process: Option<Selector>,
    input: Option<Input>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct SendSignalRequest {
    process: Option<Selector>,
    signal: Value,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct UpdateRequest {
    process: Option<Selector>,
    pty: Option<Pty>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct StreamInputRequest {
    start: Option<SelectRequest>,
    data: Option<StreamInputData>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct StreamInputData {
    input: Option<Input>,
}

fn signal_of(value: &Value) -> Result<ProcessSignal, ApiError> {
    match value {
        Value::String(name) if name == "SIGNAL_SIGKILL" => Ok(ProcessSignal::Kill),
        Value::String(name) if name == "SIGNAL_SIGTERM" => Ok(ProcessSignal::Terminate),
        Value::Number(n) if n.as_u64() == Some(9) => Ok(ProcessSignal::Kill),
        Value::Number(n) if n.as_u64() == Some(15) => Ok(ProcessSignal::Terminate),
        other => Err(ApiError::bad_request(format!(
            "signal {other}: only SIGNAL_SIGKILL and SIGNAL_SIGTERM are sent"
        ))),
    }
}

// ---- handlers ----

/// `POST /process.Process/{method}`.
pub(crate) async fn rpc(
    State(state): State<Arc<AppState>>,
    Path(method): Path<String>,
    break_off: Option<Extension<BreakOff>>,
    headers: HeaderMap,
    request: Body,
) -> Response {
    let break_off = break_off.map(|Extension(b)| b);
    let entry = match super::envd::sandbox(&state, &headers).await {
        Ok(entry) => entry,
        Err(e) => return e.into_response(),
    };
    let limit = state.config.json_limit();
    match method.as_str() {
        "Start" | "Connect" => {
            if let Err(e) = connect::check_codec(&headers, true) {
                return e.into_connect().into_response();
            }
            let stream = async {
                let request = EnvelopeReader::new(request, limit).only::<Value>().await?;
                let request =
                    request.ok_or_else(|| ApiError::bad_request("the request stream has no message"))?;
                fn parse<T: serde::de::DeserializeOwned>(method: &str, value: Value) -> Result<T, ApiError> {
                    serde_json::from_value(value)
                        .map_err(|e| ApiError::bad_request(format!("invalid {method}Request: {e}")))
                }
                if method == "Start" {
                    start(&entry, parse(&method, request)?).await
                } else {
                    let request: SelectRequest = parse(&method, request)?;
                    let tracked = entry.processes.find(request.selector()?)?;
                    let events = tracked.attach().ok_or_else(|| {
                        ApiError::not_found(format!("process with pid {} not found", tracked.pid))
                    })?;
                    Ok((tracked.pid, events))
                }
            };
            match tokio::time::timeout(state.config.body_timeout, stream).await {
                Ok(Ok((pid, events))) => {
                    event_stream(state.clone(), entry.id.clone(), pid, events, &headers, break_off)
                }
                Ok(Err(e)) => connect::stream_error(&e.into_connect()),
                Err(_) => connect::stream_error(&super::body::too_slow(state.config.body_timeout)),
            }
        }
        "StreamInput" => {
            if let Err(e) = connect::check_codec(&headers, true) {
                return e.into_connect().into_response();
            }
            match stream_input(&entry, EnvelopeReader::new(request, limit)).await {
                Ok(()) => connect::stream_response(futures_util::stream::iter([
                    connect::message(&json!({})),
                    connect::end(None),
                ])),
                Err(e) => connect::stream_error(&e.into_connect()),
            }
        }
        _ => {
            let result = async {
                connect::check_codec(&headers, false)?;
                let bytes = super::body::read(request, limit, state.config.body_timeout).await?;
                unary(&entry, &method, &bytes).await
            }
            .await;
            match result {
                Ok(value) => Json(value).into_response(),
                Err(e) => e.into_connect().into_response(),
            }
        }
    }
}

/// The unary RPCs.
async fn unary(entry: &SandboxEntry, method: &str, bytes: &[u8]) -> Result<Value, ApiError> {
    let table = &entry.processes;
    match method {
        "List" => {
            let processes: Vec<Value> = table
                .list()
                .iter()
                .map(|p| {
                    let mut info = json!({"config": p.config, "pid": p.pid});
                    if let Some(tag) = &p.tag {
                        info["tag"] = json!(tag);
                    }
                    info
                })
                .collect();
            Ok(json!({"processes": processes}))
        }
        "SendInput" => {
            let request: SendInputRequest = super::body::json(bytes)?;
            let tracked = table.find(named(&request.process)?)?;
            let data = request.input.unwrap_or_default().bytes()?;
            tracked
                .control
                .write_stdin(&data)
                .await
                .map_err(ApiError::from_sandbox)?;
            Ok(json!({}))
        }
        "CloseStdin" => {
            let request: SelectRequest = super::body::json(bytes)?;
            let tracked = table.find(request.selector()?)?;
            tracked
                .control
                .close_stdin()
                .await
                .map_err(ApiError::from_sandbox)?;
            Ok(json!({}))
        }
        "SendSignal" => {
            let request: SendSignalRequest = super::body::json(bytes)?;
            let tracked = table.find(named(&request.process)?)?;
            tracked
                .control
                .signal(signal_of(&request.signal)?)
                .await
                .map_err(ApiError::from_sandbox)?;
            Ok(json!({}))
        }
        "Update" => {
            let request: UpdateRequest = super::body::json(bytes)?;
            let tracked = table.find(named(&request.process)?)?;
            if let Some(pty) = &request.pty {
                tracked
                    .control
                    .resize(pty.size()?)
                    .await
                    .map_err(ApiError::from_sandbox)?;
            }
            Ok(json!({}))
        }
        _ => Err(ApiError::not_found(format!("no RPC process.Process/{method}"))),
    }
}

/// `Start`: the process started in the sandbox and tracked, with the first stream attached.
async fn start(
    entry: &SandboxEntry,
    request: StartRequest,
) -> Result<(u32, mpsc::Receiver<Value>), ApiError> {
    let config = request
        .process
        .ok_or_else(|| ApiError::bad_request("StartRequest.process is required"))?;
    let mut spec = ProcessSpec::new(config.cmd.clone()).with_args(config.args.clone());
    spec.env = config.envs.clone();
    spec.cwd = config.cwd.clone().filter(|cwd| !cwd.is_empty());
    // envd keeps stdin open unless told not to (older SDKs never say).
    spec.stdin = request.stdin.unwrap_or(true);
    if let Some(pty) = &request.pty {
        spec.pty = Some(pty.size()?);
    }
    let process = entry
        .session
        .start_process(&spec)
        .await
        .map_err(ApiError::from_sandbox)?;
    let config = serde_json::to_value(&config).unwrap_or_default();
    Ok(entry
        .processes
        .insert(request.tag, config, process.control, process.output))
}

/// `StreamInput`: a start message naming the process, then data messages, in order.
async fn stream_input(entry: &SandboxEntry, mut reader: EnvelopeReader) -> Result<(), ApiError> {
    let mut target: Option<Arc<Tracked>> = None;
    while let Some(message) = reader.next::<StreamInputRequest>().await? {
        if let Some(start) = &message.start {
            target = Some(entry.processes.find(start.selector()?)?);
        }
        if let Some(data) = &message.data {
            let tracked = target
                .as_ref()
                .ok_or_else(|| ApiError::bad_request("StreamInput sent data before a start message"))?;
            let bytes = data
                .input
                .as_ref()
                .map(Input::bytes)
                .transpose()?
                .unwrap_or_default();
            tracked
                .control
                .write_stdin(&bytes)
                .await
                .map_err(ApiError::from_sandbox)?;
        }
    }
    Ok(())
}

/// A `Start`/`Connect` response: the start event, the process's events, keepalives as asked, and
/// an end within the client's deadline. A process that ended because its sandbox was killed
/// breaks the connection off with a reset, as a dead E2B sandbox's does (the SDKs then check the
/// sandbox's health and report it killed).
fn event_stream(
    state: Arc<AppState>,
    sandbox_id: String,
    pid: u32,
    mut events: mpsc::Receiver<Value>,
    headers: &HeaderMap,
    break_off: Option<BreakOff>,
) -> Response {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    let keepalive = header(KEEPALIVE_HEADER)
        .map(|s| Duration::from_secs(s.max(1)))
        .unwrap_or(DEFAULT_KEEPALIVE);
    let deadline = header(TIMEOUT_HEADER).map(|ms| Instant::now() + Duration::from_millis(ms));
    let (out, mut envelopes) = mpsc::channel(16);
    tokio::spawn(async move {
        let message = |event: Value| connect::message(&json!({"event": event}));
        if out
            .send(Ok(message(json!({"start": {"pid": pid}}))))
            .await
            .is_err()
        {
            return;
        }
        let mut ticker = tokio::time::interval_at(Instant::now() + keepalive, keepalive);
        let far = Instant::now() + Duration::from_secs(100 * 365 * 24 * 3600);
        loop {
            let envelope = tokio::select! {
                event = events.recv() => match event {
                    Some(event) => {
                        let last = event.get("end").is_some();
                        if last && state.registry.get(&sandbox_id).is_none() {
                            if let Some(break_off) = &break_off {
                                break_off.arm();
                            }
                            let killed = std::io::Error::other(format!("sandbox {sandbox_id} was killed"));
                            let _ = out.send(Err(killed)).await;
                            return;
                        }
                        if out.send(Ok(message(event))).await.is_err() || last {
                            let _ = out.send(Ok(connect::end(None))).await;
                            return;
                        }
                        continue;
                    }
                    None => connect::end(Some(&ApiError::new(StatusCode::BAD_GATEWAY, "the process's output stream ended without an end event").into_connect())),
                },
                _ = ticker.tick() => message(json!({"keepalive": {}})),
                () = tokio::time::sleep_until(deadline.unwrap_or(far)) => connect::end(Some(
                    &ApiError::new(StatusCode::GATEWAY_TIMEOUT, "the request's deadline (Connect-Timeout-Ms) passed").into_connect(),
                )),
                () = out.closed() => return,
            };
            let last = envelope.first() == Some(&0x02);
            if out.send(Ok(envelope)).await.is_err() || last {
                return;
            }
        }
    });
    connect::broken_stream_response(futures_util::stream::poll_fn(move |cx| envelopes.poll_recv(cx)))
}
