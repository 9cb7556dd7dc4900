//! The per-run span cap (`WAXELL_MAX_SPANS_PER_RUN`, default 50,000): a runaway agent loop must not flood the
//! collector or the export queue. Over the cap, a trace keeps only the spans that matter for reading it: the
//! root, agent spans (they carry the scores as `gen_ai.evaluation.result` events), spans with an error status
//! and any span carrying a score event. Everything else over the cap is dropped and counted.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry::trace::{SpanId, Status};
use opentelemetry::Context;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Span, SpanData, SpanProcessor};
use opentelemetry_sdk::Resource;

use crate::export::fail_open::DropCounters;
use crate::semconv::{GEN_AI_EVALUATION_RESULT, GEN_AI_OPERATION_NAME, OP_INVOKE_AGENT};

/// The per-trace counts are split by trace id so that agents ending spans on many threads rarely contend.
const SHARDS: usize = 16;

/// Traces tracked at once per shard. Counts are forgotten when a root ends; if roots never end locally, a shard
/// is reset past this size so memory stays bounded (its runs then count from zero again).
const MAX_TRACKED_TRACES_PER_SHARD: usize = 256;

/// Applies the per-run span cap in front of `next`.
#[derive(Debug)]
pub(crate) struct SpanCap<P> {
    next: P,
    /// `None`: no cap, spans pass straight through.
    cap: Option<usize>,
    per_trace: [Mutex<HashMap<u128, usize>>; SHARDS],
    counters: Arc<DropCounters>,
}

impl<P> SpanCap<P> {
    /// `cap` spans per run besides the root; `0` turns the cap off.
    pub(crate) fn new(next: P, cap: usize, counters: Arc<DropCounters>) -> Self {
        Self {
            next,
            cap: (cap > 0).then_some(cap),
            per_trace: std::array::from_fn(|_| Mutex::new(HashMap::new())),
            counters,
        }
    }

    /// Count one span of `trace` (a root ends its run and forgets it); whether the run is now over the cap.
    fn over_cap(&self, trace: u128, root: bool, cap: usize) -> bool {
        let shard = &self.per_trace[(trace as usize) % SHARDS];
        let mut per_trace = shard.lock().unwrap_or_else(|p| p.into_inner());
        if root {
            per_trace.remove(&trace);
            return false;
        }
        if per_trace.len() >= MAX_TRACKED_TRACES_PER_SHARD && !per_trace.contains_key(&trace) {
            per_trace.clear();
        }
        let seen = per_trace.entry(trace).or_insert(0);
        *seen += 1;
        *seen > cap
    }
}

/// A span ending its trace locally: no parent, or a parent in another process.
fn is_root(span: &SpanData) -> bool {
    span.parent_span_id == SpanId::INVALID || span.parent_span_is_remote
}

/// Spans kept whatever the count: the root, agent runs, errors and scores.
fn always_kept(span: &SpanData) -> bool {
    is_root(span)
        || matches!(span.status, Status::Error { .. })
        || span
            .attributes
            .iter()
            .any(|kv| kv.key.as_str() == GEN_AI_OPERATION_NAME && kv.value.as_str() == OP_INVOKE_AGENT)
        || span.events.iter().any(|e| e.name == GEN_AI_EVALUATION_RESULT)
}

impl<P: SpanProcessor> SpanProcessor for SpanCap<P> {
    fn on_start(&self, span: &mut Span, cx: &Context) {
        self.next.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        let Some(cap) = self.cap else {
            return self.next.on_end(span);
        };
        let trace = u128::from_be_bytes(span.span_context.trace_id().to_bytes());
        if self.over_cap(trace, is_root(&span), cap) && !always_kept(&span) {
            self.counters.add_over_span_cap();
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

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{Span as _, TraceContextExt, Tracer, TracerProvider};
    use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SimpleSpanProcessor};

    /// One run of a root and `children` plain children, the last of which fails; returns the names exported.
    fn run(cap: usize, children: usize) -> (Vec<String>, u64) {
        let exporter = InMemorySpanExporter::default();
        let counters = Arc::new(DropCounters::default());
        let processor = SpanCap::new(
            SimpleSpanProcessor::new(exporter.clone()),
            cap,
            Arc::clone(&counters),
        );
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .build();
        let tracer = provider.tracer("t");
        let root = tracer.start("root");
        let cx = Context::current_with_span(root);
        for i in 0..children {
            let mut child = tracer.start_with_context(format!("child {i}"), &cx);
            if i + 1 == children {
                child.set_status(Status::error("boom"));
            }
            child.end();
        }
        cx.span().end();
        let names = exporter
            .get_finished_spans()
            .unwrap()
            .into_iter()
            .map(|s| s.name.into_owned())
            .collect();
        let over = crate::export::DropCounter(counters).dropped().over_span_cap;
        (names, over)
    }

    #[test]
    fn over_the_cap_only_the_root_and_errors_are_kept() {
        let (names, over) = run(3, 10);
        assert_eq!(names, ["child 0", "child 1", "child 2", "child 9", "root"]);
        assert_eq!(over, 6);
    }

    #[test]
    fn zero_turns_the_cap_off() {
        let (names, over) = run(0, 10);
        assert_eq!((names.len(), over), (11, 0));
    }
}
