//! A sandbox's end: killed (or dropped), or its lifetime deadline passed. The deadline moves with
//! `set_timeout`; the session's watchdog shuts the sandbox down when it passes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

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

    /// The current deadline, and what wakes a waiter when it moves or the sandbox ends.
    pub(crate) fn deadline(&self) -> (Instant, Arc<Notify>) {
        (
            *self.deadline.lock().unwrap_or_else(|e| e.into_inner()),
            Arc::clone(&self.changed),
        )
    }
}
