//! The runtime behind the attribute macros: one [`Run`] per instrumented call.
//!
//! The macros only parse and emit; everything here is ordinary, non-generic-heavy code so expansions stay
//! small. A `Run` starts the span (with the arguments captured), attaches its context while the body runs
//! (on every poll for futures), records the outcome, and ends the span. A panic is recorded and continues;
//! a future dropped before completion ends its span marked cancelled.

use std::any::Any;
use std::future::Future;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};

use opentelemetry::trace::{SpanBuilder, SpanKind, Status, TraceContextExt};
use opentelemetry::{Context, KeyValue, Value};

use crate::capture::{Captured, Outcome};
use crate::semconv::*;
use crate::spans::{shared, string_array, AgentRun};
use crate::telemetry::{self, State};

/// Which attribute produced the span (shared with the macros, which write its span name).
pub use waxell_kind::Kind;

/// Everything about an instrumented function that is known at compile time.
#[derive(Debug)]
pub struct Meta {
    /// The attribute on the function.
    pub kind: Kind,
    /// Full span name, e.g. `execute_tool run_basic_code`.
    pub span_name: &'static str,
    /// Agent, tool, step or decision name; reasoning step; retrieval source.
    pub name: &'static str,
    /// From `description = "..."` or the function's doc comment.
    pub description: Option<&'static str>,
    /// `#[tool(tool_type = ...)]`; empty for other kinds.
    pub tool_type: &'static str,
    /// `#[decision(options = ...)]`.
    pub options: &'static [&'static str],
    /// False with `capture = false`: no arguments or return value are recorded.
    pub capture: bool,
}

/// One instrumented call. Created by the macros; not public API.
pub struct Run {
    inner: Option<Box<Inner>>,
}

struct Inner {
    cx: Context,
    meta: &'static Meta,
    state: Arc<State>,
    recording: bool,
    /// Set once the span has been ended (finished, panicked); a drop before that means cancellation.
    ended: AtomicBool,
    /// No parent in this process: its end completes the trace here.
    local_root: bool,
}

/// Captured arguments, in declaration order.
pub type Args = Vec<(&'static str, Captured)>;

fn gen_ai_tool_type(tool_type: &str) -> &'static str {
    match tool_type {
        "function" => "function",
        "database" | "search" | "retrieval" => "datastore",
        _ => "extension",
    }
}

impl Run {
    /// Start the span of one call. `args` runs only when the span records and content capture is on.
    pub fn start(meta: &'static Meta, args: impl FnOnce() -> Args) -> Run {
        if !telemetry::maybe_active() {
            return Run { inner: None };
        }
        let parent = Context::current();
        let Some(state) = telemetry::state_for(&parent) else {
            return Run { inner: None };
        };
        let (op, oi_kind, span_kind) = match meta.kind {
            Kind::Agent => (OP_INVOKE_AGENT, OI_KIND_AGENT, "agent_execution"),
            Kind::Tool => (OP_EXECUTE_TOOL, OI_KIND_TOOL, "tool"),
            Kind::Reasoning => (OP_REASONING, OI_KIND_CHAIN, "reasoning"),
            Kind::Decision => (OP_DECIDE, OI_KIND_CHAIN, "decision"),
            Kind::Step => (OP_STEP, OI_KIND_CHAIN, "step"),
            Kind::Retrieval => (OP_RETRIEVAL, OI_KIND_RETRIEVER, "retrieval"),
        };
        let mut attrs = Vec::with_capacity(14);
        attrs.push(KeyValue::new(GEN_AI_OPERATION_NAME, op));
        attrs.push(KeyValue::new(OI_SPAN_KIND, oi_kind));
        attrs.push(KeyValue::new(WAXELL_SPAN_TYPE, span_kind));
        match meta.kind {
            Kind::Agent => {
                attrs.push(KeyValue::new(GEN_AI_AGENT_NAME, meta.name));
                attrs.push(KeyValue::new(OI_AGENT_NAME, meta.name));
                attrs.push(KeyValue::new(WAXELL_AGENT_NAME, meta.name));
                if let Some(d) = meta.description {
                    attrs.push(KeyValue::new(GEN_AI_AGENT_DESCRIPTION, d));
                }
            }
            Kind::Tool => {
                attrs.push(KeyValue::new(GEN_AI_TOOL_NAME, meta.name));
                attrs.push(KeyValue::new(GEN_AI_TOOL_TYPE, gen_ai_tool_type(meta.tool_type)));
                attrs.push(KeyValue::new(OI_TOOL_NAME, meta.name));
                attrs.push(KeyValue::new(WAXELL_TOOL_NAME, meta.name));
                attrs.push(KeyValue::new(WAXELL_TOOL_TYPE, meta.tool_type));
                if let Some(d) = meta.description {
                    attrs.push(KeyValue::new(GEN_AI_TOOL_DESCRIPTION, d));
                    attrs.push(KeyValue::new(OI_TOOL_DESCRIPTION, d));
                }
            }
            Kind::Reasoning => attrs.push(KeyValue::new(WAXELL_REASONING_STEP, meta.name)),
            Kind::Decision => {
                attrs.push(KeyValue::new(WAXELL_DECISION_NAME, meta.name));
                if !meta.options.is_empty() {
                    attrs.push(KeyValue::new(WAXELL_DECISION_OPTIONS, string_array(meta.options)));
                }
            }
            Kind::Step => attrs.push(KeyValue::new(WAXELL_STEP_NAME, meta.name)),
            Kind::Retrieval => {
                attrs.push(KeyValue::new(GEN_AI_DATA_SOURCE_ID, meta.name));
                attrs.push(KeyValue::new(WAXELL_RETRIEVAL_SOURCE, meta.name));
            }
        }
        // Arguments go into the builder with the other start attributes: one allocation, no per-attribute
        // locking. They are skipped when the parent is known to be unsampled (the span will not record).
        let (parent_unsampled, local_root) = {
            let sc = parent.span().span_context().clone();
            (
                sc.is_valid() && !sc.is_sampled(),
                !sc.is_valid() || sc.is_remote(),
            )
        };
        if meta.capture && state.capture.content && !parent_unsampled {
            args_attributes(meta, &state, args(), &mut attrs);
        }
        let builder = SpanBuilder::from_name(meta.span_name)
            .with_kind(SpanKind::Internal)
            .with_attributes(attrs);
        let mut cx = state.start(builder, &parent);
        let recording = cx.span().is_recording();
        if meta.kind == Kind::Agent {
            cx = cx.with_value(AgentRun { cx: cx.clone() });
        }
        let inner = Inner {
            cx,
            meta,
            state,
            recording,
            ended: AtomicBool::new(false),
            local_root,
        };
        Run {
            inner: Some(Box::new(inner)),
        }
    }

    /// Record session and user ids (`#[agent(session_id = ..., user_id = ...)]`).
    pub fn set_ids(&self, session_id: Option<String>, user_id: Option<String>) {
        let Some(inner) = self.recording() else { return };
        let span = inner.cx.span();
        if let Some(id) = session_id {
            span.set_attribute(KeyValue::new(GEN_AI_CONVERSATION_ID, id.clone()));
            span.set_attribute(KeyValue::new(OI_SESSION_ID, id.clone()));
            span.set_attribute(KeyValue::new(WAXELL_SESSION_ID, id));
        }
        if let Some(id) = user_id {
            span.set_attribute(KeyValue::new(OI_USER_ID, id.clone()));
            span.set_attribute(KeyValue::new(WAXELL_USER_ID, id));
        }
    }

    fn recording(&self) -> Option<&Inner> {
        self.inner.as_deref().filter(|i| i.recording)
    }

    /// Run a synchronous body with this call's context attached; a panic is recorded and continues.
    pub fn in_scope<R>(&self, body: impl FnOnce() -> R) -> R {
        let Some(inner) = &self.inner else { return body() };
        let _attached = inner.cx.clone().attach();
        match catch_unwind(AssertUnwindSafe(body)) {
            Ok(value) => value,
            Err(payload) => {
                inner.end_with_panic(payload.as_ref());
                resume_unwind(payload)
            }
        }
    }

    /// Wrap a future so this call's context is attached on every poll.
    pub fn instrument<F: Future>(&self, future: F) -> Instrumented<'_, F> {
        Instrumented {
            inner: future,
            run: self,
        }
    }

    /// Record the outcome and end the span. `observe(wants_value)` is called only when the span records;
    /// it gets whether the successful value should be captured.
    pub fn finish(&self, observe: impl FnOnce(bool) -> Outcome) {
        let Some(inner) = &self.inner else { return };
        if inner.ended.swap(true, Ordering::AcqRel) {
            return;
        }
        if inner.recording {
            let needs_value = matches!(
                inner.meta.kind,
                Kind::Reasoning | Kind::Decision | Kind::Retrieval
            );
            let wants = needs_value || (inner.meta.capture && inner.state.capture.content);
            // Telemetry must never panic into the user's code: a panicking Serialize/Debug impl is contained.
            match catch_unwind(AssertUnwindSafe(|| observe(wants))) {
                Ok(outcome) => inner.record_outcome(outcome),
                Err(_) => inner.cx.span().set_attribute(KeyValue::new(
                    "waxell.capture.error",
                    "return value capture panicked",
                )),
            }
        }
        inner.end_span();
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        let Some(inner) = &self.inner else { return };
        if inner.ended.swap(true, Ordering::AcqRel) {
            return;
        }
        let span = inner.cx.span();
        if std::thread::panicking() {
            span.set_attribute(KeyValue::new(WAXELL_PANIC, true));
            span.set_attribute(KeyValue::new(ERROR_TYPE, "panic"));
            span.set_status(Status::error("panicked"));
        } else {
            span.set_attribute(KeyValue::new(WAXELL_CANCELLED, true));
            span.set_attribute(KeyValue::new(ERROR_TYPE, "cancelled"));
            span.set_status(Status::error(
                "cancelled: the future was dropped before it completed",
            ));
        }
        inner.end_span();
    }
}

impl Inner {
    fn record_outcome(&self, outcome: Outcome) {
        let span = self.cx.span();
        if let Some(err) = &outcome.error {
            let message = self.state.content(&err.message);
            span.set_attribute(KeyValue::new(ERROR_TYPE, err.type_name.clone()));
            span.add_event(
                "exception",
                vec![
                    KeyValue::new("exception.type", err.type_name.clone()),
                    KeyValue::new("exception.message", message.clone()),
                ],
            );
            span.set_status(Status::error(message));
        }
        let Some(value) = outcome.value else { return };
        match self.meta.kind {
            Kind::Reasoning => crate::decision::record_reasoning(&self.cx, &self.state, &value),
            Kind::Decision => crate::decision::record_decision_outcome(
                &self.cx,
                &self.state,
                self.meta.name,
                self.meta.options,
                &value,
            ),
            Kind::Retrieval => self.record_retrieval(&value),
            _ => {}
        }
        if self.meta.capture && self.state.capture.content {
            // One shared string for both attribute families (and cheap to copy for the fail-open exporter).
            let text = shared(match &value {
                Captured::Json(v) if !v.is_string() => self.state.json_content(v.clone()),
                other => self.state.content(&other.to_text()),
            });
            if self.meta.kind == Kind::Tool {
                span.set_attribute(KeyValue::new(GEN_AI_TOOL_CALL_RESULT, text.clone()));
            }
            span.set_attribute(KeyValue::new(
                OI_OUTPUT_MIME_TYPE,
                if value.is_json() { MIME_JSON } else { MIME_TEXT },
            ));
            span.set_attribute(KeyValue::new(OI_OUTPUT_VALUE, text));
        }
    }

    fn record_retrieval(&self, value: &Captured) {
        let Captured::Json(v) = value else { return };
        let items = match v {
            serde_json::Value::Array(items) => items,
            serde_json::Value::Object(map) => {
                match ["documents", "results", "hits"].iter().find_map(|k| map.get(*k)) {
                    Some(serde_json::Value::Array(items)) => items,
                    _ => return,
                }
            }
            _ => return,
        };
        let span = self.cx.span();
        span.set_attribute(KeyValue::new(WAXELL_RETRIEVAL_RESULT_COUNT, items.len() as i64));
        let scores: Vec<f64> = items
            .iter()
            .filter_map(|i| i.get("score").and_then(|s| s.as_f64()))
            .collect();
        if !scores.is_empty() {
            span.set_attribute(KeyValue::new(
                WAXELL_RETRIEVAL_SCORES,
                Value::Array(scores.into()),
            ));
        }
    }

    fn end_with_panic(&self, payload: &(dyn Any + Send)) {
        if self.ended.swap(true, Ordering::AcqRel) {
            return;
        }
        let message = panic_message(payload);
        let span = self.cx.span();
        span.set_attribute(KeyValue::new(WAXELL_PANIC, true));
        span.set_attribute(KeyValue::new(ERROR_TYPE, "panic"));
        span.add_event(
            "exception",
            vec![
                KeyValue::new("exception.type", "panic"),
                KeyValue::new("exception.message", self.state.content(&message)),
                KeyValue::new("exception.escaped", true),
            ],
        );
        span.set_status(Status::error(format!(
            "panicked: {}",
            self.state.content(&message)
        )));
        self.end_span();
    }

    /// End the span. A root first waits for LLM calls still being recorded off their thread (see
    /// `crate::deferred`), so the trace reaches the exporter and the console complete, children first.
    fn end_span(&self) {
        if self.local_root {
            crate::deferred::drain(crate::deferred::DRAIN_TIMEOUT);
        }
        self.cx.span().end();
    }
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}

/// The attributes of the captured arguments.
fn args_attributes(meta: &Meta, state: &State, args: Args, attrs: &mut Vec<KeyValue>) {
    if meta.kind == Kind::Retrieval {
        // The query is the argument named like one, else the first argument.
        let query = args
            .iter()
            .find(|(n, _)| matches!(*n, "query" | "q" | "question"))
            .or(args.first());
        if let Some((_, q)) = query {
            attrs.push(KeyValue::new(WAXELL_RETRIEVAL_QUERY, state.content(&q.to_text())));
        }
    }
    if args.is_empty() {
        return;
    }
    let mut object = serde_json::Map::with_capacity(args.len());
    for (name, value) in args {
        object.insert(name.to_owned(), value.into_json());
    }
    // One shared string for both attribute families.
    let json = shared(state.json_content(serde_json::Value::Object(object)));
    if meta.kind == Kind::Tool {
        attrs.push(KeyValue::new(GEN_AI_TOOL_CALL_ARGUMENTS, json.clone()));
    }
    attrs.push(KeyValue::new(OI_INPUT_VALUE, json));
    attrs.push(KeyValue::new(OI_INPUT_MIME_TYPE, MIME_JSON));
}

pin_project_lite::pin_project! {
    /// A future with its call's context attached on every poll. Panics inside are recorded and continue.
    pub struct Instrumented<'r, F> {
        #[pin]
        inner: F,
        run: &'r Run,
    }
}

impl<F: Future> Future for Instrumented<'_, F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, task: &mut TaskContext<'_>) -> Poll<F::Output> {
        let this = self.project();
        let Some(inner) = this.run.inner.as_deref() else {
            return this.inner.poll(task);
        };
        let _attached = inner.cx.clone().attach();
        let future = this.inner;
        match catch_unwind(AssertUnwindSafe(|| future.poll(task))) {
            Ok(poll) => poll,
            Err(payload) => {
                inner.end_with_panic(payload.as_ref());
                resume_unwind(payload)
            }
        }
    }
}
