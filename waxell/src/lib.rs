//! # waxell: observability for AI agents
//!
//! Attribute macros turn agent code into OpenTelemetry traces that show what the agent did: which agent ran
//! (`#[agent]`), which tool it called (`#[tool]`), what it reasoned (`#[reasoning]`) and decided
//! (`#[decision]`), and how well it scored ([`score`]). Every span carries both the OpenTelemetry GenAI
//! attributes and the OpenInference ones, so Jaeger, Phoenix, Langfuse and MLflow all render it.
//!
//! ```
//! use waxell::{agent, tool, Reasoning};
//!
//! #[tool(tool_type = "function")]
//! fn add(a: i64, b: i64) -> i64 {
//!     a + b
//! }
//!
//! #[waxell::reasoning(step = "check")]
//! fn check(sum: i64) -> Reasoning {
//!     Reasoning::new(format!("the sum is {sum}")).evidence("added two numbers").conclusion("done")
//! }
//!
//! #[agent(name = "calculator")]
//! fn run() -> i64 {
//!     let sum = add(2, 3);
//!     check(sum);
//!     waxell::score("correct", sum == 5);
//!     sum
//! }
//!
//! // Without init(), spans go to the global OpenTelemetry provider (a no-op unless you set one).
//! assert_eq!(run(), 5);
//! ```
//!
//! Call [`init`] once at start-up to export: over OTLP when `OTEL_EXPORTER_OTLP_ENDPOINT` is set, else to the
//! embedded default (a trace tree on stderr and OTLP JSON lines under `.waxell/traces/`).
//!
//! To assert in your own tests which spans, scores and decisions your agent produced, use the `testing`
//! module (cargo feature `testing`).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod capture;
mod cloud;
mod config;
mod console;
mod decision;
// Only the async-openai layer and the `tracing` bridge queue recording work; without them, nothing does.
#[cfg_attr(
    not(any(feature = "async-openai", all(feature = "tracing", feature = "llm"))),
    path = "deferred_none.rs"
)]
mod deferred;
pub mod e2b;
mod error;
pub mod export;
#[cfg(any(feature = "otlp-http", feature = "llm", feature = "e2b"))]
mod http;
mod init;
#[cfg(feature = "llm")]
pub mod integrations;
mod limits;
#[cfg(feature = "llm")]
pub mod llm;
#[cfg(any(feature = "llm", feature = "e2b"))]
mod retry_after;
mod run;
pub mod sandbox;
mod score;
mod scrub;
mod secret;
pub mod semconv;
mod spans;
pub(crate) mod telemetry;
#[cfg(feature = "testing")]
pub mod testing;
#[cfg(feature = "ui")]
pub mod ui;

pub use config::Protocol;
pub use decision::{decide, Decision, DecisionOptions, Reasoning};
pub use error::InitError;
pub use init::{builder, init, Builder, FlushError, Guard, ShutdownError};
pub use score::{current_trace_id, metadata, score, score_with_comment, tag, ScoreValue};
pub use secret::Secret;

/// A `tracing` layer that puts `tracing` spans in the same traces as waxell's, nesting both ways (sync and
/// async): a `#[tool]` called inside a `tracing` span is its child, and a `tracing` span entered inside an
/// `#[agent]` is the agent's child. Call it after [`init`]:
///
/// ```no_run
/// use tracing_subscriber::layer::SubscriberExt as _;
/// use tracing_subscriber::util::SubscriberInitExt as _;
///
/// let _telemetry = waxell::init()?;
/// tracing_subscriber::registry().with(waxell::tracing_layer()).init();
/// # Ok::<(), waxell::InitError>(())
/// ```
///
/// `tracing` spans are started like waxell's own, so inside a `waxell::testing` capture they are captured too.
///
/// Filter out the HTTP stacks (`hyper`, `h2`, `tonic`, `reqwest`) if your subscriber records their spans, so
/// exporting does not trace itself.
///
/// With the `llm` feature, `tracing` spans of LLM calls (rig's, genai's: GenAI fields with a `chat`,
/// `generate_content` or `embeddings` operation) come out as waxell's LLM spans: see `docs/integrations.md`.
#[cfg(feature = "tracing")]
pub fn tracing_layer<S>() -> impl tracing_subscriber::Layer<S>
where
    S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
{
    #[cfg(feature = "llm")]
    let tracer = integrations::genai_spans::GenAiTracer::new(telemetry::bridge::BridgeTracer);
    #[cfg(not(feature = "llm"))]
    let tracer = telemetry::bridge::BridgeTracer;
    tracing_opentelemetry::layer().with_tracer(tracer)
}

#[cfg(feature = "macros")]
#[doc(inline)]
pub use waxell_macros::{agent, decision, reasoning, retrieval, step, tool, DecisionOptions};

/// Support for the macros' expansions. Not public API: may change in any release.
#[doc(hidden)]
pub mod __private {
    pub use crate::capture::outcome::{
        PlainAny, PlainDebug, PlainSer, ResultAnyAny, ResultAnyDebug, ResultAnyDisplay, ResultDebugDisplay,
        ResultSerDisplay,
    };
    pub use crate::capture::{CaptureViaDebug, CaptureViaSerialize, CaptureViaTypeName, Captured, Probe};
    pub use crate::run::{Args, Instrumented, Kind, Meta, Run};
}
