//! The one writer of OTLP JSON-lines trace files (one `ExportTraceServiceRequest` per line, the OpenTelemetry
//! file-exporter format): the embedded default writes every span through it, and the fail-open pipeline saves
//! spans that could not be exported through it, so `waxell replay` and `waxell show` read a single format.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
use opentelemetry_sdk::trace::SpanData;

/// An append-only JSON-lines trace file, created (with its directory) on first write unless opened at once.
#[derive(Debug)]
pub(crate) struct JsonLinesFile {
    path: PathBuf,
    writer: Mutex<Option<BufWriter<File>>>,
    written: AtomicU64,
}

impl JsonLinesFile {
    /// A file that is created only when the first span is written (no empty files on healthy runs).
    pub(crate) fn lazy(path: &Path) -> Self {
        Self {
            path: path.to_path_buf(),
            writer: Mutex::new(None),
            written: AtomicU64::new(0),
        }
    }

    /// Create (or append to) the file now, so a path that cannot be written is an error at `init()`.
    pub(crate) fn open_now(path: &Path) -> std::io::Result<Self> {
        let file = Self::lazy(path);
        *file.writer.lock().unwrap_or_else(|p| p.into_inner()) = Some(open(path)?);
        Ok(file)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Spans written so far.
    pub(crate) fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    /// Append `spans` as one line. A line is written and flushed under one lock, so lines never interleave.
    pub(crate) fn write(
        &self,
        spans: Vec<SpanData>,
        resource: &ResourceAttributesWithSchema,
    ) -> std::io::Result<()> {
        if spans.is_empty() {
            return Ok(());
        }
        let n = spans.len() as u64;
        // Straight from the spans: the same line serde makes of opentelemetry-proto's request, for a fraction
        // of the cost (`export::otlp_proto`).
        self.write_line(&super::otlp_proto::encode_request_json(&spans, resource), n)
    }

    /// Append one request (of `spans` spans) as one line.
    #[cfg(feature = "otlp-http")]
    pub(crate) fn write_request(
        &self,
        request: &ExportTraceServiceRequest,
        spans: u64,
    ) -> std::io::Result<()> {
        let line = serde_json::to_vec(request).map_err(std::io::Error::other)?;
        self.write_line(&line, spans)
    }

    fn write_line(&self, line: &[u8], spans: u64) -> std::io::Result<()> {
        let mut guard = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        if guard.is_none() {
            *guard = Some(open(&self.path)?);
        }
        let w = guard.as_mut().expect("opened above");
        w.write_all(line)
            .and_then(|_| w.write_all(b"\n"))
            .and_then(|_| w.flush())?;
        self.written.fetch_add(spans, Ordering::Relaxed);
        Ok(())
    }
}

fn open(path: &Path) -> std::io::Result<BufWriter<File>> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let f = OpenOptions::new().create(true).append(true).open(path)?;
    Ok(BufWriter::new(f))
}

/// A trace file that could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TraceFileError {
    /// The file could not be opened or read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// What the operating system reported.
        source: std::io::Error,
    },
    /// A line is not one OTLP JSON `ExportTraceServiceRequest`.
    #[error("{path} line {line}: not an OTLP JSON trace request: {message}")]
    Parse {
        /// The file.
        path: String,
        /// The line's number, counting from 1.
        line: usize,
        /// What the JSON decoder reported.
        message: String,
    },
}

/// Requests read from a trace file (line number, request), the byte offset reading stopped at, and the
/// number of the last line read.
pub(crate) type Read = (Vec<(usize, ExportTraceServiceRequest)>, u64, usize);

/// Each non-empty line of a trace file from byte `from` on, as (line number, request). A last line without
/// its newline is left for later (it may still be being written); the returned offset is where reading
/// stopped, the line number that of the last line read.
pub(crate) fn read_requests(path: &Path, from: u64, first_line: usize) -> Result<Read, TraceFileError> {
    use std::io::{Read, Seek, SeekFrom};
    let shown = path.display().to_string();
    let read_error = |source| TraceFileError::Read {
        path: shown.clone(),
        source,
    };
    let mut file = File::open(path).map_err(read_error)?;
    file.seek(SeekFrom::Start(from)).map_err(read_error)?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).map_err(read_error)?;
    let complete = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let text = String::from_utf8_lossy(&bytes[..complete]);
    let mut requests = Vec::new();
    let mut line_no = first_line;
    for line in text.lines() {
        line_no += 1;
        if line.trim().is_empty() {
            continue;
        }
        let request: ExportTraceServiceRequest =
            serde_json::from_str(line).map_err(|e| TraceFileError::Parse {
                path: shown.clone(),
                line: line_no,
                message: e.to_string(),
            })?;
        requests.push((line_no, request));
    }
    Ok((requests, from + complete as u64, line_no))
}

/// Spans in a request.
#[cfg(any(feature = "otlp-http", feature = "grpc", test))]
pub(crate) fn span_count(request: &ExportTraceServiceRequest) -> usize {
    request
        .resource_spans
        .iter()
        .flat_map(|rs| &rs.scope_spans)
        .map(|ss| ss.spans.len())
        .sum()
}
