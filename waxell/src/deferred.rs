//! Recording work the caller does not wait for. An integration that sits in the request path (the
//! async-openai layer) hands the parsing, pricing, scrubbing and span attributes of a finished call to one
//! background thread, so the caller gets its response as soon as it arrived; the span still ends at the
//! time the response arrived (the job is given that time).
//!
//! Nothing is lost and nothing comes late where it is read: every flush and shutdown of the SDK, a test
//! capture's read and the end of a local root span first [`drain`] what is queued. A full queue, or a
//! thread that cannot be started, runs the job on the caller's thread instead (slower, never dropped).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

type Job = Box<dyn FnOnce() + Send>;

/// Jobs queued at most; past this the caller runs its own job (back-pressure instead of unbounded memory).
const QUEUE: usize = 4096;

/// How long [`drain`] waits by default: jobs take tens of microseconds, so this only bounds a stuck one.
pub(crate) const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

struct Worker {
    sender: SyncSender<Job>,
    thread: std::thread::ThreadId,
    /// Jobs queued or running.
    pending: AtomicUsize,
    idle_lock: Mutex<()>,
    idle: Condvar,
}

impl Worker {
    fn start() -> Option<Self> {
        let (sender, receiver) = sync_channel::<Job>(QUEUE);
        let thread = std::thread::Builder::new()
            .name("waxell-recorder".into())
            .spawn(move || {
                for job in receiver {
                    // A panicking job must not take the recorder (and every later recording) with it.
                    let _ = catch_unwind(AssertUnwindSafe(job));
                    if let Some(worker) = WORKER.get().and_then(Option::as_ref) {
                        worker.done();
                    }
                }
            })
            .ok()?;
        Some(Self {
            sender,
            thread: thread.thread().id(),
            pending: AtomicUsize::new(0),
            idle_lock: Mutex::new(()),
            idle: Condvar::new(),
        })
    }

    fn done(&self) {
        if self.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
            // Taking the lock orders this wake-up after a waiter's check (no lost wake-up).
            let _guard = self.idle_lock.lock().unwrap_or_else(|p| p.into_inner());
            self.idle.notify_all();
        }
    }
}

static WORKER: OnceLock<Option<Worker>> = OnceLock::new();

/// Run `job` on the recording thread, or here if it cannot take it.
pub(crate) fn defer(job: impl FnOnce() + Send + 'static) {
    let Some(worker) = WORKER.get_or_init(Worker::start).as_ref() else {
        return job();
    };
    worker.pending.fetch_add(1, Ordering::AcqRel);
    match worker.sender.try_send(Box::new(job)) {
        Ok(()) => {}
        Err(TrySendError::Full(job) | TrySendError::Disconnected(job)) => {
            worker.done();
            job();
        }
    }
}

/// Wait until every job queued so far has run, at most `timeout`; whether the queue is empty.
pub(crate) fn drain(timeout: Duration) -> bool {
    let Some(worker) = WORKER.get().and_then(Option::as_ref) else {
        return true;
    };
    if worker.pending.load(Ordering::Acquire) == 0 {
        return true;
    }
    // A job that flushes would wait for itself.
    if std::thread::current().id() == worker.thread {
        return false;
    }
    let deadline = Instant::now() + timeout;
    let mut guard = worker.idle_lock.lock().unwrap_or_else(|p| p.into_inner());
    while worker.pending.load(Ordering::Acquire) != 0 {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        guard = worker
            .idle
            .wait_timeout(guard, left)
            .unwrap_or_else(|p| p.into_inner())
            .0;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn drain_waits_for_every_queued_job() {
        let ran = Arc::new(AtomicUsize::new(0));
        for _ in 0..100 {
            let ran = Arc::clone(&ran);
            defer(move || {
                std::thread::sleep(Duration::from_micros(100));
                ran.fetch_add(1, Ordering::SeqCst);
            });
        }
        assert!(drain(Duration::from_secs(10)));
        assert_eq!(ran.load(Ordering::SeqCst), 100);
    }

    #[test]
    fn a_panicking_job_does_not_stop_later_ones() {
        defer(|| panic!("a job failed"));
        let ran = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&ran);
        defer(move || {
            counter.fetch_add(1, Ordering::SeqCst);
        });
        assert!(drain(Duration::from_secs(10)));
        assert_eq!(ran.load(Ordering::SeqCst), 1);
    }
}
