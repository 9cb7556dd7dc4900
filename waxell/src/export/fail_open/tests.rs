//! The fail-open exporter, gate and tallies under failing, hanging and panicking exporters.

use std::sync::atomic::AtomicU64;

use super::*;
use crate::export::jsonl::JsonLinesFile;
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
) -> (
    FailOpenExporter<SpanExporterDelivery<Scripted>>,
    Scripted,
    Arc<DropCounters>,
) {
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
    let exporter = FailOpenExporter::new(
        SpanExporterDelivery(scripted.clone()),
        config,
        Arc::clone(&counters),
        None,
    )
    .unwrap();
    (exporter, scripted, counters)
}

fn export(e: &FailOpenExporter<SpanExporterDelivery<Scripted>>, c: &DropCounters, n: usize) -> OTelSdkResult {
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
    let e = FailOpenExporter::new(
        SpanExporterDelivery(scripted.clone()),
        config,
        Arc::clone(&counters),
        Some(log),
    )
    .unwrap();
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
    let e = FailOpenExporter::new(
        SpanExporterDelivery(scripted.clone()),
        config,
        Arc::clone(&counters),
        Some(log),
    )
    .unwrap();
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
    let e = FailOpenExporter::new(
        SpanExporterDelivery(scripted.clone()),
        config,
        Arc::clone(&counters),
        None,
    )
    .unwrap();
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
