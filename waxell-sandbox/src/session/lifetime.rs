//! A sandbox's end: killed (or dropped), or its lifetime deadline passed. The deadline moves with
//! `set_timeout`; [`watch`] shuts the sandbox down when it passes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::Inner;
use crate::backend::Backend;

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

/// Shut the sandbox down when its deadline passes. Holds only a weak reference while waiting, so
/// dropping the sandbox cleans up at once.
pub(super) fn watch<B: Backend>(weak: Weak<Inner<B>>) {
    tokio::spawn(async move {
        loop {
            let (deadline, changed) = {
                let Some(inner) = weak.upgrade() else { return };
                let lifetime = &inner.lifetime;
                if lifetime.has_ended() {
                    return;
                }
                let deadline = lifetime.deadline();
                if Instant::now() >= deadline {
                    tracing::info!(sandbox = %B::sandbox_id(&inner.shell), "sandbox lifetime expired, shutting it down");
                    inner.shutdown(false).await;
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
