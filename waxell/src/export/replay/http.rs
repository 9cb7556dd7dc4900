//! Replay over OTLP/HTTP (protobuf or JSON bodies), with a blocking client.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
use prost::Message;

use super::{rejected, Note, ReplayError, Requests};
use crate::config::OtlpSettings;
use crate::export::fail_open::EncodedRequest;
use crate::export::jsonl::span_count;
use crate::export::otlp_http::Target;

/// Send each request once to the traces URL `endpoint`, noting what became of it.
pub(super) fn send_all(
    endpoint: &str,
    settings: &OtlpSettings,
    requests: &Requests,
    note: &mut Note<'_>,
) -> Result<(), ReplayError> {
    let target = Target::new(endpoint, settings).map_err(|message| ReplayError::Send {
        endpoint: endpoint.to_owned(),
        line: 0,
        message,
    })?;
    for (line, request) in requests {
        let n = span_count(request);
        let outcome = send(&target, &EncodedRequest::encode(request, n, target.json));
        note(*line, n, outcome);
    }
    Ok(())
}

/// Send one request; the spans the collector rejected, or why it failed.
fn send(target: &Target, request: &EncodedRequest) -> Result<i64, String> {
    let answer = target.post(request).map_err(|outcome| outcome.describe())?;
    if !answer.status.is_success() {
        let text = String::from_utf8_lossy(&answer.body);
        return Err(format!(
            "HTTP {}: {}",
            answer.status,
            text.trim().chars().take(300).collect::<String>()
        ));
    }
    let decoded = if request.json {
        serde_json::from_slice(&answer.body).ok()
    } else {
        ExportTraceServiceResponse::decode(answer.body.as_ref()).ok()
    };
    Ok(rejected(decoded))
}
