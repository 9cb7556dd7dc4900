//! Assert, in your own tests, which spans, attributes, scores and decisions your agent produced.
//!
//! [`capture()`] starts an in-memory capture scoped to the calling thread and to everything that runs in
//! its OpenTelemetry context: spans started there (by the macros, [`crate::decide`], [`crate::score`], the
//! LLM and sandbox clients) go to this capture and nowhere else, and spans of other tests running at the
//! same time in the same process do not come in. No `init()` is needed, and the global pipeline (if one is
//! installed) does not see the captured spans.
//!
//! ```
//! use waxell::{agent, tool};
//!
//! #[tool(tool_type = "function")]
//! fn add(a: i64, b: i64) -> i64 {
//!     a + b
//! }
//!
//! #[agent(name = "calculator")]
//! fn run() -> i64 {
//!     let sum = add(2, 3);
//!     waxell::score("correct", sum == 5);
//!     sum
//! }
//!
//! let capture = waxell::testing::capture();
//! run();
//! capture.assert_child_of("execute_tool add", "invoke_agent calculator");
//! capture.span("execute_tool add").assert_attr("gen_ai.tool.name", "add");
//! assert_eq!(capture.score("correct").value, waxell::ScoreValue::Boolean(true));
//! ```
//!
//! **Threads and tasks.** The capture travels with the OpenTelemetry [`Context`], the same way a span's
//! parent does: a `#[tokio::test]` on the current-thread runtime needs nothing more; a task spawned onto
//! other worker threads or a thread you start needs the context handed over, exactly as it needs it for
//! its spans to have the right parent (`tokio::spawn(fut.with_current_context())` with
//! [`opentelemetry::trace::FutureExt`], or `let _attached = cx.attach();` in the thread with
//! `cx = Context::current()` taken before). See `docs/testing.md`.
//!
//! The [`Capture`] guard holds the thread's context attached, so it is neither `Send` nor `Sync`: create
//! it in the test's own thread, and let it drop at the end of the test. [`Capture::view`] is a `Send` and
//! `Sync` handle on the same spans; [`CaptureBuilder::detached`] makes a capture that attaches nothing, for
//! a test that runs as a task of its own.

use std::collections::HashMap;
use std::fmt::{self, Write as _};
use std::sync::{Arc, Mutex};

use opentelemetry::trace::{SpanId, Status, TraceId, TracerProvider as _};
use opentelemetry::{Context, ContextGuard, KeyValue, Value};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider, SpanData, SpanExporter};

pub mod span_data;

use crate::config;
use crate::scrub;
use crate::semconv::*;
use crate::telemetry::{self, Scoped, ScopedToken, SpanSource, State};
use crate::ScoreValue;

/// Start capturing the spans of the current thread and context, with the default capture policy (content
/// captured, scrubbed, at most 4000 characters per string). Use [`builder`] to change the policy.
pub fn capture() -> Capture {
    builder().start()
}

/// A capture with a non-default policy:
///
/// ```
/// let capture = waxell::testing::builder().capture_content(false).start();
/// # drop(capture);
/// ```
pub fn builder() -> CaptureBuilder {
    CaptureBuilder {
        capture: config::Capture::default(),
    }
}

/// Sets the capture policy of a [`Capture`] (what `WAXELL_CAPTURE_CONTENT`, `WAXELL_MAX_CONTENT_CHARS`
/// and `WAXELL_SCRUB` set for the real pipeline). The environment is not read.
#[derive(Debug, Clone)]
#[must_use]
pub struct CaptureBuilder {
    capture: config::Capture,
}

impl CaptureBuilder {
    /// Record content (arguments, results, messages, code) on spans. Default: on.
    pub fn capture_content(mut self, on: bool) -> Self {
        self.capture.content = on;
        self
    }

    /// Longest captured string, in characters. Default: 4000.
    pub fn max_content_chars(mut self, chars: usize) -> Self {
        self.capture.max_chars = chars;
        self
    }

    /// Scrub secrets from captured content with the built-in patterns. Default: on.
    pub fn scrub(mut self, on: bool) -> Self {
        self.capture.scrub = on;
        self
    }

    /// Start capturing: the current thread's context carries the capture until the guard is dropped.
    pub fn start(self) -> Capture {
        let view = self.detached();
        let attached = view.context().attach();
        Capture {
            attached: Some(attached),
            view,
        }
    }

    /// A capture attached to nothing: spans go to it only where its [`context`](CaptureView::context) is
    /// current (`fut.with_context(view.context())`, `view.context().attach()`). It is `Send` and `Sync`, for
    /// a test that is itself an async task which may move between threads.
    pub fn detached(self) -> CaptureView {
        let exporter = Memory::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .with_id_generator(telemetry::PresetIds::default())
            .build();
        let tracer = provider.tracer_with_scope(telemetry::scope());
        let state = Arc::new(State {
            tracer: SpanSource::Sdk(tracer.clone()),
            scrubber: self.capture.scrub.then(|| &*scrub::DEFAULT),
            capture: self.capture,
            #[cfg(any(feature = "async-openai", all(feature = "tracing", feature = "llm")))]
            ids_ahead: config::Env::process().samples_by_parent(),
        });
        let token = ScopedToken::new();
        CaptureView {
            inner: Arc::new(ViewInner {
                cx: Context::current().with_value(Scoped(state)),
                exporter,
                tracer,
                _provider: provider,
                _token: token,
            }),
        }
    }
}

/// An in-memory capture attached to the current thread's context; see the [module docs](self). The
/// queries are those of [`CaptureView`] (through `Deref`).
///
/// The assertion helpers panic with a message that shows the captured span tree.
pub struct Capture {
    // Detached on drop, before the view (and the count of live captures) goes.
    attached: Option<ContextGuard>,
    view: CaptureView,
}

impl fmt::Debug for Capture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.view.fmt(f)
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        self.attached.take();
    }
}

impl std::ops::Deref for Capture {
    type Target = CaptureView;

    fn deref(&self) -> &CaptureView {
        &self.view
    }
}

impl Capture {
    /// A `Send + Sync` handle on the same capture, to query it (or hand its context on) from anywhere.
    pub fn view(&self) -> CaptureView {
        self.view.clone()
    }
}

/// The spans of a capture and the queries on them. Cheap to clone, `Send` and `Sync`.
#[derive(Clone)]
pub struct CaptureView {
    inner: Arc<ViewInner>,
}

struct ViewInner {
    cx: Context,
    exporter: Memory,
    tracer: SdkTracer,
    _provider: SdkTracerProvider,
    _token: ScopedToken,
}

impl fmt::Debug for CaptureView {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Capture")
            .field("spans", &self.names())
            .finish_non_exhaustive()
    }
}

impl CaptureView {
    /// Every span ended so far, in the order they ended.
    pub fn spans(&self) -> Vec<CapturedSpan> {
        // Calls that ended before this read but are still being recorded off their thread belong in it.
        crate::deferred::drain(crate::deferred::DRAIN_TIMEOUT);
        self.inner
            .exporter
            .spans()
            .into_iter()
            .map(|data| CapturedSpan { data })
            .collect()
    }

    /// The names of [`spans`](Self::spans).
    pub fn names(&self) -> Vec<String> {
        self.spans().iter().map(|s| s.name().to_owned()).collect()
    }

    /// The only span called `name`. Panics, showing the span tree, when there is none or more than one.
    #[track_caller]
    pub fn span(&self, name: &str) -> CapturedSpan {
        let mut found = self.spans_named(name);
        match found.len() {
            1 => found.remove(0),
            n => panic!(
                "expected one span {name:?}, found {n}; captured:\n{}",
                self.tree()
            ),
        }
    }

    /// The first span (in end order) called `name`, if any.
    pub fn find(&self, name: &str) -> Option<CapturedSpan> {
        self.spans().into_iter().find(|s| s.name() == name)
    }

    /// Every span called `name`, in end order.
    pub fn spans_named(&self, name: &str) -> Vec<CapturedSpan> {
        self.spans().into_iter().filter(|s| s.name() == name).collect()
    }

    /// The spans whose parent is `parent`, in start order.
    pub fn children_of(&self, parent: &CapturedSpan) -> Vec<CapturedSpan> {
        let mut children: Vec<_> = self
            .spans()
            .into_iter()
            .filter(|s| s.is_child_of(parent))
            .collect();
        children.sort_by_key(|s| s.data.start_time);
        children
    }

    /// The captured parent of `child`, if its parent was captured.
    pub fn parent_of(&self, child: &CapturedSpan) -> Option<CapturedSpan> {
        self.spans().into_iter().find(|s| child.is_child_of(s))
    }

    /// Assert that the only span called `child` is a direct child of the only span called `parent`.
    #[track_caller]
    pub fn assert_child_of(&self, child: &str, parent: &str) {
        let (c, p) = (self.span(child), self.span(parent));
        assert!(
            c.is_child_of(&p),
            "{child:?} is not a child of {parent:?}; captured:\n{}",
            self.tree()
        );
    }

    /// Assert that the only span called `span` has attribute `key` equal to `expected`.
    #[track_caller]
    pub fn assert_attr(&self, span: &str, key: &str, expected: impl Into<Value>) {
        self.span(span).assert_attr(key, expected);
    }

    /// Every score recorded (`gen_ai.evaluation.result` events), in the order their spans ended.
    pub fn scores(&self) -> Vec<Score> {
        self.spans().iter().flat_map(Score::all_in).collect()
    }

    /// The last score called `name`. Panics, listing the scores, when there is none.
    #[track_caller]
    pub fn score(&self, name: &str) -> Score {
        let scores = self.scores();
        match scores.iter().rev().find(|s| s.name == name) {
            Some(score) => score.clone(),
            None => panic!(
                "no score {name:?}; recorded: {:?}",
                scores.iter().map(|s| &s.name).collect::<Vec<_>>()
            ),
        }
    }

    /// Every decision recorded (`#[decision]`, [`crate::decide`], an LLM's tool choice), in end order.
    pub fn decisions(&self) -> Vec<RecordedDecision> {
        self.spans()
            .iter()
            .filter_map(RecordedDecision::from_span)
            .collect()
    }

    /// The last decision called `name`. Panics, listing the decisions, when there is none.
    #[track_caller]
    pub fn decision(&self, name: &str) -> RecordedDecision {
        let decisions = self.decisions();
        match decisions.iter().rev().find(|d| d.name == name) {
            Some(d) => d.clone(),
            None => panic!(
                "no decision {name:?}; recorded: {:?}",
                decisions.iter().map(|d| &d.name).collect::<Vec<_>>()
            ),
        }
    }

    /// The captured spans as an indented tree (children in start order), for failure messages.
    pub fn tree(&self) -> String {
        render_tree(&self.spans())
    }

    /// Forget the spans captured so far.
    pub fn clear(&self) {
        self.inner
            .exporter
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    /// A tracer whose spans go to this capture, for spans of the test's own (a parent, a foreign service).
    pub fn tracer(&self) -> SdkTracer {
        self.inner.tracer.clone()
    }

    /// The context carrying this capture: attach it in a thread you start, or run a future in it, so the
    /// spans started there are captured too (`Context::current()` taken in the test's thread carries it as
    /// well, with any span that is open there).
    pub fn context(&self) -> Context {
        self.inner.cx.clone()
    }
}

/// The capture's exporter: spans arrive here as they end (a simple processor exports synchronously, so
/// a span is visible as soon as its `end()` returns).
#[derive(Debug, Clone, Default)]
struct Memory(Arc<Mutex<Vec<SpanData>>>);

impl Memory {
    fn spans(&self) -> Vec<SpanData> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl SpanExporter for Memory {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).extend(batch);
        Ok(())
    }
}

/// One captured span. Wraps the SDK's [`SpanData`] with lookups and assertions.
#[derive(Debug, Clone)]
pub struct CapturedSpan {
    data: SpanData,
}

impl CapturedSpan {
    /// The span's name.
    pub fn name(&self) -> &str {
        &self.data.name
    }

    /// The value of attribute `key` (the last one set wins).
    pub fn attr(&self, key: &str) -> Option<&Value> {
        span_data::last(&self.data.attributes, key)
    }

    /// The string value of attribute `key`, if it is a string.
    pub fn str_attr(&self, key: &str) -> Option<&str> {
        match self.attr(key) {
            Some(Value::String(s)) => Some(s.as_str()),
            _ => None,
        }
    }

    /// Attribute `key` parsed as JSON (arguments, results and messages are recorded as JSON strings).
    pub fn json_attr(&self, key: &str) -> Option<serde_json::Value> {
        self.str_attr(key).and_then(|s| serde_json::from_str(s).ok())
    }

    /// Assert that attribute `key` equals `expected`; returns the span for chaining.
    #[track_caller]
    pub fn assert_attr(&self, key: &str, expected: impl Into<Value>) -> &Self {
        let expected = expected.into();
        match self.attr(key) {
            Some(actual) if *actual == expected => self,
            Some(actual) => panic!(
                "span {:?}: attribute {key:?} is {}, expected {}",
                self.name(),
                show(actual),
                show(&expected)
            ),
            None => panic!(
                "span {:?} has no attribute {key:?}; it has {:?}",
                self.name(),
                self.data
                    .attributes
                    .iter()
                    .map(|kv| kv.key.as_str())
                    .collect::<Vec<_>>()
            ),
        }
    }

    /// Assert that the span has no attribute `key`; returns the span for chaining.
    #[track_caller]
    pub fn assert_no_attr(&self, key: &str) -> &Self {
        if let Some(value) = self.attr(key) {
            panic!("span {:?} has attribute {key:?} = {}", self.name(), show(value));
        }
        self
    }

    /// All attributes, in the order they were set.
    pub fn attributes(&self) -> &[KeyValue] {
        &self.data.attributes
    }

    /// The span's status.
    pub fn status(&self) -> &Status {
        &self.data.status
    }

    /// Whether the span ended with an error status.
    pub fn is_error(&self) -> bool {
        matches!(self.data.status, Status::Error { .. })
    }

    /// The names of the span's events, in order.
    pub fn event_names(&self) -> Vec<&str> {
        self.data.events.iter().map(|e| e.name.as_ref()).collect()
    }

    /// The attributes of the first event called `name`.
    pub fn event(&self, name: &str) -> Option<&[KeyValue]> {
        self.data
            .events
            .iter()
            .find(|e| e.name == name)
            .map(|e| e.attributes.as_slice())
    }

    /// Whether `parent` is this span's direct parent.
    pub fn is_child_of(&self, parent: &CapturedSpan) -> bool {
        self.data.parent_span_id == parent.data.span_context.span_id()
            && self.data.span_context.trace_id() == parent.data.span_context.trace_id()
    }

    /// The trace this span belongs to.
    pub fn trace_id(&self) -> TraceId {
        self.data.span_context.trace_id()
    }

    /// This span's id.
    pub fn span_id(&self) -> SpanId {
        self.data.span_context.span_id()
    }

    /// The parent's span id ([`SpanId::INVALID`] for a root).
    pub fn parent_span_id(&self) -> SpanId {
        self.data.parent_span_id
    }

    /// Everything the SDK recorded.
    pub fn data(&self) -> &SpanData {
        &self.data
    }
}

/// A score, as [`crate::score`] (or a decision's confidence) recorded it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Score {
    /// The score's name.
    pub name: String,
    /// Its value, typed as it was recorded.
    pub value: ScoreValue,
    /// The comment ([`crate::score_with_comment`]), if any.
    pub comment: Option<String>,
    /// The span it was recorded on (the agent run's).
    pub span: String,
}

impl Score {
    fn all_in(span: &CapturedSpan) -> Vec<Score> {
        let text = |attrs: &[KeyValue], key: &str| {
            attrs
                .iter()
                .find(|kv| kv.key.as_str() == key)
                .map(|kv| match &kv.value {
                    Value::String(s) => s.as_str().to_owned(),
                    other => other.to_string(),
                })
        };
        span.data
            .events
            .iter()
            .filter(|e| e.name == GEN_AI_EVALUATION_RESULT)
            .map(|e| {
                let attrs = e.attributes.as_slice();
                let label = text(attrs, GEN_AI_EVALUATION_SCORE_LABEL);
                let value = match text(attrs, WAXELL_SCORE_DATA_TYPE).as_deref() {
                    Some("boolean") => ScoreValue::Boolean(label.as_deref() == Some("true")),
                    Some("categorical") => ScoreValue::Categorical(label.unwrap_or_default()),
                    _ => ScoreValue::Numeric(
                        attrs
                            .iter()
                            .find(|kv| kv.key.as_str() == GEN_AI_EVALUATION_SCORE_VALUE)
                            .and_then(|kv| match kv.value {
                                Value::F64(v) => Some(v),
                                Value::I64(v) => Some(v as f64),
                                _ => None,
                            })
                            .unwrap_or(f64::NAN),
                    ),
                };
                Score {
                    name: text(attrs, GEN_AI_EVALUATION_NAME).unwrap_or_default(),
                    value,
                    comment: text(attrs, GEN_AI_EVALUATION_EXPLANATION),
                    span: span.name().to_owned(),
                }
            })
            .collect()
    }
}

/// A decision, as `#[decision]`, [`crate::decide`] or the LLM client (a model's tool choice) recorded it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RecordedDecision {
    /// The decision's name.
    pub name: String,
    /// The options offered (empty when none were declared).
    pub options: Vec<String>,
    /// The option chosen, if the decision completed.
    pub chosen: Option<String>,
    /// The reasoning, when content capture is on.
    pub reasoning: Option<String>,
    /// The confidence, in `[0, 1]`.
    pub confidence: Option<f64>,
    /// Whether the chosen option was not among the options.
    pub invalid_choice: bool,
    /// The decision's span.
    pub span: String,
}

impl RecordedDecision {
    fn from_span(span: &CapturedSpan) -> Option<Self> {
        if span.str_attr(WAXELL_SPAN_TYPE) != Some("decision") {
            return None;
        }
        let options = match span.attr(WAXELL_DECISION_OPTIONS) {
            Some(Value::Array(opentelemetry::Array::String(items))) => {
                items.iter().map(|s| s.as_str().to_owned()).collect()
            }
            _ => Vec::new(),
        };
        Some(Self {
            name: span.str_attr(WAXELL_DECISION_NAME).unwrap_or_default().to_owned(),
            options,
            chosen: span.str_attr(WAXELL_DECISION_CHOSEN).map(str::to_owned),
            reasoning: span.str_attr(WAXELL_DECISION_REASONING).map(str::to_owned),
            confidence: match span.attr(WAXELL_DECISION_CONFIDENCE) {
                Some(Value::F64(v)) => Some(*v),
                _ => None,
            },
            invalid_choice: span.attr(WAXELL_DECISION_INVALID_CHOICE) == Some(&Value::Bool(true)),
            span: span.name().to_owned(),
        })
    }
}

/// A value for a failure message: strings quoted, the rest as OpenTelemetry displays them.
fn show(value: &Value) -> String {
    match value {
        Value::String(s) => format!("{:?}", s.as_str()),
        other => other.to_string(),
    }
}

/// Spans as an indented tree: roots (spans whose parent was not captured) first, children in start order.
fn render_tree(spans: &[CapturedSpan]) -> String {
    if spans.is_empty() {
        return "  (no spans)\n".to_owned();
    }
    let ids: std::collections::HashSet<(TraceId, SpanId)> =
        spans.iter().map(|s| (s.trace_id(), s.span_id())).collect();
    let mut children: HashMap<(TraceId, SpanId), Vec<&CapturedSpan>> = HashMap::new();
    let mut roots = Vec::new();
    for span in spans {
        let parent = (span.trace_id(), span.parent_span_id());
        if ids.contains(&parent) {
            children.entry(parent).or_default().push(span);
        } else {
            roots.push(span);
        }
    }
    roots.sort_by_key(|s| s.data.start_time);
    for list in children.values_mut() {
        list.sort_by_key(|s| s.data.start_time);
    }
    let mut out = String::new();
    let mut stack: Vec<(&CapturedSpan, usize)> = roots.into_iter().rev().map(|s| (s, 0)).collect();
    while let Some((span, depth)) = stack.pop() {
        let _ = write!(out, "  {}{}", "  ".repeat(depth), span.name());
        if let Status::Error { description } = span.status() {
            let _ = write!(out, "  [error: {description}]");
        }
        out.push('\n');
        if let Some(kids) = children.get(&(span.trace_id(), span.span_id())) {
            stack.extend(kids.iter().rev().map(|k| (*k, depth + 1)));
        }
    }
    out
}
