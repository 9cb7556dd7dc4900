//! The OTLP receivers' way into the store. A request is read, checked and made ready ([`Prepared`]) on its
//! own thread and answered once it is queued; one writer thread commits the queue, several requests per
//! transaction. So an exporter's next request is read while the last one is written, on the other core (an
//! OpenTelemetry Collector, too, answers once a batch is queued). Reads wait for what was answered before
//! they began ([`Ingest::settled`]), so a page or a query after an answered export shows its spans.
//!
//! At most [`QUEUE`] answered requests wait for the writer, which commits them within milliseconds, and at
//! stop before the store is closed. A commit that fails (a full disk) is said on the console and tried
//! again; meanwhile the queue fills and the receivers answer "unavailable", so exporters keep their spans and
//! send them again.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::mpsc;

use super::store::{Prepared, Store};

/// Requests answered and not yet committed, at most.
const QUEUE: usize = 16;
/// Spans committed in one transaction, at most (more wait for the next one).
const SPANS_PER_COMMIT: usize = 16_384;
/// How long a request waits for room in the queue before it is answered "unavailable".
const ROOM_WAIT: Duration = Duration::from_secs(5);
/// How long a read waits for the writer before it reads what is there (the writer may be failing).
const SETTLE_WAIT: Duration = Duration::from_secs(2);
/// Tries of a failing commit at stop, before its spans are given up (and said so).
const TRIES_AT_STOP: u32 = 3;

enum Job {
    Request(Prepared),
    /// Commit what is queued, then end.
    Stop,
}

/// Requests queued and committed, counted, so a read can wait for what came before it.
#[derive(Default)]
struct Ledger {
    queued: AtomicU64,
    committed: Mutex<u64>,
    advanced: Condvar,
}

/// The queue in front of the store, and its writer thread.
pub(crate) struct Ingest {
    store: Arc<Store>,
    ledger: Arc<Ledger>,
    /// `None` once stopping.
    queue: Mutex<Option<mpsc::Sender<Job>>>,
    writer: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// Why a request was not queued.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Unavailable {
    /// The writer has not made room for [`ROOM_WAIT`].
    #[error("the store is behind (the last {QUEUE} requests are not yet written after {ROOM_WAIT:?}); send again later")]
    Behind,
    /// The UI is stopping.
    #[error("the UI is stopping")]
    Stopping,
}

impl Ingest {
    /// Start the writer thread in front of `store`.
    pub(crate) fn start(store: Arc<Store>) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel(QUEUE);
        let ledger = Arc::new(Ledger::default());
        let writer = {
            let (store, ledger) = (store.clone(), ledger.clone());
            std::thread::Builder::new()
                .name("waxell-ui-writer".into())
                .spawn(move || write(&store, rx, &ledger))?
        };
        Ok(Self {
            store,
            ledger,
            queue: Mutex::new(Some(tx)),
            writer: Mutex::new(Some(writer)),
        })
    }

    /// Queue a request's spans for the store: `Ok` once queued, when the request can be answered.
    pub(crate) async fn submit(&self, request: Prepared) -> Result<(), Unavailable> {
        let tx = self
            .queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .ok_or(Unavailable::Stopping)?;
        let permit = match tokio::time::timeout(ROOM_WAIT, tx.reserve()).await {
            Ok(Ok(permit)) => permit,
            Ok(Err(_)) => return Err(Unavailable::Stopping),
            Err(_) => return Err(Unavailable::Behind),
        };
        // Counted before it can be committed, so `committed` never passes `queued`.
        self.ledger.queued.fetch_add(1, Ordering::SeqCst);
        permit.send(Job::Request(request));
        Ok(())
    }

    /// The store, once every request queued before this call is committed (blocking until then, at most
    /// [`SETTLE_WAIT`]).
    pub(crate) fn settled(&self) -> &Arc<Store> {
        let queued = self.ledger.queued.load(Ordering::SeqCst);
        let committed = self
            .ledger
            .committed
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let _ = self
            .ledger
            .advanced
            .wait_timeout_while(committed, SETTLE_WAIT, |c| *c < queued);
        &self.store
    }

    /// Take no more requests, commit every queued one, and end the writer.
    pub(crate) fn stop(&self) {
        let Some(tx) = self.queue.lock().unwrap_or_else(PoisonError::into_inner).take() else {
            return;
        };
        // Not `blocking_send`: this may run on a runtime's thread (a server dropped in async code).
        let mut stop = Job::Stop;
        while let Err(mpsc::error::TrySendError::Full(job)) = tx.try_send(stop) {
            stop = job;
            std::thread::sleep(Duration::from_millis(1));
        }
        drop(tx);
        if let Some(writer) = self.writer.lock().unwrap_or_else(PoisonError::into_inner).take() {
            let _ = writer.join();
        }
    }
}

impl std::fmt::Debug for Ingest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let committed = *self
            .ledger
            .committed
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        f.debug_struct("Ingest")
            .field("queued", &self.ledger.queued.load(Ordering::SeqCst))
            .field("committed", &committed)
            .finish_non_exhaustive()
    }
}

impl Drop for Ingest {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The writer: commit what is queued, several requests at a time, until told to stop and the queue is
/// empty.
fn write(store: &Store, mut rx: mpsc::Receiver<Job>, ledger: &Ledger) {
    let mut stopping = false;
    loop {
        let first = if stopping {
            rx.try_recv().ok()
        } else {
            rx.blocking_recv()
        };
        let Some(first) = first else { return };
        let (mut batch, mut spans) = (Vec::new(), 0);
        let mut next = Some(first);
        while let Some(job) = next.take() {
            match job {
                Job::Request(request) => {
                    spans += request.spans();
                    batch.push(request);
                }
                Job::Stop => stopping = true,
            }
            if spans < SPANS_PER_COMMIT {
                next = rx.try_recv().ok();
            }
        }
        if batch.is_empty() {
            continue;
        }
        commit(store, &batch, spans, stopping);
        let mut committed = ledger.committed.lock().unwrap_or_else(PoisonError::into_inner);
        *committed += batch.len() as u64;
        ledger.advanced.notify_all();
    }
}

/// Commit `batch`, trying again while it fails (a full disk frees up); at stop, give up after a few tries.
fn commit(store: &Store, batch: &[Prepared], spans: usize, stopping: bool) {
    let mut wait = Duration::from_millis(100);
    for tries in 1.. {
        let Err(e) = store.commit(batch, None) else {
            return;
        };
        let console = crate::console::current();
        if stopping && tries >= TRIES_AT_STOP {
            console.message(format_args!(
                "ui: stopping: {spans} spans that were received could not be stored: {e}"
            ));
            return;
        }
        console.message(format_args!(
            "ui: storing {spans} received spans: {e}; trying again in {wait:?}"
        ));
        std::thread::sleep(wait);
        wait = (wait * 2).min(Duration::from_secs(5));
    }
}
