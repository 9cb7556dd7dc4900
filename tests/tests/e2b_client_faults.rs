//! `waxell::e2b` against fake E2B servers on 127.0.0.1 that misbehave on purpose: streams cut
//! mid-way, HTML 502s, malformed lines, 429/503 with `Retry-After`, silent servers.

mod e2b_support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::ConnectInfo;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use e2b_support::{client_config, serve};
use waxell::e2b::{E2bBackend, E2bConfig};
use waxell::sandbox::{RunOptions, Sandbox, SandboxError, SandboxOptions};

const SANDBOX_ID: &str = "fakesandbox000000000";

/// E2B's create answer, with both tokens so the test can see where each is sent.
async fn created() -> Response {
    (
        StatusCode::CREATED,
        Json(serde_json::json!({
            "templateID": "code-interpreter-v1",
            "sandboxID": SANDBOX_ID,
            "clientID": "6532622b",
            "envdVersion": "0.6.13",
            "envdAccessToken": "envd-token",
            "trafficAccessToken": "traffic-token",
            "domain": null,
        })),
    )
        .into_response()
}

/// A fake with create and the given `/execute`.
fn fake_with_execute<H, T>(execute: H) -> Router
where
    H: axum::handler::Handler<T, ()>,
    T: 'static,
{
    Router::new()
        .route("/v2/sandboxes", post(created))
        .route("/execute", post(execute))
}

async fn sandbox_at(url: &str, config: impl FnOnce(E2bConfig) -> E2bConfig) -> Sandbox {
    let backend = E2bBackend::new(config(client_config(url))).unwrap();
    Sandbox::create(&backend, &SandboxOptions::new()).await.unwrap()
}

fn ndjson(lines: &[&str]) -> String {
    lines.iter().map(|l| format!("{l}\n")).collect()
}

#[tokio::test]
async fn a_stream_that_ends_without_end_of_execution_is_a_transport_error() {
    let url = serve(fake_with_execute(|| async {
        ndjson(&[
            r#"{"type": "number_of_executions", "execution_count": 1}"#,
            r#"{"type": "stdout", "text": "partial\n", "timestamp": "2024-05-01T12:00:00+00:00"}"#,
        ])
    }))
    .await;
    let sandbox = sandbox_at(&url, |c| c).await;
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let sink = seen.clone();
    let result = sandbox
        .run_code(
            "print('partial')",
            &RunOptions::new().on_stdout(move |m| sink.lock().unwrap().push(m.line.clone())),
        )
        .await;
    assert!(
        matches!(&result, Err(SandboxError::Transport(m)) if m.contains("without end_of_execution")),
        "{result:?}"
    );
    assert_eq!(
        *seen.lock().unwrap(),
        ["partial\n"],
        "output before the cut was delivered"
    );
}

#[tokio::test]
async fn a_connection_cut_mid_stream_is_a_transport_error() {
    let url = serve(fake_with_execute(|| async {
        // The line, a pause so it reaches the client, then a body error: hyper drops the connection.
        let chunks = futures_util::stream::unfold(0, |step| async move {
            let item = match step {
                0 => Ok(Bytes::from(ndjson(&[
                    r#"{"type": "stdout", "text": "before the cut\n"}"#,
                ]))),
                1 => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    Err(std::io::Error::other("the fake server cuts the connection"))
                }
                _ => return None,
            };
            Some((item, step + 1))
        });
        Body::from_stream(chunks)
    }))
    .await;
    let sandbox = sandbox_at(&url, |c| c).await;
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let sink = seen.clone();
    let result = sandbox
        .run_code(
            "print()",
            &RunOptions::new().on_stdout(move |m| sink.lock().unwrap().push(m.line.clone())),
        )
        .await;
    assert!(matches!(&result, Err(SandboxError::Transport(_))), "{result:?}");
    assert_eq!(*seen.lock().unwrap(), ["before the cut\n"]);
}

#[tokio::test]
async fn an_html_502_means_the_sandbox_is_gone_and_is_not_retried() {
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let url = serve(fake_with_execute(move || {
        let counter = counter.clone();
        async move {
            counter.fetch_add(1, Ordering::SeqCst);
            (
                StatusCode::BAD_GATEWAY,
                [("content-type", "text/html")],
                "<!DOCTYPE html>\n<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>",
            )
        }
    }))
    .await;
    let sandbox = sandbox_at(&url, |c| c).await;
    let result = sandbox.run_code("1", &RunOptions::new()).await;
    assert!(
        matches!(&result, Err(SandboxError::NotFound(m)) if m.contains("HTML")),
        "{result:?}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn the_proxys_json_502_means_the_sandbox_is_gone() {
    let url = serve(fake_with_execute(|| async {
        (
            StatusCode::BAD_GATEWAY,
            Json(serde_json::json!({"sandboxId": SANDBOX_ID, "message": "The sandbox was not found", "code": 502})),
        )
    }))
    .await;
    let sandbox = sandbox_at(&url, |c| c).await;
    let result = sandbox.run_code("1", &RunOptions::new()).await;
    assert!(
        matches!(&result, Err(SandboxError::NotFound(m)) if m.contains("was not found")),
        "{result:?}"
    );
}

#[tokio::test]
async fn a_malformed_line_is_a_protocol_error_naming_what_was_received() {
    let url = serve(fake_with_execute(|| async {
        ndjson(&[r#"{"type": "stdout", "text": "ok\n"}"#, "<this is not json>"])
    }))
    .await;
    let sandbox = sandbox_at(&url, |c| c).await;
    let result = sandbox.run_code("1", &RunOptions::new()).await;
    match result {
        Err(SandboxError::Protocol { message, received }) => {
            assert!(message.contains("line 2"), "{message}");
            assert_eq!(received, "<this is not json>");
        }
        other => panic!("expected a protocol error, got {other:?}"),
    }
}

#[tokio::test]
async fn unknown_line_types_and_keepalives_are_ignored_and_results_keep_extra_formats() {
    let url = serve(fake_with_execute(|| async {
        ndjson(&[
            r#"{"type": "keepalive"}"#,
            r#"{"type": "something_new", "x": 1}"#,
            r#"{"type": "result", "text": "2", "image/webp": "AAAA", "extra": {}, "is_main_result": true}"#,
            r#"{"type": "error", "name": "E", "value": "v", "traceback": ["line 1", "line 2"]}"#,
            r#"{"type": "number_of_executions", "execution_count": 7}"#,
            r#"{"type": "end_of_execution"}"#,
        ])
    }))
    .await;
    let sandbox = sandbox_at(&url, |c| c).await;
    let execution = sandbox.run_code("1 + 1", &RunOptions::new()).await.unwrap();
    assert_eq!(execution.text(), Some("2"));
    assert_eq!(
        execution.results[0].extra.get("image/webp"),
        Some(&serde_json::json!("AAAA"))
    );
    let error = execution.error.unwrap();
    assert_eq!(
        (error.name.as_str(), error.traceback.as_str()),
        ("E", "line 1\nline 2")
    );
    assert_eq!(execution.execution_count, Some(7));
}

/// A create endpoint answering `statuses` in turn (each with its `Retry-After`), then 201.
fn flaky_create(statuses: Vec<(u16, Option<&'static str>)>, calls: Arc<AtomicUsize>) -> Router {
    Router::new().route(
        "/v2/sandboxes",
        post(move || {
            let statuses = statuses.clone();
            let calls = calls.clone();
            async move {
                let n = calls.fetch_add(1, Ordering::SeqCst);
                match statuses.get(n).copied() {
                    Some((status, retry_after)) => {
                        let mut response = (
                            StatusCode::from_u16(status).unwrap(),
                            Json(serde_json::json!({"code": status, "message": "try again later"})),
                        )
                            .into_response();
                        if let Some(after) = retry_after {
                            response
                                .headers_mut()
                                .insert("retry-after", after.parse().unwrap());
                        }
                        response
                    }
                    _ => created().await,
                }
            }
        }),
    )
}

#[tokio::test]
async fn retries_on_429_503_and_control_plane_502_honour_retry_after() {
    let calls = Arc::new(AtomicUsize::new(0));
    let url = serve(flaky_create(
        vec![(429, Some("1")), (503, Some("0")), (502, None)],
        calls.clone(),
    ))
    .await;
    let backend = E2bBackend::new(client_config(&url)).unwrap();
    let started = Instant::now();
    let sandbox = Sandbox::create(&backend, &SandboxOptions::new()).await.unwrap();
    assert_eq!(sandbox.sandbox_id(), SANDBOX_ID);
    assert_eq!(calls.load(Ordering::SeqCst), 4, "three retries then success");
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "Retry-After: 1 was honoured"
    );
}

#[tokio::test]
async fn retries_are_bounded_in_number_and_in_wait() {
    let calls = Arc::new(AtomicUsize::new(0));
    let always_429 = vec![(429, Some("3600")); 100];
    let url = serve(flaky_create(always_429, calls.clone())).await;
    let backend = E2bBackend::new(
        client_config(&url)
            .with_max_retries(2)
            .with_max_retry_delay(Duration::from_millis(100)),
    )
    .unwrap();
    let started = Instant::now();
    let result = Sandbox::create(&backend, &SandboxOptions::new()).await;
    assert!(matches!(result, Err(SandboxError::RateLimited(_))), "{result:?}");
    assert_eq!(calls.load(Ordering::SeqCst), 3, "one try and two retries");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "a Retry-After of an hour was capped"
    );

    let calls = Arc::new(AtomicUsize::new(0));
    let url = serve(flaky_create(vec![(401, None); 10], calls.clone())).await;
    let backend = E2bBackend::new(client_config(&url)).unwrap();
    let result = Sandbox::create(&backend, &SandboxOptions::new()).await;
    assert!(
        matches!(result, Err(SandboxError::Authentication(_))),
        "{result:?}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1, "401 is not retried");
}

/// Sets its flag when dropped: the server dropping the body means the client's connection closed.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[tokio::test]
async fn an_execution_timeout_closes_the_connection() {
    let closed = Arc::new(AtomicBool::new(false));
    let flag = closed.clone();
    let url = serve(fake_with_execute(move || {
        let guard = DropFlag(flag.clone());
        async move {
            let keepalives = futures_util::stream::unfold(guard, |guard| async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                Some((
                    Ok::<_, std::io::Error>(Bytes::from_static(b"{\"type\": \"keepalive\"}\n")),
                    guard,
                ))
            });
            Body::from_stream(keepalives)
        }
    }))
    .await;
    let sandbox = sandbox_at(&url, |c| c).await;
    let started = Instant::now();
    let result = sandbox
        .run_code(
            "while True: pass",
            &RunOptions::new().with_timeout(Duration::from_millis(500)),
        )
        .await;
    assert!(matches!(result, Err(SandboxError::Timeout(_))), "{result:?}");
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(450) && elapsed < Duration::from_secs(5),
        "{elapsed:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while !closed.load(Ordering::SeqCst) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        closed.load(Ordering::SeqCst),
        "the server still holds the stream: connection not closed"
    );
}

#[tokio::test]
async fn a_server_that_never_answers_hits_the_request_timeout() {
    let url = serve(fake_with_execute(|| async {
        tokio::time::sleep(Duration::from_secs(30)).await;
        "never"
    }))
    .await;
    let sandbox = sandbox_at(&url, |c| c.with_request_timeout(Duration::from_millis(300))).await;
    let started = Instant::now();
    let result = sandbox.run_code("1", &RunOptions::new()).await;
    assert!(matches!(result, Err(SandboxError::Timeout(_))), "{result:?}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

#[derive(Debug, Clone)]
struct SeenRequest {
    path: String,
    peer: SocketAddr,
    headers: HeaderMap,
}

#[tokio::test]
async fn each_execute_uses_its_own_connection_and_the_data_plane_headers() {
    let seen: Arc<Mutex<Vec<SeenRequest>>> = Arc::default();
    let record = |seen: Arc<Mutex<Vec<SeenRequest>>>, path: &'static str| {
        move |ConnectInfo(peer): ConnectInfo<SocketAddr>, headers: HeaderMap| {
            let seen = seen.clone();
            async move {
                seen.lock().unwrap().push(SeenRequest {
                    path: path.into(),
                    peer,
                    headers,
                });
                if path == "/execute" {
                    ndjson(&[r#"{"type": "end_of_execution"}"#]).into_response()
                } else {
                    Json(serde_json::json!({"id": "c1", "language": "python", "cwd": "/home/user"}))
                        .into_response()
                }
            }
        }
    };
    let app = Router::new()
        .route("/v2/sandboxes", post(created))
        .route("/execute", post(record(seen.clone(), "/execute")))
        .route("/contexts", post(record(seen.clone(), "/contexts")));
    let url = serve(app).await;
    let sandbox = sandbox_at(&url, |c| c).await;
    for _ in 0..3 {
        sandbox.run_code("1", &RunOptions::new()).await.unwrap();
    }
    sandbox.create_context(None, None).await.unwrap();
    let seen = seen.lock().unwrap().clone();
    let executes: Vec<&SeenRequest> = seen.iter().filter(|s| s.path == "/execute").collect();
    assert_eq!(executes.len(), 3);
    let mut ports: Vec<u16> = executes.iter().map(|s| s.peer.port()).collect();
    ports.dedup();
    assert_eq!(ports.len(), 3, "one TCP connection per execute: {ports:?}");
    let header = |s: &SeenRequest, name: &str| {
        s.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    for execute in &executes {
        assert_eq!(header(execute, "e2b-sandbox-id").as_deref(), Some(SANDBOX_ID));
        assert_eq!(header(execute, "e2b-sandbox-port").as_deref(), Some("49999"));
        assert_eq!(header(execute, "x-access-token").as_deref(), Some("envd-token"));
        assert_eq!(
            header(execute, "e2b-traffic-access-token").as_deref(),
            Some("traffic-token")
        );
        assert_eq!(
            header(execute, "x-api-key"),
            None,
            "the API key stays on the control plane"
        );
    }
    let context = seen.iter().find(|s| s.path == "/contexts").unwrap();
    assert_eq!(
        header(context, "x-access-token"),
        None,
        "E2B sends the envd token only on /execute"
    );
    assert_eq!(
        header(context, "e2b-traffic-access-token").as_deref(),
        Some("traffic-token")
    );
}
