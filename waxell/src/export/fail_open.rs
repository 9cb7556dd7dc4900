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

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::task::{Context as TaskContext, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use opentelemetry::Context;
use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};
use opentelemetry_sdk::Resource;

use super::jsonl::JsonLinesFile;
use super::transport::{self, Outcome, TransportLog};

/// Spans that never reached the collector and could not be saved either, by reason. Returned by
/// [`Guard::dropped_spans`](crate::Guard::dropped_spans).
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
        write!(
            f,
            "dropped {} spans ({})",
            self.total(),
            reasons(&[
                ("queue full", self.queue_full),
                ("export failed or timed out", self.export_failed),
                ("collector circuit open", self.circuit_open),
                ("unsent at shutdown", self.unsent_at_shutdown),
                ("over the per-run span cap", self.over_span_cap),
            ])
        )
    }
}

/// Spans that did not reach the collector and were saved to the trace file instead, by reason. Returned by
/// [`DropCounter::saved`]; send them later with `waxell replay FILE`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SavedSpans {
    /// The export queue was full.
    pub queue_full: u64,
    /// The export failed or took longer than the export timeout.
    pub export_failed: u64,
    /// The circuit breaker was open, so the collector was not called.
    pub circuit_open: u64,
    /// Still being exported or queued when the exit budget ran out.
    pub unsent_at_shutdown: u64,
}

impl SavedSpans {
    /// All saved spans.
    pub fn total(&self) -> u64 {
        self.queue_full + self.export_failed + self.circuit_open + self.unsent_at_shutdown
    }
}

impl std::fmt::Display for SavedSpans {
    /// `saved 12 spans (export failed or timed out: 2, collector circuit open: 10)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "saved {} spans ({})",
            self.total(),
            reasons(&[
                ("queue full", self.queue_full),
                ("export failed or timed out", self.export_failed),
                ("collector circuit open", self.circuit_open),
                ("unsent when the exit budget ran out", self.unsent_at_shutdown),
            ])
        )
    }
}

fn reasons(list: &[(&str, u64)]) -> String {
    list.iter()
        .filter(|(_, n)| *n > 0)
        .map(|(why, n)| format!("{why}: {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Why a batch did not reach the collector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reason {
    QueueFull,
    ExportFailed,
    CircuitOpen,
    Unsent,
}

/// One counter per [`Reason`].
#[derive(Debug, Default)]
struct Tally([AtomicU64; 4]);

impl Tally {
    fn add(&self, reason: Reason, n: u64) {
        self.0[reason as usize].fetch_add(n, Ordering::Relaxed);
    }
    fn get(&self, reason: Reason) -> u64 {
        self.0[reason as usize].load(Ordering::Relaxed)
    }
}

/// Where spans that could not be exported are saved: the trace file, as OTLP JSON lines.
#[derive(Debug)]
pub(crate) struct Spill {
    file: Arc<JsonLinesFile>,
    resource: RwLock<ResourceAttributesWithSchema>,
    /// Spans the queue gate turned away, waiting for the export thread to write them (the agent's thread
    /// never writes); bounded, beyond it spans are dropped and counted.
    overflow: Mutex<Vec<SpanData>>,
    overflow_capacity: usize,
}

impl Spill {
    pub(crate) fn new(file: Arc<JsonLinesFile>, overflow_capacity: usize) -> Self {
        Self {
            file,
            resource: RwLock::new((&Resource::builder_empty().build()).into()),
            overflow: Mutex::new(Vec::new()),
            overflow_capacity,
        }
    }

    fn write(&self, spans: Vec<SpanData>) -> std::io::Result<()> {
        let resource = self.resource.read().unwrap_or_else(|p| p.into_inner());
        self.file.write(spans, &resource)
    }
}

/// The batch the worker is exporting, shared between the worker, the waiting batch processor thread and the
/// guard (which saves it if the exit budget runs out first).
#[derive(Debug, Default)]
struct InFlight {
    busy: bool,
    /// A copy of the batch, to retry or save it; whoever takes it decides its fate, so it is saved once.
    copy: Option<Vec<SpanData>>,
    result: Option<OTelSdkResult>,
    /// The waiter stopped waiting: the worker then settles the batch itself.
    abandoned: bool,
}

/// Shared tallies and state of the export pipeline, updated from any thread.
#[derive(Debug, Default)]
pub(crate) struct DropCounters {
    dropped: Tally,
    saved: Tally,
    over_span_cap: AtomicU64,
    /// Spans the collector accepted.
    exported: AtomicU64,
    /// Spans accepted by the gate and not yet handed to an export attempt.
    queued: AtomicUsize,
    /// Export attempts that reached the exporter (probes and retries included).
    attempts: AtomicU64,
    /// Spans of the batch being exported right now.
    exporting: AtomicUsize,
    /// Set when shutdown starts: from then on one failure is enough to give up on the collector.
    closing: AtomicBool,
    /// Set once shutdown has finished or given up.
    shut_down: AtomicBool,
    /// Set when a flush or the shutdown stopped waiting for an export that was still running.
    gave_up: AtomicBool,
    /// Bumped to make the waiting batch processor stop waiting for the export in flight.
    abandon_epoch: AtomicU64,
    /// The exit budget's end, once shutdown has started.
    give_up_at: Mutex<Option<Instant>>,
    /// Why the last export failed.
    last_error: Mutex<Option<String>>,
    in_flight: Mutex<InFlight>,
    in_flight_changed: Condvar,
    spill: Option<Spill>,
}

impl DropCounters {
    pub(crate) fn new(spill: Option<Spill>) -> Self {
        Self {
            spill,
            ..Self::default()
        }
    }

    pub(crate) fn add_over_span_cap(&self) {
        self.over_span_cap.fetch_add(1, Ordering::Relaxed);
    }

    fn set_error(&self, why: String) {
        *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(why);
    }

    /// Save `spans` to the trace file, or count them as dropped when there is none or writing fails.
    fn lose(&self, reason: Reason, spans: Vec<SpanData>) {
        let n = spans.len() as u64;
        if n == 0 {
            return;
        }
        if let Some(spill) = &self.spill {
            match spill.write(spans) {
                Ok(()) => return self.saved.add(reason, n),
                Err(e) => self.set_error(format!(
                    "could not save spans to {}: {e}",
                    spill.file.path().display()
                )),
            }
        }
        self.dropped.add(reason, n);
    }

    /// A span the queue had no room for: kept for the export thread to save, or dropped and counted.
    fn overflow(&self, span: SpanData) {
        if let Some(spill) = &self.spill {
            let mut list = spill.overflow.lock().unwrap_or_else(|p| p.into_inner());
            if list.len() < spill.overflow_capacity {
                list.push(span);
                return;
            }
        }
        self.dropped.add(Reason::QueueFull, 1);
    }

    /// Write the spans the queue turned away (on the export thread, or at shutdown).
    fn drain_overflow(&self) {
        if let Some(spill) = &self.spill {
            let spans = std::mem::take(&mut *spill.overflow.lock().unwrap_or_else(|p| p.into_inner()));
            self.lose(Reason::QueueFull, spans);
        }
    }

    /// Shutdown is starting: don't retry a collector that just failed, and stop waiting for the collector
    /// once `budget` has passed.
    pub(crate) fn begin_shutdown(&self, budget: Duration) {
        *self.give_up_at.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now() + budget);
        self.closing.store(true, Ordering::Release);
    }

    /// A flush ran out of time: stop waiting for the export in flight (the worker still settles it).
    pub(crate) fn abandon_in_flight(&self) {
        self.abandon_epoch.fetch_add(1, Ordering::AcqRel);
        self.in_flight_changed.notify_all();
        self.gave_up.store(true, Ordering::Release);
    }

    /// Whether an export is running right now.
    pub(crate) fn exporting_now(&self) -> bool {
        self.in_flight.lock().unwrap_or_else(|p| p.into_inner()).busy
    }

    /// Whether an export to the collector has failed.
    pub(crate) fn collector_failed(&self) -> bool {
        self.last_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }

    /// Shutdown has finished or given up: save the batch still in flight and the overflow, and count what
    /// is still queued (the batch processor stopped before sending it) as unsent.
    pub(crate) fn finish_shutdown(&self) {
        let stranded = {
            let mut f = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
            if f.busy {
                f.copy.take()
            } else {
                None
            }
        };
        let exporting = self.exporting.swap(0, Ordering::AcqRel);
        if let Some(batch) = stranded {
            self.gave_up.store(true, Ordering::Release);
            self.lose(Reason::Unsent, batch);
        } else if exporting > 0 {
            self.dropped.add(Reason::Unsent, exporting as u64);
        }
        self.drain_overflow();
        let queued = self.queued.swap(0, Ordering::AcqRel);
        self.dropped.add(Reason::Unsent, queued as u64);
        self.shut_down.store(true, Ordering::Release);
    }

    fn snapshot(&self) -> DroppedSpans {
        DroppedSpans {
            queue_full: self.dropped.get(Reason::QueueFull),
            export_failed: self.dropped.get(Reason::ExportFailed),
            circuit_open: self.dropped.get(Reason::CircuitOpen),
            unsent_at_shutdown: self.dropped.get(Reason::Unsent),
            over_span_cap: self.over_span_cap.load(Ordering::Relaxed),
        }
    }

    fn saved_snapshot(&self) -> SavedSpans {
        SavedSpans {
            queue_full: self.saved.get(Reason::QueueFull),
            export_failed: self.saved.get(Reason::ExportFailed),
            circuit_open: self.saved.get(Reason::CircuitOpen),
            unsent_at_shutdown: self.saved.get(Reason::Unsent),
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
    Done(OTelSdkResult, Option<Vec<SpanData>>),
    /// The wait ended first (timeout, flush gave up, exit budget); the worker settles the batch.
    Abandoned,
    /// The worker is still busy with an earlier, abandoned export, or gone.
    NotStarted(Vec<SpanData>, &'static str),
}

/// Wraps an exporter so that no export outlasts the timeout, repeated failures open a circuit breaker, and
/// every span that does not arrive is saved or counted.
#[derive(Debug)]
pub(crate) struct FailOpenExporter<E> {
    /// Shared with the worker thread; the write lock is only taken by `set_resource`, before any export.
    inner: Arc<RwLock<E>>,
    /// To the worker thread; holds at most one job.
    jobs: SyncSender<Vec<SpanData>>,
    /// The HTTP client's record of the last request (OTLP/HTTP only).
    transport: Option<Arc<TransportLog>>,
    config: FailOpenConfig,
    breaker: Mutex<Breaker>,
    counters: Arc<DropCounters>,
}

/// First wait before retrying a 429/502/503/504 without `Retry-After`; doubles each time.
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_RETRIES: u32 = 3;

impl<E: SpanExporter + 'static> FailOpenExporter<E> {
    pub(crate) fn new(
        inner: E,
        config: FailOpenConfig,
        counters: Arc<DropCounters>,
        transport: Option<Arc<TransportLog>>,
    ) -> std::io::Result<Self> {
        let inner = Arc::new(RwLock::new(inner));
        let (jobs, rx) = mpsc::sync_channel::<Vec<SpanData>>(1);
        let worker_inner = Arc::clone(&inner);
        let worker_counters = Arc::clone(&counters);
        std::thread::Builder::new()
            .name("waxell-export".into())
            .spawn(move || {
                // Ends when the exporter (the only sender) is dropped.
                while let Ok(batch) = rx.recv() {
                    let n = batch.len() as u64;
                    let exporter = worker_inner.read().unwrap_or_else(|p| p.into_inner());
                    let result =
                        std::panic::catch_unwind(AssertUnwindSafe(|| block_on(exporter.export(batch))))
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
    fn export_counted(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let c = &self.counters;
        if !self.may_call_collector() {
            c.lose(Reason::CircuitOpen, batch);
            return Err(OTelSdkError::InternalFailure(
                "waxell: collector circuit open after failed exports; spans saved or counted".into(),
            ));
        }
        let n = batch.len() as u64;
        let deadline = Instant::now() + self.config.export_timeout;
        let mut batch = batch;
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
                    if let (Some(wait), Some(copy)) = (outcome.retry_after(backoff), &copy) {
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
    fn attempt(&self, batch: Vec<SpanData>, deadline: Instant) -> Attempt {
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

impl<E: SpanExporter + 'static> SpanExporter for FailOpenExporter<E> {
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

/// A handle on the export pipeline's tallies that stays readable after the guard is shut down and gone.
/// Get one from [`Guard::drop_counter`](crate::Guard::drop_counter).
#[derive(Debug, Clone, Default)]
pub struct DropCounter(pub(crate) Arc<DropCounters>);

impl DropCounter {
    /// Spans lost for good so far (not exported and not saved), by reason.
    pub fn dropped(&self) -> DroppedSpans {
        self.0.snapshot()
    }

    /// Spans that were not exported and were saved to the trace file instead ([`saved_to`](Self::saved_to)).
    pub fn saved(&self) -> SavedSpans {
        self.0.saved_snapshot()
    }

    /// The file unsent spans are saved to, if saving is on (`WAXELL_TRACE_FILE`, not `off`).
    pub fn saved_to(&self) -> Option<&Path> {
        self.0.spill.as_ref().map(|s| s.file.path())
    }

    /// Spans the collector accepted.
    pub fn exported(&self) -> u64 {
        self.0.exported.load(Ordering::Relaxed)
    }

    /// Why the last failed export failed (`connection refused ...`, `the collector answered HTTP 500`, ...).
    pub fn last_error(&self) -> Option<String> {
        self.0
            .last_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Whether a flush or the shutdown stopped waiting for an export that was still running.
    pub fn gave_up_waiting(&self) -> bool {
        self.0.gave_up.load(Ordering::Acquire)
    }

    /// Export attempts that reached the exporter (one per batch, plus retries); batches kept from the
    /// collector by the open circuit breaker or while a timed-out export was still running are not attempts.
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
        /// Where a real HTTP client would record what happened.
        log: Option<Arc<TransportLog>>,
    }

    impl SpanExporter for Scripted {
        async fn export(&self, _batch: Vec<SpanData>) -> OTelSdkResult {
            self.calls.fetch_add(1, Ordering::Relaxed);
            let mode = *self.mode.lock().unwrap();
            match mode {
                "ok" => Ok(()),
                "panic" => panic!("exporter bug"),
                "refused" | "503" => {
                    let outcome = if mode == "refused" {
                        Outcome::Refused("connection refused (is the collector running?)".into())
                    } else {
                        Outcome::Status {
                            code: 503,
                            retry_after: Some(Duration::from_millis(10)),
                        }
                    };
                    self.log.as_ref().unwrap().set(outcome);
                    Err(OTelSdkError::InternalFailure("HTTP export failed".into()))
                }
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
            log: None,
        };
        let counters = Arc::new(DropCounters::default());
        let config = FailOpenConfig {
            export_timeout: Duration::from_millis(timeout_ms),
            breaker_failures: 2,
            breaker_cooldown: Duration::from_millis(300),
        };
        let exporter = FailOpenExporter::new(scripted.clone(), config, Arc::clone(&counters), None).unwrap();
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
        c.finish_shutdown();
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
        c.begin_shutdown(Duration::from_secs(5));
        assert!(export(&e, &c, 3).is_err());
        assert!(export(&e, &c, 5).is_err());
        assert_eq!(s.calls.load(Ordering::Relaxed), 1, "not retried while closing");
        c.queued.fetch_add(7, Ordering::AcqRel);
        c.finish_shutdown();
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
        assert_eq!(
            c.snapshot().export_failed,
            2,
            "the batch that found the worker busy"
        );
        c.finish_shutdown();
        assert_eq!(
            c.snapshot().unsent_at_shutdown,
            2,
            "the batch still in flight at the end"
        );
    }

    #[test]
    fn a_refused_connection_opens_the_breaker_at_once() {
        let log = Arc::new(TransportLog::default());
        let scripted = Scripted {
            mode: Arc::new(Mutex::new("refused")),
            calls: Arc::new(AtomicU64::new(0)),
            log: Some(Arc::clone(&log)),
        };
        let counters = Arc::new(DropCounters::default());
        let config = FailOpenConfig {
            export_timeout: Duration::from_secs(1),
            breaker_failures: 3,
            breaker_cooldown: Duration::from_secs(30),
        };
        let e = FailOpenExporter::new(scripted.clone(), config, Arc::clone(&counters), Some(log)).unwrap();
        assert!(export(&e, &counters, 2).is_err());
        assert!(export(&e, &counters, 3).is_err());
        assert_eq!(
            scripted.calls.load(Ordering::Relaxed),
            1,
            "no retry, no second call"
        );
        let d = counters.snapshot();
        assert_eq!((d.export_failed, d.circuit_open), (2, 3));
        assert!(counters.collector_failed());
        assert_eq!(
            DropCounter(Arc::clone(&counters)).last_error().as_deref(),
            Some("connection refused (is the collector running?)")
        );
    }

    #[test]
    fn a_retryable_status_is_retried_within_the_timeout_but_not_while_closing() {
        let log = Arc::new(TransportLog::default());
        let scripted = Scripted {
            mode: Arc::new(Mutex::new("503")),
            calls: Arc::new(AtomicU64::new(0)),
            log: Some(Arc::clone(&log)),
        };
        let counters = Arc::new(DropCounters::default());
        let config = FailOpenConfig {
            export_timeout: Duration::from_secs(5),
            breaker_failures: 10,
            breaker_cooldown: Duration::from_secs(30),
        };
        let e = FailOpenExporter::new(scripted.clone(), config, Arc::clone(&counters), Some(log)).unwrap();
        assert!(export(&e, &counters, 2).is_err());
        assert_eq!(
            scripted.calls.load(Ordering::Relaxed),
            4,
            "the try and three retries"
        );
        *scripted.mode.lock().unwrap() = "ok";
        assert!(export(&e, &counters, 2).is_ok());
        *scripted.mode.lock().unwrap() = "503";
        counters.begin_shutdown(Duration::from_secs(5));
        assert!(export(&e, &counters, 2).is_err());
        assert_eq!(
            scripted.calls.load(Ordering::Relaxed),
            6,
            "no retry during shutdown"
        );
    }

    #[test]
    fn with_a_trace_file_every_batch_that_does_not_arrive_is_saved_there() {
        let dir = std::env::temp_dir().join(format!("waxell-spill-test-{}", std::process::id()));
        let path = dir.join("spill.jsonl");
        let _ = std::fs::remove_file(&path);
        let file = Arc::new(JsonLinesFile::lazy(&path));
        let counters = Arc::new(DropCounters::new(Some(Spill::new(Arc::clone(&file), 2))));
        let scripted = Scripted {
            mode: Arc::new(Mutex::new("fail")),
            calls: Arc::new(AtomicU64::new(0)),
            log: None,
        };
        let config = FailOpenConfig {
            export_timeout: Duration::from_millis(100),
            breaker_failures: 2,
            breaker_cooldown: Duration::from_millis(200),
        };
        let e = FailOpenExporter::new(scripted.clone(), config, Arc::clone(&counters), None).unwrap();
        assert!(!path.exists(), "no file until something must be saved");
        assert!(export(&e, &counters, 3).is_err());
        assert!(export(&e, &counters, 3).is_err());
        assert!(export(&e, &counters, 4).is_err(), "breaker open");
        // The queue gate's overflow (capacity 2 here) is saved by the export thread.
        let gate = QueueGate::new(
            opentelemetry_sdk::trace::SimpleSpanProcessor::new(InMemorySpanExporter::default()),
            0,
            Arc::clone(&counters),
        );
        for span in spans(3) {
            gate.on_end(span);
        }
        std::thread::sleep(Duration::from_millis(250));
        *scripted.mode.lock().unwrap() = "hang";
        assert!(export(&e, &counters, 5).is_err(), "timed out");
        counters.finish_shutdown();
        let saved = counters.saved_snapshot();
        assert_eq!(
            (
                saved.export_failed,
                saved.circuit_open,
                saved.queue_full,
                saved.unsent_at_shutdown
            ),
            (6, 4, 2, 5),
            "{saved}"
        );
        let dropped = counters.snapshot();
        assert_eq!(dropped.queue_full, 1, "beyond the overflow capacity: {dropped}");
        assert_eq!(dropped.total(), 1, "{dropped}");
        let (requests, _, _) = super::super::jsonl::read_requests(&path, 0, 0).unwrap();
        let on_disk: usize = requests
            .iter()
            .map(|(_, r)| super::super::jsonl::span_count(r))
            .sum();
        assert_eq!(on_disk as u64, saved.total());
        let _ = std::fs::remove_dir_all(&dir);
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
        counters.finish_shutdown();
        assert_eq!(
            counters.snapshot().unsent_at_shutdown,
            3,
            "never counted out by an export"
        );
    }
}
