//! `init()` and its builder: the settings over the environment, and the assembly of the pipeline from them.
//!
//! `guard` holds what `init()` returns (flush, shutdown, exit report); `pipeline` the processor chain every
//! default export shares; `otlp` the collector transports, one module per cargo feature; `resource` the
//! resource spans carry.

mod guard;
mod otlp;
mod pipeline;
mod resource;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanProcessor};

pub use self::guard::{FlushError, Guard, ShutdownError};
use self::guard::{Target, DEFAULT_SHUTDOWN_TIMEOUT};
use self::pipeline::Limits;
use crate::config::{self, Capture, Env, OtlpSettings, Protocol};
use crate::console::Console;
use crate::error::InitError;
use crate::export::fail_open::{DropCounters, FailOpenConfig, SpanExporterDelivery, Spill};
use crate::export::jsonl::JsonLinesFile;
use crate::export::{default_trace_file, DropCounter, EmbeddedExporter};
use crate::scrub::{self, Scrubber};
use crate::telemetry::{self, State};

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
    env: Env,
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

    /// Read configuration variables from `lookup` instead of the process environment: every variable
    /// `init()` reads (see `docs/configuration.md`) is looked up there, and the process environment is not
    /// consulted. For tests, or to configure from a file or a map.
    ///
    /// ```
    /// let builder = waxell::builder().with_env(|name| match name {
    ///     "WAXELL_OBSERVE" => Some("false".to_owned()),
    ///     _ => None,
    /// });
    /// # drop(builder);
    /// ```
    pub fn with_env(mut self, lookup: impl Fn(&str) -> Option<String> + Send + Sync + 'static) -> Self {
        self.env = Env::lookup(lookup);
        self
    }

    /// Build the pipeline, install it globally, and return the guard that shuts it down.
    pub fn init(self) -> Result<Guard, InitError> {
        let console = self.console_writer.clone().unwrap_or_default();
        crate::console::set_current(console.clone());
        let env = config::from_env(&self.env)?;
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
        let default_export = self.default_export.unwrap_or(true);
        let cloud = match (&explicit_endpoint, default_export) {
            (None, true) => config::cloud_from_env(&self.env)?.map(crate::cloud::resolve),
            _ => None,
        };
        let resource = resource::build(
            &resource::Service {
                name: self.service_name.as_deref(),
                version: self.service_version.as_deref(),
                project: self.project_name.as_deref(),
            },
            &env,
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
        let mut meter_provider = None;
        let mut background = None;
        let mut target = Target::None;
        let export_timeout = self.export_timeout.unwrap_or(env.export_timeout);
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
                    let settings = OtlpSettings {
                        traces_endpoint: Some(url.clone()),
                        protocol,
                        headers,
                        timeout: export_timeout,
                    };
                    let (with_export, meters, runs_on) = otlp::install(
                        provider,
                        &settings,
                        env.metrics_endpoint.as_deref(),
                        resource,
                        &limits,
                    )?;
                    provider = with_export;
                    meter_provider = Some(meters);
                    background = runs_on;
                    target = Target::Otlp(url.clone());
                }
                None => {
                    let exporter =
                        EmbeddedExporter::new(self.console.unwrap_or(env.console), file, console.clone());
                    provider =
                        provider.with_span_processor(limits.pipeline(SpanExporterDelivery(exporter), None)?);
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
            #[cfg(any(feature = "async-openai", all(feature = "tracing", feature = "llm")))]
            ids_ahead: self.env.samples_by_parent(),
        });
        Ok(Guard {
            provider: Some(provider),
            meter_provider,
            background,
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
