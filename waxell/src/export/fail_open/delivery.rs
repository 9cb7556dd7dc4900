//! How a batch reaches the collector, and the form it is kept in meanwhile.
//!
//! The fail-open exporter keeps a copy of every batch in flight, to retry it or save it to the trace file.
//! A plain span exporter takes the spans by value, so the copy is a deep clone ([`SpanExporterDelivery`]);
//! OTLP/HTTP encodes the batch once and keeps the encoded request, whose copy is a reference count
//! (`export::otlp_http`).

#[cfg(feature = "otlp-http")]
use std::sync::Arc;
use std::time::Duration;

#[cfg(feature = "otlp-http")]
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
#[cfg(feature = "otlp-http")]
use opentelemetry_sdk::error::OTelSdkError;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use opentelemetry_sdk::Resource;

/// A batch in flight, in the form its delivery sends; cloning it is the copy kept to retry or save it.
#[derive(Debug, Clone)]
pub(crate) enum Batch {
    Spans(Vec<SpanData>),
    /// Encoded once; clones share it.
    #[cfg(feature = "otlp-http")]
    Request(Arc<EncodedRequest>),
}

impl Batch {
    pub(crate) fn len(&self) -> usize {
        match self {
            Self::Spans(spans) => spans.len(),
            #[cfg(feature = "otlp-http")]
            Self::Request(request) => request.spans,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl From<Vec<SpanData>> for Batch {
    fn from(spans: Vec<SpanData>) -> Self {
        Self::Spans(spans)
    }
}

/// An OTLP request ready to send: its body in the configured encoding, and how many spans it holds.
#[cfg(feature = "otlp-http")]
#[derive(Debug)]
pub(crate) struct EncodedRequest {
    pub(crate) body: bytes::Bytes,
    pub(crate) spans: usize,
    /// The body is JSON (`http/json`), else protobuf.
    pub(crate) json: bool,
}

#[cfg(feature = "otlp-http")]
impl EncodedRequest {
    /// `request` as JSON when `json` is asked for, else protobuf. JSON encoding of these types cannot fail in
    /// practice; if it ever did, the body is protobuf (OTLP/HTTP collectors take both on the same path).
    pub(crate) fn encode(request: &ExportTraceServiceRequest, spans: usize, json: bool) -> Self {
        use prost::Message as _;
        let json_body = json.then(|| serde_json::to_vec(request).ok()).flatten();
        let json = json_body.is_some();
        let body = json_body.unwrap_or_else(|| request.encode_to_vec());
        Self {
            body: body.into(),
            spans,
            json,
        }
    }

    pub(crate) fn content_type(&self) -> &'static str {
        if self.json {
            "application/json"
        } else {
            "application/x-protobuf"
        }
    }

    /// The request back, to save it as a JSON line.
    pub(crate) fn decode(&self) -> Result<ExportTraceServiceRequest, String> {
        use prost::Message as _;
        if self.json {
            serde_json::from_slice(&self.body).map_err(|e| e.to_string())
        } else {
            ExportTraceServiceRequest::decode(self.body.as_ref()).map_err(|e| e.to_string())
        }
    }
}

/// Sends batches to the collector for the fail-open exporter.
pub(crate) trait Delivery: std::fmt::Debug + Send + Sync + 'static {
    /// The batch processor's spans in the form [`deliver`](Self::deliver) sends (on the batch processor's
    /// thread, which waits for the export anyway).
    fn prepare(&self, spans: Vec<SpanData>) -> Batch;

    /// Send one batch and wait for the answer (on the export worker's thread).
    fn deliver(&self, batch: Batch) -> OTelSdkResult;

    fn set_resource(&mut self, resource: &Resource);

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }
}

/// Any OpenTelemetry span exporter (gRPC, the embedded default's file and console, tests' exporters).
#[derive(Debug)]
pub(crate) struct SpanExporterDelivery<E>(pub(crate) E);

impl<E: SpanExporter + 'static> Delivery for SpanExporterDelivery<E> {
    fn prepare(&self, spans: Vec<SpanData>) -> Batch {
        Batch::Spans(spans)
    }

    fn deliver(&self, batch: Batch) -> OTelSdkResult {
        match batch {
            Batch::Spans(spans) => super::block_on(self.0.export(spans)),
            #[cfg(feature = "otlp-http")]
            Batch::Request(_) => Err(OTelSdkError::InternalFailure(
                "waxell: a span exporter was given an encoded request".into(),
            )),
        }
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.0.set_resource(resource);
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.0.force_flush()
    }
}
