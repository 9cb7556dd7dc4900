//! The Docker Engine API as the container backend uses it: connecting (honouring `DOCKER_HOST`),
//! errors that name the missing piece, and execs (attached kernels, one-shot helpers, kills).

use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use bollard::container::LogOutput;
use bollard::exec::{StartExecOptions, StartExecResults};
use bollard::models::ExecConfig;
use bollard::Docker;
use futures_util::{Stream, StreamExt};
use tokio::io::AsyncWriteExt;
use waxell::sandbox::SandboxError;

use crate::kernel::{ExitInfo, KernelProcess, MainThread, ProcessControl, ReadyInfo, StderrTail};

/// Sockets tried, in order, when `DOCKER_HOST` is unset: Docker Engine (and Docker Desktop with its
/// default-socket setting), Docker Desktop's per-user socket (macOS, Linux), rootless and rootful
/// Podman, and Colima (macOS). `home` and `runtime_dir` are `$HOME` and `$XDG_RUNTIME_DIR`.
fn default_sockets(home: Option<&str>, runtime_dir: Option<&str>) -> Vec<PathBuf> {
    let mut sockets = vec![PathBuf::from("/var/run/docker.sock")];
    if let Some(home) = home.filter(|h| !h.is_empty()) {
        sockets.push(PathBuf::from(home).join(".docker/run/docker.sock"));
    }
    if let Some(dir) = runtime_dir.filter(|d| !d.is_empty()) {
        sockets.push(PathBuf::from(dir).join("podman/podman.sock"));
    }
    sockets.push(PathBuf::from("/run/podman/podman.sock"));
    if let Some(home) = home.filter(|h| !h.is_empty()) {
        sockets.push(PathBuf::from(home).join(".colima/default/docker.sock"));
    }
    sockets
}

/// Where the engine is and how to reach it.
#[derive(Debug, Clone)]
pub(crate) struct Endpoint {
    pub(crate) socket: PathBuf,
}

impl Endpoint {
    /// `configured`, else `DOCKER_HOST` (`unix://` only), else the first default socket that exists.
    pub(crate) fn resolve(configured: Option<&str>) -> Result<Self, SandboxError> {
        let from_env = std::env::var("DOCKER_HOST").ok().filter(|h| !h.is_empty());
        let host = configured.map(str::to_owned).or(from_env);
        let socket = match host {
            Some(host) => match host.strip_prefix("unix://") {
                Some(path) => PathBuf::from(path),
                None if host.starts_with('/') => PathBuf::from(host),
                None => {
                    return Err(SandboxError::InvalidArgument(format!(
                        "docker host {host:?}: only unix:// sockets are supported (no TCP/TLS client is built in)"
                    )))
                }
            },
            None => {
                let home = std::env::var("HOME").ok();
                let runtime_dir = std::env::var("XDG_RUNTIME_DIR").ok();
                let candidates = default_sockets(home.as_deref(), runtime_dir.as_deref());
                match candidates.iter().find(|p| p.exists()) {
                    Some(found) => found.clone(),
                    None => {
                        let tried: Vec<String> = candidates.iter().map(|p| p.display().to_string()).collect();
                        return Err(SandboxError::Unavailable(format!(
                            "no container engine found: DOCKER_HOST is not set and none of {} exists. Start \
                             Docker (Docker Desktop on macOS), or Podman's Docker API service (`podman system \
                             service --time=0 unix:///path/to/podman.sock`), or set DOCKER_HOST=unix:///path/to/socket",
                            tried.join(", ")
                        )));
                    }
                }
            }
        };
        Ok(Self { socket })
    }

    /// Connect and check the engine answers: errors name a missing socket or a permission problem.
    pub(crate) async fn connect(&self) -> Result<Docker, SandboxError> {
        let socket = &self.socket;
        match std::fs::metadata(socket) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(SandboxError::Unavailable(format!(
                    "no container engine socket at {}: start Docker, or Podman's Docker API service \
                     (`podman system service --time=0 unix://{}`), or set DOCKER_HOST=unix:///path/to/socket \
                     (scripts/setup-container.sh does this for the tests)",
                    socket.display(),
                    socket.display()
                )))
            }
            _ => {}
        }
        if let Err(e) = std::os::unix::net::UnixStream::connect(socket) {
            return Err(match e.kind() {
                io::ErrorKind::PermissionDenied => SandboxError::Unavailable(format!(
                    "permission denied on the container engine socket {}: add this user to the `docker` group \
                     (or the socket's group), use a rootless engine's socket, or run as root",
                    socket.display()
                )),
                io::ErrorKind::ConnectionRefused => SandboxError::Unavailable(format!(
                    "the container engine socket {} refuses connections: the engine is not running",
                    socket.display()
                )),
                _ => SandboxError::Unavailable(format!(
                    "cannot connect to the container engine socket {}: {e}",
                    socket.display()
                )),
            });
        }
        let path = socket.to_string_lossy();
        let docker = Docker::connect_with_unix(&path, 120, bollard::API_DEFAULT_VERSION)
            .map_err(|e| SandboxError::Unavailable(format!("container engine at {path}: {e}")))?;
        docker.ping().await.map_err(|e| {
            SandboxError::Unavailable(format!("the container engine at {path} does not answer: {e}"))
        })?;
        Ok(docker)
    }
}

/// Whether the engine is Podman (its Docker-compatible service), from `/version`. An engine that
/// does not answer is an error, not a guess: the two take the seccomp profile differently, and a
/// wrong guess fails every create with a message about the profile instead of the engine.
pub(crate) async fn is_podman(docker: &Docker) -> Result<bool, SandboxError> {
    let version = docker
        .version()
        .await
        .map_err(|e| SandboxError::Unavailable(format!("the container engine did not tell its version (/version): {e}")))?;
    Ok(version
        .components
        .unwrap_or_default()
        .iter()
        .any(|c| c.name.to_ascii_lowercase().contains("podman")))
}

/// Map an Engine API error; `what` says what was being done.
pub(crate) fn api_error(what: &str, e: bollard::errors::Error) -> SandboxError {
    match e {
        bollard::errors::Error::DockerResponseServerError {
            status_code: 404,
            message,
        } => SandboxError::NotFound(format!("{what}: {message}")),
        bollard::errors::Error::DockerResponseServerError { status_code, message } => {
            SandboxError::Transport(format!("{what}: the engine answered {status_code}: {message}"))
        }
        other => SandboxError::Transport(format!("{what}: {other}")),
    }
}

/// An exec'd process inside a container, as the kernel's [`ProcessControl`].
pub(crate) struct ContainerExec {
    docker: Docker,
    container: String,
    exec_id: String,
    user: String,
    control: Control,
    /// The kernel's pid inside the container, once it reported ready.
    pid: Option<u32>,
    /// Its request fd, once it reported ready.
    request_fd: Option<i32>,
    /// The kernel among the host's processes, where it can be seen from here (runc, the engine on
    /// this host): its host pid and what its request fd was at `ready`.
    on_host: Option<(u32, std::path::PathBuf)>,
    /// Not seen from here, but pid 1 can check its main thread (under gVisor: init.py).
    checked_by_init: bool,
    /// Its output stream ended.
    ended: Arc<AtomicBool>,
    killed: bool,
}

#[async_trait::async_trait]
impl ProcessControl for ContainerExec {
    fn has_exited(&mut self) -> bool {
        self.killed || self.ended.load(Ordering::SeqCst)
    }

    async fn exit_info(&mut self, stderr_tail: &str) -> ExitInfo {
        let mut code = None;
        for _ in 0..50 {
            match self.docker.inspect_exec(&self.exec_id).await {
                Ok(inspect) if inspect.running != Some(true) => {
                    code = inspect.exit_code;
                    break;
                }
                Ok(_) => tokio::time::sleep(Duration::from_millis(10)).await,
                Err(_) => break,
            }
        }
        // The container itself may have gone (gVisor's sandbox is OOM-killed as a whole).
        // Without an exec status the container itself is going down: wait for the engine to see it.
        let mut state = None;
        for _ in 0..if code.is_none() { 40 } else { 1 } {
            state = self
                .docker
                .inspect_container(&self.container, None)
                .await
                .ok()
                .and_then(|c| c.state);
            if state.as_ref().is_none_or(|s| s.running != Some(true)) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let container_down = state.as_ref().map(|s| s.running != Some(true)).unwrap_or(true);
        // A container SIGKILLed without us asking (removal marks the sandbox killed first) is the
        // host's OOM killer: engines do not always set OOMKilled (Podman with runsc does not).
        let container_oom = state.as_ref().is_some_and(|s| {
            s.oom_killed == Some(true) || (s.running != Some(true) && s.exit_code == Some(137))
        });
        // SIGKILL we did not send: in a container with a memory cap that is the OOM killer.
        let oom_killed = code == Some(137) || container_oom;
        let detail = match (stderr_tail.lines().next(), code) {
            _ if container_down => "the sandbox's container exited".to_owned(),
            (Some(line), _) if !line.is_empty() => line.to_owned(),
            (_, Some(code)) => format!("exit status {code}"),
            _ => "no exit status".to_owned(),
        };
        ExitInfo { oom_killed, detail }
    }

    fn interrupt(&self) -> io::Result<()> {
        self.signal(2)
    }

    async fn signals_delivered(&self) {
        self.control.delivered(Duration::from_secs(2)).await;
    }

    fn on_ready(&mut self, ready: &ReadyInfo) {
        self.pid = Some(ready.pid);
        self.request_fd = Some(ready.request_fd);
    }

    /// The engine's exec pid is the kernel's host pid under runc when the engine shares this host's
    /// pid namespace: confirmed by the process's own `NSpid` ending in the pid the kernel reported.
    /// Under gVisor (the pid is runsc's, not the interpreter's) pid 1 checks instead, once it has
    /// seen the kernel idle here, at `ready`. When neither can, `done` is believed
    /// (docs/container-sandbox.md).
    async fn locate_on_host(&mut self) {
        let (Some(pid), Some(fd)) = (self.pid, self.request_fd) else { return };
        if let Some(host_pid) = self.host_pid(pid).await {
            if let Ok(target) = std::fs::read_link(format!("/proc/{host_pid}/fd/{fd}")) {
                self.on_host = Some((host_pid, target));
            }
            return;
        }
        // Just after `ready` the kernel is on its way to its first read: a few tries.
        for _ in 0..20 {
            if self.control.main_thread(pid, fd, INIT_CHECK_LIMIT).await == MainThread::Idle {
                self.checked_by_init = true;
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tracing::warn!(pid, "neither the host nor pid 1 can see the kernel's main thread: `done` is believed");
    }

    /// Whether the kernel's main thread is blocked reading its request fd (where it waits between
    /// cells and no cell code runs), seen from the host's `/proc` as on the local backend, or by
    /// pid 1.
    async fn main_thread(&self) -> MainThread {
        if self.checked_by_init {
            let (Some(pid), Some(fd)) = (self.pid, self.request_fd) else { return MainThread::Idle };
            return self.control.main_thread(pid, fd, INIT_CHECK_LIMIT).await;
        }
        let (Some((host_pid, request)), Some(fd)) = (&self.on_host, self.request_fd) else {
            return MainThread::Idle;
        };
        let Ok(syscall) = std::fs::read_to_string(format!("/proc/{host_pid}/task/{host_pid}/syscall")) else {
            // Gone: the run ends through EOF anyway.
            return MainThread::Busy;
        };
        let mut fields = syscall.split_whitespace();
        let in_read = fields.next() == Some(libc::SYS_read.to_string().as_str());
        let on_fd = fields.next() == Some(format!("{fd:#x}").as_str());
        let same = std::fs::read_link(format!("/proc/{host_pid}/fd/{fd}")).is_ok_and(|t| &t == request);
        if in_read && on_fd && same {
            MainThread::Idle
        } else {
            MainThread::Busy
        }
    }

    fn identity(&self) -> Option<(u32, i32)> {
        self.pid.zip(self.request_fd)
    }

    fn forget(&mut self) {
        self.killed = true;
    }

    fn kill(&mut self) {
        if self.killed {
            return;
        }
        self.killed = true;
        if !self.ended.load(Ordering::SeqCst) {
            let _ = self.signal(9);
        } else if let Some(pid) = self.pid {
            // It ended by itself (the OOM killer): what it started keeps its group and may hold what
            // got it killed, and would get the next kernel killed too. Pid 1 takes the tree, if the
            // container still runs (no helper exec for a kernel already gone).
            self.control.send(9, pid);
        }
    }
}

/// How long pid 1 may take to answer a check (a ptrace stop of the kernel, under a millisecond).
const INIT_CHECK_LIMIT: Duration = Duration::from_millis(500);

impl ContainerExec {
    /// The kernel's host pid, where the engine shares this host's pid namespace (runc).
    async fn host_pid(&self, pid: u32) -> Option<u32> {
        let inspect = self.docker.inspect_exec(&self.exec_id).await.ok()?;
        let host_pid = inspect.pid.and_then(|p| u32::try_from(p).ok()).filter(|p| *p > 0)?;
        let status = std::fs::read_to_string(format!("/proc/{host_pid}/status")).unwrap_or_default();
        let nspid_matches = status
            .lines()
            .find_map(|line| line.strip_prefix("NSpid:"))
            .and_then(|pids| pids.split_whitespace().last())
            .is_some_and(|inner| inner == pid.to_string());
        nspid_matches.then_some(host_pid)
    }

    /// The Engine API cannot signal an exec: the container's pid 1 does it (see `Control`), or,
    /// if its channel is gone, a helper exec run as the sandbox user. Fire and forget.
    fn signal(&self, signal: i32) -> io::Result<()> {
        let pid = self.pid.ok_or_else(|| io::Error::other("the kernel's pid is unknown"))?;
        if self.control.send(signal, pid) {
            return Ok(());
        }
        let (docker, container, user) = (self.docker.clone(), self.container.clone(), self.user.clone());
        let handle = tokio::runtime::Handle::try_current().map_err(io::Error::other)?;
        handle.spawn(async move {
            let cmd = vec![
                "python3".to_owned(),
                "-I".to_owned(),
                "-c".to_owned(),
                SIGNAL_TREE.to_owned(),
                pid.to_string(),
                signal.to_string(),
            ];
            if let Err(e) = run_helper(&docker, &container, &user, cmd, None).await {
                tracing::debug!("signalling kernel {pid} in container {container}: {e}");
            }
        });
        Ok(())
    }
}

/// The host's line to the container's pid 1 (its attached stdin): "<signal> <pid>" requests, which
/// it carries out without starting a process, so signals still arrive when the code has used up
/// the pids limit (then no exec can start, not even the kill helper); and "check <pid> <fd>",
/// whether a kernel's main thread waits for requests (under gVisor, see init.py).
#[derive(Clone)]
pub(crate) struct Control {
    /// The key pid 1 signs its answers with; a restored pid 1 keeps the one it was first given.
    key: Arc<AnswerKey>,
    requests: Option<tokio::sync::mpsc::UnboundedSender<Request>>,
    /// Requests queued, and pid 1's answers (one line each, in order, once carried out).
    sent: Arc<std::sync::atomic::AtomicU64>,
    answered: Option<tokio::sync::watch::Receiver<u64>>,
    /// Becomes true when pid 1's attach stream ends: the container is gone (under gVisor a fork or
    /// memory bomb ends the whole sandbox, and an exec's stream is then not always closed).
    gone: Option<tokio::sync::watch::Receiver<bool>>,
    /// Set once pid 1 was asked to end the execs before a checkpoint (`sever`): an exec that ends
    /// from then on may have been ended by it, while what it ran lives on (keeper.py).
    severed: Arc<std::sync::atomic::AtomicBool>,
}

impl Control {
    /// Attach to the (created, not yet started) container's stdin. On failure signals fall back
    /// to helper execs. `key`: the key of a pid 1 restored from a checkpoint (hex), else a new one.
    pub(crate) async fn attach(docker: &Docker, container: &str, key: Option<&str>) -> Self {
        let key = Arc::new(key.and_then(AnswerKey::from_hex).unwrap_or_else(AnswerKey::new));
        let options = bollard::query_parameters::AttachContainerOptionsBuilder::new()
            .stdin(true)
            .stdout(true)
            .stream(true)
            .build();
        let attached = match docker.attach_container(container, Some(options)).await {
            Ok(attached) => attached,
            Err(e) => {
                tracing::warn!(container, "cannot attach to the sandbox's pid 1, signals go through execs: {e}");
                return Self {
                    key,
                    severed: Arc::default(),
                    requests: None,
                    sent: Arc::default(),
                    answered: None,
                    gone: None,
                };
            }
        };
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Request>();
        let (gone_tx, gone_rx) = tokio::sync::watch::channel(false);
        let (answered_tx, answered_rx) = tokio::sync::watch::channel(0u64);
        let mut input = attached.input;
        let mut output = attached.output;
        let signer = key.clone();
        // The key goes first, before the container starts and so before any code runs in it.
        let sent = Arc::new(std::sync::atomic::AtomicU64::new(1));
        let mut first = Some(format!("key {}\n", key.hex()));
        tokio::spawn(async move {
            let mut requests_open = true;
            let mut checks = std::collections::HashMap::<u64, tokio::sync::oneshot::Sender<MainThread>>::new();
            let mut next_nonce = 0u64;
            let mut partial = Vec::new();
            loop {
                tokio::select! {
                    request = async { match first.take() { Some(line) => Some(Err(line)), None => rx.recv().await.map(Ok) } },
                        if requests_open =>
                    {
                        let line = match request {
                            None => {
                                requests_open = false;
                                continue;
                            }
                            Some(Err(line)) => line,
                            Some(Ok(Request::Signal { signal, pid })) => format!("{signal} {pid}\n"),
                            Some(Ok(Request::Sever)) => "sever\n".to_owned(),
                            Some(Ok(Request::Check { pid, fd, answer })) => {
                                next_nonce += 1;
                                checks.retain(|_, waiter| !waiter.is_closed());
                                checks.insert(next_nonce, answer);
                                format!("check {pid} {fd} {next_nonce}\n")
                            }
                        };
                        if input.write_all(line.as_bytes()).await.is_err() || input.flush().await.is_err() {
                            requests_open = false;
                        }
                    }
                    // pid 1's answers; the stream ends when pid 1 exits, i.e. the container stops.
                    item = output.next() => match item {
                        Some(Ok(LogOutput::StdOut { message })) => {
                            partial.extend_from_slice(&message);
                            let mut lines = 0;
                            while let Some(end) = partial.iter().position(|b| *b == b'\n') {
                                let line: Vec<u8> = partial.drain(..=end).collect();
                                if let Some((nonce, found)) = signer.verify(&line[..end]) {
                                    if let Some(waiter) = checks.remove(&nonce) {
                                        let _ = waiter.send(found);
                                    }
                                }
                                lines += 1;
                            }
                            // Only the code could write a line this long (through /proc/1/fd/1).
                            if partial.len() > 4096 {
                                partial.clear();
                            }
                            answered_tx.send_modify(|n| *n += lines);
                        }
                        Some(Ok(_)) => {}
                        None | Some(Err(_)) => break,
                    },
                }
            }
            let _ = gone_tx.send(true);
        });
        Self {
            key,
            severed: Arc::default(),
            requests: Some(tx),
            sent,
            answered: Some(answered_rx),
            gone: Some(gone_rx),
        }
    }

    /// The key pid 1 signs with (hex), for a restore of this sandbox from a checkpoint.
    pub(crate) fn key_hex(&self) -> String {
        self.key.hex()
    }

    /// Have pid 1 kill every process holding a descriptor of the host's (init.py), and wait until
    /// it has, at most `limit`; false when it did not confirm.
    pub(crate) async fn sever(&self, limit: Duration) -> bool {
        self.severed.store(true, std::sync::atomic::Ordering::Release);
        if !self.queue(Request::Sever) {
            return false;
        }
        let Some(mut answered) = self.answered.clone() else { return false };
        let sent = self.sent.load(std::sync::atomic::Ordering::Acquire);
        tokio::time::timeout(limit, answered.wait_for(|n| *n >= sent)).await.is_ok_and(|r| r.is_ok())
    }

    /// The checkpoint `sever` was for failed and the sandbox runs on: an exec that ends from now
    /// on ended by itself.
    pub(crate) fn unsever(&self) {
        self.severed.store(false, std::sync::atomic::Ordering::Release);
    }

    /// Whether pid 1 was asked to end the execs before a checkpoint (see `sever`).
    pub(crate) fn severed(&self) -> bool {
        self.severed.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Queue a signal for `pid`; false when pid 1 can no longer be reached.
    pub(crate) fn send(&self, signal: i32, pid: u32) -> bool {
        self.queue(Request::Signal { signal, pid })
    }

    /// Whether kernel `pid`'s main thread is blocked reading `fd`, as pid 1 sees it (init.py);
    /// `Unknown` when pid 1 cannot tell or does not answer within `limit`, `Busy` when it is gone.
    pub(crate) async fn main_thread(&self, pid: u32, fd: i32, limit: Duration) -> MainThread {
        let (answer, found) = tokio::sync::oneshot::channel();
        if !self.queue(Request::Check { pid, fd, answer }) {
            return MainThread::Busy;
        }
        match tokio::time::timeout(limit, found).await {
            Ok(Ok(found)) => found,
            Ok(Err(_)) => MainThread::Busy, // pid 1's stream ended: the container stopped
            Err(_) => MainThread::Unknown,
        }
    }

    fn queue(&self, request: Request) -> bool {
        // Counted before it can be answered, so `delivered` never waits for fewer than were sent.
        self.sent.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        let queued = self.requests.as_ref().is_some_and(|tx| tx.send(request).is_ok());
        if !queued {
            self.sent.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        }
        queued
    }

    /// Wait until pid 1 has carried out every request queued so far, at most `limit` (it is gone,
    /// or swamped: the next cell then starts anyway).
    pub(crate) async fn delivered(&self, limit: Duration) {
        let Some(mut answered) = self.answered.clone() else { return };
        let sent = self.sent.load(std::sync::atomic::Ordering::Acquire);
        if tokio::time::timeout(limit, answered.wait_for(|n| *n >= sent)).await.is_err() {
            tracing::warn!("the sandbox's pid 1 did not confirm its signals within {limit:?}");
        }
    }

    /// Whether pid 1's stream has already ended, i.e. the container stopped.
    pub(crate) fn has_stopped(&self) -> bool {
        self.gone.as_ref().is_some_and(|gone| *gone.borrow())
    }

    /// Resolves when the container has stopped (never, if pid 1 could not be attached).
    pub(crate) fn gone(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let gone = self.gone.clone();
        async move {
            match gone {
                Some(mut gone) => {
                    let _ = gone.wait_for(|gone| *gone).await;
                }
                None => std::future::pending().await,
            }
        }
    }
}

/// The key pid 1 signs its check answers with (init.py): random, known only to this process and
/// pid 1, so code in the sandbox that writes to pid 1's stdout cannot answer for it.
struct AnswerKey([u8; 32]);

impl AnswerKey {
    fn new() -> Self {
        let mut key = [0u8; 32];
        let mut filled = 0;
        while filled < key.len() {
            match rustix::rand::getrandom(&mut key[filled..], rustix::rand::GetRandomFlags::empty()) {
                Ok(n) => filled += n,
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => panic!("the kernel's random source failed: {e}"),
            }
        }
        Self(key)
    }

    fn from_hex(hex: &str) -> Option<Self> {
        let bytes: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| hex.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()))
            .collect::<Option<_>>()?;
        Some(Self(bytes.try_into().ok()?))
    }

    fn hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// `<idle|busy|unknown> <nonce> <tag>` with a valid tag: the nonce and what pid 1 found.
    fn verify(&self, line: &[u8]) -> Option<(u64, MainThread)> {
        use hmac::Mac;
        let text = std::str::from_utf8(line).ok()?;
        let (answer, tag) = text.rsplit_once(' ')?;
        let (verdict, nonce) = answer.split_once(' ')?;
        let found = match verdict {
            "idle" => MainThread::Idle,
            "busy" => MainThread::Busy,
            "unknown" => MainThread::Unknown,
            _ => return None,
        };
        let tag: Vec<u8> = (0..tag.len())
            .step_by(2)
            .map(|i| tag.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()))
            .collect::<Option<_>>()?;
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&self.0).ok()?;
        mac.update(answer.as_bytes());
        mac.verify_slice(&tag).ok()?;
        Some((nonce.parse().ok()?, found))
    }
}

/// One request to pid 1.
enum Request {
    Signal { signal: i32, pid: u32 },
    Sever,
    Check {
        pid: u32,
        fd: i32,
        answer: tokio::sync::oneshot::Sender<MainThread>,
    },
}

/// Fallback of [`Control`]: signal a process (SIGKILL: and all its descendants), run inside the
/// container as the sandbox user.
const SIGNAL_TREE: &str = r#"
import os, sys
root, sig = int(sys.argv[1]), int(sys.argv[2]); children = {}
if sig != 9:
    os.kill(root, sig); sys.exit(0)
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            ppid = int(open("/proc/%s/stat" % p).read().rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(p))
        except (OSError, ValueError, IndexError):
            pass
todo = [root]
while todo:
    p = todo.pop()
    todo.extend(children.get(p, []))
    try:
        os.kill(p, sig)
    except OSError:
        pass
"#;

/// Start a kernel as an attached exec: its stdin/stdout carry the same JSON-lines protocol as the
/// local backend's pipes (in the home directory); its stderr goes to the tail kept for error messages.
/// `restored`: the pid and request fd of a kernel already running (relayed to after a restore).
pub(crate) async fn start_kernel_exec(
    docker: &Docker,
    container: &str,
    control: Control,
    user: &str,
    cmd: Vec<String>,
    env: Vec<String>,
    restored: Option<(u32, i32)>,
) -> Result<KernelProcess, SandboxError> {
    let exec = docker
        .create_exec(
            container,
            ExecConfig {
                attach_stdin: Some(true),
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                tty: Some(false),
                cmd: Some(cmd),
                env: Some(env),
                user: Some(user.to_owned()),
                working_dir: Some(crate::paths::HOME_DIR.to_owned()),
                ..Default::default()
            },
        )
        .await
        .map_err(|e| api_error("starting the kernel (exec create)", e))?;
    let started = docker
        .start_exec(
            &exec.id,
            Some(StartExecOptions {
                detach: false,
                tty: false,
                output_capacity: None,
            }),
        )
        .await
        .map_err(|e| api_error("starting the kernel (exec start)", e))?;
    let StartExecResults::Attached { output, input } = started else {
        return Err(SandboxError::Protocol {
            message: "the engine started the kernel detached".into(),
            received: String::new(),
        });
    };
    let tail: StderrTail = Default::default();
    let ended = Arc::new(AtomicBool::new(false));
    // The kernel's stream also ends when the container stops, whether or not the engine closes it.
    let output: OutputStream = Box::pin(output.take_until(control.gone()));
    let reader = tokio_util::io::StreamReader::new(stdout_only(output, tail.clone(), ended.clone()));
    let control = ContainerExec {
        docker: docker.clone(),
        container: container.to_owned(),
        exec_id: exec.id,
        user: user.to_owned(),
        control,
        // A kernel restored from a checkpoint (gVisor) sent its `ready` before: pid 1 checks it.
        pid: restored.map(|r| r.0),
        request_fd: restored.map(|r| r.1),
        on_host: None,
        checked_by_init: restored.is_some(),
        ended,
        killed: false,
    };
    Ok(KernelProcess::from_parts(Box::new(control), input, Box::pin(reader), tail))
}

type OutputStream = Pin<Box<dyn Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>>;

/// The exec's stdout as a byte stream; stderr goes to `tail`; `ended` is set at the end.
fn stdout_only(
    mut output: OutputStream,
    tail: StderrTail,
    ended: Arc<AtomicBool>,
) -> impl Stream<Item = io::Result<bytes::Bytes>> + Send {
    futures_util::stream::poll_fn(move |cx| loop {
        match output.as_mut().poll_next(cx) {
            Poll::Ready(Some(Ok(LogOutput::StdOut { message }))) => return Poll::Ready(Some(Ok(message))),
            Poll::Ready(Some(Ok(LogOutput::StdErr { message }))) => {
                let mut tail = tail.lock().unwrap_or_else(|e| e.into_inner());
                if tail.len() < 8 << 10 {
                    tail.push_str(&String::from_utf8_lossy(&message));
                }
            }
            Poll::Ready(Some(Ok(_))) => {}
            Poll::Ready(Some(Err(e))) => {
                ended.store(true, Ordering::SeqCst);
                return Poll::Ready(Some(Err(io::Error::other(e))));
            }
            Poll::Ready(None) => {
                ended.store(true, Ordering::SeqCst);
                return Poll::Ready(None);
            }
            Poll::Pending => return Poll::Pending,
        }
    })
}

/// What a one-shot helper exec produced.
pub(crate) struct HelperOutput {
    pub(crate) stdout: Vec<u8>,
    pub(crate) stderr: Vec<u8>,
    pub(crate) exit_code: i64,
}

/// Run a helper to completion as `user`, optionally feeding `stdin` (the helper must know how much
/// to read: half-closing an attached stream is not portable across engines). Output is capped.
pub(crate) async fn run_helper(
    docker: &Docker,
    container: &str,
    user: &str,
    cmd: Vec<String>,
    stdin: Option<&[u8]>,
) -> Result<HelperOutput, SandboxError> {
    const OUTPUT_CAP: usize = 256 << 20;
    let exec = docker
        .create_exec(
            container,
            ExecConfig {
                attach_stdin: Some(stdin.is_some()),
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                tty: Some(false),
                cmd: Some(cmd),
                user: Some(user.to_owned()),
                working_dir: Some(crate::paths::HOME_DIR.to_owned()),
                ..Default::default()
            },
        )
        .await
        .map_err(|e| api_error("sandbox helper (exec create)", e))?;
    let started = docker
        .start_exec(&exec.id, None)
        .await
        .map_err(|e| api_error("sandbox helper (exec start)", e))?;
    let StartExecResults::Attached {
        mut output,
        mut input,
    } = started
    else {
        return Err(SandboxError::Protocol {
            message: "the engine started a helper detached".into(),
            received: String::new(),
        });
    };
    let feed = async {
        if let Some(data) = stdin {
            input.write_all(data).await?;
            input.flush().await?;
        }
        Ok::<_, io::Error>(())
    };
    let collect = async {
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        while let Some(item) = output.next().await {
            match item {
                Ok(LogOutput::StdOut { message }) if stdout.len() < OUTPUT_CAP => {
                    stdout.extend_from_slice(&message)
                }
                Ok(LogOutput::StdErr { message }) if stderr.len() < 64 << 10 => {
                    stderr.extend_from_slice(&message)
                }
                Ok(_) => {}
                Err(e) => return Err(SandboxError::Transport(format!("sandbox helper output: {e}"))),
            }
        }
        Ok((stdout, stderr))
    };
    let (fed, collected) = tokio::join!(feed, collect);
    fed.map_err(|e| SandboxError::Transport(format!("sandbox helper input: {e}")))?;
    let (stdout, stderr) = collected?;
    drop(input);
    let mut exit_code = -1;
    for _ in 0..200 {
        let inspect = docker
            .inspect_exec(&exec.id)
            .await
            .map_err(|e| api_error("sandbox helper (exec inspect)", e))?;
        if inspect.running != Some(true) {
            exit_code = inspect.exit_code.unwrap_or(-1);
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(HelperOutput {
        stdout,
        stderr,
        exit_code,
    })
}

#[cfg(test)]
mod tests {
    use super::{default_sockets, AnswerKey, MainThread};
    use std::path::PathBuf;

    #[test]
    fn default_sockets_cover_docker_desktop_podman_and_colima_in_order() {
        let found = default_sockets(Some("/Users/ada"), Some("/run/user/501"));
        let expected = [
            "/var/run/docker.sock",
            "/Users/ada/.docker/run/docker.sock",
            "/run/user/501/podman/podman.sock",
            "/run/podman/podman.sock",
            "/Users/ada/.colima/default/docker.sock",
        ]
        .map(PathBuf::from);
        assert_eq!(found, expected);
        // Without HOME or XDG_RUNTIME_DIR only the system-wide sockets remain.
        let system_only = default_sockets(None, Some(""));
        assert_eq!(system_only, ["/var/run/docker.sock", "/run/podman/podman.sock"].map(PathBuf::from));
    }

    /// pid 1 signs with Python's `hmac` (init.py): its tags verify here, and nothing else does.
    #[test]
    fn answers_signed_by_pid_1_verify_and_others_do_not() {
        let key = AnswerKey::new();
        let sign = |answer: &str| {
            let out = std::process::Command::new("python3")
                .args(["-I", "-c", "import hmac, sys\nsys.stdout.write(hmac.new(bytes.fromhex(sys.argv[1]), sys.argv[2].encode(), 'sha256').hexdigest())"])
                .args([key.hex().as_str(), answer])
                .output()
                .unwrap();
            format!("{answer} {}", String::from_utf8(out.stdout).unwrap())
        };
        assert_eq!(key.verify(sign("idle 7").as_bytes()), Some((7, MainThread::Idle)));
        assert_eq!(key.verify(sign("busy 8").as_bytes()), Some((8, MainThread::Busy)));
        assert_eq!(key.verify(sign("unknown 9").as_bytes()), Some((9, MainThread::Unknown)));
        let forged_nonce = sign("idle 7").replacen("idle 7", "idle 9", 1);
        assert_eq!(key.verify(forged_nonce.as_bytes()), None);
        assert_eq!(key.verify(format!("idle 7 {}", "0".repeat(64)).as_bytes()), None);
        assert_eq!(AnswerKey::new().verify(sign("idle 7").as_bytes()), None, "another key");
        assert_eq!(key.verify(b"idle 7"), None);
        assert_eq!(key.verify(b""), None);
        // A restored pid 1 keeps its key: the host signs with it again from its hex.
        let again = AnswerKey::from_hex(&key.hex()).unwrap();
        assert_eq!(again.verify(sign("idle 7").as_bytes()), Some((7, MainThread::Idle)));
        assert!(AnswerKey::from_hex("00ff").is_none() && AnswerKey::from_hex("zz").is_none());
    }
}
