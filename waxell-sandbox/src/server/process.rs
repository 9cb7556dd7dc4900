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
    SandboxProcess,
};

use super::conn::BreakOff;
use super::connect::{self, EnvelopeReader};
use super::error::ApiError;
use super::registry::SandboxEntry;
use super::state::AppState;
use crate::backend::SavedProcess;

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
                checkpointing: false,
                detached: Vec::new(),
            }),
        }
    }
}

struct TableInner {
    next_pid: u32,
    running: BTreeMap<u32, Arc<Tracked>>,
    /// A checkpoint of the sandbox's memory is being taken: a process that outlives it
    /// (`ProcessControl::durable_pid`) and whose events end without an exit stays, to be attached
    /// to again after the restore.
    checkpointing: bool,
    /// The pids of those whose events so ended.
    detached: Vec<u32>,
}

/// One running process.
struct Tracked {
    pid: u32,
    tag: Option<String>,
    /// Its `ProcessConfig`, as `List` reports it.
    config: Value,
    /// Its terminal's size as started, if it has one, and whether its input is open: what a
    /// checkpoint keeps to attach to it again.
    terminal: Option<PtySize>,
    stdin: bool,
    /// Replaced when it is attached to again after a restore.
    control: Mutex<Arc<dyn ProcessControl>>,
    listeners: Mutex<Listeners>,
}

#[derive(Default)]
struct Listeners {
    streams: Vec<mpsc::Sender<Value>>,
    /// Its end was sent: nothing may attach any more.
    ended: bool,
}

/// What the server keeps of a process in a checkpoint ([`SavedProcess::owner`]).
#[derive(Serialize, Deserialize)]
struct Owned {
    pid: u32,
    tag: Option<String>,
    config: Value,
}

impl Tracked {
    fn control(&self) -> Arc<dyn ProcessControl> {
        self.control.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Send its end to every stream attached, and let none attach any more.
    async fn end(&self, exit: &ProcessExit) {
        let streams = {
            let mut listeners = self.listeners.lock().unwrap_or_else(|e| e.into_inner());
            listeners.ended = true;
            std::mem::take(&mut listeners.streams)
        };
        let value = end_event(exit);
        for stream in streams {
            let _ = stream.send(value.clone()).await;
        }
    }

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
        spec: &ProcessSpec,
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
                terminal: spec.pty,
                stdin: spec.stdin,
                control: Mutex::new(control),
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

    /// A checkpoint of the sandbox's memory begins (see [`TableInner::checkpointing`]).
    pub(crate) fn begin_checkpoint(&self) {
        self.lock().checkpointing = true;
    }

    /// The checkpoint was taken: the processes that live on in it.
    pub(crate) fn saved(&self) -> Vec<SavedProcess> {
        let inner = self.lock();
        inner
            .running
            .values()
            .filter_map(|tracked| {
                let sandbox_pid = tracked.control().durable_pid()?;
                let owner = Owned {
                    pid: tracked.pid,
                    tag: tracked.tag.clone(),
                    config: tracked.config.clone(),
                };
                Some(SavedProcess {
                    sandbox_pid,
                    terminal: tracked.terminal.map(|size| (size.rows, size.cols)),
                    stdin: tracked.stdin,
                    owner: serde_json::to_value(owner).unwrap_or_default(),
                })
            })
            .collect()
    }

    /// The checkpoint failed and the sandbox runs on: the processes whose events ended meanwhile
    /// are gone (their relays were ended; nothing brings them back), so their streams get an end.
    pub(crate) async fn checkpoint_failed(&self) {
        let gone: Vec<Arc<Tracked>> = {
            let mut inner = self.lock();
            inner.checkpointing = false;
            let detached = std::mem::take(&mut inner.detached);
            detached
                .iter()
                .filter_map(|pid| inner.running.remove(pid))
                .collect()
        };
        end_each(
            gone,
            "the process was lost when a checkpoint of the sandbox failed",
        )
        .await;
    }

    /// End every process here for `why` (the sandbox they lived on in is gone): their streams get
    /// an end.
    pub(crate) async fn end_all(&self, why: &str) {
        let gone: Vec<Arc<Tracked>> = std::mem::take(&mut self.lock().running).into_values().collect();
        end_each(gone, why).await;
    }

    /// Track `saved`, a process of the checkpoint this table's sandbox was restored from, as
    /// attached to again (`process`). `previous`: the table of the sandbox it was checkpointed
    /// from, when that is the same sandbox (a resume, or a restore in place), whose streams
    /// attached to the process go on. When it could not be attached to, those streams get an end.
    pub(crate) async fn adopt(
        self: &Arc<Self>,
        saved: &SavedProcess,
        process: Result<SandboxProcess, String>,
        previous: Option<&ProcessTable>,
    ) {
        let Ok(owned) = serde_json::from_value::<Owned>(saved.owner.clone()) else {
            tracing::warn!("a process in the checkpoint is not one of this server's: left alone");
            return;
        };
        let earlier = previous.and_then(|table| table.lock().running.get(&owned.pid).cloned());
        let process = match process {
            Ok(process) => process,
            Err(why) => {
                tracing::warn!(
                    pid = owned.pid,
                    "attaching to a process of the checkpoint failed: {why}"
                );
                let why = format!("the process could not be attached to after the restore: {why}");
                end_each(earlier.into_iter().collect(), &why).await;
                return;
            }
        };
        let tracked = match earlier {
            Some(earlier) => {
                *earlier.control.lock().unwrap_or_else(|e| e.into_inner()) = process.control;
                earlier
            }
            None => Arc::new(Tracked {
                pid: owned.pid,
                tag: owned.tag,
                config: owned.config,
                terminal: saved.terminal.map(|(rows, cols)| PtySize { rows, cols }),
                stdin: saved.stdin,
                control: Mutex::new(process.control),
                listeners: Mutex::default(),
            }),
        };
        {
            let mut inner = self.lock();
            inner.next_pid = inner.next_pid.max(tracked.pid.saturating_add(1));
            inner.running.insert(tracked.pid, tracked.clone());
        }
        tokio::spawn(pump(Arc::downgrade(self), tracked, process.output));
    }
}

/// End each of `gone` for `why`, a reason outside the process (it was lost with its sandbox or
/// its checkpoint): their streams get an end with no exit status.
async fn end_each(gone: Vec<Arc<Tracked>>, why: &str) {
    let exit = ProcessExit {
        exit_code: -1,
        signal: None,
        error: Some(why.to_owned()),
    };
    for tracked in gone {
        tracked.end(&exit).await;
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
        let mut inner = table.lock();
        if inner.checkpointing && tracked.control().durable_pid().is_some() {
            // Its relay ended for the checkpoint; the process lives on in it.
            inner.detached.push(tracked.pid);
            return;
        }
        inner.running.remove(&tracked.pid);
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
                .control()
                .write_stdin(&data)
                .await
                .map_err(ApiError::from_sandbox)?;
            Ok(json!({}))
        }
        "CloseStdin" => {
            let request: SelectRequest = super::body::json(bytes)?;
            let tracked = table.find(request.selector()?)?;
            tracked
                .control()
                .close_stdin()
                .await
                .map_err(ApiError::from_sandbox)?;
            Ok(json!({}))
        }
        "SendSignal" => {
            let request: SendSignalRequest = super::body::json(bytes)?;
            let tracked = table.find(named(&request.process)?)?;
            tracked
                .control()
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
                    .control()
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
        .insert(request.tag, config, &spec, process.control, process.output))
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
                .control()
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

#[cfg(test)]
mod tests {
    use async_trait::async_trait;
    use waxell::sandbox::SandboxError;

    use super::*;

    /// A process's control that does nothing; `durable`: the pid it outlives checkpoints with.
    struct Quiet {
        durable: Option<u32>,
    }

    #[async_trait]
    impl ProcessControl for Quiet {
        async fn write_stdin(&self, _: &[u8]) -> Result<(), SandboxError> {
            Ok(())
        }
        async fn close_stdin(&self) -> Result<(), SandboxError> {
            Ok(())
        }
        async fn signal(&self, _: ProcessSignal) -> Result<(), SandboxError> {
            Ok(())
        }
        async fn resize(&self, _: PtySize) -> Result<(), SandboxError> {
            Ok(())
        }
        fn durable_pid(&self) -> Option<u32> {
            self.durable
        }
    }

    /// Events the test hands the table one by one.
    struct Feed(mpsc::Receiver<ProcessEvent>);

    #[async_trait]
    impl ProcessOutput for Feed {
        async fn next_event(&mut self) -> Option<ProcessEvent> {
            self.0.recv().await
        }
    }

    /// A process as a backend would hand it over, and the sender of its events.
    fn handed_over(durable: Option<u32>) -> (mpsc::Sender<ProcessEvent>, SandboxProcess) {
        let (events, feed) = mpsc::channel(8);
        let process = SandboxProcess {
            output: Box::new(Feed(feed)),
            control: Arc::new(Quiet { durable }),
        };
        (events, process)
    }

    fn start(
        table: &Arc<ProcessTable>,
        tag: &str,
        durable: Option<u32>,
    ) -> (u32, mpsc::Receiver<Value>, mpsc::Sender<ProcessEvent>) {
        let (events, process) = handed_over(durable);
        let mut spec = ProcessSpec::new("sleep");
        spec.stdin = true;
        let (pid, stream) = table.insert(
            Some(tag.into()),
            json!({"cmd": "sleep"}),
            &spec,
            process.control,
            process.output,
        );
        (pid, stream, events)
    }

    async fn settled(table: &ProcessTable, what: impl Fn(&TableInner) -> bool) {
        for _ in 0..200 {
            if what(&table.lock()) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("the table did not settle");
    }

    #[tokio::test]
    async fn a_durable_process_outlives_a_checkpoint_and_its_stream_reads_on() {
        let table = Arc::new(ProcessTable::default());
        let (pid, mut stream, events) = start(&table, "kept", Some(42));
        let (other, _, other_events) = start(&table, "plain", None);
        events
            .send(ProcessEvent::Stdout(b"before".to_vec()))
            .await
            .unwrap();
        assert_eq!(
            stream.recv().await.unwrap(),
            json!({"data": {"stdout": BASE64.encode("before")}})
        );

        table.begin_checkpoint();
        // Their relays end for the checkpoint: the events end without an exit.
        drop(events);
        drop(other_events);
        settled(&table, |inner| {
            inner.detached == [pid] && !inner.running.contains_key(&other)
        })
        .await;
        let saved = table.saved();
        assert_eq!(saved.len(), 1, "only the durable process is in the checkpoint");
        assert_eq!(
            (saved[0].sandbox_pid, saved[0].stdin, saved[0].terminal),
            (42, true, None)
        );
        assert_eq!(saved[0].owner["pid"], json!(pid));

        // Restored as the same sandbox: the stream opened before reads on, to its end.
        let restored = Arc::new(ProcessTable::default());
        let (events, process) = handed_over(Some(42));
        restored.adopt(&saved[0], Ok(process), Some(&table)).await;
        let listed: Vec<(u32, Option<String>)> =
            restored.list().iter().map(|t| (t.pid, t.tag.clone())).collect();
        assert_eq!(listed, [(pid, Some("kept".to_owned()))]);
        events
            .send(ProcessEvent::Stdout(b"after".to_vec()))
            .await
            .unwrap();
        assert_eq!(
            stream.recv().await.unwrap(),
            json!({"data": {"stdout": BASE64.encode("after")}})
        );
        events
            .send(ProcessEvent::Exit(ProcessExit::code(7)))
            .await
            .unwrap();
        assert_eq!(stream.recv().await.unwrap()["end"]["exitCode"], json!(7));
        settled(&restored, |inner| inner.running.is_empty()).await;
        let (next, _, _) = start(&restored, "new", None);
        assert!(
            next > pid,
            "a new process takes a pid after the restored ones ({next} > {pid})"
        );

        // A fork: its own entry under the same pid, with no streams of the source's.
        let fork = Arc::new(ProcessTable::default());
        let (_events, process) = handed_over(Some(42));
        fork.adopt(&saved[0], Ok(process), None).await;
        let forked = fork
            .find(&Selector {
                pid: Some(pid),
                tag: None,
            })
            .unwrap();
        assert!(forked.listeners.lock().unwrap().streams.is_empty());
    }

    #[tokio::test]
    async fn a_failed_checkpoint_or_restore_ends_the_streams_of_what_it_cut_off() {
        let table = Arc::new(ProcessTable::default());
        let (pid, mut stream, events) = start(&table, "cut", Some(9));
        let (_, mut running, _running_events) = start(&table, "untouched", Some(10));
        table.begin_checkpoint();
        drop(events);
        settled(&table, |inner| inner.detached == [pid]).await;
        table.checkpoint_failed().await;
        let end = stream.recv().await.unwrap();
        assert!(
            end["end"]["error"].as_str().unwrap().contains("checkpoint"),
            "{end}"
        );
        assert_eq!(table.list().len(), 1, "the process whose relay lived on stays");
        assert!(running.try_recv().is_err(), "and its stream goes on");

        let saved = table.saved();
        let restored = Arc::new(ProcessTable::default());
        restored
            .adopt(&saved[0], Err("no such process".into()), Some(&table))
            .await;
        let end = running.recv().await.unwrap();
        assert!(
            end["end"]["error"].as_str().unwrap().contains("no such process"),
            "{end}"
        );
        assert!(restored.list().is_empty());
    }
}
