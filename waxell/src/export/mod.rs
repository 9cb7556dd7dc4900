//! The embedded default, used when no OTLP endpoint is configured: a readable trace tree on stderr and the
//! spans as OTLP JSON lines (the OpenTelemetry file-exporter format, one `ExportTraceServiceRequest` per
//! line) in a file that [`replay`] can send to any OTLP endpoint later.

mod console;
pub(crate) mod fail_open;
#[cfg(any(feature = "otlp-http", feature = "grpc"))]
mod replay;

pub use fail_open::{DropCounter, DroppedSpans};
#[cfg(any(feature = "otlp-http", feature = "grpc"))]
pub use replay::{replay, ReplayError, ReplaySummary};

use std::collections::HashMap;
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use opentelemetry::trace::TraceId;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
use opentelemetry_proto::transform::trace::tonic::group_spans_by_resource_and_scope;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use opentelemetry_sdk::Resource;

/// The traces URL the standard variables (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, `OTEL_EXPORTER_OTLP_ENDPOINT`)
/// name for `protocol`, if any.
pub fn traces_endpoint_from_env(protocol: crate::Protocol) -> Option<String> {
    let var = |n: &str| std::env::var(n).ok().filter(|v| !v.trim().is_empty());
    crate::config::traces_url(
        var("OTEL_EXPORTER_OTLP_ENDPOINT").as_deref(),
        var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").as_deref(),
        protocol,
    )
}

/// Where the embedded default writes spans when `WAXELL_TRACE_FILE` is not set:
/// `.waxell/traces/<unix-millis>-<pid>.jsonl` under the working directory.
pub fn default_trace_file() -> PathBuf {
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or_default();
    PathBuf::from(".waxell")
        .join("traces")
        .join(format!("{millis}-{}.jsonl", std::process::id()))
}

/// Console tree + JSON-lines file exporter.
pub(crate) struct EmbeddedExporter {
    console: bool,
    file: Option<(PathBuf, Mutex<BufWriter<File>>)>,
    resource: ResourceAttributesWithSchema,
    /// Spans of traces whose root has not ended yet, printed together when it does.
    pending: Mutex<HashMap<TraceId, Vec<SpanData>>>,
    written: Mutex<usize>,
}

impl fmt::Debug for EmbeddedExporter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EmbeddedExporter")
            .field("console", &self.console)
            .field("file", &self.file.as_ref().map(|(p, _)| p))
            .finish()
    }
}

impl EmbeddedExporter {
    pub(crate) fn new(console: bool, file: Option<&Path>) -> std::io::Result<Self> {
        let file = match file {
            Some(path) => {
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    std::fs::create_dir_all(dir)?;
                }
                let f = OpenOptions::new().create(true).append(true).open(path)?;
                Some((path.to_path_buf(), Mutex::new(BufWriter::new(f))))
            }
            None => None,
        };
        Ok(Self {
            console,
            file,
            resource: (&Resource::builder_empty().build()).into(),
            pending: Mutex::new(HashMap::new()),
            written: Mutex::new(0),
        })
    }

    fn write_lines(&self, batch: &[SpanData]) -> OTelSdkResult {
        let Some((path, writer)) = &self.file else {
            return Ok(());
        };
        let request = ExportTraceServiceRequest {
            resource_spans: group_spans_by_resource_and_scope(batch.to_vec(), &self.resource),
        };
        let line = serde_json::to_string(&request)
            .map_err(|e| OTelSdkError::InternalFailure(format!("encoding spans as OTLP JSON: {e}")))?;
        let mut w = writer.lock().unwrap_or_else(|p| p.into_inner());
        writeln!(w, "{line}")
            .and_then(|_| w.flush())
            .map_err(|e| OTelSdkError::InternalFailure(format!("writing {}: {e}", path.display())))?;
        *self.written.lock().unwrap_or_else(|p| p.into_inner()) += batch.len();
        Ok(())
    }

    fn print_finished_traces(&self, batch: Vec<SpanData>) {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        let mut finished = Vec::new();
        for span in batch {
            let trace = span.span_context.trace_id();
            let is_root =
                span.parent_span_id == opentelemetry::trace::SpanId::INVALID || span.parent_span_is_remote;
            pending.entry(trace).or_default().push(span);
            if is_root {
                finished.push(trace);
            }
        }
        for trace in finished {
            if let Some(spans) = pending.remove(&trace) {
                eprint!("{}", console::render_trace(&spans));
            }
        }
    }
}

impl SpanExporter for EmbeddedExporter {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let written = self.write_lines(&batch);
        if self.console {
            self.print_finished_traces(batch);
        }
        written
    }

    fn shutdown_with_timeout(&self, _timeout: std::time::Duration) -> OTelSdkResult {
        if self.console {
            let leftovers: Vec<Vec<SpanData>> = self
                .pending
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .drain()
                .map(|(_, v)| v)
                .collect();
            for spans in leftovers {
                eprint!("{}", console::render_trace(&spans));
            }
        }
        if let Some((path, _)) = &self.file {
            let n = *self.written.lock().unwrap_or_else(|p| p.into_inner());
            if n > 0 {
                eprintln!(
                    "waxell: wrote {n} spans to {} (send them to any OTLP endpoint with `waxell replay {}`)",
                    path.display(),
                    path.display()
                );
            }
        }
        Ok(())
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.resource = resource.into();
    }
}
