//! What every backend's session does the same way over the transport-neutral kernel: the
//! contexts (each its own kernel), `run_code`'s argument checks and the replacement of a dead
//! kernel, and the context calls. A backend supplies only what differs: how a kernel starts, the
//! limits it runs under, how an OOM kill is counted, and whether the sandbox is still alive.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use async_trait::async_trait;
use waxell::sandbox::{CodeContext, Execution, RunOptions, SandboxError};

use crate::kernel::{ExecLimits, KernelProcess, OomCounter};
use crate::launcher::HOME_DIR;

/// A sandbox's end: killed (or dropped), or its lifetime deadline passed. The deadline moves with
/// `set_timeout`; [`watch_lifetime`] shuts the sandbox down when it passes.
pub(crate) struct Lifetime {
    ended: AtomicBool,
    deadline: Mutex<Instant>,
    /// Shared with the watchdog, which waits on it without holding the sandbox.
    changed: Arc<Notify>,
}

impl Lifetime {
    pub(crate) fn new(lifetime: Duration) -> Self {
        Self {
            ended: AtomicBool::new(false),
            deadline: Mutex::new(Instant::now() + lifetime),
            changed: Arc::new(Notify::new()),
        }
    }

    /// Whether the sandbox was killed, dropped or outlived its deadline.
    pub(crate) fn has_ended(&self) -> bool {
        self.ended.load(Ordering::SeqCst)
    }

    /// Mark the sandbox ended and wake the watchdog so it exits.
    pub(crate) fn end(&self) {
        self.ended.store(true, Ordering::SeqCst);
        self.changed.notify_one();
    }

    /// A new deadline, `timeout` from now.
    pub(crate) fn extend(&self, timeout: Duration) {
        *self.deadline.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now() + timeout;
        self.changed.notify_one();
    }

    fn deadline(&self) -> Instant {
        *self.deadline.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The shared state of a sandbox whose lifetime [`watch_lifetime`] enforces.
#[async_trait]
pub(crate) trait Expiring: Send + Sync + 'static {
    fn lifetime(&self) -> &Lifetime;
    /// For the log line.
    fn sandbox_id(&self) -> &str;
    /// Kill the sandbox's processes and remove what it holds.
    async fn shutdown(&self);
}

/// Shut the sandbox down when its deadline passes. Holds only a weak reference while waiting, so
/// dropping the sandbox cleans up at once.
pub(crate) fn watch_lifetime<T: Expiring>(weak: Weak<T>) {
    tokio::spawn(async move {
        loop {
            let (deadline, changed) = {
                let Some(inner) = weak.upgrade() else { return };
                let lifetime = inner.lifetime();
                if lifetime.has_ended() {
                    return;
                }
                let deadline = lifetime.deadline();
                if Instant::now() >= deadline {
                    tracing::info!(sandbox = %inner.sandbox_id(), "sandbox lifetime expired, shutting it down");
                    inner.shutdown().await;
                    return;
                }
                (deadline, Arc::clone(&lifetime.changed))
            };
            tokio::select! {
                _ = changed.notified() => {}
                _ = tokio::time::sleep_until(deadline) => {}
            }
        }
    });
}

/// Id of the context every sandbox starts with.
pub const DEFAULT_CONTEXT_ID: &str = "default";

/// One context: its description and its kernel (`None` after a kill, until the next run starts one).
pub(crate) struct Context {
    pub(crate) info: CodeContext,
    pub(crate) kernel: tokio::sync::Mutex<Option<KernelProcess>>,
}

/// The contexts of one sandbox, starting with the default one.
pub(crate) struct Contexts {
    map: Mutex<BTreeMap<String, Arc<Context>>>,
    next_id: AtomicU64,
}

impl Contexts {
    /// The default context, running `kernel` in the home directory.
    pub(crate) fn new(kernel: KernelProcess) -> Self {
        let default = Arc::new(Context {
            info: CodeContext {
                id: DEFAULT_CONTEXT_ID.into(),
                language: "python".into(),
                cwd: HOME_DIR.into(),
            },
            kernel: tokio::sync::Mutex::new(Some(kernel)),
        });
        Self {
            map: Mutex::new(BTreeMap::from([(DEFAULT_CONTEXT_ID.to_owned(), default)])),
            next_id: AtomicU64::new(1),
        }
    }

    fn map(&self) -> Result<std::sync::MutexGuard<'_, BTreeMap<String, Arc<Context>>>, SandboxError> {
        self.map
            .lock()
            .map_err(|_| SandboxError::Other("context lock poisoned".into()))
    }

    fn get(&self, id: &str) -> Result<Arc<Context>, SandboxError> {
        self.map()?
            .get(id)
            .cloned()
            .ok_or_else(|| SandboxError::ContextNotFound(format!("Context {id} not found")))
    }

    /// Every context, removed from the sandbox (it is shutting down).
    pub(crate) fn take_all(&self) -> Vec<Arc<Context>> {
        self.map
            .lock()
            .map(|mut contexts| std::mem::take(&mut *contexts).into_values().collect())
            .unwrap_or_default()
    }
}

/// What a backend's sandbox supplies to the shared session logic.
#[async_trait]
pub(crate) trait SessionBackend: Send + Sync {
    /// "local sandbox", "container sandbox": names the backend in argument errors.
    fn kind(&self) -> &'static str;
    fn contexts(&self) -> &Contexts;
    /// `NotFound` once the sandbox was killed or its lifetime expired.
    fn check_alive(&self) -> Result<(), SandboxError>;
    /// Start a kernel (with the sandbox's env vars) in `cwd`, `None` = the home directory.
    async fn start_kernel(&self, cwd: Option<&str>) -> Result<KernelProcess, SandboxError>;
    /// The limits of one run with these options.
    fn exec_limits(&self, options: &RunOptions) -> ExecLimits;
    /// Where OOM kills of the sandbox's processes are counted.
    fn oom_counter(&self) -> &dyn OomCounter;
}

/// Only Python runs in these sandboxes.
fn check_language(backend: &dyn SessionBackend, language: &str) -> Result<(), SandboxError> {
    match language.trim().to_ascii_lowercase().as_str() {
        "" | "python" | "python3" => Ok(()),
        other => Err(SandboxError::InvalidArgument(format!(
            "language {other:?} is not supported by the {} (only python)",
            backend.kind()
        ))),
    }
}

/// A context may work in the home directory or /tmp, or below them: the only writable places.
fn check_cwd(cwd: &str) -> Result<(), SandboxError> {
    let allowed = cwd == HOME_DIR || cwd.starts_with("/home/user/") || cwd == "/tmp" || cwd.starts_with("/tmp/");
    if allowed {
        Ok(())
    } else {
        Err(SandboxError::InvalidArgument(format!(
            "cwd {cwd:?}: must be {HOME_DIR} or /tmp or below them"
        )))
    }
}

fn context_cwd(context: &Context) -> Option<&str> {
    (context.info.cwd != HOME_DIR).then_some(context.info.cwd.as_str())
}

pub(crate) async fn run_code(
    backend: &dyn SessionBackend,
    code: &str,
    options: &RunOptions,
) -> Result<Execution, SandboxError> {
    backend.check_alive()?;
    if options.language.is_some() && options.context_id.is_some() {
        return Err(SandboxError::InvalidArgument(
            "Only one of context_id or language can be provided".into(),
        ));
    }
    if let Some(language) = &options.language {
        check_language(backend, language)?;
    }
    let context = backend
        .contexts()
        .get(options.context_id.as_deref().unwrap_or(DEFAULT_CONTEXT_ID))?;
    let mut slot = context.kernel.lock().await;
    backend.check_alive()?;
    let limits = backend.exec_limits(options);
    if let Some(kernel) = slot.as_mut() {
        kernel.settle_abandoned(limits.grace).await;
    }
    // A kernel killed by a timeout, OOM or the output cap is replaced with a fresh one.
    if !slot.as_ref().is_some_and(KernelProcess::is_alive) {
        *slot = Some(backend.start_kernel(context_cwd(&context)).await?);
    }
    let kernel = slot.as_mut().expect("kernel just ensured");
    let execution = kernel
        .execute(code, options, &limits, backend.oom_counter())
        .await?;
    // Killed from outside (kill() or the lifetime) while running: report that, not a crash.
    backend.check_alive()?;
    Ok(execution)
}

pub(crate) async fn create_context(
    backend: &dyn SessionBackend,
    language: Option<&str>,
    cwd: Option<&str>,
) -> Result<CodeContext, SandboxError> {
    backend.check_alive()?;
    if let Some(language) = language {
        check_language(backend, language)?;
    }
    if let Some(cwd) = cwd {
        check_cwd(cwd)?;
    }
    let kernel = backend.start_kernel(cwd).await?;
    let contexts = backend.contexts();
    let id = format!("ctx-{}", contexts.next_id.fetch_add(1, Ordering::Relaxed));
    let info = CodeContext {
        id: id.clone(),
        language: "python".into(),
        cwd: cwd.unwrap_or(HOME_DIR).into(),
    };
    let context = Arc::new(Context {
        info: info.clone(),
        kernel: tokio::sync::Mutex::new(Some(kernel)),
    });
    contexts.map()?.insert(id, context);
    Ok(info)
}

pub(crate) fn list_contexts(backend: &dyn SessionBackend) -> Result<Vec<CodeContext>, SandboxError> {
    backend.check_alive()?;
    Ok(backend
        .contexts()
        .map()?
        .values()
        .map(|c| c.info.clone())
        .collect())
}

pub(crate) async fn restart_context(backend: &dyn SessionBackend, context_id: &str) -> Result<(), SandboxError> {
    backend.check_alive()?;
    let context = backend.contexts().get(context_id)?;
    let mut slot = context.kernel.lock().await;
    if let Some(mut old) = slot.take() {
        old.kill();
    }
    *slot = Some(backend.start_kernel(context_cwd(&context)).await?);
    Ok(())
}

pub(crate) async fn remove_context(backend: &dyn SessionBackend, context_id: &str) -> Result<(), SandboxError> {
    backend.check_alive()?;
    if context_id == DEFAULT_CONTEXT_ID {
        return Err(SandboxError::InvalidArgument(
            "the default context cannot be removed".into(),
        ));
    }
    let removed = backend.contexts().map()?.remove(context_id);
    let context =
        removed.ok_or_else(|| SandboxError::ContextNotFound(format!("Context {context_id} not found")))?;
    if let Some(mut kernel) = context.kernel.lock().await.take() {
        kernel.kill();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check_cwd;

    #[test]
    fn contexts_may_work_only_in_the_writable_places() {
        for ok in ["/home/user", "/home/user/data", "/tmp", "/tmp/x"] {
            assert!(check_cwd(ok).is_ok(), "{ok}");
        }
        for bad in ["/home/username", "/etc", "/tmpfoo", "/", "relative"] {
            assert!(check_cwd(bad).is_err(), "{bad}");
        }
    }
}
