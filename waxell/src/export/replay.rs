//! Re-send a JSON-lines trace file written by the embedded default to any OTLP endpoint.

use std::io::BufRead;
use std::path::Path;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;

use crate::config::Protocol;

/// Why a replay failed; nothing is half-sent silently: the error says which line or request failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError {
    #[error("reading {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("{path} line {line}: not an OTLP JSON trace request: {message}")]
    Parse {
        path: String,
        line: usize,
        message: String,
    },
    #[error("sending line {line} to {endpoint}: {message}")]
    Send {
        endpoint: String,
        line: usize,
        message: String,
    },
}

/// What a replay sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplaySummary {
    pub requests: usize,
    pub spans: usize,
}

/// Send every line of `path` to `endpoint` (for HTTP the full traces URL, e.g.
/// `http://127.0.0.1:4318/v1/traces`; for gRPC the collector address), with extra `headers`.
pub fn replay(
    path: &Path,
    endpoint: &str,
    protocol: Protocol,
    headers: &[(String, String)],
) -> Result<ReplaySummary, ReplayError> {
    let shown = path.display().to_string();
    let file = std::fs::File::open(path).map_err(|source| ReplayError::Read {
        path: shown.clone(),
        source,
    })?;
    let mut requests = Vec::new();
    for (index, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|source| ReplayError::Read {
            path: shown.clone(),
            source,
        })?;
        if line.trim().is_empty() {
            continue;
        }
        let request: ExportTraceServiceRequest =
            serde_json::from_str(&line).map_err(|e| ReplayError::Parse {
                path: shown.clone(),
                line: index + 1,
                message: e.to_string(),
            })?;
        requests.push((index + 1, request));
    }
    let spans = requests
        .iter()
        .flat_map(|(_, r)| &r.resource_spans)
        .flat_map(|rs| &rs.scope_spans)
        .map(|ss| ss.spans.len())
        .sum();
    let send_error = |line: usize, message: String| ReplayError::Send {
        endpoint: endpoint.to_owned(),
        line,
        message,
    };
    match protocol {
        #[cfg(not(feature = "grpc"))]
        Protocol::Grpc => {
            return Err(send_error(
                0,
                "replay over gRPC needs waxell's cargo feature `grpc`".into(),
            ));
        }
        #[cfg(feature = "grpc")]
        Protocol::Grpc => {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| send_error(0, format!("starting a runtime: {e}")))?;
            runtime.block_on(async {
                use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
                let mut client = TraceServiceClient::connect(endpoint.to_owned())
                    .await
                    .map_err(|e| send_error(0, format!("connecting: {e}")))?;
                for (line, request) in &requests {
                    let mut req = tonic::Request::new(request.clone());
                    for (k, v) in headers {
                        let key = tonic::metadata::MetadataKey::from_bytes(k.to_ascii_lowercase().as_bytes())
                            .map_err(|e| send_error(*line, format!("header {k:?}: {e}")))?;
                        let value = v.parse().map_err(|_| send_error(*line, format!("header {k:?} has an invalid value")))?;
                        req.metadata_mut().insert(key, value);
                    }
                    client.export(req).await.map_err(|status| send_error(*line, status.to_string()))?;
                }
                Ok::<(), ReplayError>(())
            })?;
        }
        #[cfg(not(feature = "otlp-http"))]
        Protocol::HttpProtobuf | Protocol::HttpJson => {
            return Err(send_error(
                0,
                "replay over HTTP needs waxell's cargo feature `otlp-http`".into(),
            ));
        }
        #[cfg(feature = "otlp-http")]
        Protocol::HttpProtobuf | Protocol::HttpJson => {
            use prost::Message as _;
            let client = crate::http::blocking_client(|b| b.timeout(std::time::Duration::from_secs(10)))
                .map_err(|e| send_error(0, e))?;
            for (line, request) in &requests {
                let (body, content_type) = match protocol {
                    Protocol::HttpJson => (
                        serde_json::to_vec(request).map_err(|e| send_error(*line, e.to_string()))?,
                        "application/json",
                    ),
                    _ => (request.encode_to_vec(), "application/x-protobuf"),
                };
                let mut builder = client
                    .post(endpoint)
                    .header("content-type", content_type)
                    .body(body);
                for (k, v) in headers {
                    builder = builder.header(k.as_str(), v.as_str());
                }
                let response = builder.send().map_err(|e| send_error(*line, e.to_string()))?;
                if !response.status().is_success() {
                    let status = response.status();
                    let text = response.text().unwrap_or_default();
                    return Err(send_error(
                        *line,
                        format!("HTTP {status}: {}", text.chars().take(300).collect::<String>()),
                    ));
                }
            }
        }
    }
    Ok(ReplaySummary {
        requests: requests.len(),
        spans,
    })
}
