//! The tallies of spans that did not reach the collector: saved to the trace file ([`Spill`]) or dropped, by
//! reason, and the public handle on them ([`DropCounter`]).

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::{Duration, Instant};

use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::SpanData;
use opentelemetry_sdk::Resource;

use super::delivery::Batch;
use crate::export::jsonl::JsonLinesFile;

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
pub(super) struct Tally([AtomicU64; 4]);

impl Tally {
    pub(super) fn add(&self, reason: Reason, n: u64) {
        self.0[reason as usize].fetch_add(n, Ordering::Relaxed);
    }
    pub(super) fn get(&self, reason: Reason) -> u64 {
        self.0[reason as usize].load(Ordering::Relaxed)
    }
}

/// Where spans that could not be exported are saved: the trace file, as OTLP JSON lines.
#[derive(Debug)]
pub(crate) struct Spill {
    pub(super) file: Arc<JsonLinesFile>,
    pub(super) resource: RwLock<ResourceAttributesWithSchema>,
    /// Spans the queue gate turned away, waiting for the export thread to write them (the agent's thread
    /// never writes); bounded, beyond it spans are dropped and counted.
    pub(super) overflow: Mutex<Vec<SpanData>>,
    pub(super) overflow_capacity: usize,
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

    pub(super) fn write(&self, batch: Batch) -> std::io::Result<()> {
        match batch {
            Batch::Spans(spans) => {
                let resource = self.resource.read().unwrap_or_else(|p| p.into_inner());
                self.file.write(spans, &resource)
            }
            #[cfg(feature = "otlp-http")]
            Batch::Request(encoded) => {
                let request = encoded.decode().map_err(std::io::Error::other)?;
                self.file.write_request(&request, encoded.spans as u64)
            }
        }
    }
}

/// The batch the worker is exporting, shared between the worker, the waiting batch processor thread and the
/// guard (which saves it if the exit budget runs out first).
#[derive(Debug, Default)]
pub(super) struct InFlight {
    pub(super) busy: bool,
    /// A copy of the batch, to retry or save it; whoever takes it decides its fate, so it is saved once.
    pub(super) copy: Option<Batch>,
    pub(super) result: Option<OTelSdkResult>,
    /// The waiter stopped waiting: the worker then settles the batch itself.
    pub(super) abandoned: bool,
}

/// Shared tallies and state of the export pipeline, updated from any thread.
#[derive(Debug, Default)]
pub(crate) struct DropCounters {
    pub(super) dropped: Tally,
    pub(super) saved: Tally,
    pub(super) over_span_cap: AtomicU64,
    /// Spans the collector accepted.
    pub(super) exported: AtomicU64,
    /// Spans accepted by the gate and not yet handed to an export attempt.
    pub(super) queued: AtomicUsize,
    /// Export attempts that reached the exporter (probes and retries included).
    pub(super) attempts: AtomicU64,
    /// Spans of the batch being exported right now.
    pub(super) exporting: AtomicUsize,
    /// Set when shutdown starts: from then on one failure is enough to give up on the collector.
    pub(super) closing: AtomicBool,
    /// Set once shutdown has finished or given up.
    pub(super) shut_down: AtomicBool,
    /// Set when a flush or the shutdown stopped waiting for an export that was still running.
    pub(super) gave_up: AtomicBool,
    /// Bumped to make the waiting batch processor stop waiting for the export in flight.
    pub(super) abandon_epoch: AtomicU64,
    /// The exit budget's end, once shutdown has started.
    pub(super) give_up_at: Mutex<Option<Instant>>,
    /// Why the last export failed.
    pub(super) last_error: Mutex<Option<String>>,
    pub(super) in_flight: Mutex<InFlight>,
    pub(super) in_flight_changed: Condvar,
    pub(super) spill: Option<Spill>,
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

    pub(super) fn set_error(&self, why: String) {
        *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(why);
    }

    /// Save `spans` to the trace file, or count them as dropped when there is none or writing fails.
    pub(super) fn lose(&self, reason: Reason, batch: Batch) {
        let n = batch.len() as u64;
        if n == 0 {
            return;
        }
        if let Some(spill) = &self.spill {
            match spill.write(batch) {
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
    pub(super) fn overflow(&self, span: SpanData) {
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
    pub(super) fn drain_overflow(&self) {
        if let Some(spill) = &self.spill {
            let spans = std::mem::take(&mut *spill.overflow.lock().unwrap_or_else(|p| p.into_inner()));
            self.lose(Reason::QueueFull, spans.into());
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

    pub(super) fn snapshot(&self) -> DroppedSpans {
        DroppedSpans {
            queue_full: self.dropped.get(Reason::QueueFull),
            export_failed: self.dropped.get(Reason::ExportFailed),
            circuit_open: self.dropped.get(Reason::CircuitOpen),
            unsent_at_shutdown: self.dropped.get(Reason::Unsent),
            over_span_cap: self.over_span_cap.load(Ordering::Relaxed),
        }
    }

    pub(super) fn saved_snapshot(&self) -> SavedSpans {
        SavedSpans {
            queue_full: self.saved.get(Reason::QueueFull),
            export_failed: self.saved.get(Reason::ExportFailed),
            circuit_open: self.saved.get(Reason::CircuitOpen),
            unsent_at_shutdown: self.saved.get(Reason::Unsent),
        }
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
