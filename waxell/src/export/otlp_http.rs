//! OTLP over HTTP: one POST of an encoded `ExportTraceServiceRequest` (protobuf or JSON body) to the traces URL,
//! shared by the live pipeline ([`OtlpHttp`]) and `waxell replay`.
//!
//! The live pipeline encodes each batch once, on the batch processor's thread (protobuf straight from the spans,
//! `export::otlp_proto`), and keeps the encoded request (reference-counted bytes) as the copy it retries or
//! saves. Going through `opentelemetry-otlp`'s exporter instead meant giving it the spans by value and keeping
//! a deep clone of every batch for the unhappy path.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
use opentelemetry_proto::transform::trace::tonic::group_spans_by_resource_and_scope;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::SpanData;
use opentelemetry_sdk::Resource;

use super::fail_open::{Batch, Delivery, EncodedRequest};
use super::transport::{classify, Outcome, TransportLog};
use crate::config::{OtlpSettings, Protocol};

/// Where requests go: the traces URL, the extra headers and the encoding.
#[derive(Debug)]
pub(crate) struct Target {
    client: reqwest::blocking::Client,
    url: String,
    headers: Vec<(String, String)>,
    /// Send JSON bodies (`http/json`) rather than protobuf.
    pub(crate) json: bool,
}

/// What the collector answered.
pub(crate) struct Answer {
    pub(crate) status: reqwest::StatusCode,
    pub(crate) retry_after: Option<Duration>,
    pub(crate) body: Bytes,
}

impl Target {
    /// A target for `url` (the full traces URL) with the settings' headers, encoding and timeout.
    pub(crate) fn new(url: &str, settings: &OtlpSettings) -> Result<Self, String> {
        let timeout = settings.timeout;
        Ok(Self {
            client: crate::http::blocking_client(move |b| b.timeout(timeout))?,
            url: url.to_owned(),
            headers: settings.headers.clone(),
            json: settings.protocol == Protocol::HttpJson,
        })
    }

    /// POST one encoded request; a transport failure comes back classified.
    pub(crate) fn post(&self, encoded: &EncodedRequest) -> Result<Answer, Outcome> {
        let mut request = self
            .client
            .post(&self.url)
            .header("content-type", encoded.content_type())
            .body(encoded.body.clone());
        for (name, value) in &self.headers {
            request = request.header(name.as_str(), value.as_str());
        }
        let response = request.send().map_err(|e| classify(&e))?;
        let status = response.status();
        // Delta-seconds, the form collectors send; an HTTP-date falls back to the back-off.
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok())
            .and_then(|s| Duration::try_from_secs_f64(s).ok());
        let body = response.bytes().unwrap_or_default();
        Ok(Answer {
            status,
            retry_after,
            body,
        })
    }
}

/// The live pipeline's OTLP/HTTP delivery: encodes each batch once and records each request's outcome in the
/// [`TransportLog`] the fail-open exporter reads.
#[derive(Debug)]
pub(crate) struct OtlpHttp {
    target: Target,
    resource: ResourceAttributesWithSchema,
    log: Arc<TransportLog>,
}

impl OtlpHttp {
    pub(crate) fn new(target: Target, log: Arc<TransportLog>) -> Self {
        Self {
            target,
            resource: (&Resource::builder_empty().build()).into(),
            log,
        }
    }
}

impl Delivery for OtlpHttp {
    fn prepare(&self, spans: Vec<SpanData>) -> Batch {
        let n = spans.len();
        let encoded = if self.target.json {
            let request = ExportTraceServiceRequest {
                resource_spans: group_spans_by_resource_and_scope(spans, &self.resource),
            };
            EncodedRequest::encode(&request, n, true)
        } else {
            EncodedRequest {
                body: super::otlp_proto::encode_request(&spans, &self.resource).into(),
                spans: n,
                json: false,
            }
        };
        Batch::Request(Arc::new(encoded))
    }

    fn deliver(&self, batch: Batch) -> OTelSdkResult {
        let Batch::Request(encoded) = batch else {
            return Err(OTelSdkError::InternalFailure(
                "waxell: the OTLP/HTTP delivery was given unencoded spans".into(),
            ));
        };
        match self.target.post(&encoded) {
            Ok(answer) => {
                let code = answer.status.as_u16();
                self.log.set(Outcome::Status {
                    code,
                    retry_after: answer.retry_after,
                });
                if answer.status.is_success() {
                    Ok(())
                } else {
                    Err(OTelSdkError::InternalFailure(format!(
                        "the collector answered HTTP {code}"
                    )))
                }
            }
            Err(outcome) => {
                let why = outcome.describe();
                self.log.set(outcome);
                Err(OTelSdkError::InternalFailure(why))
            }
        }
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.resource = resource.into();
    }
}
