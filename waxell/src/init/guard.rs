//! The guard `init()` returns: flush, shutdown within the exit budget, and the exit report.

use std::path::PathBuf;
use std::sync::{mpsc, Arc};
use std::time::Duration;

use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::SdkTracerProvider;

use super::otlp::Background;
use crate::console::Console;
use crate::export::{human, replay_hint, DropCounter, DroppedSpans};
use crate::telemetry;

/// Why [`Guard::force_flush`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FlushError {
    /// The flush did not finish in time (the guard's shutdown timeout); spans still queued may be lost.
    #[error("telemetry flush did not finish within {0:?}")]
    Timeout(Duration),
    /// The exporter or a span processor reported a failure.
    #[error("telemetry flush failed: {0}")]
    Export(String),
    /// The pipeline was already shut down.
    #[error("telemetry flush: the pipeline was already shut down")]
    AlreadyShutDown,
}

/// Why [`Guard::shutdown`] failed. Spans the exporter had not sent by then were dropped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ShutdownError {
    /// Shutdown did not finish in time (the guard's shutdown timeout); unsent spans were dropped.
    #[error("telemetry shutdown did not finish within {0:?}; unsent spans were dropped")]
    Timeout(Duration),
    /// The exporter or a span processor reported a failure.
    #[error("telemetry shutdown failed: {0}")]
    Export(String),
    /// The pipeline was already shut down.
    #[error("telemetry shutdown: the pipeline was already shut down")]
    AlreadyShutDown,
}

/// What went wrong in a bounded flush or shutdown, before it is typed for the caller.
enum Bounded {
    Timeout(Duration),
    Export(String),
    AlreadyShutDown,
}

impl From<opentelemetry_sdk::error::OTelSdkError> for Bounded {
    fn from(e: opentelemetry_sdk::error::OTelSdkError) -> Self {
        use opentelemetry_sdk::error::OTelSdkError;
        match e {
            OTelSdkError::AlreadyShutdown => Self::AlreadyShutDown,
            OTelSdkError::Timeout(t) => Self::Timeout(t),
            other => Self::Export(other.to_string()),
        }
    }
}

impl From<Bounded> for FlushError {
    fn from(b: Bounded) -> Self {
        match b {
            Bounded::Timeout(t) => Self::Timeout(t),
            Bounded::Export(m) => Self::Export(m),
            Bounded::AlreadyShutDown => Self::AlreadyShutDown,
        }
    }
}

impl From<Bounded> for ShutdownError {
    fn from(b: Bounded) -> Self {
        match b {
            Bounded::Timeout(t) => Self::Timeout(t),
            Bounded::Export(m) => Self::Export(m),
            Bounded::AlreadyShutDown => Self::AlreadyShutDown,
        }
    }
}

/// Where spans are going.
#[derive(Debug, Clone)]
pub(super) enum Target {
    None,
    Otlp(String),
    Embedded(Option<PathBuf>),
}

/// Keeps telemetry running; dropping it flushes and shuts down (bounded by the shutdown timeout).
#[must_use = "dropping the guard shuts telemetry down at once"]
pub struct Guard {
    pub(super) provider: Option<SdkTracerProvider>,
    pub(super) meter_provider: Option<SdkMeterProvider>,
    /// What the exporter runs on besides its threads (gRPC's private runtime), stopped after shutdown.
    pub(super) background: Option<Background>,
    pub(super) target: Target,
    pub(super) shutdown_timeout: Duration,
    /// Drop tallies of the default export pipeline (all zero when telemetry is off).
    pub(super) counters: DropCounter,
    /// Where the exit report goes.
    pub(super) console: Console,
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard")
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

impl Guard {
    pub(super) fn disabled() -> Self {
        Self {
            provider: None,
            meter_provider: None,
            background: None,
            target: Target::None,
            shutdown_timeout: Duration::ZERO,
            counters: DropCounter::default(),
            console: Console::default(),
        }
    }

    /// Spans dropped so far by the default export (queue full, export failed or timed out, circuit breaker
    /// open, per-run span cap), by reason. Reported once on the console at shutdown when any were dropped.
    pub fn dropped_spans(&self) -> DroppedSpans {
        self.counters.dropped()
    }

    /// A handle on the drop tallies that outlives the guard: after shutdown it also counts the spans still
    /// unsent when shutdown gave up.
    pub fn drop_counter(&self) -> DropCounter {
        self.counters.clone()
    }

    /// Whether telemetry is on (`WAXELL_OBSERVE` is not false).
    pub fn is_enabled(&self) -> bool {
        self.provider.is_some()
    }

    /// The OTLP traces URL spans are exported to, if any.
    pub fn otlp_endpoint(&self) -> Option<&str> {
        match &self.target {
            Target::Otlp(url) => Some(url),
            _ => None,
        }
    }

    /// The JSON-lines file the embedded default writes, if any.
    pub fn trace_file(&self) -> Option<&std::path::Path> {
        match &self.target {
            Target::Embedded(Some(path)) => Some(path),
            _ => None,
        }
    }

    /// Export everything ended so far. Runs off the calling thread, so it cannot deadlock a
    /// current-thread Tokio runtime; waits at most the exit budget (`with_shutdown_timeout`), then stops
    /// waiting for the collector (what it had not taken is saved to the trace file when its export ends
    /// badly, or at shutdown).
    pub fn force_flush(&self) -> Result<(), FlushError> {
        let Some(provider) = self.provider.clone() else {
            return Ok(());
        };
        // Calls recorded off the caller's thread that ended before this flush are part of it.
        crate::deferred::drain(self.shutdown_timeout);
        let meter = self.meter_provider.clone();
        let result = run_bounded("flush", self.shutdown_timeout, move || {
            let traces = provider.force_flush().map_err(Bounded::from);
            if let Some(m) = meter {
                let _ = m.force_flush();
            }
            traces
        })
        .map_err(FlushError::from);
        if result.is_err() && self.counters.0.exporting_now() {
            self.counters.0.abandon_in_flight();
        }
        result
    }

    /// Flush and shut down now, reporting what went wrong.
    pub fn shutdown(mut self) -> Result<(), ShutdownError> {
        self.shutdown_inner()
    }

    fn shutdown_inner(&mut self) -> Result<(), ShutdownError> {
        let Some(provider) = self.provider.take() else {
            return Ok(());
        };
        let meter = self.meter_provider.take();
        let budget = self.shutdown_timeout;
        // Before the state goes: calls still being recorded off the caller's thread export with the rest.
        crate::deferred::drain(budget);
        telemetry::uninstall();
        // From here the exporter waits for the collector until the budget's end at most, then saves the rest.
        self.counters.0.begin_shutdown(budget);
        let counters = Arc::clone(&self.counters.0);
        let started = std::time::Instant::now();
        let result = run_bounded("shutdown", budget + SHUTDOWN_SLACK, move || {
            let traces = provider
                .shutdown_with_timeout(budget + SHUTDOWN_SLACK / 2)
                .map_err(Bounded::from);
            if let Some(m) = meter {
                // A collector that just failed the traces gets no more of the budget for metrics.
                let left = budget.saturating_sub(started.elapsed());
                let _ = m.shutdown_with_timeout(if counters.collector_failed() {
                    Duration::from_millis(50).min(left)
                } else {
                    left
                });
            }
            traces
        })
        .map_err(ShutdownError::from);
        // Never blocks, so the guard may be dropped inside async code.
        drop(self.background.take());
        self.counters.0.finish_shutdown();
        for line in exit_report(&self.counters, &self.target, budget) {
            self.console.message(line);
        }
        let _ = result;
        // The report above told the user; the error says the same to the caller.
        let (dropped, saved) = (self.counters.dropped(), self.counters.saved());
        // Spans over the per-run cap are dropped by policy, not because export failed.
        if dropped.total() > dropped.over_span_cap {
            Err(ShutdownError::Export(dropped.to_string()))
        } else if saved.total() > 0 {
            Err(ShutdownError::Export(format!(
                "the collector did not take every span: {saved}"
            )))
        } else {
            Ok(())
        }
    }
}

/// Extra time for the batch processor to save what is left once the exit budget has run out.
const SHUTDOWN_SLACK: Duration = Duration::from_millis(1500);

/// The default exit budget.
pub(super) const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

/// What the exit says about spans that did not reach the collector: where they were saved and the command
/// that sends them, that the exit stopped waiting, and what was lost for good.
fn exit_report(counter: &DropCounter, target: &Target, budget: Duration) -> Vec<String> {
    let mut lines = Vec::new();
    if counter.gave_up_waiting() {
        lines.push(format!(
            "gave up waiting for the collector after the exit budget of {} (WAXELL_SHUTDOWN_TIMEOUT_MS, \
             Builder::with_shutdown_timeout)",
            human(budget)
        ));
    }
    let saved = counter.saved();
    if let (Target::Otlp(url), true, Some(file)) = (target, saved.total() > 0, counter.saved_to()) {
        let why = counter.last_error().unwrap_or_else(|| "export failed".into());
        let kind = crate::export::EndpointKind::of(url).name();
        lines.push(format!(
            "could not send {} spans to {kind} at {url} ({why}); saved them to {}",
            saved.total(),
            file.display()
        ));
        lines.push(format!("send them once {kind} is up: {}", replay_hint(file)));
    }
    let dropped = counter.dropped();
    if dropped.total() > 0 {
        lines.push(dropped.to_string());
    }
    lines
}

/// Run `work` on its own thread and wait at most `timeout`: export and shutdown block, and on a
/// current-thread runtime blocking the caller's thread can deadlock.
fn run_bounded(
    what: &str,
    timeout: Duration,
    work: impl FnOnce() -> Result<(), Bounded> + Send + 'static,
) -> Result<(), Bounded> {
    let (tx, rx) = mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name(format!("waxell-{what}"))
        .spawn(move || {
            let _ = tx.send(work());
        });
    if let Err(e) = spawned {
        return Err(Bounded::Export(format!("could not start the {what} thread: {e}")));
    }
    match rx.recv_timeout(timeout) {
        Ok(result) => result,
        Err(_) => Err(Bounded::Timeout(timeout)),
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        // Whatever went wrong was reported on the console by the shutdown itself.
        let _ = self.shutdown_inner();
    }
}
