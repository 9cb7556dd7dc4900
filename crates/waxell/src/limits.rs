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

/// Default for `WAXELL_MAX_SPANS_PER_RUN`.
pub(crate) const DEFAULT_MAX_SPANS_PER_RUN: usize = 50_000;

/// Traces tracked at once. Counts are forgotten when a root ends; if roots never end locally (e.g. the root is
/// remote-parented elsewhere and never seen), the table is reset past this size so memory stays bounded.
const MAX_TRACKED_TRACES: usize = 4096;

/// Applies the per-run span cap in front of `next`.
#[derive(Debug)]
pub(crate) struct SpanCap<P> {
    next: P,
    cap: usize,
    per_trace: Mutex<HashMap<u128, usize>>,
    counters: Arc<DropCounters>,
}

impl<P> SpanCap<P> {
    pub(crate) fn new(next: P, cap: usize, counters: Arc<DropCounters>) -> Self {
        Self {
            next,
            cap,
            per_trace: Mutex::new(HashMap::new()),
            counters,
        }
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
        let trace = u128::from_be_bytes(span.span_context.trace_id().to_bytes());
        let over = {
            let mut per_trace = self.per_trace.lock().unwrap_or_else(|p| p.into_inner());
            if is_root(&span) {
                per_trace.remove(&trace);
                false
            } else {
                if per_trace.len() >= MAX_TRACKED_TRACES && !per_trace.contains_key(&trace) {
                    per_trace.clear();
                }
                let seen = per_trace.entry(trace).or_insert(0);
                *seen += 1;
                *seen > self.cap
            }
        };
        if over && !always_kept(&span) {
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
