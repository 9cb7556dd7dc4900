//! Fail-open export: telemetry must never be the reason an agent is slow or crashes, and no span is lost.
//!
//! The pipeline `init()` builds is `SpanCap -> QueueGate -> BatchSpanProcessor -> FailOpenExporter -> exporter`:
//!
//! - [`QueueGate`] sits in front of the batch processor and bounds the spans waiting for export. Its `on_end` is
//!   one atomic add and a non-blocking channel send; a span that does not fit goes to a bounded overflow list
//!   that the export thread saves to the trace file, so the calling thread never waits or writes.
//! - [`FailOpenExporter`] runs each export on its own worker thread and waits at most the export timeout (and
//!   never past the exit budget once shutdown starts): the blocking HTTP client sleeps inside `poll`, so
//!   racing futures could not bound it. A refused connection is final for the export and opens the circuit
//!   breaker at once; 429/502/503/504 are retried within the timeout, never during shutdown.
//! - A circuit breaker in the exporter: after `failures` consecutive failed exports the collector is left alone
//!   for `cooldown`; then one batch probes again.
//! - Nothing lost: a batch that was not exported (failed, timed out, breaker open, queue full, still in
//!   flight when the exit budget ran out) is written to the trace file ([`Spill`]) as OTLP JSON lines, which
//!   `waxell replay` sends later. Only spans that could not be written either (no file configured, disk full)
//!   are dropped; [`DropCounters`] tallies both, by reason.

mod counters;
mod delivery;
#[cfg(test)]
mod tests;

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, RwLock};
use std::task::{Context as TaskContext, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use opentelemetry::Context;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};
use opentelemetry_sdk::Resource;

use super::transport::{self, Outcome, TransportLog};

use self::counters::InFlight;
pub use self::counters::{DropCounter, DroppedSpans, SavedSpans};
pub(crate) use self::counters::{DropCounters, Reason, Spill};
#[cfg(feature = "otlp-http")]
pub(crate) use self::delivery::EncodedRequest;
pub(crate) use self::delivery::{Batch, Delivery, SpanExporterDelivery};

/// Settings of [`FailOpenExporter`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct FailOpenConfig {
    /// Longest wait for one export (all its retries included).
    pub(crate) export_timeout: Duration,
    /// Consecutive failed exports that open the breaker.
    pub(crate) breaker_failures: u32,
    /// How long the open breaker keeps the collector from being called.
    pub(crate) breaker_cooldown: Duration,
}

/// Bounds the spans waiting for export: counts each span in, and [`FailOpenExporter`] counts it out when an
/// export attempt takes it. Over `capacity`, spans go to the overflow list (never blocking), which also keeps
/// the batch processor's own channel from ever filling (its drops would go uncounted).
#[derive(Debug)]
pub(crate) struct QueueGate<P> {
    next: P,
    capacity: usize,
    counters: Arc<DropCounters>,
}

impl<P> QueueGate<P> {
    pub(crate) fn new(next: P, capacity: usize, counters: Arc<DropCounters>) -> Self {
        Self {
            next,
            capacity,
            counters,
        }
    }
}

impl<P: SpanProcessor> SpanProcessor for QueueGate<P> {
    fn on_start(&self, span: &mut Span, cx: &Context) {
        self.next.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        if self.counters.queued.fetch_add(1, Ordering::AcqRel) >= self.capacity {
            self.counters.queued.fetch_sub(1, Ordering::AcqRel);
            self.counters.overflow(span);
            return;
        }
        self.next.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.next.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.next.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.next.set_resource(resource);
    }
}

#[derive(Debug, Default)]
struct Breaker {
    consecutive_failures: u32,
    open_until: Option<Instant>,
}

/// What one hand-over to the worker came to.
enum Attempt {
    /// The export finished in time; with the batch's copy.
    Done(OTelSdkResult, Option<Batch>),
    /// The wait ended first (timeout, flush gave up, exit budget); the worker settles the batch.
    Abandoned,
    /// The worker is still busy with an earlier, abandoned export, or gone.
    NotStarted(Batch, &'static str),
}

/// Wraps a delivery so that no export outlasts the timeout, repeated failures open a circuit breaker, and
/// every span that does not arrive is saved or counted.
#[derive(Debug)]
pub(crate) struct FailOpenExporter<D> {
    /// Shared with the worker thread; the write lock is only taken by `set_resource`, before any export.
    inner: Arc<RwLock<D>>,
    /// To the worker thread; holds at most one job.
    jobs: SyncSender<Batch>,
    /// The HTTP client's record of the last request (OTLP/HTTP only).
    transport: Option<Arc<TransportLog>>,
    config: FailOpenConfig,
    breaker: Mutex<Breaker>,
    counters: Arc<DropCounters>,
}

/// First wait before retrying a 429/502/503/504 without `Retry-After`; doubles each time.
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_RETRIES: u32 = 3;

impl<D: Delivery> FailOpenExporter<D> {
    pub(crate) fn new(
        inner: D,
        config: FailOpenConfig,
        counters: Arc<DropCounters>,
        transport: Option<Arc<TransportLog>>,
    ) -> std::io::Result<Self> {
        let inner = Arc::new(RwLock::new(inner));
        let (jobs, rx) = mpsc::sync_channel::<Batch>(1);
        let worker_inner = Arc::clone(&inner);
        let worker_counters = Arc::clone(&counters);
        std::thread::Builder::new()
            .name("waxell-export".into())
            .spawn(move || {
                // Ends when the exporter (the only sender) is dropped.
                while let Ok(batch) = rx.recv() {
                    let n = batch.len() as u64;
                    let exporter = worker_inner.read().unwrap_or_else(|p| p.into_inner());
                    let result = std::panic::catch_unwind(AssertUnwindSafe(|| exporter.deliver(batch)))
                        .unwrap_or_else(|_| {
                            Err(OTelSdkError::InternalFailure("the span exporter panicked".into()))
                        });
                    drop(exporter);
                    let c = &worker_counters;
                    let mut f = c.in_flight.lock().unwrap_or_else(|p| p.into_inner());
                    f.busy = false;
                    // A delivered batch needs no copy: drop it here, after the waiter is told, rather than on
                    // the batch processor's thread, whose next batch waits for it.
                    let delivered = if result.is_ok() && !f.abandoned {
                        f.copy.take()
                    } else {
                        None
                    };
                    if f.abandoned {
                        // Nobody waits any more: settle the batch here (unless shutdown already saved it).
                        f.abandoned = false;
                        let copy = f.copy.take();
                        drop(f);
                        match (result, copy) {
                            (Ok(()), Some(_)) => {
                                c.exported.fetch_add(n, Ordering::Relaxed);
                            }
                            (Err(_), Some(copy)) => c.lose(Reason::ExportFailed, copy),
                            (_, None) => {}
                        }
                    } else {
                        f.result = Some(result);
                        drop(f);
                        c.in_flight_changed.notify_all();
                    }
                    drop(delivered);
                }
            })?;
        Ok(Self {
            inner,
            jobs,
            transport,
            config,
            breaker: Mutex::new(Breaker::default()),
            counters,
        })
    }

    fn closing(&self) -> bool {
        self.counters.closing.load(Ordering::Acquire)
    }

    /// Whether the breaker lets this batch through (closed, or open but cooled down: a probe). During
    /// shutdown, a collector that failed the last export is not tried again.
    fn may_call_collector(&self) -> bool {
        let breaker = self.breaker.lock().unwrap_or_else(|p| p.into_inner());
        if self.closing() && breaker.consecutive_failures > 0 {
            return false;
        }
        breaker.open_until.is_none_or(|until| Instant::now() >= until)
    }

    /// Record an export's outcome; `final_now` (a refused connection) opens the breaker at once.
    fn record(&self, ok: bool, final_now: bool) {
        let mut breaker = self.breaker.lock().unwrap_or_else(|p| p.into_inner());
        if ok {
            *breaker = Breaker::default();
            return;
        }
        breaker.consecutive_failures = breaker.consecutive_failures.saturating_add(1);
        // A failed probe (breaker was open) re-opens at once; otherwise after `breaker_failures` in a row.
        if final_now
            || breaker.open_until.is_some()
            || breaker.consecutive_failures >= self.config.breaker_failures
            || self.closing()
        {
            breaker.open_until = Some(Instant::now() + self.config.breaker_cooldown);
        }
    }

    /// Export through the breaker and the timeout; a batch that does not arrive is saved or counted.
    fn export_counted(&self, spans: Vec<SpanData>) -> OTelSdkResult {
        let c = &self.counters;
        if !self.may_call_collector() {
            c.lose(Reason::CircuitOpen, spans.into());
            return Err(OTelSdkError::InternalFailure(
                "waxell: collector circuit open after failed exports; spans saved or counted".into(),
            ));
        }
        let n = spans.len() as u64;
        let deadline = Instant::now() + self.config.export_timeout;
        let mut batch = self
            .inner
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .prepare(spans);
        let mut backoff = FIRST_BACKOFF;
        let mut retries = 0;
        loop {
            if let Some(t) = &self.transport {
                t.take();
            }
            match self.attempt(batch, deadline) {
                Attempt::Done(Ok(()), _) => {
                    c.exported.fetch_add(n, Ordering::Relaxed);
                    self.record(true, false);
                    return Ok(());
                }
                Attempt::Done(Err(e), copy) => {
                    let outcome = self
                        .transport
                        .as_ref()
                        .and_then(|t| t.take())
                        .unwrap_or_else(|| transport::classify_message(&e.to_string()));
                    if let (Some(wait), Some(copy)) =
                        (outcome.retry().map(|asked| asked.unwrap_or(backoff)), &copy)
                    {
                        let worth_it =
                            retries < MAX_RETRIES && !self.closing() && Instant::now() + wait < deadline;
                        if worth_it && !copy.is_empty() {
                            std::thread::sleep(wait);
                            retries += 1;
                            backoff *= 2;
                            batch = copy.clone();
                            continue;
                        }
                    }
                    c.set_error(outcome.describe());
                    self.record(false, matches!(outcome, Outcome::Refused(_)));
                    match copy {
                        Some(copy) => c.lose(Reason::ExportFailed, copy),
                        None => c.dropped.add(Reason::ExportFailed, n),
                    }
                    return Err(e);
                }
                Attempt::Abandoned => {
                    c.set_error(format!(
                        "no answer within {} (export timeout or exit budget)",
                        crate::export::human(self.config.export_timeout)
                    ));
                    self.record(false, false);
                    return Err(OTelSdkError::Timeout(self.config.export_timeout));
                }
                Attempt::NotStarted(batch, why) => {
                    self.record(false, false);
                    c.lose(Reason::ExportFailed, batch);
                    return Err(OTelSdkError::InternalFailure(format!("waxell: {why}")));
                }
            }
        }
    }

    /// Hand the batch to the worker and wait for it until `deadline`, the exit budget's end, or a flush
    /// giving up, whichever comes first.
    fn attempt(&self, batch: Batch, deadline: Instant) -> Attempt {
        let c = &self.counters;
        let epoch = c.abandon_epoch.load(Ordering::Acquire);
        {
            let mut f = c.in_flight.lock().unwrap_or_else(|p| p.into_inner());
            if f.busy {
                return Attempt::NotStarted(batch, "the previous export is still running past its timeout");
            }
            *f = InFlight {
                busy: true,
                copy: Some(batch.clone()),
                result: None,
                abandoned: false,
            };
        }
        if let Err(e) = self.jobs.try_send(batch) {
            *c.in_flight.lock().unwrap_or_else(|p| p.into_inner()) = InFlight::default();
            let batch = match e {
                TrySendError::Full(b) | TrySendError::Disconnected(b) => b,
            };
            return Attempt::NotStarted(batch, "the export worker stopped");
        }
        c.attempts.fetch_add(1, Ordering::Relaxed);
        let mut f = c.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(result) = f.result.take() {
                return Attempt::Done(result, f.copy.take());
            }
            let exit = *c.give_up_at.lock().unwrap_or_else(|p| p.into_inner());
            let limit = exit.map_or(deadline, |e| e.min(deadline));
            let now = Instant::now();
            if now >= limit || c.abandon_epoch.load(Ordering::Acquire) != epoch {
                f.abandoned = true;
                if exit.is_some_and(|e| now >= e) {
                    c.gave_up.store(true, Ordering::Release);
                }
                return Attempt::Abandoned;
            }
            // Short slices: the exit budget may start (and a flush may give up) while this waits.
            let slice = (limit - now).min(Duration::from_millis(25));
            f = c
                .in_flight_changed
                .wait_timeout(f, slice)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

impl<D: Delivery> SpanExporter for FailOpenExporter<D> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        // Called on the batch processor's own thread, never on the agent's: blocking here is fine.
        let n = batch.len();
        self.counters.exporting.store(n, Ordering::Release);
        self.counters.queued.fetch_sub(n, Ordering::AcqRel);
        self.counters.drain_overflow();
        let result = self.export_counted(batch);
        self.counters.exporting.store(0, Ordering::Release);
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.counters.drain_overflow();
        self.inner
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.read().unwrap_or_else(|p| p.into_inner()).force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        if let Some(spill) = &self.counters.spill {
            *spill.resource.write().unwrap_or_else(|p| p.into_inner()) = resource.into();
        }
        self.inner
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .set_resource(resource);
    }
}

/// Poll a future to completion on this thread (the exporters' futures need no particular runtime: the batch
/// processor drives them the same way).
fn block_on<F: Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = TaskContext::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        match future.as_mut().poll(&mut cx) {
            Poll::Ready(out) => return out,
            Poll::Pending => std::thread::park(),
        }
    }
}
