//! A backend with its warm pool ([`Pooled`]): creates sandboxes, handing out a ready one when the
//! pool has it, and refills the pool in the background.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::Notify;
use waxell::sandbox::{SandboxBackend, SandboxError, SandboxOptions, SandboxSession};

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
    backend: Arc<B>,
    pool: Mutex<VecDeque<Prepared<B::Shell>>>,
    /// Wakes the refill task; also notified when the backend is dropped so the task exits.
    refill: Arc<Notify>,
    refill_started: AtomicBool,
    /// The refill task's last failure, reported by `warm_up`.
    refill_error: Mutex<Option<String>>,
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
                pool: Mutex::new(VecDeque::new()),
                refill: Arc::new(Notify::new()),
                refill_started: AtomicBool::new(false),
                refill_error: Mutex::new(None),
            }),
        };
        if tokio::runtime::Handle::try_current().is_ok() {
            pooled.start_refill();
        }
        pooled
    }

    /// The backend.
    pub(crate) fn backend(&self) -> &B {
        &self.inner.backend
    }

    /// Ready sandboxes waiting in the pool.
    pub fn pool_len(&self) -> usize {
        self.inner.pool.lock().map(|p| p.len()).unwrap_or(0)
    }

    /// Fill the warm pool to `pool_size` and wait until it is full (needs a tokio runtime).
    pub async fn warm_up(&self) -> Result<(), SandboxError> {
        let target = self.inner.backend.config().pool_size;
        self.start_refill();
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

    fn start_refill(&self) {
        if self.inner.backend.config().pool_size == 0 || self.inner.refill_started.swap(true, Ordering::SeqCst) {
            return;
        }
        let weak = Arc::downgrade(&self.inner);
        let notify = self.inner.refill.clone();
        tokio::spawn(async move {
            loop {
                let notified = notify.notified();
                let Some(inner) = weak.upgrade() else { return };
                let target = inner.backend.config().pool_size;
                let len = inner.pool.lock().map(|p| p.len()).unwrap_or(target);
                if len < target {
                    match inner.backend.prepare().await {
                        Ok(prepared) => {
                            if let Ok(mut pool) = inner.pool.lock() {
                                pool.push_back(prepared);
                            }
                        }
                        Err(e) => {
                            tracing::warn!(backend = B::NAME, "warm pool refill failed: {e}");
                            if let Ok(mut slot) = inner.refill_error.lock() {
                                *slot = Some(e.to_string());
                            }
                            drop(inner);
                            tokio::time::sleep(Duration::from_secs(1)).await;
                        }
                    }
                    continue;
                }
                drop(inner);
                notified.await;
            }
        });
    }

    /// Create a sandbox (the concrete type; [`SandboxBackend::create`] boxes it).
    pub async fn create_sandbox(&self, options: &SandboxOptions) -> Result<Session<B>, SandboxError> {
        // Idempotent; starts the refill if the backend was made outside a runtime.
        self.start_refill();
        let pooled = loop {
            let Some(mut prepared) = self.inner.pool.lock().ok().and_then(|mut p| p.pop_front()) else {
                break None;
            };
            self.inner.refill.notify_one();
            // A kernel that died while waiting (killed from outside) is discarded.
            if !prepared.kernel.has_exited() {
                break Some(prepared);
            }
        };
        let prepared = match pooled {
            Some(prepared) => prepared,
            None => self.inner.backend.prepare().await?,
        };
        Session::start(Arc::clone(&self.inner.backend), prepared, options).await
    }
}

impl<B: Backend> Pooled<B> {
    /// A new sandbox from a checkpoint (not supported by any backend yet).
    #[cfg_attr(not(test), expect(dead_code, reason = "the snapshot issue adds the callers"))]
    pub(crate) async fn restore(&self, checkpoint: &Checkpoint) -> Result<Session<B>, SandboxError> {
        let prepared = self.inner.backend.restore(checkpoint).await?;
        Session::start(Arc::clone(&self.inner.backend), prepared, &SandboxOptions::default()).await
    }
}

#[async_trait]
impl<B: Backend> SandboxBackend for Pooled<B> {
    fn name(&self) -> &'static str {
        B::NAME
    }

    async fn create(&self, options: &SandboxOptions) -> Result<Box<dyn SandboxSession>, SandboxError> {
        Ok(Box::new(self.create_sandbox(options).await?))
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
