//! Fail-open export: telemetry must never be the reason an agent is slow or crashes.
//!
//! The pipeline `init()` builds is `SpanCap -> QueueGate -> BatchSpanProcessor -> FailOpenExporter -> exporter`:
//!
//! - [`QueueGate`] sits in front of the batch processor and bounds the spans waiting for export. Its `on_end` is
//!   one atomic add and a non-blocking channel send; a span that does not fit is dropped and counted, so the
//!   calling thread never waits and memory stays bounded whatever the collector does.
//! - [`FailOpenExporter`] runs each export on its own worker thread and waits at most the export timeout: the
//!   OTLP exporter retries and its blocking HTTP client sleeps inside `poll`, so racing futures could not bound
//!   it. A batch that fails or times out is dropped and counted.
//! - A circuit breaker in the exporter: after `failures` consecutive failed exports the collector is left alone
//!   for `cooldown`; batches offered meanwhile are dropped (and counted) at once; then one batch probes again.
//! - [`DropCounters`] tallies every dropped span by reason; the guard reports the total once at shutdown and
//!   exposes it as [`DroppedSpans`].

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, RwLock};
use std::task::{Context as TaskContext, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use opentelemetry::Context;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};
use opentelemetry_sdk::Resource;

/// Spans that never reached the collector, by reason. Returned by [`Guard::dropped_spans`](crate::Guard::dropped_spans).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DroppedSpans {
    /// The export queue was full (the collector could not keep up, or was failing).
    pub queue_full: u64,
    /// The export failed or took longer than the export timeout.
    pub export_failed: u64,
    /// The circuit breaker was open after repeated failures, so the collector was not called.
    pub circuit_open: u64,
    /// Still queued when shutdown gave up.
    pub unsent_at_shutdown: u64,
    /// Over the per-run span cap (`WAXELL_MAX_SPANS_PER_RUN`).
    pub over_span_cap: u64,
}

impl DroppedSpans {
    /// All dropped spans.
    pub fn total(&self) -> u64 {
        self.queue_full
            + self.export_failed
            + self.circuit_open
            + self.unsent_at_shutdown
            + self.over_span_cap
    }
}

impl std::fmt::Display for DroppedSpans {
    /// `dropped 12 spans (queue full: 2, export failed: 10)`, naming only the non-zero reasons.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let reasons: Vec<String> = [
            ("queue full", self.queue_full),
            ("export failed or timed out", self.export_failed),
            ("collector circuit open", self.circuit_open),
            ("unsent at shutdown", self.unsent_at_shutdown),
            ("over the per-run span cap", self.over_span_cap),
        ]
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(why, n)| format!("{why}: {n}"))
        .collect();
        write!(f, "dropped {} spans ({})", self.total(), reasons.join(", "))
    }
}

/// Shared tallies of the export pipeline, updated lock-free from any thread.
#[derive(Debug, Default)]
pub(crate) struct DropCounters {
    queue_full: AtomicU64,
    export_failed: AtomicU64,
    circuit_open: AtomicU64,
    over_span_cap: AtomicU64,
    /// Spans accepted by the gate and not yet handed to an export attempt.
    queued: AtomicUsize,
    /// Export attempts that reached the exporter (probes included); used by tests and diagnostics.
    attempts: AtomicU64,
    /// Spans of the batch being exported right now.
    exporting: AtomicUsize,
    /// Set when shutdown starts: from then on one failure is enough to give up on the collector.
    closing: AtomicBool,
    /// Set once shutdown has finished or given up: spans still queued then will never be sent.
    shut_down: AtomicBool,
}

impl DropCounters {
    pub(crate) fn add_over_span_cap(&self) {
        self.over_span_cap.fetch_add(1, Ordering::Relaxed);
    }

    /// Shutdown is starting: don't spend its time budget retrying a collector that just failed.
    pub(crate) fn begin_shutdown(&self) {
        self.closing.store(true, Ordering::Release);
    }

    pub(crate) fn mark_shut_down(&self) {
        self.shut_down.store(true, Ordering::Release);
    }

    /// The tallies now. After shutdown, spans still queued count as unsent.
    fn snapshot(&self) -> DroppedSpans {
        let shut_down = self.shut_down.load(Ordering::Acquire);
        DroppedSpans {
            queue_full: self.queue_full.load(Ordering::Relaxed),
            export_failed: self.export_failed.load(Ordering::Relaxed),
            circuit_open: self.circuit_open.load(Ordering::Relaxed),
            unsent_at_shutdown: if shut_down {
                (self.queued.load(Ordering::Relaxed) + self.exporting.load(Ordering::Relaxed)) as u64
            } else {
                0
            },
            over_span_cap: self.over_span_cap.load(Ordering::Relaxed),
        }
    }
}

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
/// export attempt takes it. Over `capacity`, spans are dropped here (never blocking) and counted, which also
/// keeps the batch processor's own channel from ever filling (its drops would go uncounted).
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
            self.counters.queue_full.fetch_add(1, Ordering::Relaxed);
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

/// One export for the worker thread, and where to send its result.
type Job = (Vec<SpanData>, SyncSender<OTelSdkResult>);

#[derive(Debug, Default)]
struct Breaker {
    consecutive_failures: u32,
    open_until: Option<Instant>,
}

/// Wraps an exporter so that no export outlasts the timeout, repeated failures open a circuit breaker, and
/// every span that does not arrive is counted.
#[derive(Debug)]
pub(crate) struct FailOpenExporter<E> {
    /// Shared with the worker thread; the write lock is only taken by `set_resource`, before any export.
    inner: Arc<RwLock<E>>,
    /// To the worker thread; holds at most one job.
    jobs: SyncSender<Job>,
    /// Set while the worker runs an export: a still-running export (one that outlived its timeout) makes the
    /// next batch fail at once instead of queueing behind it.
    busy: Arc<AtomicBool>,
    config: FailOpenConfig,
    breaker: Mutex<Breaker>,
    counters: Arc<DropCounters>,
}

impl<E: SpanExporter + 'static> FailOpenExporter<E> {
    pub(crate) fn new(
        inner: E,
        config: FailOpenConfig,
        counters: Arc<DropCounters>,
    ) -> std::io::Result<Self> {
        let inner = Arc::new(RwLock::new(inner));
        let (jobs, rx) = mpsc::sync_channel::<Job>(1);
        let busy = Arc::new(AtomicBool::new(false));
        let worker_busy = Arc::clone(&busy);
        let worker_inner = Arc::clone(&inner);
        std::thread::Builder::new()
            .name("waxell-export".into())
            .spawn(move || {
                // Ends when the exporter (the only sender) is dropped.
                while let Ok((batch, reply)) = rx.recv() {
                    let exporter = worker_inner.read().unwrap_or_else(|p| p.into_inner());
                    let result = block_on(exporter.export(batch));
                    drop(exporter);
                    // Idle again before replying, so the next batch never sees a stale "busy".
                    worker_busy.store(false, Ordering::Release);
                    let _ = reply.send(result);
                }
            })?;
        Ok(Self {
            inner,
            jobs,
            busy,
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

    fn record(&self, ok: bool) {
        let mut breaker = self.breaker.lock().unwrap_or_else(|p| p.into_inner());
        if ok {
            *breaker = Breaker::default();
            return;
        }
        breaker.consecutive_failures = breaker.consecutive_failures.saturating_add(1);
        // A failed probe (breaker was open) re-opens at once; otherwise after `breaker_failures` in a row.
        if breaker.open_until.is_some()
            || breaker.consecutive_failures >= self.config.breaker_failures
            || self.closing()
        {
            breaker.open_until = Some(Instant::now() + self.config.breaker_cooldown);
        }
    }

    /// Export through the breaker and the timeout, counting the `n` spans if they are dropped.
    fn export_counted(&self, batch: Vec<SpanData>, n: usize) -> OTelSdkResult {
        if !self.may_call_collector() {
            self.counters.circuit_open.fetch_add(n as u64, Ordering::Relaxed);
            return Err(OTelSdkError::InternalFailure(
                "waxell: collector circuit open after repeated failures; spans dropped".into(),
            ));
        }
        let result = self.export_bounded(batch);
        if result.is_err() {
            self.counters.export_failed.fetch_add(n as u64, Ordering::Relaxed);
        }
        self.record(result.is_ok());
        result
    }

    /// Hand the batch to the worker and wait at most the export timeout.
    fn export_bounded(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let still_running = || {
            Err(OTelSdkError::InternalFailure(
                "waxell: the previous export is still running past its timeout".into(),
            ))
        };
        if self.busy.swap(true, Ordering::AcqRel) {
            return still_running();
        }
        let (reply, result) = mpsc::sync_channel(1);
        match self.jobs.try_send((batch, reply)) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => return still_running(),
            Err(TrySendError::Disconnected(_)) => {
                return Err(OTelSdkError::InternalFailure(
                    "waxell: the export worker stopped".into(),
                ))
            }
        }
        self.counters.attempts.fetch_add(1, Ordering::Relaxed);
        match result.recv_timeout(self.config.export_timeout) {
            Ok(r) => r,
            Err(RecvTimeoutError::Timeout) => Err(OTelSdkError::Timeout(self.config.export_timeout)),
            Err(RecvTimeoutError::Disconnected) => Err(OTelSdkError::InternalFailure(
                "waxell: the export worker stopped".into(),
            )),
        }
    }
}

impl<E: SpanExporter + 'static> SpanExporter for FailOpenExporter<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        // Called on the batch processor's own thread, never on the agent's: blocking here is fine.
        let n = batch.len();
        self.counters.exporting.store(n, Ordering::Release);
        self.counters.queued.fetch_sub(n, Ordering::AcqRel);
        let result = self.export_counted(batch, n);
        self.counters.exporting.store(0, Ordering::Release);
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.read().unwrap_or_else(|p| p.into_inner()).force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .set_resource(resource);
    }
}

/// A handle on the export pipeline's drop tallies that stays readable after the guard is shut down and gone.
/// Get one from [`Guard::drop_counter`](crate::Guard::drop_counter).
#[derive(Debug, Clone, Default)]
pub struct DropCounter(pub(crate) Arc<DropCounters>);

impl DropCounter {
    /// Spans dropped so far, by reason.
    pub fn dropped(&self) -> DroppedSpans {
        self.0.snapshot()
    }

    /// Export attempts that reached the exporter (one per batch); batches dropped by the open circuit breaker
    /// or while a timed-out export was still running are not attempts.
    pub fn export_attempts(&self) -> u64 {
        self.0.attempts.load(Ordering::Relaxed)
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

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_sdk::trace::InMemorySpanExporter;

    /// An exporter that fails, hangs or succeeds on demand.
    #[derive(Debug, Clone)]
    struct Scripted {
        mode: Arc<Mutex<&'static str>>,
        calls: Arc<AtomicU64>,
    }

    impl SpanExporter for Scripted {
        async fn export(&self, _batch: Vec<SpanData>) -> OTelSdkResult {
            self.calls.fetch_add(1, Ordering::Relaxed);
            let mode = *self.mode.lock().unwrap();
            match mode {
                "ok" => Ok(()),
                "panic" => panic!("exporter bug"),
                "hang" => {
                    // Far past the test's bound, so only a cut at the timeout can pass it.
                    std::thread::sleep(Duration::from_secs(5));
                    Ok(())
                }
                _ => Err(OTelSdkError::InternalFailure("down".into())),
            }
        }
    }

    fn spans(n: usize) -> Vec<SpanData> {
        let exporter = InMemorySpanExporter::default();
        let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        use opentelemetry::trace::{Tracer, TracerProvider};
        let tracer = provider.tracer("t");
        for _ in 0..n {
            drop(tracer.start("s"));
        }
        exporter.get_finished_spans().unwrap()
    }

    fn wrapper(
        mode: &'static str,
        timeout_ms: u64,
    ) -> (FailOpenExporter<Scripted>, Scripted, Arc<DropCounters>) {
        let scripted = Scripted {
            mode: Arc::new(Mutex::new(mode)),
            calls: Arc::new(AtomicU64::new(0)),
        };
        let counters = Arc::new(DropCounters::default());
        let config = FailOpenConfig {
            export_timeout: Duration::from_millis(timeout_ms),
            breaker_failures: 2,
            breaker_cooldown: Duration::from_millis(300),
        };
        let exporter = FailOpenExporter::new(scripted.clone(), config, Arc::clone(&counters)).unwrap();
        (exporter, scripted, counters)
    }

    fn export(e: &FailOpenExporter<Scripted>, c: &DropCounters, n: usize) -> OTelSdkResult {
        c.queued.fetch_add(n, Ordering::AcqRel);
        block_on(e.export(spans(n)))
    }

    #[test]
    fn breaker_opens_after_consecutive_failures_then_probes_and_closes() {
        let (e, s, c) = wrapper("fail", 1000);
        assert!(export(&e, &c, 3).is_err());
        assert!(export(&e, &c, 3).is_err());
        assert_eq!(s.calls.load(Ordering::Relaxed), 2);
        // Open: dropped without calling the exporter.
        assert!(export(&e, &c, 4).is_err());
        assert_eq!(s.calls.load(Ordering::Relaxed), 2);
        std::thread::sleep(Duration::from_millis(350));
        *s.mode.lock().unwrap() = "ok";
        assert!(export(&e, &c, 1).is_ok(), "the probe goes through");
        assert!(export(&e, &c, 1).is_ok());
        assert_eq!(s.calls.load(Ordering::Relaxed), 4);
        c.mark_shut_down();
        let d = c.snapshot();
        assert_eq!((d.export_failed, d.circuit_open, d.unsent_at_shutdown), (6, 4, 0));
        assert_eq!(
            d.to_string(),
            "dropped 10 spans (export failed or timed out: 6, collector circuit open: 4)"
        );
    }

    #[test]
    fn during_shutdown_one_failure_is_enough_and_unsent_spans_are_counted() {
        let (e, s, c) = wrapper("fail", 1000);
        c.begin_shutdown();
        assert!(export(&e, &c, 3).is_err());
        assert!(export(&e, &c, 5).is_err());
        assert_eq!(s.calls.load(Ordering::Relaxed), 1, "not retried while closing");
        c.queued.fetch_add(7, Ordering::AcqRel);
        c.mark_shut_down();
        let d = c.snapshot();
        assert_eq!((d.export_failed, d.circuit_open, d.unsent_at_shutdown), (3, 5, 7));
    }

    #[test]
    fn a_panicking_exporter_fails_the_export_instead_of_unwinding_into_the_caller() {
        let (e, _s, c) = wrapper("panic", 1000);
        assert!(export(&e, &c, 2).is_err());
        assert!(export(&e, &c, 2).is_err(), "later batches fail at once");
        assert_eq!(c.snapshot().export_failed, 4);
    }

    #[test]
    fn a_hanging_export_is_cut_at_the_timeout_and_the_next_batch_does_not_queue_behind_it() {
        let (e, _s, c) = wrapper("hang", 50);
        let started = Instant::now();
        assert!(matches!(export(&e, &c, 2), Err(OTelSdkError::Timeout(_))));
        assert!(export(&e, &c, 2).is_err(), "worker still busy");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(c.snapshot().export_failed, 4);
    }

    #[test]
    fn the_gate_drops_and_counts_beyond_capacity() {
        let counters = Arc::new(DropCounters::default());
        let exporter = InMemorySpanExporter::default();
        let gate = QueueGate::new(
            opentelemetry_sdk::trace::SimpleSpanProcessor::new(exporter.clone()),
            3,
            Arc::clone(&counters),
        );
        for s in spans(5) {
            gate.on_end(s);
        }
        assert_eq!(exporter.get_finished_spans().unwrap().len(), 3);
        assert_eq!(counters.snapshot().queue_full, 2);
        counters.mark_shut_down();
        assert_eq!(
            counters.snapshot().unsent_at_shutdown,
            3,
            "never counted out by an export"
        );
    }
}
