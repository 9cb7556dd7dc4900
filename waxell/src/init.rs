//! `init()`, its builder, and the guard that flushes and shuts down.

use std::path::PathBuf;
use std::sync::{mpsc, Arc};
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry::KeyValue;
#[cfg(any(feature = "otlp-http", feature = "grpc"))]
use opentelemetry_otlp::WithExportConfig as _;
#[cfg(feature = "grpc")]
use opentelemetry_otlp::WithTonicConfig as _;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider, SpanProcessor};
use opentelemetry_sdk::Resource;

use crate::config::{self, BatchSettings, Capture, Protocol};
use crate::console::Console;
use crate::export::fail_open::{DropCounters, FailOpenConfig, FailOpenExporter, QueueGate, Spill};
use crate::export::jsonl::JsonLinesFile;
#[cfg(feature = "otlp-http")]
use crate::export::transport::ObservedClient;
use crate::export::transport::TransportLog;
use crate::export::{default_trace_file, human, replay_hint, DropCounter, DroppedSpans, EmbeddedExporter};
use crate::limits::SpanCap;
use crate::scrub::{self, Scrubber};
use crate::semconv::*;
use crate::telemetry::{self, State};

/// Why `init()` could not set up telemetry. Every variant names what was wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InitError {
    /// An environment variable has a value we cannot use.
    #[error("environment variable {name}={value:?} is invalid: expected {expected}")]
    InvalidVariable {
        /// The variable.
        name: String,
        /// Its value (hidden for secrets).
        value: String,
        /// What would have been valid.
        expected: String,
    },
    /// A builder setting is invalid.
    #[error("invalid setting {setting}: {message}")]
    InvalidSetting {
        /// The setting.
        setting: &'static str,
        /// What is wrong with it.
        message: String,
    },
    /// The OTLP exporter could not be built.
    #[error("could not build the OTLP {protocol} exporter for {endpoint}: {message}")]
    Exporter {
        /// `http/protobuf`, `http/json` or `grpc`.
        protocol: &'static str,
        /// The endpoint it was for.
        endpoint: String,
        /// Why it could not be built.
        message: String,
    },
    /// The trace file could not be opened.
    #[error("could not open the trace file {path}: {source}")]
    TraceFile {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The configuration asks for something this build of waxell left out.
    #[error("{needed_for} needs waxell's cargo feature `{feature}`: enable it in Cargo.toml (waxell = {{ features = [\"{feature}\"] }})")]
    FeatureMissing {
        /// The cargo feature to enable.
        feature: &'static str,
        /// What the configuration asked for that needs it.
        needed_for: String,
    },
}

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

/// Set up telemetry from the environment (see the configuration reference in `docs/configuration.md`).
///
/// With an OTLP endpoint configured (`OTEL_EXPORTER_OTLP_ENDPOINT`, ...), spans go there; without one, the
/// embedded default prints a trace tree to stderr and writes OTLP JSON lines to `.waxell/traces/`.
/// Keep the returned guard alive: dropping it flushes and shuts down.
///
/// ```no_run
/// fn main() -> Result<(), waxell::InitError> {
///     let _telemetry = waxell::init()?;
///     // ... run agents ...
///     Ok(())
/// }
/// ```
pub fn init() -> Result<Guard, InitError> {
    builder().init()
}

/// A builder for [`init`] whose settings override the environment.
pub fn builder() -> Builder {
    Builder::default()
}

/// Settings for [`init`]; each overrides its environment variable.
#[derive(Default)]
#[must_use]
pub struct Builder {
    service_name: Option<String>,
    service_version: Option<String>,
    project_name: Option<String>,
    endpoint: Option<String>,
    protocol: Option<Protocol>,
    headers: Vec<(String, String)>,
    capture_content: Option<bool>,
    max_content_chars: Option<usize>,
    scrub: Option<bool>,
    scrub_patterns: Vec<(String, String)>,
    console: Option<bool>,
    console_writer: Option<Console>,
    trace_file: Option<Option<PathBuf>>,
    default_export: Option<bool>,
    processors: Vec<
        Box<
            dyn FnOnce(
                opentelemetry_sdk::trace::TracerProviderBuilder,
            ) -> opentelemetry_sdk::trace::TracerProviderBuilder,
        >,
    >,
    shutdown_timeout: Option<Duration>,
    export_timeout: Option<Duration>,
    circuit_breaker: Option<(u32, Duration)>,
    max_spans_per_run: Option<usize>,
}

impl Builder {
    /// `service.name` of the resource (else `OTEL_SERVICE_NAME`, else `waxell-agent`).
    pub fn with_service_name(mut self, name: impl Into<String>) -> Self {
        self.service_name = Some(name.into());
        self
    }
    /// `service.version` of the resource (else from `OTEL_RESOURCE_ATTRIBUTES`).
    pub fn with_service_version(mut self, version: impl Into<String>) -> Self {
        self.service_version = Some(version.into());
        self
    }
    /// `openinference.project.name` (Phoenix project), else `WAXELL_PROJECT_NAME`.
    pub fn with_project_name(mut self, name: impl Into<String>) -> Self {
        self.project_name = Some(name.into());
        self
    }
    /// Full OTLP traces URL (HTTP: including `/v1/traces`; gRPC: the collector address).
    pub fn with_otlp_endpoint(mut self, url: impl Into<String>) -> Self {
        self.endpoint = Some(url.into());
        self
    }
    /// The OTLP protocol (`OTEL_EXPORTER_OTLP_PROTOCOL`); its cargo feature must be on.
    pub fn with_protocol(mut self, protocol: Protocol) -> Self {
        self.protocol = Some(protocol);
        self
    }
    /// An extra header (HTTP) or metadata entry (gRPC) on every export request.
    pub fn with_header(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((key.into(), value.into()));
        self
    }
    /// Record content (arguments, results, messages, code); on by default.
    pub fn with_capture_content(mut self, on: bool) -> Self {
        self.capture_content = Some(on);
        self
    }
    /// Longest captured string, in characters (default 4,000).
    pub fn with_max_content_chars(mut self, chars: usize) -> Self {
        self.max_content_chars = Some(chars);
        self
    }
    /// Scrub secrets from captured content; on by default.
    pub fn with_scrubbing(mut self, on: bool) -> Self {
        self.scrub = Some(on);
        self
    }
    /// Also scrub matches of `regex`, tagged `[REDACTED:{kind}]`.
    pub fn with_scrub_pattern(mut self, kind: impl Into<String>, regex: impl Into<String>) -> Self {
        self.scrub_patterns.push((kind.into(), regex.into()));
        self
    }
    /// Print the trace tree on the console (embedded default only; default on, `WAXELL_CONSOLE`); see
    /// [`with_console_writer`](Self::with_console_writer) for where it goes.
    pub fn with_console(mut self, on: bool) -> Self {
        self.console = Some(on);
        self
    }
    /// Write the console (the embedded default's trace tree and every message waxell prints: the exit
    /// report, warnings) to `writer` instead of standard error. Takes effect when [`init`](Self::init) runs
    /// and stays until the next `init()`; the library prints nothing anywhere else.
    ///
    /// ```
    /// use std::io::Write;
    /// use std::sync::{Arc, Mutex};
    ///
    /// /// A writer that keeps what it is given, for a test or a UI to show.
    /// #[derive(Clone, Default)]
    /// struct Shared(Arc<Mutex<Vec<u8>>>);
    /// impl Write for Shared {
    ///     fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
    ///         self.0.lock().unwrap().write(buf)
    ///     }
    ///     fn flush(&mut self) -> std::io::Result<()> {
    ///         Ok(())
    ///     }
    /// }
    ///
    /// let console = Shared::default();
    /// let builder = waxell::builder().with_console_writer(console.clone());
    /// # drop(builder);
    /// ```
    pub fn with_console_writer(mut self, writer: impl std::io::Write + Send + 'static) -> Self {
        self.console_writer = Some(Console::writer(writer));
        self
    }
    /// Where the embedded default writes OTLP JSON lines; `None` turns the file off (`WAXELL_TRACE_FILE`).
    pub fn with_trace_file(mut self, path: Option<PathBuf>) -> Self {
        self.trace_file = Some(path);
        self
    }
    /// Add a span processor (e.g. a `SimpleSpanProcessor` over an in-memory exporter in tests).
    pub fn with_span_processor<P: SpanProcessor + 'static>(mut self, processor: P) -> Self {
        self.processors
            .push(Box::new(move |b| b.with_span_processor(processor)));
        self
    }
    /// Whether to set up the default export (OTLP or the embedded default) besides added processors.
    pub fn with_default_export(mut self, on: bool) -> Self {
        self.default_export = Some(on);
        self
    }
    /// The exit budget: how long a flush, and shutdown, wait for the collector before they give up and save
    /// what is unsent to the trace file (else `WAXELL_SHUTDOWN_TIMEOUT_MS`, else 5 s).
    pub fn with_shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.shutdown_timeout = Some(timeout);
        self
    }

    /// Longest wait for one export, retries included (else `WAXELL_EXPORT_TIMEOUT_MS`, else
    /// `OTEL_EXPORTER_OTLP_TIMEOUT`, else 10 s). A batch that takes longer is saved to the trace file.
    pub fn with_export_timeout(mut self, timeout: Duration) -> Self {
        self.export_timeout = Some(timeout);
        self
    }
    /// After `failures` consecutive failed exports, stop calling the collector for `cooldown` (spans offered
    /// meanwhile are saved to the trace file), then let one batch probe it (default: 3 failures, 30 s). A
    /// refused connection opens the breaker at once.
    pub fn with_circuit_breaker(mut self, failures: u32, cooldown: Duration) -> Self {
        self.circuit_breaker = Some((failures.max(1), cooldown));
        self
    }
    /// Spans kept per run (trace) before only the root, agent spans, errors and scores are kept
    /// (else `WAXELL_MAX_SPANS_PER_RUN`, default 50,000; 0 = no cap).
    pub fn with_max_spans_per_run(mut self, spans: usize) -> Self {
        self.max_spans_per_run = Some(spans);
        self
    }

    /// Build the pipeline, install it globally, and return the guard that shuts it down.
    pub fn init(self) -> Result<Guard, InitError> {
        let console = self.console_writer.clone().unwrap_or_default();
        crate::console::set_current(console.clone());
        let env = config::from_env()?;
        let capture = Capture {
            content: self.capture_content.unwrap_or(env.capture.content),
            max_chars: self.max_content_chars.unwrap_or(env.capture.max_chars),
            scrub: self.scrub.unwrap_or(env.capture.scrub),
        };
        let scrubber: Option<&'static Scrubber> = match (capture.scrub, self.scrub_patterns.is_empty()) {
            (false, _) => None,
            (true, true) => Some(&*scrub::DEFAULT),
            (true, false) => {
                let s = Scrubber::new(&self.scrub_patterns).map_err(|message| InitError::InvalidSetting {
                    setting: "scrub pattern",
                    message,
                })?;
                // One scrubber per init, kept for the process: spans may be captured until the very end.
                Some(Box::leak(Box::new(s)))
            }
        };
        if !env.observe {
            telemetry::set_enabled(false);
            return Ok(Guard::disabled());
        }
        telemetry::set_enabled(true);

        // Waxell's cloud, when nothing more specific names a collector.
        let explicit_endpoint = self.endpoint.clone().or(env.traces_endpoint.clone());
        let cloud = match (&explicit_endpoint, self.default_export.unwrap_or(true)) {
            (None, true) => crate::cloud::from_env()?,
            _ => None,
        };
        let resource = build_resource(
            self.service_name.as_deref(),
            self.service_version.as_deref(),
            self.project_name.as_deref(),
            cloud.as_ref().and_then(|c| c.tenant_id.as_deref()),
        );
        let mut provider = SdkTracerProvider::builder()
            .with_resource(resource.clone())
            .with_id_generator(telemetry::PresetIds::default());
        for add in self.processors {
            provider = add(provider);
        }
        let mut protocol = self.protocol.unwrap_or(env.protocol);
        let mut endpoint = explicit_endpoint;
        let mut headers = env.headers.clone();
        headers.extend(self.headers.iter().cloned());
        if let Some(cloud) = &cloud {
            // Waxell ingests OTLP/HTTP protobuf and authenticates with X-Wax-Key.
            endpoint = Some(cloud.traces_url.clone());
            protocol = Protocol::HttpProtobuf;
            headers.push(("X-Wax-Key".to_owned(), cloud.key.clone()));
        }
        let mut runtime = None;
        #[allow(unused_mut)] // assigned only when an OTLP feature is on
        let mut meter_provider: Option<SdkMeterProvider> = None;
        let mut target = Target::None;
        let export_timeout = self.export_timeout.unwrap_or(env.export_timeout);
        let default_export = self.default_export.unwrap_or(true);
        // The trace file: the embedded default writes every span there; with a collector, spans it could not
        // take are saved there (created only then). `None` (WAXELL_TRACE_FILE=off) turns both off.
        let file_path = match self.trace_file.clone().or(env.trace_file.clone()) {
            Some(explicit) => explicit,
            None => Some(default_trace_file()),
        };
        let file = match (&file_path, default_export, &endpoint) {
            (None, _, _) | (_, false, _) => None,
            (Some(path), true, Some(_)) => Some(Arc::new(JsonLinesFile::lazy(path))),
            (Some(path), true, None) => Some(Arc::new(JsonLinesFile::open_now(path).map_err(|source| {
                InitError::TraceFile {
                    path: path.display().to_string(),
                    source,
                }
            })?)),
        };
        let limits = Limits {
            fail_open: FailOpenConfig {
                export_timeout,
                breaker_failures: self
                    .circuit_breaker
                    .map(|b| b.0)
                    .or(env.breaker_failures)
                    .unwrap_or(3),
                breaker_cooldown: self
                    .circuit_breaker
                    .map(|b| b.1)
                    .or(env.breaker_cooldown)
                    .unwrap_or(Duration::from_secs(30)),
            },
            batch: env.batch,
            max_spans_per_run: self.max_spans_per_run.unwrap_or(env.max_spans_per_run),
            counters: Arc::new(DropCounters::new(
                file.clone().map(|f| Spill::new(f, env.batch.max_queue_size)),
            )),
        };
        if default_export {
            match &endpoint {
                Some(url) => {
                    let transport = Arc::new(TransportLog::default());
                    let (exporter, rt) =
                        otlp_exporter(url, protocol, &headers, export_timeout, Arc::clone(&transport))?;
                    runtime = rt;
                    let transport = (protocol != Protocol::Grpc).then_some(transport);
                    provider = provider.with_span_processor(limits.pipeline(exporter, transport)?);
                    #[cfg(any(feature = "otlp-http", feature = "grpc"))]
                    {
                        meter_provider = Some(otlp_meter_provider(
                            url,
                            protocol,
                            &headers,
                            export_timeout,
                            resource,
                            runtime.as_ref(),
                        )?);
                    }
                    target = Target::Otlp(url.clone());
                }
                None => {
                    let exporter =
                        EmbeddedExporter::new(self.console.unwrap_or(env.console), file, console.clone());
                    provider = provider.with_span_processor(limits.pipeline(exporter, None)?);
                    target = Target::Embedded(file_path);
                }
            }
        }
        let provider = provider.build();
        opentelemetry::global::set_tracer_provider(provider.clone());
        if let Some(mp) = &meter_provider {
            opentelemetry::global::set_meter_provider(mp.clone());
        }
        telemetry::install(State {
            tracer: telemetry::SpanSource::Sdk(provider.tracer_with_scope(telemetry::scope())),
            capture,
            scrubber,
            ids_ahead: telemetry::samples_by_parent(),
        });
        Ok(Guard {
            provider: Some(provider),
            meter_provider,
            runtime,
            target,
            shutdown_timeout: self
                .shutdown_timeout
                .or(env.shutdown_timeout)
                .unwrap_or(DEFAULT_SHUTDOWN_TIMEOUT),
            counters: DropCounter(limits.counters),
            console,
        })
    }
}

fn build_resource(
    service_name: Option<&str>,
    service_version: Option<&str>,
    project_name: Option<&str>,
    tenant_id: Option<&str>,
) -> Resource {
    let mut builder = Resource::builder();
    let env_name = std::env::var("OTEL_SERVICE_NAME").ok().filter(|s| !s.is_empty());
    let in_attributes = std::env::var("OTEL_RESOURCE_ATTRIBUTES").is_ok_and(|a| a.contains("service.name="));
    match (service_name, env_name.is_some() || in_attributes) {
        (Some(name), _) => builder = builder.with_service_name(name.to_owned()),
        (None, false) => builder = builder.with_service_name("waxell-agent"),
        (None, true) => {}
    }
    builder = builder.with_attributes([
        KeyValue::new(WAXELL_SDK_NAME, "waxell-rs"),
        KeyValue::new(WAXELL_SDK_VERSION, env!("CARGO_PKG_VERSION")),
    ]);
    let project = project_name.map(str::to_owned).or_else(|| {
        std::env::var("WAXELL_PROJECT_NAME")
            .ok()
            .filter(|s| !s.is_empty())
    });
    if let Some(project) = project {
        builder = builder.with_attribute(KeyValue::new(OPENINFERENCE_PROJECT_NAME, project));
    }
    if let Some(version) = service_version {
        builder = builder.with_attribute(KeyValue::new("service.version", version.to_owned()));
    }
    if let Some(tenant) = tenant_id {
        builder = builder.with_attribute(KeyValue::new(WAXELL_TENANT_ID, tenant.to_owned()));
    }
    builder.build()
}

/// The fail-open settings every default pipeline shares, and the drop tallies the guard reports.
struct Limits {
    fail_open: FailOpenConfig,
    /// Queue and batch sizes; beyond the queue, spans are dropped and counted, never waited for.
    batch: BatchSettings,
    max_spans_per_run: usize,
    counters: Arc<DropCounters>,
}

impl Limits {
    /// `SpanCap -> QueueGate -> BatchSpanProcessor -> FailOpenExporter -> exporter` (see `export::fail_open`).
    fn pipeline<E: opentelemetry_sdk::trace::SpanExporter + 'static>(
        &self,
        exporter: E,
        transport: Option<Arc<TransportLog>>,
    ) -> Result<impl SpanProcessor + 'static, InitError> {
        let exporter = FailOpenExporter::new(exporter, self.fail_open, Arc::clone(&self.counters), transport)
            .map_err(|e| InitError::InvalidSetting {
                setting: "export worker",
                message: format!("could not start the export thread: {e}"),
            })?;
        let batch = BatchSpanProcessor::builder(exporter)
            .with_batch_config(
                BatchConfigBuilder::default()
                    .with_max_queue_size(self.batch.max_queue_size)
                    .with_max_export_batch_size(self.batch.max_export_batch_size)
                    .with_scheduled_delay(self.batch.schedule_delay)
                    .build(),
            )
            .build();
        let gated = QueueGate::new(batch, self.batch.max_queue_size, Arc::clone(&self.counters));
        Ok(SpanCap::new(
            gated,
            self.max_spans_per_run,
            Arc::clone(&self.counters),
        ))
    }
}

fn protocol_name(p: Protocol) -> &'static str {
    match p {
        Protocol::HttpProtobuf => "http/protobuf",
        Protocol::HttpJson => "http/json",
        Protocol::Grpc => "grpc",
    }
}

/// The private Tokio runtime gRPC export runs on; uninhabited when the `grpc` feature is off.
#[cfg(feature = "grpc")]
type GrpcRuntime = tokio::runtime::Runtime;
#[cfg(not(feature = "grpc"))]
type GrpcRuntime = std::convert::Infallible;

/// The error for a protocol whose cargo feature this build lacks.
#[allow(dead_code)] // unused when every export feature is on
fn feature_missing(protocol: Protocol, endpoint: &str, feature: &'static str) -> InitError {
    InitError::FeatureMissing {
        feature,
        needed_for: format!(
            "OTLP {} export to {endpoint} (OTEL_EXPORTER_OTLP_PROTOCOL or the builder's protocol)",
            protocol_name(protocol)
        ),
    }
}

/// A private Tokio runtime for tonic: gRPC export then works from a plain `main`, a current-thread
/// runtime or a multi-thread one alike, and shutdown never waits on the user's runtime.
#[cfg(feature = "grpc")]
fn grpc_runtime() -> Result<tokio::runtime::Runtime, std::io::Error> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("waxell-otlp-grpc")
        .enable_all()
        .build()
}

#[cfg(feature = "otlp-http")]
use opentelemetry_otlp::WithHttpConfig as _;

#[cfg(feature = "otlp-http")]
fn http_protocol(protocol: Protocol) -> opentelemetry_otlp::Protocol {
    if protocol == Protocol::HttpJson {
        opentelemetry_otlp::Protocol::HttpJson
    } else {
        opentelemetry_otlp::Protocol::HttpBinary
    }
}

#[cfg(feature = "otlp-http")]
fn http_client(timeout: Duration) -> Result<reqwest::blocking::Client, String> {
    crate::http::blocking_client(move |b| b.timeout(timeout))
}

#[cfg(any(feature = "otlp-http", feature = "grpc"))]
type SpanExporter = opentelemetry_otlp::SpanExporter;
#[cfg(not(any(feature = "otlp-http", feature = "grpc")))]
type SpanExporter = EmbeddedExporter;

fn otlp_exporter(
    url: &str,
    protocol: Protocol,
    headers: &[(String, String)],
    timeout: Duration,
    transport: Arc<TransportLog>,
) -> Result<(SpanExporter, Option<GrpcRuntime>), InitError> {
    let fail = |message: String| InitError::Exporter {
        protocol: protocol_name(protocol),
        endpoint: url.to_owned(),
        message,
    };
    let _ = (&fail, headers, timeout, &transport);
    match protocol {
        #[cfg(feature = "grpc")]
        Protocol::Grpc => {
            let runtime = grpc_runtime().map_err(|e| fail(e.to_string()))?;
            let _entered = runtime.enter();
            let exporter = opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_endpoint(url)
                .with_timeout(timeout)
                // Retries happen in the fail-open exporter, where a refused connection is final.
                .with_retry_policy(opentelemetry_otlp::RetryPolicy::disabled())
                .with_metadata(metadata(headers).map_err(fail)?)
                .build()
                .map_err(|e| fail(e.to_string()))?;
            Ok((exporter, Some(runtime)))
        }
        #[cfg(not(feature = "grpc"))]
        Protocol::Grpc => Err(feature_missing(protocol, url, "grpc")),
        #[cfg(feature = "otlp-http")]
        Protocol::HttpProtobuf | Protocol::HttpJson => {
            let exporter = opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(http_protocol(protocol))
                .with_endpoint(url)
                .with_timeout(timeout)
                // The exporter's own retry loop would back off on a refused connection (seconds at exit
                // with the collector down); the fail-open exporter retries only what can help, from what
                // this client observed.
                .with_http_client(ObservedClient::new(
                    http_client(timeout).map_err(fail)?,
                    transport,
                ))
                .with_retry_policy(opentelemetry_otlp::RetryPolicy::disabled())
                .with_headers(headers.iter().cloned().collect())
                .build()
                .map_err(|e| fail(e.to_string()))?;
            Ok((exporter, None))
        }
        #[cfg(not(feature = "otlp-http"))]
        Protocol::HttpProtobuf | Protocol::HttpJson => Err(feature_missing(protocol, url, "otlp-http")),
    }
}

#[cfg(feature = "grpc")]
fn metadata(headers: &[(String, String)]) -> Result<tonic::metadata::MetadataMap, String> {
    let mut map = tonic::metadata::MetadataMap::new();
    for (k, v) in headers {
        let key = tonic::metadata::MetadataKey::from_bytes(k.to_ascii_lowercase().as_bytes())
            .map_err(|_| format!("header name {k:?} is not valid gRPC metadata"))?;
        let value = v
            .parse()
            .map_err(|_| format!("the value of header {k:?} is not valid gRPC metadata"))?;
        map.insert(key, value);
    }
    Ok(map)
}

/// Metrics go next to the traces: `/v1/metrics` beside `/v1/traces` for HTTP, the same address for gRPC.
#[cfg(any(feature = "otlp-http", feature = "grpc"))]
fn otlp_meter_provider(
    traces_url: &str,
    protocol: Protocol,
    headers: &[(String, String)],
    timeout: Duration,
    resource: Resource,
    runtime: Option<&GrpcRuntime>,
) -> Result<SdkMeterProvider, InitError> {
    let fail = |message: String| InitError::Exporter {
        protocol: protocol_name(protocol),
        endpoint: traces_url.to_owned(),
        message,
    };
    let _ = runtime;
    let exporter = match protocol {
        #[cfg(feature = "grpc")]
        Protocol::Grpc => {
            let _entered = runtime.map(|rt| rt.enter());
            opentelemetry_otlp::MetricExporter::builder()
                .with_tonic()
                .with_endpoint(traces_url)
                .with_timeout(timeout)
                .with_retry_policy(opentelemetry_otlp::RetryPolicy::disabled())
                .with_metadata(metadata(headers).map_err(fail)?)
                .build()
        }
        #[cfg(feature = "otlp-http")]
        Protocol::HttpProtobuf | Protocol::HttpJson => {
            let url = std::env::var("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
                .ok()
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| match traces_url.strip_suffix("/v1/traces") {
                    Some(base) => format!("{base}/v1/metrics"),
                    None => traces_url.to_owned(),
                });
            opentelemetry_otlp::MetricExporter::builder()
                .with_http()
                .with_protocol(http_protocol(protocol))
                .with_endpoint(url)
                .with_timeout(timeout)
                .with_retry_policy(opentelemetry_otlp::RetryPolicy::disabled())
                .with_headers(headers.iter().cloned().collect())
                .with_http_client(http_client(timeout).map_err(fail)?)
                .build()
        }
        #[allow(unreachable_patterns)] // reachable only when a protocol's feature is off
        _ => return Err(fail("no exporter for this protocol in this build".into())),
    }
    .map_err(|e| fail(e.to_string()))?;
    Ok(SdkMeterProvider::builder()
        .with_periodic_exporter(exporter)
        .with_resource(resource)
        .build())
}

/// Where spans are going.
#[derive(Debug, Clone)]
enum Target {
    None,
    Otlp(String),
    Embedded(Option<PathBuf>),
}

/// Keeps telemetry running; dropping it flushes and shuts down (bounded by the shutdown timeout).
#[must_use = "dropping the guard shuts telemetry down at once"]
pub struct Guard {
    provider: Option<SdkTracerProvider>,
    meter_provider: Option<SdkMeterProvider>,
    #[cfg_attr(not(feature = "grpc"), allow(dead_code))]
    runtime: Option<GrpcRuntime>,
    target: Target,
    shutdown_timeout: Duration,
    /// Drop tallies of the default export pipeline (all zero when telemetry is off).
    counters: DropCounter,
    /// Where the exit report goes.
    console: Console,
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard")
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

impl Guard {
    fn disabled() -> Self {
        Self {
            provider: None,
            meter_provider: None,
            runtime: None,
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
        #[cfg(feature = "grpc")]
        if let Some(rt) = self.runtime.take() {
            // Never blocks, so the guard may be dropped inside async code.
            rt.shutdown_background();
        }
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
const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

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
