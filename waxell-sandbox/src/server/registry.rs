//! The sandboxes of the server: E2B ids, lifetimes (TTL), data-plane tokens and the limit; the
//! live ones here, the paused ones and snapshots in lifecycle.rs (kept on disk by store.rs).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime};

use axum::http::{HeaderMap, StatusCode};
use rand::distr::{Alphanumeric, SampleString};

use super::watchers::Watchers;
use rand::Rng;
use waxell::sandbox::{SandboxBackend, SandboxOptions, SandboxSession};

use super::config::{ServerConfig, MIN_TIMEOUT};
use super::error::ApiError;
use super::lifecycle::Saved;
use super::logs::{Level, LogEntry, SandboxLog};
use super::saved;
use waxell::e2b::wire::DEBUG_SANDBOX_ID;
use waxell::e2b::wire::SANDBOX_ID_HEADER;

/// The backend's own lifetime is the server's plus this margin, so the server's reaper (which
/// also forgets the id) is what ends a sandbox, not the backend on its own.
const BACKEND_LIFETIME_MARGIN: Duration = Duration::from_secs(30);

/// One live sandbox.
pub(crate) struct SandboxEntry {
    pub(crate) id: String,
    pub(crate) session: Arc<dyn SandboxSession>,
    pub(crate) template_id: String,
    pub(crate) metadata: BTreeMap<String, String>,
    pub(crate) env_vars: BTreeMap<String, String>,
    pub(crate) started_at: SystemTime,
    /// Checked by envd requests and `/execute` (`X-Access-Token`). Every sandbox has one but the
    /// debug-mode sandbox, whose SDKs never learn a token.
    pub(crate) envd_token: Option<String>,
    /// Checked by Code Interpreter requests (`E2B-Traffic-Access-Token`), likewise.
    pub(crate) traffic_token: Option<String>,
    /// envd's polled directory watchers.
    pub(crate) watchers: Watchers,
    /// What happens when its lifetime ends.
    pub(crate) lifecycle: Lifecycle,
    /// Whether a pause, or a fork's or snapshot's checkpoint, holds it now ([`Hold`]).
    hold: std::sync::atomic::AtomicU8,
    /// Its running processes (envd's process RPCs).
    pub(crate) processes: Arc<super::process::ProcessTable>,
    /// What happened to it (`GET /sandboxes/{id}/logs`).
    pub(crate) log: SandboxLog,
    deadline: Mutex<Deadline>,
}

/// What holds a live sandbox, so that requests no longer reach it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Hold {
    /// Nothing: it serves requests.
    Free,
    /// Being paused: info and the lists say `paused`; traffic resumes it when it has autoResume.
    Pausing,
    /// Being paused with the files only (`memory: false`): traffic never resumes it (E2B's rule).
    PausingFilesOnly,
    /// Checkpointed for a fork or a snapshot, and coming back under its id: still `running`, and
    /// traffic waits for it.
    Copying,
}

/// E2B's `lifecycle`: pause instead of kill at the end of the lifetime (asking to keep memory or
/// not, `autoPauseMemory`), and resume on traffic.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Lifecycle {
    pub(crate) auto_pause: bool,
    pub(crate) auto_pause_memory: bool,
    pub(crate) auto_resume: bool,
}

/// Who a sandbox is: its id, tokens and start time (kept across a pause).
pub(crate) struct Identity {
    pub(crate) id: String,
    pub(crate) envd_token: Option<String>,
    pub(crate) traffic_token: Option<String>,
    pub(crate) started_at: SystemTime,
}

impl Identity {
    /// A new sandbox `id` with new tokens (none for the debug-mode sandbox, whose SDKs never
    /// learn one).
    pub(crate) fn new(id: String) -> Self {
        let with_token = id != DEBUG_SANDBOX_ID;
        Self {
            id,
            envd_token: with_token.then(new_token),
            traffic_token: with_token.then(new_token),
            started_at: SystemTime::now(),
        }
    }
}

#[derive(Clone, Copy)]
struct Deadline {
    at: Instant,
    wall: SystemTime,
}

impl SandboxEntry {
    /// What holds it now.
    pub(crate) fn hold(&self) -> Hold {
        match self.hold.load(Ordering::SeqCst) {
            1 => Hold::Pausing,
            2 => Hold::PausingFilesOnly,
            3 => Hold::Copying,
            _ => Hold::Free,
        }
    }

    pub(crate) fn set_hold(&self, hold: Hold) {
        self.hold.store(hold as u8, Ordering::SeqCst);
    }

    /// Being paused (the state the API reports).
    pub(crate) fn is_pausing(&self) -> bool {
        matches!(self.hold(), Hold::Pausing | Hold::PausingFilesOnly)
    }

    /// When the sandbox will be killed (wall clock).
    pub(crate) fn end_at(&self) -> SystemTime {
        self.deadline.lock().unwrap_or_else(|e| e.into_inner()).wall
    }

    fn expired(&self, now: Instant) -> bool {
        self.deadline.lock().unwrap_or_else(|e| e.into_inner()).at <= now
    }

    fn set_deadline(&self, timeout: Duration, only_extend: bool) {
        let mut deadline = self.deadline.lock().unwrap_or_else(|e| e.into_inner());
        let at = Instant::now() + timeout;
        if !only_extend || at > deadline.at {
            *deadline = Deadline {
                at,
                wall: SystemTime::now() + timeout,
            };
        }
    }
}

/// A token header and the sandbox's expected value for it (`None`: the sandbox has no such token).
pub(crate) type TokenCheck = (&'static str, fn(&SandboxEntry) -> Option<&String>);

/// What a create request asks for.
#[derive(Clone)]
pub(crate) struct CreateRequest {
    pub(crate) template_id: String,
    pub(crate) timeout: Duration,
    pub(crate) metadata: BTreeMap<String, String>,
    pub(crate) env_vars: BTreeMap<String, String>,
    pub(crate) lifecycle: Lifecycle,
    /// Saved files (a paused sandbox's or a snapshot's `home`) written into it before it is served.
    pub(crate) files: Option<PathBuf>,
    /// Its log so far (a paused sandbox's, resuming; a sandbox's restored in place).
    pub(crate) history: Vec<LogEntry>,
}

pub(crate) struct Registry {
    backend: Arc<dyn SandboxBackend>,
    pub(crate) config: ServerConfig,
    sandboxes: Mutex<HashMap<String, Arc<SandboxEntry>>>,
    /// Paused sandboxes, snapshots and where they are kept (lifecycle.rs).
    pub(crate) saved: Saved,
    /// Creations in flight, counted against the limit so concurrent creates cannot overshoot it.
    creating: AtomicUsize,
    /// Serialises lazy creation of the debug-mode sandbox.
    debug_create: tokio::sync::Mutex<()>,
}

/// Releases a reserved creation slot however the creation ends.
struct Reservation<'a>(&'a AtomicUsize);

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Registry {
    /// Fails only when the state directory cannot be made.
    pub(crate) fn new(backend: Arc<dyn SandboxBackend>, config: ServerConfig) -> std::io::Result<Arc<Self>> {
        let saved = Saved::open(&config)?;
        Ok(Arc::new(Self {
            backend,
            config,
            sandboxes: Mutex::new(HashMap::new()),
            saved,
            creating: AtomicUsize::new(0),
            debug_create: tokio::sync::Mutex::new(()),
        }))
    }

    /// The backend's checkpoints, if it keeps a sandbox's memory across a pause.
    pub(crate) fn keeps_memory(&self) -> Option<&dyn crate::pool::KeepsMemory> {
        crate::pool::keeps_memory(&*self.backend)
    }

    /// The backend's name (`local`, `docker`).
    pub(crate) fn backend_name(&self) -> &'static str {
        self.backend.name()
    }

    pub(crate) fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<SandboxEntry>>> {
        self.sandboxes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Check a requested lifetime against the server's bounds.
    pub(crate) fn check_timeout(&self, seconds: i64) -> Result<Duration, ApiError> {
        let timeout = Duration::from_secs(seconds.max(0) as u64);
        if timeout < MIN_TIMEOUT || timeout > self.config.max_timeout {
            return Err(ApiError::bad_request(format!(
                "timeout {seconds} s is out of range: allowed {}..={} s",
                MIN_TIMEOUT.as_secs(),
                self.config.max_timeout.as_secs()
            )));
        }
        Ok(timeout)
    }

    /// Create a sandbox with the backend and register it under a new E2B-style id.
    pub(crate) async fn create(&self, request: CreateRequest) -> Result<Arc<SandboxEntry>, ApiError> {
        let timeout = request.timeout;
        let entry = self.create_as(Identity::new(new_sandbox_id()), request).await?;
        entry.log.add(
            Level::Info,
            "sandbox created",
            [
                ("template", entry.template_id.clone()),
                ("timeout_s", timeout.as_secs().to_string()),
                ("backend", self.backend_name().to_owned()),
            ],
        );
        Ok(entry)
    }

    /// Create a sandbox for `identity` (new, or a paused one resuming), with `request.files`
    /// written into it, and register it.
    pub(crate) async fn create_as(
        &self,
        identity: Identity,
        request: CreateRequest,
    ) -> Result<Arc<SandboxEntry>, ApiError> {
        let backend = self.backend.clone();
        self.register(identity, request, |options| async move {
            backend.create(&options).await
        })
        .await
    }

    /// Register the sandbox `make` makes with the backend's options for `request` (within the
    /// limit), `request.files` written into it.
    pub(crate) async fn register<F, Fut>(
        &self,
        identity: Identity,
        request: CreateRequest,
        make: F,
    ) -> Result<Arc<SandboxEntry>, ApiError>
    where
        F: FnOnce(SandboxOptions) -> Fut,
        Fut: std::future::Future<Output = Result<Box<dyn SandboxSession>, waxell::sandbox::SandboxError>>,
    {
        let in_flight = self.creating.fetch_add(1, Ordering::SeqCst);
        let _reservation = Reservation(&self.creating);
        let live = self.map().len();
        // A sandbox restored in place of itself (a fork's or a snapshot's source) takes no new place.
        let replaces = self.map().contains_key(&identity.id);
        if !replaces && live + in_flight >= self.config.max_sandboxes {
            return Err(ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                format!(
                    "sandbox limit reached: {} live sandboxes at most on this server; kill one first",
                    self.config.max_sandboxes
                ),
            ));
        }
        let mut options = SandboxOptions::new()
            .with_template(request.template_id.clone())
            .with_timeout(request.timeout + BACKEND_LIFETIME_MARGIN);
        options.env_vars = request.env_vars.clone();
        options.metadata = request.metadata.clone();
        let session: Arc<dyn SandboxSession> = Arc::from(make(options).await?);
        if let Some(files) = &request.files {
            if let Err(e) = saved::restore_home(&*session, files).await {
                let _ = session.kill().await;
                return Err(e);
            }
        }
        let Identity {
            id,
            envd_token,
            traffic_token,
            started_at,
        } = identity;
        let entry = Arc::new(SandboxEntry {
            id: id.clone(),
            session,
            template_id: request.template_id,
            metadata: request.metadata,
            env_vars: request.env_vars,
            watchers: Watchers::default(),
            started_at,
            envd_token,
            traffic_token,
            lifecycle: request.lifecycle,
            hold: std::sync::atomic::AtomicU8::new(Hold::Free as u8),
            processes: Arc::default(),
            log: SandboxLog::continuing(request.history),
            deadline: Mutex::new(Deadline {
                at: Instant::now() + request.timeout,
                wall: SystemTime::now() + request.timeout,
            }),
        });
        self.map().insert(id, entry.clone());
        tracing::info!(sandbox = %entry.id, template = %entry.template_id, "sandbox created");
        Ok(entry)
    }

    /// The sandbox `id`, if it is live.
    pub(crate) fn get(&self, id: &str) -> Option<Arc<SandboxEntry>> {
        self.map().get(id).cloned()
    }

    /// All live sandboxes, those being paused too, oldest first.
    pub(crate) fn list_with_pausing(&self) -> Vec<Arc<SandboxEntry>> {
        let mut all: Vec<_> = self.map().values().cloned().collect();
        all.sort_by_key(|e| e.started_at);
        all
    }

    /// All live sandboxes (not those being paused), oldest first.
    pub(crate) fn list(&self) -> Vec<Arc<SandboxEntry>> {
        let mut all: Vec<_> = self
            .map()
            .values()
            .filter(|e| e.hold() == Hold::Free)
            .cloned()
            .collect();
        all.sort_by_key(|e| e.started_at);
        all
    }

    /// Reset the lifetime to `timeout` from now (`only_extend`: never shorten it, as connect does).
    pub(crate) async fn set_timeout(
        &self,
        entry: &SandboxEntry,
        timeout: Duration,
        only_extend: bool,
    ) -> Result<(), ApiError> {
        entry.set_deadline(timeout, only_extend);
        let remaining = entry
            .end_at()
            .duration_since(SystemTime::now())
            .unwrap_or_default();
        entry
            .session
            .set_timeout(remaining + BACKEND_LIFETIME_MARGIN)
            .await?;
        Ok(())
    }

    /// Forget the sandbox and kill it, or remove it if it is paused. False if it was neither.
    pub(crate) async fn kill(&self, id: &str) -> bool {
        // Not while a pause, resume, fork or snapshot of it is under way.
        let _guard = self.saved.lock.lock().await;
        let Some(entry) = self.map().remove(id) else {
            return self.saved.remove_paused(id);
        };
        if let Err(e) = entry.session.kill().await {
            tracing::warn!(sandbox = %id, error = %e, "killing the sandbox failed");
        }
        tracing::info!(sandbox = %id, "sandbox killed");
        true
    }

    async fn reap_expired(&self) {
        let now = Instant::now();
        let expired: Vec<(String, Lifecycle)> = self
            .map()
            .values()
            .filter(|e| e.expired(now))
            .map(|e| (e.id.clone(), e.lifecycle))
            .collect();
        for (id, lifecycle) in expired {
            if let Some(entry) = self.get(&id) {
                let then = if lifecycle.auto_pause { "pause" } else { "kill" };
                entry.log.add(
                    Level::Info,
                    "sandbox lifetime ended",
                    [("onTimeout", then.to_owned())],
                );
            }
            if lifecycle.auto_pause {
                tracing::info!(sandbox = %id, "sandbox lifetime expired, pausing it (onTimeout: pause)");
                match self.pause(&id, Some(lifecycle.auto_pause_memory)).await {
                    Ok(_) => continue,
                    Err(e) => {
                        tracing::warn!(sandbox = %id, error = %e.message(), "auto-pause failed, killing")
                    }
                }
            } else {
                tracing::info!(sandbox = %id, "sandbox lifetime expired");
            }
            self.kill(&id).await;
        }
    }

    /// The sandbox a data-plane request is for, after checking its tokens: each `(header, expected)`
    /// pair must match where the sandbox has that token. Unknown sandboxes get E2B's proxy answer
    /// (502 "was not found").
    pub(crate) async fn for_data_plane(
        &self,
        headers: &HeaderMap,
        tokens: &[TokenCheck],
    ) -> Result<Arc<SandboxEntry>, ApiError> {
        let id = headers
            .get(SANDBOX_ID_HEADER)
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| ApiError::bad_request(format!("Missing header: {SANDBOX_ID_HEADER}")))?;
        let entry = match self.get(id) {
            Some(entry) => match entry.hold() {
                Hold::Free => entry,
                // autoResume: traffic during a pause waits for it, then resumes the sandbox.
                Hold::Pausing if entry.lifecycle.auto_resume => {
                    self.resume(id, self.config.default_timeout).await?
                }
                Hold::Pausing | Hold::PausingFilesOnly => return Err(ApiError::sandbox_not_running(id)),
                // Back under its id once the fork or snapshot is done (they hold the lock).
                Hold::Copying => {
                    drop(self.saved.lock.lock().await);
                    match self.get(id) {
                        Some(entry) if entry.hold() == Hold::Free => entry,
                        _ => return Err(ApiError::sandbox_not_running(id)),
                    }
                }
            },
            None if id == DEBUG_SANDBOX_ID && self.config.debug_sandbox => {
                if self.config.api_key.is_some() {
                    // Debug mode sends no key and no token: serving it would open the server.
                    return Err(ApiError::unauthorized(
                        "the debug-mode sandbox is served only by a server without auth (--no-auth)",
                    ));
                }
                self.debug_sandbox().await?
            }
            // E2B's autoResume: traffic to a paused sandbox resumes it.
            None if self.saved.auto_resumes(id) => self.resume(id, self.config.default_timeout).await?,
            None => return Err(ApiError::sandbox_not_running(id)),
        };
        for (token_header, expected) in tokens {
            let Some(token) = expected(&entry) else { continue };
            let given = headers.get(*token_header).and_then(|v| v.to_str().ok());
            if !given.is_some_and(|g| constant_time_eq(g.as_bytes(), token.as_bytes())) {
                return Err(ApiError::unauthorized(format!(
                    "missing or wrong {token_header} for sandbox {id}: use the token its create or \
                     connect response gave"
                )));
            }
        }
        Ok(entry)
    }

    /// The debug-mode sandbox, created on first use.
    async fn debug_sandbox(&self) -> Result<Arc<SandboxEntry>, ApiError> {
        let _guard = self.debug_create.lock().await;
        if let Some(entry) = self.get(DEBUG_SANDBOX_ID) {
            return Ok(entry);
        }
        let request = CreateRequest {
            template_id: "code-interpreter-v1".into(),
            timeout: self.config.default_timeout,
            metadata: BTreeMap::new(),
            env_vars: BTreeMap::new(),
            lifecycle: Lifecycle::default(),
            files: None,
            history: Vec::new(),
        };
        self.create_as(Identity::new(DEBUG_SANDBOX_ID.into()), request)
            .await
    }
}

/// Kill expired sandboxes every `interval` until the registry is dropped.
pub(crate) fn spawn_reaper(registry: Weak<Registry>, interval: Duration) {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(interval).await;
            let Some(registry) = registry.upgrade() else {
                return;
            };
            registry.reap_expired().await;
        }
    });
}

/// 20 characters of `[a-z0-9]`, the shape E2B's proxy accepts.
pub(crate) fn new_sandbox_id() -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    (0..20)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

fn new_token() -> String {
    Alphanumeric.sample_string(&mut rand::rng(), 40)
}

/// Compare secrets without an early exit that would leak how much of a guess matched.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
