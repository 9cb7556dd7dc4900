//! Spans exported over real OTLP (HTTP/protobuf, HTTP/JSON, gRPC) to receivers on 127.0.0.1 that decode them
//! with the OpenTelemetry protobuf definitions. Every assertion is on what arrived.
//! Each test that installs the pipeline runs in a child process of its own (`own_process!`), so the global
//! pipeline is per test; configuration variables come from a lookup given to `Builder::with_env`.

use std::time::{Duration, Instant};

use waxell::{agent, tool, Protocol};
use waxell_tests::{attr_string, by_name, is_child, AnyValue, OtlpReceiver};

#[tool(tool_type = "sandbox")]
fn compute(x: u32) -> Result<u32, String> {
    if x == 0 {
        Err("zero is not allowed".into())
    } else {
        Ok(x * 2)
    }
}

#[agent(name = "wire-agent")]
fn sync_agent() -> u32 {
    let _ = compute(0);
    waxell::score_with_comment("quality", 0.5, "half");
    compute(21).unwrap_or(0)
}

#[tool]
async fn async_compute(x: u32) -> u32 {
    tokio::task::yield_now().await;
    x + 1
}

#[agent(name = "async-wire-agent")]
async fn async_agent() -> u32 {
    async_compute(1).await + async_compute(2).await
}

fn assert_sync_agent_trace(rx: &OtlpReceiver) {
    let spans = rx.wait_for_spans(3, Duration::from_secs(10));
    let agent = by_name(&spans, "invoke_agent wire-agent").expect("agent span arrived");
    let tools: Vec<_> = spans
        .iter()
        .filter(|r| r.span.name == "execute_tool compute")
        .collect();
    assert_eq!(tools.len(), 2, "both tool calls arrived");
    for t in &tools {
        assert!(is_child(&t.span, &agent.span));
        assert_eq!(
            attr_string(&t.span, "waxell.tool.type").as_deref(),
            Some("sandbox")
        );
        assert_eq!(
            attr_string(&t.span, "gen_ai.operation.name").as_deref(),
            Some("execute_tool")
        );
    }
    let failed = tools
        .iter()
        .find(|t| attr_string(&t.span, "error.type").is_some())
        .expect("the failed call");
    assert_eq!(
        failed.span.status.as_ref().map(|s| s.code),
        Some(2),
        "status ERROR"
    );
    assert_eq!(
        failed.span.status.as_ref().map(|s| s.message.as_str()),
        Some("zero is not allowed")
    );
    let score = agent
        .span
        .events
        .iter()
        .find(|e| e.name == "gen_ai.evaluation.result")
        .expect("score event arrived");
    assert!(score
        .attributes
        .iter()
        .any(|kv| kv.key == "gen_ai.evaluation.name"
            && kv.value.as_ref().and_then(|v| v.value.as_ref())
                == Some(&AnyValue::StringValue("quality".into()))));
    assert_eq!(agent.scope, "waxell");
    assert_eq!(
        agent.resource.get("waxell.sdk.name"),
        Some(&AnyValue::StringValue("waxell-rs".into()))
    );
}

#[test]
fn http_protobuf_from_a_plain_main_with_headers_and_service_name() {
    waxell_tests::own_process!();
    let rx = OtlpReceiver::start_http();
    let guard = waxell::builder()
        .with_otlp_endpoint(rx.traces_url())
        .with_service_name("wire-test")
        .with_header("x-wax-key", "test-key")
        .init()
        .unwrap();
    assert_eq!(sync_agent(), 42);
    guard.shutdown().unwrap();
    assert_sync_agent_trace(&rx);
    let spans = rx.spans();
    assert_eq!(
        spans[0].resource.get("service.name"),
        Some(&AnyValue::StringValue("wire-test".into()))
    );
    let request = &rx.requests()[0];
    assert_eq!(
        request.headers.get("x-wax-key").map(String::as_str),
        Some("test-key")
    );
    assert_eq!(
        request.headers.get("content-type").map(String::as_str),
        Some("application/x-protobuf")
    );
}

#[test]
fn grpc_from_a_plain_main() {
    waxell_tests::own_process!();
    let rx = OtlpReceiver::start_grpc();
    let guard = waxell::builder()
        .with_otlp_endpoint(rx.base_url())
        .with_protocol(Protocol::Grpc)
        .with_header("x-wax-key", "grpc-key")
        .init()
        .unwrap();
    sync_agent();
    guard.shutdown().unwrap();
    assert_sync_agent_trace(&rx);
    assert_eq!(
        rx.requests()[0].headers.get("x-wax-key").map(String::as_str),
        Some("grpc-key")
    );
}

fn assert_async_agent_trace(rx: &OtlpReceiver) {
    let spans = rx.wait_for_spans(3, Duration::from_secs(10));
    let agent = by_name(&spans, "invoke_agent async-wire-agent").expect("agent arrived");
    let tools: Vec<_> = spans
        .iter()
        .filter(|r| r.span.name == "execute_tool async_compute")
        .collect();
    assert_eq!(tools.len(), 2);
    assert!(tools.iter().all(|t| is_child(&t.span, &agent.span)));
}

#[test]
fn grpc_and_http_on_a_current_thread_runtime_shut_down_without_hanging() {
    waxell_tests::own_process!();
    for grpc in [true, false] {
        let rx = if grpc {
            OtlpReceiver::start_grpc()
        } else {
            OtlpReceiver::start_http()
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let took = rt.block_on(async {
            let builder = if grpc {
                waxell::builder()
                    .with_otlp_endpoint(rx.base_url())
                    .with_protocol(Protocol::Grpc)
            } else {
                waxell::builder().with_otlp_endpoint(rx.traces_url())
            };
            let guard = builder.init().unwrap();
            assert_eq!(async_agent().await, 5);
            let started = Instant::now();
            // Dropping the guard inside the runtime: the case that deadlocks a naive shutdown.
            drop(guard);
            started.elapsed()
        });
        assert!(
            took < Duration::from_secs(4),
            "shutdown took {took:?} (grpc={grpc})"
        );
        assert_async_agent_trace(&rx);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_json_on_a_multi_thread_runtime() {
    waxell_tests::own_process!();
    let rx = OtlpReceiver::start_http();
    let guard = waxell::builder()
        .with_otlp_endpoint(rx.traces_url())
        .with_protocol(Protocol::HttpJson)
        .init()
        .unwrap();
    async_agent().await;
    guard.force_flush().unwrap();
    assert_async_agent_trace(&rx);
    assert_eq!(
        rx.requests()[0].headers.get("content-type").map(String::as_str),
        Some("application/json")
    );
    drop(guard);
}

#[test]
fn standard_environment_variables_configure_the_exporter() {
    waxell_tests::own_process!();
    let rx = OtlpReceiver::start_http();
    let base_url = rx.base_url();
    let guard = waxell::builder()
        .with_env(waxell_tests::env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &base_url), // gets /v1/traces appended
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                "x-team=agents,authorization=Basic%20dGVzdA%3D%3D",
            ),
            ("OTEL_SERVICE_NAME", "env-service"),
            ("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=ci"),
        ]))
        .init()
        .unwrap();
    assert_eq!(guard.otlp_endpoint(), Some(rx.traces_url().as_str()));
    sync_agent();
    drop(guard);
    assert_sync_agent_trace(&rx);
    let spans = rx.spans();
    assert_eq!(
        spans[0].resource.get("service.name"),
        Some(&AnyValue::StringValue("env-service".into()))
    );
    assert_eq!(
        spans[0].resource.get("deployment.environment"),
        Some(&AnyValue::StringValue("ci".into()))
    );
    let headers = &rx.requests()[0].headers;
    assert_eq!(headers.get("x-team").map(String::as_str), Some("agents"));
    assert_eq!(
        headers.get("authorization").map(String::as_str),
        Some("Basic dGVzdA==")
    );
}

#[test]
fn bad_configuration_is_a_clear_error() {
    // init() fails before it installs anything, so the test shares its process.
    let err = waxell::builder()
        .with_env(waxell_tests::env(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "thrift")]))
        .init()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("OTEL_EXPORTER_OTLP_PROTOCOL") && err.contains("http/protobuf"),
        "{err}"
    );
    let err = waxell::builder()
        .with_env(waxell_tests::env(&[
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("WAXELL_CAPTURE_CONTENT", "maybe"),
        ]))
        .init()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("WAXELL_CAPTURE_CONTENT") && err.contains("true or false"),
        "{err}"
    );
}

#[test]
fn observe_false_sends_nothing_and_writes_nothing() {
    waxell_tests::own_process!();
    let rx = OtlpReceiver::start_http();
    let guard = waxell::builder()
        .with_env(waxell_tests::env(&[("WAXELL_OBSERVE", "false")]))
        .with_otlp_endpoint(rx.traces_url())
        .init()
        .unwrap();
    assert!(!guard.is_enabled());
    assert_eq!(sync_agent(), 42, "the function still runs and returns its value");
    drop(guard);
    std::thread::sleep(Duration::from_millis(200));
    assert!(rx.spans().is_empty());
}

#[test]
fn embedded_default_writes_a_file_that_replays_with_the_same_spans_over_http_and_grpc() {
    waxell_tests::own_process!();
    let dir = std::env::temp_dir().join(format!("waxell-embedded-{}", std::process::id()));
    let file = dir.join("trace.jsonl");
    let guard = waxell::builder()
        .with_trace_file(Some(file.clone()))
        .with_console(true)
        .init()
        .unwrap();
    assert_eq!(guard.trace_file(), Some(file.as_path()));
    sync_agent();
    drop(guard);
    let written = std::fs::read_to_string(&file).unwrap();
    assert!(written.lines().count() >= 1);
    let first: serde_json::Value = serde_json::from_str(written.lines().next().unwrap()).unwrap();
    assert!(first["resourceSpans"].is_array(), "OTLP JSON shape: {first}");

    let mut ids = Vec::new();
    for grpc in [false, true] {
        let rx = if grpc {
            OtlpReceiver::start_grpc()
        } else {
            OtlpReceiver::start_http()
        };
        let (endpoint, protocol) = if grpc {
            (rx.base_url(), Protocol::Grpc)
        } else {
            (rx.traces_url(), Protocol::HttpProtobuf)
        };
        let summary = waxell::export::replay(&file, &endpoint, protocol, &[]).unwrap();
        assert_eq!(summary.spans, 3);
        assert_sync_agent_trace(&rx);
        let mut got: Vec<_> = rx
            .spans()
            .iter()
            .map(|r| (r.span.span_id.clone(), r.span.name.clone()))
            .collect();
        got.sort();
        ids.push(got);
    }
    assert_eq!(ids[0], ids[1], "the same spans arrive over both protocols");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn replay_names_the_bad_line() {
    let dir = std::env::temp_dir().join(format!("waxell-replay-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bad.jsonl");
    std::fs::write(&file, "{\"resourceSpans\": []}\nnot json\n").unwrap();
    let err = waxell::export::replay(&file, "http://127.0.0.1:9/v1/traces", Protocol::HttpProtobuf, &[])
        .unwrap_err();
    assert!(err.to_string().contains("line 2"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}
