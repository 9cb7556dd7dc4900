//! Commands and terminals in an E2B sandbox: envd's `process.Process` Connect RPCs (JSON codec),
//! as [`SandboxSession::start_process`](crate::sandbox::SandboxSession::start_process). `Start` is
//! a server stream of enveloped events read on a fresh connection (like `/execute`); input,
//! signals and resizes are unary calls naming the process by the pid its start event gave.

use std::sync::Arc;

use async_trait::async_trait;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use futures_util::StreamExt;
use reqwest::Method;
use serde_json::{json, Value};

use super::http::{self, Endpoint};
use super::sandbox::E2bSandbox;
use crate::sandbox::{
    ProcessControl, ProcessEvent, ProcessExit, ProcessOutput, ProcessSignal, ProcessSpec, PtySize,
    SandboxError, SandboxProcess,
};

/// Events buffered before reading the stream waits for the caller.
const EVENTS_BUFFERED: usize = 64;
/// Connect's end-of-stream envelope flag.
const END_STREAM: u8 = 0x02;

impl E2bSandbox {
    /// `Start` the process and read its start event; its other events come through the channel.
    pub(super) async fn start_process_rpc(&self, spec: &ProcessSpec) -> Result<SandboxProcess, SandboxError> {
        let mut process = json!({"cmd": spec.cmd, "args": spec.args, "envs": spec.env});
        if let Some(cwd) = &spec.cwd {
            process["cwd"] = json!(cwd);
        }
        let mut request = json!({"process": process, "stdin": spec.stdin});
        if let Some(size) = spec.pty {
            request["pty"] = json!({"size": {"rows": size.rows, "cols": size.cols}});
        }
        let payload = request.to_string();
        let mut body = Vec::with_capacity(payload.len() + 5);
        body.push(0);
        body.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        body.extend_from_slice(payload.as_bytes());
        let url = self.envd_url("/process.Process/Start")?;
        let what = "start process";
        let response = http::send(self.config(), Endpoint::Process, what, || {
            self.envd(self.shared_clients().1, Method::POST, url.clone())
                .header("Connect-Protocol-Version", "1")
                .header(reqwest::header::CONTENT_TYPE, "application/connect+json")
                .body(body.clone())
        })
        .await?;
        let mut envelopes = Envelopes {
            stream: Box::pin(
                response
                    .bytes_stream()
                    .map(|chunk| chunk.map(|bytes| bytes.to_vec())),
            ),
            buffer: Vec::new(),
        };
        let pid = match envelopes.next().await? {
            Some(Envelope::Message(message)) => message["event"]["start"]["pid"].as_u64(),
            Some(Envelope::End(end)) => {
                return Err(end_error(&end).unwrap_or_else(|| protocol("no start event", &end)))
            }
            None => None,
        }
        .ok_or_else(|| {
            protocol(
                "the process stream did not begin with a start event",
                &Value::Null,
            )
        })?;
        let (events, receiver) = tokio::sync::mpsc::channel(EVENTS_BUFFERED);
        tokio::spawn(read_events(envelopes, events));
        Ok(SandboxProcess {
            output: Box::new(Events(receiver)),
            control: Arc::new(E2bProcessControl {
                sandbox: self.clone(),
                pid,
            }),
        })
    }

    /// A unary `process.Process` RPC.
    async fn process_rpc(&self, method: &str, body: &Value) -> Result<(), SandboxError> {
        let url = self.envd_url(&format!("/process.Process/{method}"))?;
        http::send(self.config(), Endpoint::Process, method, || {
            self.envd(self.shared_clients().0, Method::POST, url.clone())
                .header("Connect-Protocol-Version", "1")
                .json(body)
        })
        .await?;
        Ok(())
    }
}

fn protocol(message: &str, received: &Value) -> SandboxError {
    SandboxError::Protocol {
        message: message.into(),
        received: http::truncate(&received.to_string(), 256),
    }
}

/// The error an end-of-stream message carries, if any.
fn end_error(end: &Value) -> Option<SandboxError> {
    let error = end.get("error")?;
    let code = error["code"].as_str().unwrap_or("unknown");
    let message = format!("{code}: {}", error["message"].as_str().unwrap_or_default());
    Some(match code {
        "not_found" => SandboxError::InvalidArgument(message),
        "invalid_argument" => SandboxError::InvalidArgument(message),
        "deadline_exceeded" => SandboxError::Timeout(message),
        "unauthenticated" | "permission_denied" => SandboxError::Authentication(message),
        "unavailable" => SandboxError::Transport(message),
        _ => SandboxError::Other(message),
    })
}

enum Envelope {
    Message(Value),
    End(Value),
}

/// Connect envelopes from a streamed body.
struct Envelopes {
    stream: std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<Vec<u8>>> + Send>>,
    buffer: Vec<u8>,
}

impl Envelopes {
    async fn next(&mut self) -> Result<Option<Envelope>, SandboxError> {
        loop {
            if self.buffer.len() >= 5 {
                let length =
                    u32::from_be_bytes([self.buffer[1], self.buffer[2], self.buffer[3], self.buffer[4]])
                        as usize;
                if self.buffer.len() >= 5 + length {
                    let flags = self.buffer[0];
                    let payload: Vec<u8> = self.buffer.drain(..5 + length).skip(5).collect();
                    let value: Value =
                        serde_json::from_slice(&payload).map_err(|e| SandboxError::Protocol {
                            message: format!("a process event is not JSON: {e}"),
                            received: http::truncate(&String::from_utf8_lossy(&payload), 256),
                        })?;
                    return Ok(Some(if flags & END_STREAM != 0 {
                        Envelope::End(value)
                    } else {
                        Envelope::Message(value)
                    }));
                }
            }
            match self.stream.next().await {
                Some(Ok(chunk)) => self.buffer.extend_from_slice(&chunk),
                Some(Err(e)) => return Err(http::transport_error("the process stream broke", &e)),
                None => return Ok(None),
            }
        }
    }
}

/// Read the stream into events until the process's end (or the stream's).
async fn read_events(mut envelopes: Envelopes, events: tokio::sync::mpsc::Sender<ProcessEvent>) {
    let decode = |value: &Value| {
        BASE64
            .decode(value.as_str().unwrap_or_default())
            .unwrap_or_default()
    };
    let exit = loop {
        match envelopes.next().await {
            Ok(Some(Envelope::Message(message))) => {
                let event = &message["event"];
                let data = &event["data"];
                let out = if data.get("stdout").is_some() {
                    ProcessEvent::Stdout(decode(&data["stdout"]))
                } else if data.get("stderr").is_some() {
                    ProcessEvent::Stderr(decode(&data["stderr"]))
                } else if data.get("pty").is_some() {
                    ProcessEvent::Pty(decode(&data["pty"]))
                } else if let Some(end) = event.get("end") {
                    break exit_of(end);
                } else {
                    continue; // keepalive, or an event this client does not know
                };
                if events.send(out).await.is_err() {
                    return;
                }
            }
            Ok(Some(Envelope::End(end))) => break stream_ended(end_error(&end).map(|e| e.to_string())),
            Ok(None) => break stream_ended(Some("the process stream ended without an end event".into())),
            Err(e) => break stream_ended(Some(e.to_string())),
        }
    };
    let _ = events.send(ProcessEvent::Exit(exit)).await;
}

fn stream_ended(error: Option<String>) -> ProcessExit {
    ProcessExit {
        exit_code: -1,
        signal: None,
        error: Some(error.unwrap_or_else(|| "the process stream ended without an end event".into())),
    }
}

/// envd's `EndEvent` as a [`ProcessExit`]: `signal: killed` and the like name the signal.
fn exit_of(end: &Value) -> ProcessExit {
    let exit_code = end["exitCode"].as_i64().unwrap_or(0) as i32;
    let status = end["status"].as_str().unwrap_or_default();
    let signal = status.strip_prefix("signal: ").map(|name| match name {
        "killed" => 9,
        "terminated" => 15,
        "interrupt" => 2,
        "hangup" => 1,
        _ => 0,
    });
    let error = end["error"].as_str().map(str::to_owned);
    // The exit status is ours to report; only what else went wrong is an error.
    let error = error.filter(|e| e != status);
    ProcessExit {
        exit_code,
        signal,
        error,
    }
}

struct Events(tokio::sync::mpsc::Receiver<ProcessEvent>);

#[async_trait]
impl ProcessOutput for Events {
    async fn next_event(&mut self) -> Option<ProcessEvent> {
        self.0.recv().await
    }
}

struct E2bProcessControl {
    sandbox: E2bSandbox,
    pid: u64,
}

impl E2bProcessControl {
    fn selector(&self) -> Value {
        json!({"pid": self.pid})
    }
}

#[async_trait]
impl ProcessControl for E2bProcessControl {
    async fn write_stdin(&self, data: &[u8]) -> Result<(), SandboxError> {
        let body = json!({"process": self.selector(), "input": {"stdin": BASE64.encode(data)}});
        self.sandbox.process_rpc("SendInput", &body).await
    }

    async fn close_stdin(&self) -> Result<(), SandboxError> {
        self.sandbox
            .process_rpc("CloseStdin", &json!({"process": self.selector()}))
            .await
    }

    async fn signal(&self, signal: ProcessSignal) -> Result<(), SandboxError> {
        let name = match signal {
            ProcessSignal::Kill => "SIGNAL_SIGKILL",
            _ => "SIGNAL_SIGTERM",
        };
        let body = json!({"process": self.selector(), "signal": name});
        self.sandbox.process_rpc("SendSignal", &body).await
    }

    async fn resize(&self, size: PtySize) -> Result<(), SandboxError> {
        let body =
            json!({"process": self.selector(), "pty": {"size": {"rows": size.rows, "cols": size.cols}}});
        self.sandbox.process_rpc("Update", &body).await
    }
}
