//! Process-wide telemetry state, and the crate-internal handles the instrumented clients (sandbox, LLM,
//! E2B) and the macros' runtime use to emit spans.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, RwLock};

use opentelemetry::global::BoxedTracer;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry::InstrumentationScope;

use crate::capture::truncate_owned;
use crate::config::{self, Capture};
use crate::scrub::{self, Scrubber};

/// Where spans are started. The SDK tracer `init()` built is used directly (no boxed span per call);
/// without `init()`, the global provider's boxed tracer.
pub(crate) enum SpanSource {
    Sdk(opentelemetry_sdk::trace::SdkTracer),
    Global(BoxedTracer),
}

impl SpanSource {
    /// Start a span under `parent` and return the context holding it.
    pub(crate) fn start(
        &self,
        builder: opentelemetry::trace::SpanBuilder,
        parent: &opentelemetry::Context,
    ) -> opentelemetry::Context {
        use opentelemetry::trace::{TraceContextExt as _, Tracer as _};
        match self {
            Self::Sdk(t) => parent.with_span(t.build_with_context(builder, parent)),
            Self::Global(t) => parent.with_span(t.build_with_context(builder, parent)),
        }
    }
}

/// What every instrumented call reads: the tracer and the capture policy.
pub(crate) struct State {
    pub(crate) tracer: SpanSource,
    pub(crate) capture: Capture,
    /// `None` when scrubbing is switched off.
    pub(crate) scrubber: Option<&'static Scrubber>,
}

/// `WAXELL_OBSERVE`, read once; `init()` may switch it. Checked before anything else so that a
/// disabled SDK costs one atomic load per instrumented call.
static OBSERVE: LazyLock<AtomicBool> = LazyLock::new(|| AtomicBool::new(config::observe_from_env()));

static STATE: RwLock<Option<Arc<State>>> = RwLock::new(None);

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

/// The current state. Without `init()`, spans go to whatever global tracer provider is set (so a user
/// with their own OpenTelemetry setup gets waxell spans there), with the capture policy from the environment.
pub(crate) fn state() -> Arc<State> {
    if let Some(state) = STATE.read().unwrap_or_else(|p| p.into_inner()).as_ref() {
        return Arc::clone(state);
    }
    let capture = config::capture_from_env().unwrap_or_else(|err| {
        eprintln!("waxell: {err}; using the defaults");
        Capture::default()
    });
    let state = Arc::new(State {
        tracer: SpanSource::Global(opentelemetry::global::tracer_provider().tracer_with_scope(scope())),
        scrubber: capture.scrub.then(|| &*scrub::DEFAULT),
        capture,
    });
    let mut slot = STATE.write().unwrap_or_else(|p| p.into_inner());
    Arc::clone(slot.get_or_insert(state))
}

impl State {
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

/// The tracer every waxell span is started from.
pub(crate) fn tracer() -> BoxedTracer {
    opentelemetry::global::tracer_provider().tracer_with_scope(scope())
}

/// Whether content (arguments, results, code, messages) may be captured on spans.
pub(crate) fn capture_content() -> bool {
    state().capture.content
}

/// Scrub secrets from `text` and truncate it to `max_chars` characters for a span attribute.
pub(crate) fn content_preview(text: &str, max_chars: usize) -> String {
    state().preview(text, max_chars)
}

/// The meter for waxell's metrics (`gen_ai.client.*`). A no-op meter unless `init()` configured an
/// OTLP endpoint.
#[cfg_attr(not(feature = "llm"), allow(dead_code))]
pub(crate) fn meter() -> opentelemetry::metrics::Meter {
    opentelemetry::global::meter_with_scope(scope())
}

#[cfg(feature = "llm")]
/// Record a decision (a `decide {name}` span under the current context, plus the
/// `decision_confidence:{name}` score when a confidence is given). Used by the LLM client for
/// `tool_call:{name}` decisions.
pub(crate) fn record_decision(
    name: &str,
    options: &[String],
    chosen: &str,
    reasoning: Option<&str>,
    confidence: Option<f64>,
) {
    crate::decision::record(name, options, chosen, reasoning, confidence);
}
