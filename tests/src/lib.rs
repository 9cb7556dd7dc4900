//! Shared helpers for the integration tests: OTLP receivers on 127.0.0.1 that decode what arrives with the
//! OpenTelemetry protobuf definitions (HTTP/protobuf, HTTP/JSON and gRPC), and accessors for decoded spans.
//!
//! Each receiver runs on its own thread with its own Tokio runtime, so a test may use a plain `main`, a
//! current-thread runtime or a multi-thread one without the receiver depending on it.

pub mod bench_row;
pub mod bench_table;
pub mod browser;
pub mod fake_llm;
pub mod fake_model;
pub mod own_process;
pub mod semconv_check;
pub mod waxell_api;

/// The Rust examples of the README and of `docs/` compile here as doc tests (`cargo test --doc -p
/// waxell-tests`), with every feature and the crates they name; those that would reach a network, a sandbox or a
/// container engine are `no_run`, and the one illustration that is not code says why it is `ignore`.
#[cfg(doctest)]
mod docs {
    #[doc = include_str!("../../README.md")]
    struct Readme;
    #[doc = include_str!("../../docs/attributes.md")]
    struct Attributes;
    #[doc = include_str!("../../docs/container-sandbox.md")]
    struct ContainerSandbox;
    #[doc = include_str!("../../docs/e2b.md")]
    struct E2b;
    #[doc = include_str!("../../docs/getting-started.md")]
    struct GettingStarted;
    #[doc = include_str!("../../docs/integrations.md")]
    struct Integrations;
    #[doc = include_str!("../../docs/jaeger.md")]
    struct Jaeger;
    #[doc = include_str!("../../docs/llm.md")]
    struct Llm;
    #[doc = include_str!("../../docs/sandbox.md")]
    struct Sandbox;
    #[doc = include_str!("../../docs/testing.md")]
    struct Testing;
}

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
/// The protobuf types, for tests that build spans to check.
pub use opentelemetry_proto;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
pub use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
pub use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

/// A span as it arrived, with its resource attributes.
#[derive(Debug, Clone)]
pub struct Received {
    pub span: Span,
    pub resource: HashMap<String, AnyValue>,
    pub scope: String,
}

/// One export request's transport details.
#[derive(Debug, Clone)]
pub struct RequestInfo {
    pub path: String,
    pub headers: HashMap<String, String>,
}

#[derive(Default)]
struct Store {
    spans: Vec<Received>,
    requests: Vec<RequestInfo>,
    metrics: Vec<ExportMetricsServiceRequest>,
}

/// A server on 127.0.0.1 (a free port) with its own thread and Tokio runtime, stopped when dropped.
pub struct ServerThread {
    pub addr: SocketAddr,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Resolves when the server should stop.
pub type StopSignal = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

impl ServerThread {
    /// Bind, then run `serve(listener, stop)` until it returns.
    pub fn spawn<F, Fut>(serve: F) -> Self
    where
        F: FnOnce(tokio::net::TcpListener, StopSignal) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()>,
    {
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (shutdown_tx, shutdown_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                addr_tx.send(listener.local_addr().unwrap()).unwrap();
                let stop: StopSignal = Box::pin(async move {
                    let _ = shutdown_rx.await;
                });
                serve(listener, stop).await;
            });
        });
        let addr = addr_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("server started");
        Self {
            addr,
            shutdown: Some(shutdown_tx),
            thread: Some(thread),
        }
    }
}

impl Drop for ServerThread {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// An OTLP receiver on 127.0.0.1.
pub struct OtlpReceiver {
    pub addr: SocketAddr,
    store: Arc<Mutex<Store>>,
    _server: ServerThread,
}

fn record(store: &Mutex<Store>, request: ExportTraceServiceRequest, info: RequestInfo) {
    let mut s = store.lock().unwrap();
    s.requests.push(info);
    for rs in request.resource_spans {
        let resource: HashMap<String, AnyValue> = rs
            .resource
            .map(|r| {
                r.attributes
                    .into_iter()
                    .filter_map(|kv| Some((kv.key, kv.value?.value?)))
                    .collect()
            })
            .unwrap_or_default();
        for ss in rs.scope_spans {
            let scope = ss.scope.map(|s| s.name).unwrap_or_default();
            for span in ss.spans {
                s.spans.push(Received {
                    span,
                    resource: resource.clone(),
                    scope: scope.clone(),
                });
            }
        }
    }
}

fn headers_of(map: &HeaderMap) -> HashMap<String, String> {
    map.iter()
        .map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or_default().to_owned()))
        .collect()
}

struct Grpc(Arc<Mutex<Store>>);

#[tonic::async_trait]
impl TraceService for Grpc {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let headers = request
            .metadata()
            .iter()
            .filter_map(|kv| match kv {
                tonic::metadata::KeyAndValueRef::Ascii(k, v) => {
                    Some((k.as_str().to_owned(), v.to_str().unwrap_or_default().to_owned()))
                }
                _ => None,
            })
            .collect();
        record(
            &self.0,
            request.into_inner(),
            RequestInfo {
                path: "grpc".into(),
                headers,
            },
        );
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

impl OtlpReceiver {
    /// OTLP/HTTP on `/v1/traces` (protobuf or JSON, by content type) and `/v1/metrics`.
    pub fn start_http() -> Self {
        Self::start(false, None)
    }

    /// OTLP/HTTP that, like MLflow 3 with `x-mlflow-experiment-id`, answers 422 to a traces request without
    /// the header `name` set to `value` (and records nothing from it).
    pub fn start_http_requiring_header(name: &str, value: &str) -> Self {
        Self::start(false, Some((name.to_ascii_lowercase(), value.to_owned())))
    }

    /// OTLP/gRPC.
    pub fn start_grpc() -> Self {
        Self::start(true, None)
    }

    fn start(grpc: bool, required: Option<(String, String)>) -> Self {
        let store = Arc::new(Mutex::new(Store::default()));
        let thread_store = Arc::clone(&store);
        let server = ServerThread::spawn(move |listener, stop| async move {
            if grpc {
                let incoming = tokio_stream_from(listener);
                tonic::transport::Server::builder()
                    .add_service(TraceServiceServer::new(Grpc(thread_store)))
                    .serve_with_incoming_shutdown(incoming, stop)
                    .await
                    .unwrap();
            } else {
                axum::serve(listener, http_routes(thread_store, required))
                    .with_graceful_shutdown(stop)
                    .await
                    .unwrap();
            }
        });
        Self {
            addr: server.addr,
            store,
            _server: server,
        }
    }

    /// Base URL, e.g. `http://127.0.0.1:4318`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Full traces URL for HTTP.
    pub fn traces_url(&self) -> String {
        format!("{}/v1/traces", self.base_url())
    }

    pub fn spans(&self) -> Vec<Received> {
        self.store.lock().unwrap().spans.clone()
    }

    pub fn requests(&self) -> Vec<RequestInfo> {
        self.store.lock().unwrap().requests.clone()
    }

    pub fn metrics(&self) -> Vec<ExportMetricsServiceRequest> {
        self.store.lock().unwrap().metrics.clone()
    }

    /// Wait until at least `n` spans arrived (or `timeout` passes) and return what arrived.
    pub fn wait_for_spans(&self, n: usize, timeout: Duration) -> Vec<Received> {
        let deadline = Instant::now() + timeout;
        loop {
            let spans = self.spans();
            if spans.len() >= n || Instant::now() >= deadline {
                return spans;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// OTLP/HTTP: `/v1/traces` (protobuf or JSON by content type) and `/v1/metrics`.
fn http_routes(thread_store: Arc<Mutex<Store>>, required: Option<(String, String)>) -> axum::Router {
    let traces_store = Arc::clone(&thread_store);
    let metrics_store = Arc::clone(&thread_store);
    let app = axum::Router::new()
        .route(
            "/v1/traces",
            post(move |headers: HeaderMap, body: Bytes| {
                let store = Arc::clone(&traces_store);
                let required = required.clone();
                async move {
                    if let Some((name, value)) = &required {
                        if headers.get(name.as_str()).and_then(|v| v.to_str().ok()) != Some(value.as_str()) {
                            return (
                                StatusCode::UNPROCESSABLE_ENTITY,
                                format!("missing header {name}").into_bytes(),
                            );
                        }
                    }
                    let json = headers
                        .get("content-type")
                        .is_some_and(|c| c.as_bytes().starts_with(b"application/json"));
                    let decoded = if json {
                        serde_json::from_slice::<ExportTraceServiceRequest>(&body).map_err(|e| e.to_string())
                    } else {
                        ExportTraceServiceRequest::decode(body).map_err(|e| e.to_string())
                    };
                    match decoded {
                        Ok(req) => {
                            record(
                                &store,
                                req,
                                RequestInfo {
                                    path: "/v1/traces".into(),
                                    headers: headers_of(&headers),
                                },
                            );
                            (StatusCode::OK, Vec::new())
                        }
                        Err(e) => (StatusCode::BAD_REQUEST, e.into_bytes()),
                    }
                }
            }),
        )
        .route(
            "/v1/metrics",
            post(move |body: Bytes| {
                let store = Arc::clone(&metrics_store);
                async move {
                    match ExportMetricsServiceRequest::decode(body) {
                        Ok(req) => {
                            store.lock().unwrap().metrics.push(req);
                            StatusCode::OK
                        }
                        Err(_) => StatusCode::BAD_REQUEST,
                    }
                }
            }),
        );
    app
}

fn tokio_stream_from(
    listener: tokio::net::TcpListener,
) -> impl futures_util::Stream<Item = Result<tokio::net::TcpStream, std::io::Error>> {
    futures_util::stream::unfold(listener, |listener| async move {
        let accepted = listener.accept().await.map(|(stream, _)| stream);
        Some((accepted, listener))
    })
}

/// Attribute value of a received span.
pub fn attr<'a>(span: &'a Span, key: &str) -> Option<&'a AnyValue> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| v.value.as_ref())
}

/// String attribute of a received span (other types rendered).
pub fn attr_string(span: &Span, key: &str) -> Option<String> {
    attr(span, key).map(|v| match v {
        AnyValue::StringValue(s) => s.clone(),
        AnyValue::IntValue(i) => i.to_string(),
        AnyValue::DoubleValue(d) => d.to_string(),
        AnyValue::BoolValue(b) => b.to_string(),
        other => format!("{other:?}"),
    })
}

/// Find a received span by name.
pub fn by_name<'a>(spans: &'a [Received], name: &str) -> Option<&'a Received> {
    spans.iter().find(|r| r.span.name == name)
}

/// Whether `child` is a direct child of `parent`.
pub fn is_child(child: &Span, parent: &Span) -> bool {
    child.parent_span_id == parent.span_id && child.trace_id == parent.trace_id
}
pub mod faults;

/// Why the container tests cannot run here, if they cannot: they need the engine named by `DOCKER_HOST`,
/// which `scripts/setup-container.sh` prints and `scripts/test.sh` exports. Without it a plain `cargo test`
/// skips them with this reason, unless `WAXELL_REQUIRE_CONTAINER_TESTS=1` makes that a failure.
pub fn container_engine_missing() -> Option<String> {
    container_engine_missing_at("DOCKER_HOST")
}

/// [`container_engine_missing`] for the engine named by `env_var` (`DOCKER_HOST`, or
/// `WAXELL_RUNSC_DOCKER_HOST` for the one running gVisor).
pub fn container_engine_missing_at(env_var: &str) -> Option<String> {
    if std::env::var(env_var).is_ok_and(|v| !v.is_empty()) {
        return None;
    }
    let why = format!(
        "{env_var} is not set: run `eval \"$(bash scripts/setup-container.sh)\"` as root, or point it at a \
         Docker or Podman socket"
    );
    assert!(
        std::env::var("WAXELL_REQUIRE_CONTAINER_TESTS").as_deref() != Ok("1"),
        "WAXELL_REQUIRE_CONTAINER_TESTS=1 but {why}"
    );
    Some(why)
}

/// A variable lookup holding exactly `vars`, for `waxell::Builder::with_env`: a test configures `init()` as
/// the environment would, without setting the process's variables (which every thread shares).
pub fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + Send + Sync + 'static {
    let vars: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    move |name| vars.get(name).cloned()
}

/// The path of a binary target of the package under test: `NEXTEST_BIN_EXE_<name>` when nextest
/// runs the test (remapped when it runs from an archive, possibly as another user on another
/// checkout), else Cargo's compile-time `CARGO_BIN_EXE_<name>`.
#[macro_export]
macro_rules! bin_exe {
    ($name:literal) => {
        ::std::env::var_os(concat!("NEXTEST_BIN_EXE_", $name))
            .map(::std::path::PathBuf::from)
            .unwrap_or_else(|| ::std::path::PathBuf::from(env!(concat!("CARGO_BIN_EXE_", $name))))
    };
}

/// The package directory of the test running now: the runtime `CARGO_MANIFEST_DIR` (set by Cargo
/// and nextest, remapped when nextest runs from an archive), else the compile-time one.
#[macro_export]
macro_rules! manifest_dir {
    () => {
        ::std::env::var_os("CARGO_MANIFEST_DIR")
            .map(::std::path::PathBuf::from)
            .unwrap_or_else(|| ::std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")))
    };
}
