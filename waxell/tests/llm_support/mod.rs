//! Test support for the LLM client tests: an OpenAI-compatible HTTP server on 127.0.0.1 that answers
//! from a script and records what it received, and in-memory OpenTelemetry exporters.
//!
//! Spans are captured per test with `waxell::testing`, so the tests of a binary share one process. Metrics
//! go to the global meter provider: a test that reads them installs one and keeps to its own server's points.
#![allow(dead_code, unreachable_pub)] // each test binary uses a different subset

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::post;
use axum::Router;
use futures_util::{stream, StreamExt};
use opentelemetry::KeyValue;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, HistogramDataPoint, MetricData};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, SdkMeterProvider};
use opentelemetry_sdk::trace::SpanData;
use serde_json::{json, Value as Json};

/// What the fake server answers to one request.
#[derive(Debug, Clone)]
pub enum FakeReply {
    /// A complete response with this status, body and extra headers.
    Json {
        status: u16,
        body: String,
        headers: Vec<(String, String)>,
    },
    /// A server-sent-event stream of these `data:` payloads. With `cut`, the connection breaks after
    /// them (no `[DONE]`, no clean end of the chunked body).
    Sse { payloads: Vec<String>, cut: bool },
    /// Wait, then answer.
    Delayed(Duration, Box<FakeReply>),
}

impl FakeReply {
    /// 200 with this JSON body.
    pub fn ok(body: Json) -> Self {
        Self::Json {
            status: 200,
            body: body.to_string(),
            headers: Vec::new(),
        }
    }

    /// An OpenAI-shaped error.
    pub fn error(status: u16, message: &str, code: &str) -> Self {
        Self::Json {
            status,
            body: json!({"error": {"message": message, "type": "server_error", "code": code}}).to_string(),
            headers: Vec::new(),
        }
    }

    pub fn with_header(self, name: &str, value: &str) -> Self {
        match self {
            Self::Json {
                status,
                body,
                mut headers,
            } => {
                headers.push((name.to_owned(), value.to_owned()));
                Self::Json {
                    status,
                    body,
                    headers,
                }
            }
            other => other,
        }
    }

    /// A 200 whose body is exactly `raw` (for malformed responses).
    pub fn raw(raw: &str) -> Self {
        Self::Json {
            status: 200,
            body: raw.to_owned(),
            headers: Vec::new(),
        }
    }

    /// A complete stream of these chunks, ending with `[DONE]`.
    pub fn stream(chunks: Vec<Json>) -> Self {
        let mut payloads: Vec<String> = chunks.iter().map(Json::to_string).collect();
        payloads.push("[DONE]".to_owned());
        Self::Sse { payloads, cut: false }
    }

    /// These chunks, then a broken connection.
    pub fn cut_stream(chunks: Vec<Json>) -> Self {
        Self::Sse {
            payloads: chunks.iter().map(Json::to_string).collect(),
            cut: true,
        }
    }

    pub fn after(self, delay: Duration) -> Self {
        Self::Delayed(delay, Box::new(self))
    }
}

/// One request the fake server received.
#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    pub headers: HeaderMap,
    pub body: Json,
    pub at: Instant,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|value| value.to_str().ok())
    }
}

#[derive(Default)]
struct Shared {
    replies: Mutex<VecDeque<FakeReply>>,
    received: Mutex<Vec<Received>>,
}

/// An OpenAI-compatible server on 127.0.0.1 answering `POST /v1/chat/completions` from a queue.
pub struct FakeServer {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
}

impl FakeServer {
    pub async fn start(replies: Vec<FakeReply>) -> Self {
        let shared = Arc::new(Shared {
            replies: Mutex::new(replies.into()),
            received: Mutex::default(),
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(answer))
            .with_state(Arc::clone(&shared));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { addr, shared }
    }

    /// The base URL to configure the client with.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    pub fn received(&self) -> Vec<Received> {
        self.shared.received.lock().unwrap().clone()
    }
}

async fn answer(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    shared.received.lock().unwrap().push(Received {
        path: "/v1/chat/completions".to_owned(),
        headers,
        body: serde_json::from_slice(&body).unwrap_or(Json::Null),
        at: Instant::now(),
    });
    let reply = shared.replies.lock().unwrap().pop_front();
    match reply {
        Some(reply) => respond(reply).await,
        None => {
            respond(FakeReply::error(
                500,
                "the fake server has no reply left",
                "test_setup",
            ))
            .await
        }
    }
}

async fn respond(mut reply: FakeReply) -> Response {
    while let FakeReply::Delayed(delay, inner) = reply {
        tokio::time::sleep(delay).await;
        reply = *inner;
    }
    match reply {
        FakeReply::Json {
            status,
            body,
            headers,
        } => {
            let mut response = Response::builder()
                .status(StatusCode::from_u16(status).unwrap())
                .header("content-type", "application/json");
            for (name, value) in headers {
                response = response.header(name, value);
            }
            response.body(Body::from(body)).unwrap()
        }
        FakeReply::Sse { payloads, cut } => {
            let events = payloads
                .into_iter()
                .map(|payload| Ok::<_, std::io::Error>(Bytes::from(format!("data: {payload}\n\n"))));
            let body = if cut {
                // An error item makes hyper abort the connection mid-body, as a dropped network would. It
                // comes a little later so that the headers and the first events are on the wire first.
                let cut = stream::once(async {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    Err(std::io::Error::new(std::io::ErrorKind::ConnectionReset, "cut"))
                });
                Body::from_stream(stream::iter(events).chain(cut))
            } else {
                Body::from_stream(stream::iter(events))
            };
            Response::builder()
                .status(200)
                .header("content-type", "text/event-stream")
                .body(body)
                .unwrap()
        }
        FakeReply::Delayed(..) => unreachable!("unwrapped above"),
    }
}

// ---- OpenAI-shaped bodies ----

pub fn completion(id: &str, model: &str, content: &str, usage: (u64, u64)) -> Json {
    json!({
        "id": id, "object": "chat.completion", "created": 1_700_000_000, "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": usage.0, "completion_tokens": usage.1, "total_tokens": usage.0 + usage.1},
    })
}

pub fn chunk(id: &str, model: &str, delta: Json, finish_reason: Option<&str>) -> Json {
    json!({
        "id": id, "object": "chat.completion.chunk", "created": 1_700_000_000, "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    })
}

pub fn usage_chunk(id: &str, model: &str, usage: (u64, u64)) -> Json {
    json!({
        "id": id, "object": "chat.completion.chunk", "created": 1_700_000_000, "model": model, "choices": [],
        "usage": {"prompt_tokens": usage.0, "completion_tokens": usage.1, "total_tokens": usage.0 + usage.1},
    })
}

// ---- telemetry ----

/// Capture the spans of this test (its thread and context).
pub fn capture_spans() -> waxell::testing::Capture {
    waxell::testing::capture()
}

/// Install an in-memory span exporter as the global tracer provider (for a test in a process of its own).
pub fn capture_spans_globally() -> opentelemetry_sdk::trace::InMemorySpanExporter {
    let exporter = opentelemetry_sdk::trace::InMemorySpanExporter::default();
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    opentelemetry::global::set_tracer_provider(provider);
    exporter
}

/// Install an in-memory metric exporter as the global meter provider.
pub fn capture_metrics() -> (SdkMeterProvider, InMemoryMetricExporter) {
    let exporter = InMemoryMetricExporter::default();
    let provider = SdkMeterProvider::builder()
        .with_periodic_exporter(exporter.clone())
        .build();
    opentelemetry::global::set_meter_provider(provider.clone());
    (provider, exporter)
}

/// The histogram data points of metric `name` (after a flush).
pub fn histogram_points_f64(exporter: &InMemoryMetricExporter, name: &str) -> Vec<(Vec<KeyValue>, f64, u64)> {
    let mut points = Vec::new();
    for resource in exporter.get_finished_metrics().unwrap() {
        for scope in resource.scope_metrics() {
            for metric in scope.metrics().filter(|metric| metric.name() == name) {
                if let AggregatedMetrics::F64(MetricData::Histogram(histogram)) = metric.data() {
                    points.extend(histogram.data_points().map(|p: &HistogramDataPoint<f64>| {
                        (p.attributes().cloned().collect(), p.sum(), p.count())
                    }));
                }
            }
        }
    }
    points
}

pub fn histogram_points_u64(
    exporter: &InMemoryMetricExporter,
    name: &str,
) -> Vec<(Vec<KeyValue>, u64, Vec<f64>)> {
    let mut points = Vec::new();
    for resource in exporter.get_finished_metrics().unwrap() {
        for scope in resource.scope_metrics() {
            for metric in scope.metrics().filter(|metric| metric.name() == name) {
                if let AggregatedMetrics::U64(MetricData::Histogram(histogram)) = metric.data() {
                    points.extend(histogram.data_points().map(|p: &HistogramDataPoint<u64>| {
                        (p.attributes().cloned().collect(), p.sum(), p.bounds().collect())
                    }));
                }
            }
        }
    }
    points
}

pub fn finished_spans(capture: &waxell::testing::Capture) -> Vec<SpanData> {
    capture.spans().iter().map(|span| span.data().clone()).collect()
}

/// The only finished span called `name`.
pub fn span_named(spans: &[SpanData], name: &str) -> SpanData {
    let matching: Vec<_> = spans.iter().filter(|span| span.name == name).collect();
    assert_eq!(
        matching.len(),
        1,
        "expected one span {name:?}, got {:?}",
        spans.iter().map(|span| &span.name).collect::<Vec<_>>()
    );
    matching[0].clone()
}

/// Every string anywhere in the span (name, attributes, events, status), to search for leaks.
pub fn span_text(span: &SpanData) -> String {
    let mut text = format!("{} {:?}", span.name, span.status);
    for kv in &span.attributes {
        text.push_str(&format!(" {}={}", kv.key, kv.value));
    }
    for event in span.events.iter() {
        text.push_str(&format!(" {} {:?}", event.name, event.attributes));
    }
    text
}

pub fn assert_secret_absent(spans: &[SpanData], secret: &str) {
    for span in spans {
        assert!(
            !span_text(span).contains(secret),
            "the API key leaked into span {:?}",
            span.name
        );
    }
}

/// A client pointed at `server` with a key and fast retries, for the tests.
pub fn client_for(server: &FakeServer) -> waxell::llm::ClientBuilder {
    waxell::llm::Client::builder()
        .with_base_url(server.base_url())
        .with_api_key(TEST_KEY)
        .with_model("gpt-4o-mini")
        .with_retry_backoff(Duration::from_millis(10), Duration::from_millis(50))
}

pub const TEST_KEY: &str = "sk-test-0123456789abcdefSECRET";
