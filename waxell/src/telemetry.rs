//! Process-wide telemetry state, and the crate-internal handles the instrumented clients (sandbox, LLM,
//! E2B) and the macros' runtime use to emit spans.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, RwLock};

use opentelemetry::global::BoxedTracer;
use opentelemetry::trace::{
    SpanBuilder, SpanId, TraceContextExt as _, TraceId, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, InstrumentationScope};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator};

use crate::capture::truncate_owned;
use crate::config::{self, Capture, Env};
use crate::scrub::{self, Scrubber};

/// Where spans are started. The SDK tracer `init()` built (or a test capture's) is used directly (no boxed
/// span per call); without `init()`, the global provider's boxed tracer.
pub(crate) enum SpanSource {
    Sdk(opentelemetry_sdk::trace::SdkTracer),
    Global(BoxedTracer),
}

/// What every instrumented call reads: the tracer and the capture policy.
pub(crate) struct State {
    pub(crate) tracer: SpanSource,
    pub(crate) capture: Capture,
    /// `None` when scrubbing is switched off.
    pub(crate) scrubber: Option<&'static Scrubber>,
    /// Whether a span may be started later under ids handed out now ([`SpanIds::ahead`]): the tracer's
    /// provider draws its ids from [`PresetIds`] and samples by the parent (the SDK's default), so the
    /// sampled flag is known before the span starts.
    /// Only the LLM integrations start spans later.
    #[cfg(any(feature = "async-openai", all(feature = "tracing", feature = "llm")))]
    pub(crate) ids_ahead: bool,
}

/// The ids of a span that starts later, on another thread, than the call it records: the LLM
/// integrations hand out an LLM call's ids (and send them as `traceparent`) at once and open its span on
/// the recording thread, so the caller does not wait for the span's start. [`with_preset_ids`] gives the
/// span exactly these ids.
#[cfg(any(feature = "async-openai", all(feature = "tracing", feature = "llm")))]
#[derive(Debug, Clone)]
pub(crate) struct SpanIds {
    /// The parent's context, in which the span will start; it also picks the state (a test capture).
    pub(crate) parent: Context,
    /// The span as the server sees it: in the request's context, and on the wire as `traceparent`.
    pub(crate) context: opentelemetry::trace::SpanContext,
    /// When the span begins (its start time, whenever it is started).
    pub(crate) started: std::time::Instant,
    pub(crate) start_time: std::time::SystemTime,
}

#[cfg(any(feature = "async-openai", all(feature = "tracing", feature = "llm")))]
impl SpanIds {
    /// Ids for a child of the current context, if its state can start a span under them later.
    #[cfg(feature = "async-openai")]
    pub(crate) fn ahead() -> Option<Self> {
        let parent = Context::current();
        let state = state_for(&parent)?;
        Self::for_child_of(parent, &state)
    }

    /// Ids for a child of `parent`, if `state` (the one for `parent`) can start a span under them later.
    pub(crate) fn for_child_of(parent: Context, state: &State) -> Option<Self> {
        use opentelemetry::trace::{SpanContext, TraceFlags, TraceState};
        if !state.ids_ahead {
            return None;
        }
        let ids = RandomIdGenerator::default();
        let (trace_id, flags, trace_state) = {
            let span = parent.span();
            let of_parent = span.span_context();
            if of_parent.is_valid() {
                // Parent-based sampling: the child is sampled exactly when its parent is.
                let state = of_parent.trace_state().clone();
                (of_parent.trace_id(), of_parent.trace_flags(), state)
            } else {
                (ids.new_trace_id(), TraceFlags::SAMPLED, TraceState::default())
            }
        };
        let context = SpanContext::new(trace_id, ids.new_span_id(), flags, false, trace_state);
        Some(Self {
            parent,
            context,
            started: std::time::Instant::now(),
            start_time: std::time::SystemTime::now(),
        })
    }

    /// The context to send the request in: the span-to-be is its current span.
    #[cfg(feature = "async-openai")]
    pub(crate) fn request_context(&self) -> Context {
        self.parent.with_remote_span_context(self.context.clone())
    }
}

thread_local! {
    /// The ids [`PresetIds`] hands out for the span being started on this thread, if preset.
    static PRESET: std::cell::Cell<Option<(TraceId, SpanId)>> = const { std::cell::Cell::new(None) };
}

/// The id generator of every provider waxell builds: random ids, except for a span started through
/// [`with_preset_ids`], which gets the ids handed out for it earlier.
#[derive(Debug, Default)]
pub(crate) struct PresetIds(RandomIdGenerator);

impl IdGenerator for PresetIds {
    fn new_trace_id(&self) -> TraceId {
        PRESET
            .with(std::cell::Cell::get)
            .map_or_else(|| self.0.new_trace_id(), |(trace, _)| trace)
    }

    fn new_span_id(&self) -> SpanId {
        PRESET
            .with(std::cell::Cell::get)
            .map_or_else(|| self.0.new_span_id(), |(_, span)| span)
    }
}

#[cfg(any(feature = "async-openai", all(feature = "tracing", feature = "llm")))]
/// Run `start`, which starts one span on this thread, with `ids` as the ids [`PresetIds`] hands out.
pub(crate) fn with_preset_ids<R>(ids: &SpanIds, start: impl FnOnce() -> R) -> R {
    /// Clears the preset ids however the start ends, so no later span on this thread reuses them.
    struct Preset;
    impl Drop for Preset {
        fn drop(&mut self) {
            PRESET.with(|slot| slot.set(None));
        }
    }
    PRESET.with(|slot| slot.set(Some((ids.context.trace_id(), ids.context.span_id()))));
    let _preset = Preset;
    start()
}

/// `WAXELL_OBSERVE`, read once; `init()` may switch it. Checked before anything else so that a
/// disabled SDK costs one atomic load per instrumented call.
static OBSERVE: LazyLock<AtomicBool> =
    LazyLock::new(|| AtomicBool::new(config::observe_from_env(&Env::process())));

static STATE: RwLock<Option<Arc<State>>> = RwLock::new(None);

/// Test captures (`waxell::testing`): states carried in a context instead of installed globally. Built only
/// with the `testing` feature; without it nothing looks for them.
#[cfg(feature = "testing")]
mod scoped {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex, Weak};

    use opentelemetry::trace::{TraceContextExt as _, TraceId};
    use opentelemetry::Context;

    use super::State;

    /// How many scoped states (test captures) are alive. While none is, resolving a state never looks into
    /// the context, so the production path pays one atomic load for the feature.
    static SCOPED: AtomicUsize = AtomicUsize::new(0);

    /// A state carried in an OpenTelemetry [`Context`] instead of installed globally: every span started
    /// under a context holding it, in whatever thread or task, uses it. `waxell::testing` captures are built
    /// on this; it is generic so that this module knows nothing of what sits above it.
    #[derive(Clone)]
    pub(crate) struct Scoped(pub(crate) Arc<State>);

    /// Keeps the count of live scoped states; created with the scoped state, dropped when it ends.
    pub(crate) struct ScopedToken(());

    /// The traces scoped states started, so a span whose context lost the scope still finds it: a
    /// `tracing` span started as an explicit root (rig's `invoke_agent`) that waxell merges into the
    /// surrounding agent span hands its children a context with the agent's span but none of its values.
    /// Only consulted while a scoped state is alive; entries go with their state.
    static SCOPED_TRACES: Mutex<Vec<(TraceId, Weak<State>)>> = Mutex::new(Vec::new());

    impl ScopedToken {
        pub(crate) fn new() -> Self {
            SCOPED.fetch_add(1, Ordering::AcqRel);
            Self(())
        }
    }

    impl Drop for ScopedToken {
        fn drop(&mut self) {
            SCOPED.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Whether any scoped state is alive.
    #[inline]
    pub(super) fn alive() -> bool {
        SCOPED.load(Ordering::Acquire) != 0
    }

    /// The scoped state for spans started under `parent`: the one it carries, else the one that started its
    /// trace.
    #[inline]
    pub(super) fn state_for(parent: &Context) -> Option<Arc<State>> {
        if !alive() {
            return None;
        }
        if let Some(scoped) = parent.get::<Scoped>() {
            return Some(Arc::clone(&scoped.0));
        }
        let span = parent.span();
        let trace = span.span_context();
        if trace.is_valid() {
            let traces = SCOPED_TRACES.lock().unwrap_or_else(|p| p.into_inner());
            return traces
                .iter()
                .rev()
                .find(|(known, _)| *known == trace.trace_id())
                .and_then(|(_, state)| state.upgrade());
        }
        None
    }

    /// After a span started under `parent` (in `cx`): a root started in a scoped state's context starts a
    /// trace of that state.
    #[inline]
    pub(super) fn started(parent: &Context, cx: &Context) {
        if alive() && !parent.has_active_span() {
            if let Some(scoped) = parent.get::<Scoped>() {
                let mut traces = SCOPED_TRACES.lock().unwrap_or_else(|p| p.into_inner());
                traces.retain(|(_, state)| state.strong_count() > 0);
                traces.push((cx.span().span_context().trace_id(), Arc::downgrade(&scoped.0)));
            }
        }
    }
}

#[cfg(feature = "testing")]
pub(crate) use self::scoped::{Scoped, ScopedToken};

/// Without the `testing` feature there are no scoped states.
#[cfg(not(feature = "testing"))]
mod scoped {
    use std::sync::Arc;

    use opentelemetry::Context;

    use super::State;

    #[inline]
    pub(super) fn alive() -> bool {
        false
    }

    #[inline]
    pub(super) fn state_for(_parent: &Context) -> Option<Arc<State>> {
        None
    }

    #[inline]
    pub(super) fn started(_parent: &Context, _cx: &Context) {}
}

pub(crate) fn scope() -> InstrumentationScope {
    InstrumentationScope::builder("waxell")
        .with_version(env!("CARGO_PKG_VERSION"))
        .build()
}

/// Whether instrumentation is on at all.
#[inline]
pub(crate) fn is_enabled() -> bool {
    OBSERVE.load(Ordering::Relaxed)
}

pub(crate) fn set_enabled(on: bool) {
    OBSERVE.store(on, Ordering::Relaxed);
}

/// Install the state `init()` built.
pub(crate) fn install(state: State) {
    let mut slot = STATE.write().unwrap_or_else(|poisoned| poisoned.into_inner());
    *slot = Some(Arc::new(state));
}

/// Forget the installed state (after shutdown); later spans go to the global provider again.
pub(crate) fn uninstall() {
    let mut slot = STATE.write().unwrap_or_else(|poisoned| poisoned.into_inner());
    *slot = None;
}

/// Whether any span may be recorded at all: instrumentation is on or a test capture is alive. Checked
/// before reading the current context, so that a disabled SDK costs two atomic loads per instrumented call.
#[inline]
pub(crate) fn maybe_active() -> bool {
    is_enabled() || scoped::alive()
}

/// The state for spans started under `parent`: a scoped state `parent` carries (a test capture), else the
/// process-wide one. `None` when instrumentation is off (`WAXELL_OBSERVE=false`) and no scoped state applies.
#[inline]
pub(crate) fn state_for(parent: &Context) -> Option<Arc<State>> {
    if let Some(state) = scoped::state_for(parent) {
        return Some(state);
    }
    is_enabled().then(global_state)
}

/// [`state_for`] the current context.
pub(crate) fn current() -> Option<Arc<State>> {
    state_for(&Context::current())
}

/// The process-wide state. Without `init()`, spans go to whatever global tracer provider is set (so a user
/// with their own OpenTelemetry setup gets waxell spans there), with the capture policy from the environment.
fn global_state() -> Arc<State> {
    if let Some(state) = STATE.read().unwrap_or_else(|p| p.into_inner()).as_ref() {
        return Arc::clone(state);
    }
    let capture = config::capture_from_env(&Env::process()).unwrap_or_else(|err| {
        crate::console::current().message(format_args!("{err}; using the defaults"));
        Capture::default()
    });
    let state = Arc::new(State {
        tracer: SpanSource::Global(opentelemetry::global::tracer_provider().tracer_with_scope(scope())),
        scrubber: capture.scrub.then(|| &*scrub::DEFAULT),
        capture,
        // Someone else's provider: its ids and sampler are its own.
        #[cfg(any(feature = "async-openai", all(feature = "tracing", feature = "llm")))]
        ids_ahead: false,
    });
    let mut slot = STATE.write().unwrap_or_else(|p| p.into_inner());
    Arc::clone(slot.get_or_insert(state))
}

impl State {
    /// Start a span under `parent` and return the context holding it. The one way waxell starts a span:
    /// callers get the `State` that applies to `parent` from [`state_for`] first.
    pub(crate) fn start(&self, builder: SpanBuilder, parent: &Context) -> Context {
        let cx = match &self.tracer {
            SpanSource::Sdk(t) => parent.with_span(t.build_with_context(builder, parent)),
            SpanSource::Global(t) => parent.with_span(t.build_with_context(builder, parent)),
        };
        scoped::started(parent, &cx);
        cx
    }

    /// [`State::start`] with the ids `ids` handed out earlier ([`SpanIds::ahead`]), under their parent and
    /// as of when they were handed out.
    #[cfg(feature = "async-openai")]
    pub(crate) fn start_with_ids(&self, builder: SpanBuilder, ids: &SpanIds) -> Context {
        with_preset_ids(ids, || {
            self.start(builder.with_start_time(ids.start_time), &ids.parent)
        })
    }

    /// The span [`State::start`] would start, not yet in a context: for the `tracing` bridge, whose layer
    /// keeps spans itself.
    #[cfg(feature = "tracing")]
    fn build(&self, builder: SpanBuilder, parent: &Context) -> bridge::BridgeSpan {
        let span = match &self.tracer {
            SpanSource::Sdk(t) => bridge::Built::Sdk(t.build_with_context(builder, parent)),
            SpanSource::Global(t) => bridge::Built::Global(t.build_with_context(builder, parent)),
        };
        bridge::BridgeSpan::new(span, parent)
    }

    /// Scrub and truncate one captured string.
    pub(crate) fn content(&self, text: &str) -> String {
        self.preview(text, self.capture.max_chars)
    }

    /// Scrub, then truncate to `max_chars` (never more than the configured maximum).
    pub(crate) fn preview(&self, text: &str, max_chars: usize) -> String {
        let max = max_chars.min(self.capture.max_chars);
        match self.scrubber {
            Some(s) => truncate_owned(s.scrub(text), max),
            None => truncate_owned(std::borrow::Cow::Borrowed(text), max),
        }
    }

    /// Scrub a JSON value and render it, truncated.
    pub(crate) fn json_content(&self, mut value: serde_json::Value) -> String {
        if let Some(s) = self.scrubber {
            s.scrub_json(&mut value);
        }
        // `to_string` writes into one growing buffer; `Display` would go through the formatting machinery.
        let text = serde_json::to_string(&value).unwrap_or_default();
        truncate_owned(std::borrow::Cow::Owned(text), self.capture.max_chars)
    }
}

/// Start a span under the current context with the state that applies there, for callers that do not need
/// the state before building the span. When instrumentation is off, the span is a non-recording one that
/// keeps the parent's span context (so propagation still works and nothing is recorded on the parent).
pub(crate) fn start_current(builder: SpanBuilder) -> Context {
    let parent = Context::current();
    match current() {
        Some(state) => state.start(builder, &parent),
        None => parent
            .with_span(opentelemetry::trace::noop::NoopTracer::new().build_with_context(builder, &parent)),
    }
}

/// The tracer of the `tracing` bridge (`tracing_layer()`): it starts each span from the state that applies
/// to its parent context, like waxell's own spans, so `tracing` spans land in a test capture too.
#[cfg(feature = "tracing")]
pub(crate) mod bridge {
    use std::borrow::Cow;
    use std::time::SystemTime;

    use opentelemetry::trace::{
        Span, SpanBuilder, SpanContext, Status, TraceContextExt as _, TracerProvider as _,
    };
    use opentelemetry::{Context, KeyValue};

    use super::{scope, state_for};

    /// Routes each span by its parent context; see the module docs.
    #[derive(Debug, Clone, Copy, Default)]
    pub(crate) struct BridgeTracer;

    /// A span from whichever tracer applied.
    #[derive(Debug)]
    pub(crate) struct BridgeSpan {
        span: Built,
        /// No parent in this process: its end completes the trace here.
        local_root: bool,
    }

    impl BridgeSpan {
        pub(super) fn new(span: Built, parent: &Context) -> Self {
            let parent = parent.span();
            let parent = parent.span_context();
            Self {
                span,
                local_root: !parent.is_valid() || parent.is_remote(),
            }
        }
    }

    #[derive(Debug)]
    #[allow(
        clippy::large_enum_variant,
        reason = "the SDK variant is the common one; boxing it would cost an allocation per span"
    )]
    pub(crate) enum Built {
        /// From `init()`'s pipeline or a test capture.
        Sdk(opentelemetry_sdk::trace::Span),
        /// From the global provider.
        Global(opentelemetry::global::BoxedSpan),
    }

    impl opentelemetry::trace::Tracer for BridgeTracer {
        type Span = BridgeSpan;

        fn build_with_context(&self, builder: SpanBuilder, parent_cx: &Context) -> BridgeSpan {
            match state_for(parent_cx) {
                Some(state) => state.build(builder, parent_cx),
                // Instrumentation off: `tracing` spans still go to the global provider, as before.
                None => BridgeSpan::new(
                    Built::Global(
                        opentelemetry::global::tracer_provider()
                            .tracer_with_scope(scope())
                            .build_with_context(builder, parent_cx),
                    ),
                    parent_cx,
                ),
            }
        }
    }

    macro_rules! delegate {
        ($self:ident, $s:ident => $e:expr) => {
            match &mut $self.span {
                Built::Sdk($s) => $e,
                Built::Global($s) => $e,
            }
        };
    }

    impl Span for BridgeSpan {
        fn add_event_with_timestamp<T>(&mut self, name: T, timestamp: SystemTime, attributes: Vec<KeyValue>)
        where
            T: Into<Cow<'static, str>>,
        {
            delegate!(self, s => s.add_event_with_timestamp(name, timestamp, attributes))
        }
        fn span_context(&self) -> &SpanContext {
            match &self.span {
                Built::Sdk(s) => s.span_context(),
                Built::Global(s) => s.span_context(),
            }
        }
        fn is_recording(&self) -> bool {
            match &self.span {
                Built::Sdk(s) => s.is_recording(),
                Built::Global(s) => s.is_recording(),
            }
        }
        fn set_attribute(&mut self, attribute: KeyValue) {
            delegate!(self, s => s.set_attribute(attribute))
        }
        fn set_status(&mut self, status: Status) {
            delegate!(self, s => s.set_status(status))
        }
        fn update_name<T>(&mut self, new_name: T)
        where
            T: Into<Cow<'static, str>>,
        {
            delegate!(self, s => s.update_name(new_name))
        }
        fn add_link(&mut self, span_context: SpanContext, attributes: Vec<KeyValue>) {
            delegate!(self, s => s.add_link(span_context, attributes))
        }
        fn end_with_timestamp(&mut self, timestamp: SystemTime) {
            // A root waits for LLM calls still being recorded off their thread (`crate::deferred`), so
            // the trace reaches the exporter and the console complete.
            if self.local_root {
                crate::deferred::drain(crate::deferred::DRAIN_TIMEOUT);
            }
            delegate!(self, s => s.end_with_timestamp(timestamp))
        }
    }
}

/// Whether content (arguments, results, code, messages) may be captured on spans started here.
pub(crate) fn capture_content() -> bool {
    current().is_some_and(|state| state.capture.content)
}

/// Scrub secrets from `text` and truncate it to `max_chars` characters for a span attribute.
pub(crate) fn content_preview(text: &str, max_chars: usize) -> String {
    match current() {
        Some(state) => state.preview(text, max_chars),
        None => global_state().preview(text, max_chars),
    }
}
