//! Re-send a JSON-lines trace file (written by the embedded default, or saved because the collector could not
//! take it) to any OTLP endpoint, with the same settings the SDK exports with ([`OtlpSettings`]).

#[cfg(feature = "grpc")]
mod grpc;
#[cfg(feature = "otlp-http")]
mod http;

use std::path::Path;
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};

use super::jsonl::{read_requests, TraceFileError};
use crate::config::{OtlpSettings, Protocol};

/// Why a replay failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError {
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
    /// A request could not be sent, or the collector refused it (also: no endpoint in the settings).
    #[error("sending line {line} to {endpoint}: {message}")]
    Send {
        /// The traces URL (HTTP) or collector address (gRPC); empty when none was configured.
        endpoint: String,
        /// The line whose request failed (0 when nothing could be sent at all).
        line: usize,
        /// The transport's error or the collector's answer.
        message: String,
    },
}

impl From<TraceFileError> for ReplayError {
    fn from(e: TraceFileError) -> Self {
        match e {
            TraceFileError::Read { path, source } => Self::Read { path, source },
            TraceFileError::Parse { path, line, message } => Self::Parse { path, line, message },
        }
    }
}

/// What a replay sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplaySummary {
    /// Export requests sent, one per line of the file.
    pub requests: usize,
    /// Spans in those requests.
    pub spans: usize,
}

/// What one file's replay came to: every request is tried, failures are listed, none stops the rest.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReplayReport {
    /// The traces URL (HTTP) or collector address (gRPC) sent to.
    pub endpoint: String,
    /// Export requests tried, one per line of the file.
    pub requests: usize,
    /// Spans in the requests sent.
    pub spans_sent: usize,
    /// Spans the collector accepted (sent in a successful request, minus those it reported as rejected).
    pub spans_accepted: usize,
    /// One entry per failed request: `line N: why`.
    pub failures: Vec<String>,
}

impl ReplayReport {
    /// Whether every request was accepted (some spans in it may still have been rejected: compare
    /// [`spans_accepted`](Self::spans_accepted) with [`spans_sent`](Self::spans_sent)).
    pub fn is_success(&self) -> bool {
        self.failures.is_empty()
    }
}

/// Send every line of `path` with `settings` (its endpoint must be set). The file must parse whole before
/// anything is sent; then each request is sent once, and the report says what the collector accepted.
pub fn replay_with(path: &Path, settings: &OtlpSettings) -> Result<ReplayReport, ReplayError> {
    let endpoint = settings
        .traces_endpoint
        .clone()
        .ok_or_else(|| ReplayError::Send {
            endpoint: String::new(),
            line: 0,
            message: "no OTLP endpoint configured".into(),
        })?;
    let (requests, _, _) = read_requests(path, 0, 0)?;
    let mut report = ReplayReport {
        endpoint: endpoint.clone(),
        requests: requests.len(),
        spans_sent: 0,
        spans_accepted: 0,
        failures: Vec::new(),
    };
    let mut note = |line: usize, spans: usize, outcome: Result<i64, String>| {
        report.spans_sent += spans;
        match outcome {
            Ok(rejected) => {
                report.spans_accepted += spans.saturating_sub(rejected.max(0) as usize);
                if rejected > 0 {
                    report.failures.push(format!(
                        "line {line}: the collector rejected {rejected} of {spans} spans"
                    ));
                }
            }
            Err(why) => report.failures.push(format!("line {line}: {why}")),
        }
    };
    match settings.protocol {
        Protocol::Grpc => grpc(&endpoint, settings, &requests, &mut note)?,
        Protocol::HttpProtobuf | Protocol::HttpJson => http(&endpoint, settings, &requests, &mut note)?,
    }
    Ok(report)
}

/// Record what became of the request on `line` holding `spans` spans: the spans the collector rejected, or
/// why it failed.
type Note<'a> = dyn FnMut(usize, usize, Result<i64, String>) + 'a;

/// The requests of a file: the line each is on, and the request.
type Requests = [(usize, ExportTraceServiceRequest)];

/// Spans the collector said it rejected (`partial_success`).
fn rejected(response: Option<ExportTraceServiceResponse>) -> i64 {
    response
        .and_then(|r| r.partial_success)
        .map_or(0, |p| p.rejected_spans)
}

/// Send every line of `path` to `endpoint` (for HTTP the full traces URL, e.g.
/// `http://127.0.0.1:4318/v1/traces`; for gRPC the collector address), with extra `headers`; stops at the
/// first failed request. [`replay_with`] takes the SDK's settings and reports per request.
pub fn replay(
    path: &Path,
    endpoint: &str,
    protocol: Protocol,
    headers: &[(String, String)],
) -> Result<ReplaySummary, ReplayError> {
    let settings = OtlpSettings {
        traces_endpoint: Some(endpoint.to_owned()),
        protocol,
        headers: headers.to_vec(),
        timeout: Duration::from_secs(10),
    };
    let report = replay_with(path, &settings)?;
    if let Some(first) = report.failures.first() {
        let (line, message) = first
            .strip_prefix("line ")
            .and_then(|rest| rest.split_once(": "))
            .map_or((0, first.clone()), |(l, m)| {
                (l.parse().unwrap_or(0), m.to_owned())
            });
        return Err(ReplayError::Send {
            endpoint: endpoint.to_owned(),
            line,
            message,
        });
    }
    Ok(ReplaySummary {
        requests: report.requests,
        spans: report.spans_sent,
    })
}

#[cfg(feature = "grpc")]
use self::grpc::send_all as grpc;

/// Without the `grpc` feature every request fails, saying which feature sends it.
#[cfg(not(feature = "grpc"))]
fn grpc(
    _endpoint: &str,
    _settings: &OtlpSettings,
    requests: &Requests,
    note: &mut Note<'_>,
) -> Result<(), ReplayError> {
    for (line, request) in requests {
        note(
            *line,
            super::jsonl::span_count(request),
            Err("replay over gRPC needs waxell's cargo feature `grpc`".into()),
        );
    }
    Ok(())
}

#[cfg(feature = "otlp-http")]
use self::http::send_all as http;

/// Without the `otlp-http` feature every request fails, saying which feature sends it.
#[cfg(not(feature = "otlp-http"))]
fn http(
    _endpoint: &str,
    _settings: &OtlpSettings,
    requests: &Requests,
    note: &mut Note<'_>,
) -> Result<(), ReplayError> {
    for (line, request) in requests {
        note(
            *line,
            super::jsonl::span_count(request),
            Err("replay over HTTP needs waxell's cargo feature `otlp-http`".into()),
        );
    }
    Ok(())
}
