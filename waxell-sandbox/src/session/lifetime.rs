//! A sandbox's end: killed (or dropped), or its lifetime deadline passed. The deadline moves with
//! `set_timeout`; the session's watchdog shuts the sandbox down when it passes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{watch, Notify};
use tokio::time::Instant;

pub(crate) struct Lifetime {
    ended: AtomicBool,
    /// Turns true at the end: what a run waits on beside its kernel (some engines keep a dead
    /// container's exec stream open for half a minute).
    ended_signal: watch::Sender<bool>,
    deadline: Mutex<Instant>,
    /// Shared with the watchdog, which waits on it without holding the sandbox.
    changed: Arc<Notify>,
}

impl Lifetime {
    pub(crate) fn new(lifetime: Duration) -> Self {
        Self {
            ended: AtomicBool::new(false),
            ended_signal: watch::Sender::new(false),
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
        self.ended_signal.send_replace(true);
        self.changed.notify_one();
    }

    /// Resolves once the sandbox has ended (at once if it already has).
    pub(crate) fn ended(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut signal = self.ended_signal.subscribe();
        async move {
            // An error means the sender is gone with the sandbox: ended too.
            let _ = signal.wait_for(|ended| *ended).await;
        }
    }

    /// A new deadline, `timeout` from now.
    pub(crate) fn extend(&self, timeout: Duration) {
        *self.deadline.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now() + timeout;
        self.changed.notify_one();
    }

    /// The current deadline, and what wakes a waiter when it moves or the sandbox ends.
    pub(crate) fn deadline(&self) -> (Instant, Arc<Notify>) {
        (
            *self.deadline.lock().unwrap_or_else(|e| e.into_inner()),
            Arc::clone(&self.changed),
        )
    }
}
