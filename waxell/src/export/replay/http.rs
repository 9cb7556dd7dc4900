//! Replay over OTLP/HTTP (protobuf or JSON bodies), with a blocking client.

use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use prost::Message;

use super::{rejected, Note, ReplayError, Requests};
use crate::config::{OtlpSettings, Protocol};
use crate::export::jsonl::span_count;

/// Send each request once to the traces URL `endpoint`, noting what became of it.
pub(super) fn send_all(
    endpoint: &str,
    settings: &OtlpSettings,
    requests: &Requests,
    note: &mut Note<'_>,
) -> Result<(), ReplayError> {
    let timeout = settings.timeout;
    let client =
        crate::http::blocking_client(move |b| b.timeout(timeout)).map_err(|message| ReplayError::Send {
            endpoint: endpoint.to_owned(),
            line: 0,
            message,
        })?;
    for (line, request) in requests {
        let outcome = send_http(&client, endpoint, settings, request);
        note(*line, span_count(request), outcome);
    }
    Ok(())
}

/// Send one request; the spans the collector rejected, or why it failed.
fn send_http(
    client: &reqwest::blocking::Client,
    endpoint: &str,
    settings: &OtlpSettings,
    request: &ExportTraceServiceRequest,
) -> Result<i64, String> {
    let json = settings.protocol == Protocol::HttpJson;
    let (body, content_type) = if json {
        (
            serde_json::to_vec(request).map_err(|e| e.to_string())?,
            "application/json",
        )
    } else {
        (request.encode_to_vec(), "application/x-protobuf")
    };
    let mut builder = client
        .post(endpoint)
        .header("content-type", content_type)
        .body(body);
    for (k, v) in &settings.headers {
        builder = builder.header(k.as_str(), v.as_str());
    }
    let response = builder
        .send()
        .map_err(|e| match crate::export::transport::classify(&e) {
            crate::export::transport::Outcome::Refused(why)
            | crate::export::transport::Outcome::Network(why) => why,
            other => other.describe(),
        })?;
    let status = response.status();
    let bytes = response.bytes().unwrap_or_default();
    if !status.is_success() {
        let text = String::from_utf8_lossy(&bytes);
        return Err(format!(
            "HTTP {status}: {}",
            text.trim().chars().take(300).collect::<String>()
        ));
    }
    let decoded = if json {
        serde_json::from_slice(&bytes).ok()
    } else {
        ExportTraceServiceResponse::decode(bytes.as_ref()).ok()
    };
    Ok(rejected(decoded))
}
