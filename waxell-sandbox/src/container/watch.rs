//! Directory watches in a container sandbox: `watch.py` runs in the container as the sandbox user
//! (inotify there works under runc and gVisor alike, where the host cannot see the sandbox's
//! tmpfs), attached to the engine's exec stream. It prints events as they happen; a `sync` line
//! makes it print everything the kernel queued until then and a marker, so `take_events` misses
//! nothing that happened before the call. Dropping the watch closes the stream, which ends it.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bollard::container::LogOutput;
use bollard::exec::{StartExecOptions, StartExecResults};
use bollard::models::ExecConfig;
use bollard::Docker;
use futures_util::StreamExt;
use serde::Deserialize;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::Notify;
use waxell::sandbox::{DirWatch, EntryInfo, FsEvent, FsEventKind, LimitKind, SandboxError, WatchOptions};

use super::engine::api_error;
use super::guard::ContainerGuard;
use super::spec::USER;
use crate::paths::sandbox_path;

/// The in-container watcher, after the metadata code it shares with the file helper.
const WATCH_SOURCE: &str = concat!(include_str!("metadata.py"), include_str!("watch.py"));
/// Events one watch queues until they are taken; past it the watch reports an overflow.
const MAX_QUEUED: usize = 10_000;
/// How long a `sync` or the start may take before the watch is reported broken.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// One line of watch.py.
#[derive(Deserialize)]
#[serde(untagged)]
#[expect(dead_code, reason = "`ready` and `synced` only tell the untagged lines apart")]
enum Line {
    Ready { ready: bool },
    Synced { synced: bool },
    Failed { error: String, missing: bool },
    Event { name: String, kind: String, entry: Option<EntryInfo> },
}

/// Why a watch stopped working.
#[derive(Clone)]
enum Failure {
    Missing,
    Refused(String),
    Overflow(String),
    Ended(String),
}

#[derive(Default)]
struct Shared {
    path: String,
    queued: Mutex<Vec<FsEvent>>,
    failure: Mutex<Option<Failure>>,
    /// `ready` and `synced` lines read so far.
    answers: AtomicU64,
    arrived: Notify,
}

/// Start a watch of `path` in `container`.
pub(super) async fn watch(
    docker: &Docker,
    container: &ContainerGuard,
    path: &str,
    options: WatchOptions,
) -> Result<Box<dyn DirWatch>, SandboxError> {
    let target = sandbox_path(path)?;
    let flag = |on: bool| if on { "1" } else { "0" }.to_owned();
    let cmd = vec![
        "python3".into(),
        "-I".into(),
        "-c".into(),
        WATCH_SOURCE.into(),
        target,
        flag(options.recursive),
        flag(options.include_entry),
    ];
    let exec = docker
        .create_exec(
            &container.id,
            ExecConfig {
                attach_stdin: Some(true),
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                cmd: Some(cmd),
                user: Some(USER.to_owned()),
                ..Default::default()
            },
        )
        .await
        .map_err(|e| api_error("starting a directory watch (exec create)", e))?;
    let started = docker
        .start_exec(&exec.id, Some(StartExecOptions::default()))
        .await
        .map_err(|e| api_error("starting a directory watch (exec start)", e))?;
    let StartExecResults::Attached { mut output, input } = started else {
        return Err(SandboxError::Other("the engine started the directory watch detached".into()));
    };
    let shared = Arc::new(Shared {
        path: path.to_owned(),
        ..Shared::default()
    });
    let reader_shared = shared.clone();
    let gone = container.control.gone();
    let reader = tokio::spawn(async move {
        let mut pending = Vec::new();
        let reading = async {
            while let Some(Ok(chunk)) = output.next().await {
                let LogOutput::StdOut { message } = chunk else { continue };
                pending.extend_from_slice(&message);
                while let Some(end) = pending.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = pending.drain(..=end).collect();
                    reader_shared.record(&line);
                }
            }
        };
        tokio::select! {
            () = reading => {}
            () = gone => {}
        }
        reader_shared.fail(Failure::Ended("the directory watch ended (the sandbox is gone)".into()));
    });
    let mut watch = ContainerWatch {
        shared,
        input,
        asked: 1,
        reader,
    };
    // The first answer is `ready` (or the reason it is not).
    watch.wait_answers().await?;
    Ok(Box::new(watch))
}

impl Shared {
    fn record(&self, line: &[u8]) {
        match serde_json::from_slice::<Line>(line) {
            Ok(Line::Ready { .. } | Line::Synced { .. }) => {
                self.answers.fetch_add(1, Ordering::AcqRel);
            }
            Ok(Line::Failed { error, missing }) => self.fail(if missing {
                Failure::Missing
            } else {
                Failure::Refused(error)
            }),
            Ok(Line::Event { name, kind, entry }) => {
                let kind = match kind.as_str() {
                    "create" => FsEventKind::Create,
                    "write" => FsEventKind::Write,
                    "remove" => FsEventKind::Remove,
                    "rename" => FsEventKind::Rename,
                    _ => FsEventKind::Chmod,
                };
                let mut queued = self.queued.lock().unwrap_or_else(|p| p.into_inner());
                if queued.len() >= MAX_QUEUED {
                    drop(queued);
                    return self.fail(Failure::Overflow(format!(
                        "more than {MAX_QUEUED} events were not taken: stop the watch and start a new one"
                    )));
                }
                queued.push(FsEvent { name, kind, entry });
            }
            Err(_) => return,
        }
        self.arrived.notify_one();
    }

    fn fail(&self, failure: Failure) {
        self.failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert(failure);
        self.arrived.notify_waiters();
        self.arrived.notify_one();
    }

    fn failure(&self) -> Result<(), SandboxError> {
        let failure = self.failure.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let path = self.path.clone();
        match failure {
            None => Ok(()),
            Some(Failure::Missing) => Err(SandboxError::FileNotFound { path }),
            Some(Failure::Refused(reason)) => Err(SandboxError::InvalidPath { path, reason }),
            Some(Failure::Overflow(message)) => Err(SandboxError::LimitExceeded {
                limit: LimitKind::Watches,
                message,
            }),
            Some(Failure::Ended(message)) => Err(SandboxError::NotFound(message)),
        }
    }

    fn take(&self) -> Vec<FsEvent> {
        std::mem::take(&mut *self.queued.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

struct ContainerWatch {
    shared: Arc<Shared>,
    input: Pin<Box<dyn AsyncWrite + Send>>,
    /// Answers (`ready`, then one per `sync`) asked for so far.
    asked: u64,
    reader: tokio::task::JoinHandle<()>,
}

impl ContainerWatch {
    /// Wait until every answer asked for has been read (or the watch failed).
    async fn wait_answers(&mut self) -> Result<(), SandboxError> {
        let deadline = tokio::time::Instant::now() + ANSWER_TIMEOUT;
        loop {
            let arrived = self.shared.arrived.notified();
            self.shared.failure()?;
            if self.shared.answers.load(Ordering::Acquire) >= self.asked {
                return Ok(());
            }
            if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                return Err(SandboxError::Timeout(format!(
                    "the directory watch did not answer within {ANSWER_TIMEOUT:?}"
                )));
            }
        }
    }
}

impl Drop for ContainerWatch {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

#[async_trait]
impl DirWatch for ContainerWatch {
    async fn take_events(&mut self) -> Result<Vec<FsEvent>, SandboxError> {
        self.input
            .write_all(b"sync\n")
            .await
            .map_err(|e| SandboxError::NotFound(format!("the directory watch ended: {e}")))?;
        self.input.flush().await.ok();
        self.asked += 1;
        self.wait_answers().await?;
        Ok(self.shared.take())
    }

    async fn next_events(&mut self) -> Result<Vec<FsEvent>, SandboxError> {
        loop {
            let arrived = self.shared.arrived.notified();
            self.shared.failure()?;
            let events = self.shared.take();
            if !events.is_empty() {
                return Ok(events);
            }
            arrived.await;
        }
    }
}
