//! A backend with its warm pool ([`Pooled`]): creates sandboxes, handing out a ready one when the
//! pool has it, and refills the pool in the background.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::{oneshot, Notify};
use waxell::sandbox::{SandboxBackend, SandboxError, SandboxOptions, SandboxProcess, SandboxSession};

use crate::backend::{Backend, Checkpoint, Prepared};
use crate::session::Session;

/// Creates sandboxes of backend `B`, optionally from a warm pool of ready ones. Cheap to clone;
/// the pool is shared. Dropping the last clone drops the pool (the sandboxes it made live on).
pub struct Pooled<B: Backend> {
    inner: Arc<PoolInner<B>>,
}

impl<B: Backend> Clone for Pooled<B> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

struct PoolInner<B: Backend> {
    /// Before `backend`: fields drop in order, and the pooled sandboxes must go while the backend's
    /// parts they end through are still there (a local kernel's zygote reaps it; with the zygote
    /// gone first, its sandbox's pid namespace waited a second for the host's init to reap it).
    state: Mutex<PoolState<Prepared<B::Shell>>>,
    backend: Arc<B>,
    /// Wakes the refill task; also notified when the backend is dropped so the task exits.
    refill: Arc<Notify>,
    refill_started: AtomicBool,
    /// The refill task's last failure, reported by `warm_up`.
    refill_error: Mutex<Option<String>>,
}

/// The ready sandboxes, and the one the refill task is starting (`T`: a [`Prepared`] sandbox).
struct PoolState<T> {
    ready: VecDeque<T>,
    in_flight: InFlight<T>,
}

/// What the pool holds: something whose process may have died while it waited.
trait Waiting {
    fn has_exited(&mut self) -> bool;
}

impl<S> Waiting for Prepared<S> {
    fn has_exited(&mut self) -> bool {
        self.kernel.has_exited()
    }
}

/// The sandbox the refill task is starting. One `create` that finds no ready sandbox claims it
/// rather than starting a second one beside it on the same cores (the refill then starts the next).
/// The sender stays with the refill task, so a claimant hears of a failed start, or of a task that
/// ended with its runtime, as a closed channel.
enum InFlight<T> {
    None,
    Unclaimed(oneshot::Receiver<T>),
    Claimed,
}

impl<T: Waiting> PoolState<T> {
    /// A ready sandbox whose kernel is alive (one killed from outside while waiting is discarded).
    fn take_ready(&mut self) -> Option<T> {
        while let Some(mut prepared) = self.ready.pop_front() {
            if !prepared.has_exited() {
                return Some(prepared);
            }
        }
        None
    }

    /// Claim the sandbox being started, if nobody has.
    fn claim_in_flight(&mut self) -> Option<oneshot::Receiver<T>> {
        match std::mem::replace(&mut self.in_flight, InFlight::Claimed) {
            InFlight::Unclaimed(receiver) => Some(receiver),
            other => {
                self.in_flight = other;
                None
            }
        }
    }

    /// Mark a start in flight; its sandbox goes through the returned sender.
    fn start_in_flight(&mut self) -> oneshot::Sender<T> {
        let (sender, receiver) = oneshot::channel();
        self.in_flight = InFlight::Unclaimed(receiver);
        sender
    }

    /// The refill's sandbox is ready: to its claimant, or (none, or it went away) to the pool.
    fn deliver(&mut self, prepared: T, sender: oneshot::Sender<T>) {
        let unsent = match std::mem::replace(&mut self.in_flight, InFlight::None) {
            InFlight::Claimed => sender.send(prepared).err(),
            InFlight::None | InFlight::Unclaimed(_) => Some(prepared),
        };
        self.ready.extend(unsent);
    }
}

/// Refill tasks holding a pool (a pool and the sandboxes in it are dropped by whoever holds it
/// last). A process about to exit waits for them, so a sandbox a refill is starting is removed
/// too (`container::removals_settled`).
static REFILLS_HOLDING_A_POOL: AtomicUsize = AtomicUsize::new(0);

/// Whether a refill task still holds a pool.
#[cfg(feature = "container")]
pub(crate) fn refills_holding_a_pool() -> bool {
    REFILLS_HOLDING_A_POOL.load(Ordering::SeqCst) > 0
}

/// A refill task's hold on its pool, counted in [`REFILLS_HOLDING_A_POOL`]. Fields drop in order:
/// the pool first (its sandboxes' removals start), then the count.
struct RefillHold<B: Backend> {
    inner: Arc<PoolInner<B>>,
    _counted: Counted,
}

struct Counted;

impl Counted {
    fn new() -> Self {
        REFILLS_HOLDING_A_POOL.fetch_add(1, Ordering::SeqCst);
        Self
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        REFILLS_HOLDING_A_POOL.fetch_sub(1, Ordering::SeqCst);
    }
}

impl<B: Backend> Drop for PoolInner<B> {
    fn drop(&mut self) {
        self.refill.notify_one();
    }
}

impl<B: Backend> Pooled<B> {
    /// Wrap a backend; starts filling the pool if `pool_size > 0` and a tokio runtime is running
    /// (else on the first `create`).
    pub(crate) fn with_backend(backend: B) -> Self {
        let pooled = Self {
            inner: Arc::new(PoolInner {
                backend: Arc::new(backend),
                state: Mutex::new(PoolState {
                    ready: VecDeque::new(),
                    in_flight: InFlight::None,
                }),
                refill: Arc::new(Notify::new()),
                refill_started: AtomicBool::new(false),
                refill_error: Mutex::new(None),
            }),
        };
        if tokio::runtime::Handle::try_current().is_ok() {
            // The first fill counts as in flight from now: the spawned task may not have run when
            // the first `create` comes, which then takes the sandbox it starts.
            let first = (pooled.inner.backend.config().pool_size > 0)
                .then(|| pooled.inner.state.lock().ok().map(|mut state| state.start_in_flight()))
                .flatten();
            pooled.start_refill(first);
        }
        pooled
    }

    /// The backend.
    pub(crate) fn backend(&self) -> &B {
        &self.inner.backend
    }

    /// Ready sandboxes waiting in the pool.
    pub fn pool_len(&self) -> usize {
        self.inner.state.lock().map(|s| s.ready.len()).unwrap_or(0)
    }

    /// Fill the warm pool to `pool_size` and wait until it is full (needs a tokio runtime).
    pub async fn warm_up(&self) -> Result<(), SandboxError> {
        let target = self.inner.backend.config().pool_size;
        self.start_refill(None);
        self.inner.refill.notify_one();
        while self.pool_len() < target {
            if let Some(error) = self.inner.refill_error.lock().ok().and_then(|mut e| e.take()) {
                return Err(SandboxError::Unavailable(format!(
                    "warm pool refill failed: {error}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Ok(())
    }

    /// `first`: the sender of a start already marked in flight.
    fn start_refill(&self, mut first: Option<oneshot::Sender<Prepared<B::Shell>>>) {
        if self.inner.backend.config().pool_size == 0 || self.inner.refill_started.swap(true, Ordering::SeqCst) {
            return;
        }
        let weak = Arc::downgrade(&self.inner);
        let notify = self.inner.refill.clone();
        tokio::spawn(async move {
            loop {
                let notified = notify.notified();
                let Some(inner) = weak.upgrade() else { return };
                let hold = RefillHold {
                    inner,
                    _counted: Counted::new(),
                };
                let inner = &hold.inner;
                let target = inner.backend.config().pool_size;
                let sender = match inner.state.lock() {
                    Ok(mut state) if state.ready.len() < target => {
                        Some(first.take().unwrap_or_else(|| state.start_in_flight()))
                    }
                    _ => None,
                };
                let Some(sender) = sender else {
                    drop(hold);
                    notified.await;
                    continue;
                };
                let prepared = inner.backend.prepare().await;
                let failed = match inner.state.lock() {
                    Ok(mut state) => match prepared {
                        Ok(prepared) => {
                            state.deliver(prepared, sender);
                            None
                        }
                        Err(e) => {
                            // A claimant hears the channel close and starts a sandbox itself.
                            state.in_flight = InFlight::None;
                            drop(sender);
                            Some(e)
                        }
                    },
                    Err(_) => return,
                };
                if let Some(e) = failed {
                    tracing::warn!(backend = B::NAME, "warm pool refill failed: {e}");
                    if let Ok(mut slot) = inner.refill_error.lock() {
                        *slot = Some(e.to_string());
                    }
                    drop(hold);
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        });
    }

    /// Create a sandbox (the concrete type; [`SandboxBackend::create`] boxes it).
    pub async fn create_sandbox(&self, options: &SandboxOptions) -> Result<Session<B>, SandboxError> {
        // Idempotent; starts the refill if the backend was made outside a runtime.
        self.start_refill(None);
        let (ready, claimed) = match self.inner.state.lock() {
            Ok(mut state) => match state.take_ready() {
                Some(prepared) => (Some(prepared), None),
                None => (None, state.claim_in_flight()),
            },
            Err(_) => (None, None),
        };
        if ready.is_some() {
            self.inner.refill.notify_one();
        }
        let from_refill = match claimed {
            Some(receiver) => receiver.await.ok().and_then(|mut p| (!p.has_exited()).then_some(p)),
            None => None,
        };
        let prepared = match ready.or(from_refill) {
            Some(prepared) => prepared,
            None => self.inner.backend.prepare().await?,
        };
        Session::start(Arc::clone(&self.inner.backend), prepared, options).await
    }
}

/// What a server pausing a sandbox with its memory needs of a backend that keeps it
/// ([`keeps_memory`]): a checkpoint of a live sandbox, and a sandbox restored from one.
#[async_trait]
#[cfg_attr(not(all(feature = "server", feature = "container")), allow(dead_code, reason = "the server's memory pause, with the container backend"))]
pub(crate) trait KeepsMemory: Send + Sync {
    /// Checkpoint `session` (one of this backend's) into `dir` and end it (see
    /// [`Session::checkpoint`]).
    async fn checkpoint(&self, session: &dyn SandboxSession, dir: &Path) -> Result<Checkpoint, SandboxError>;
    /// Attach to `saved`, a process of `session` (restored by this backend) that lived on in its
    /// checkpoint.
    async fn attach_process(
        &self,
        session: &dyn SandboxSession,
        saved: &crate::backend::SavedProcess,
    ) -> Result<SandboxProcess, SandboxError>;
    /// The sandbox saved in `dir`, with `options`' lifetime and environment.
    async fn restore(
        &self,
        checkpoint: &Checkpoint,
        dir: &Path,
        options: &SandboxOptions,
    ) -> Result<Box<dyn SandboxSession>, SandboxError>;
}

#[async_trait]
impl<B: Backend> KeepsMemory for Pooled<B> {
    async fn checkpoint(&self, session: &dyn SandboxSession, dir: &Path) -> Result<Checkpoint, SandboxError> {
        own_session::<B>(session)?.checkpoint(dir).await
    }

    async fn attach_process(
        &self,
        session: &dyn SandboxSession,
        saved: &crate::backend::SavedProcess,
    ) -> Result<SandboxProcess, SandboxError> {
        own_session::<B>(session)?.attach_process(saved).await
    }

    async fn restore(
        &self,
        checkpoint: &Checkpoint,
        dir: &Path,
        options: &SandboxOptions,
    ) -> Result<Box<dyn SandboxSession>, SandboxError> {
        if checkpoint.backend != B::NAME {
            return Err(SandboxError::InvalidArgument(format!(
                "a checkpoint of the {} backend cannot be restored by the {} backend",
                checkpoint.backend,
                B::NAME
            )));
        }
        let session = Session::restore(Arc::clone(&self.inner.backend), checkpoint, dir, options).await?;
        Ok(Box::new(session))
    }
}

/// `session` as one of backend `B`'s, or an error naming the backend.
fn own_session<B: Backend>(session: &dyn SandboxSession) -> Result<&Session<B>, SandboxError> {
    session
        .as_any()
        .and_then(|any| any.downcast_ref::<Session<B>>())
        .ok_or_else(|| SandboxError::InvalidArgument(format!("not a sandbox of the {} backend", B::NAME)))
}

/// `backend`'s checkpoints, if it keeps sandboxes' memory across a pause where it runs now.
#[cfg_attr(not(all(feature = "server", feature = "container")), allow(dead_code, reason = "the server's memory pause, with the container backend"))]
pub(crate) fn keeps_memory(backend: &dyn SandboxBackend) -> Option<&dyn KeepsMemory> {
    let any = backend.as_any()?;
    #[cfg(feature = "container")]
    if let Some(container) = any.downcast_ref::<crate::ContainerBackend>() {
        return container.inner.backend.keeps_memory().then_some(container as &dyn KeepsMemory);
    }
    let _ = any;
    None
}

#[async_trait]
impl<B: Backend> SandboxBackend for Pooled<B> {
    fn name(&self) -> &'static str {
        B::NAME
    }

    async fn create(&self, options: &SandboxOptions) -> Result<Box<dyn SandboxSession>, SandboxError> {
        Ok(Box::new(self.create_sandbox(options).await?))
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}

impl<B: Backend> std::fmt::Debug for Pooled<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pooled")
            .field("backend", &B::NAME)
            .field("config", self.inner.backend.config())
            .field("pool_len", &self.pool_len())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pooled sandbox: its number, and whether its process has died.
    #[derive(Debug, PartialEq)]
    struct Fake(u32, bool);

    impl Waiting for Fake {
        fn has_exited(&mut self) -> bool {
            self.1
        }
    }

    fn state() -> PoolState<Fake> {
        PoolState {
            ready: VecDeque::new(),
            in_flight: InFlight::None,
        }
    }

    #[test]
    fn one_claimant_gets_the_sandbox_in_flight_and_the_pool_stays_empty() {
        let mut state = state();
        assert!(state.claim_in_flight().is_none(), "nothing in flight");
        let sender = state.start_in_flight();
        let mut receiver = state.claim_in_flight().expect("the start in flight");
        assert!(state.claim_in_flight().is_none(), "claimed once only");
        state.deliver(Fake(1, false), sender);
        assert_eq!(receiver.try_recv().unwrap(), Fake(1, false));
        assert!(state.ready.is_empty());
        assert!(matches!(state.in_flight, InFlight::None));
    }

    #[test]
    fn unclaimed_or_abandoned_sandboxes_go_to_the_pool() {
        let mut state = state();
        let sender = state.start_in_flight();
        state.deliver(Fake(1, false), sender);
        let sender = state.start_in_flight();
        drop(state.claim_in_flight().expect("claimed"));
        state.deliver(Fake(2, false), sender);
        assert_eq!(state.ready, [Fake(1, false), Fake(2, false)]);
    }

    #[test]
    fn a_failed_start_closes_the_claimants_channel() {
        let mut state = state();
        let sender = state.start_in_flight();
        let mut receiver = state.claim_in_flight().expect("claimed");
        drop(sender);
        assert!(matches!(receiver.try_recv(), Err(oneshot::error::TryRecvError::Closed)));
    }

    #[test]
    fn dead_sandboxes_are_not_handed_out() {
        let mut state = state();
        state.ready.extend([Fake(1, true), Fake(2, false)]);
        assert_eq!(state.take_ready(), Some(Fake(2, false)));
        assert_eq!(state.take_ready(), None);
    }
}
