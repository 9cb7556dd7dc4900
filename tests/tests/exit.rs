//! The exit with a collector that is down or hangs: nothing is lost (unsent spans are saved to the trace
//! file, and `replay` delivers them), the exit waits at most its budget and says so, and the message names
//! the file and a replay command. The run itself happens in a child process (this test binary, an ignored
//! test) so that its stderr and exit can be observed.

use std::path::Path;
use std::time::Duration;

use waxell::export::OtlpSettings;
use waxell::{agent, tool};
use waxell_tests::faults::{nothing_listening_url, Fault, FaultServer};
use waxell_tests::OtlpReceiver;

const RUNS: u64 = 10;
/// One agent span and 100 tools per run.
const SPANS: usize = (RUNS * 101) as usize;

#[tool]
fn work(x: u64) -> u64 {
    x + 1
}

#[agent(name = "exit-agent")]
fn run_agent() -> u64 {
    (0..100).map(work).sum()
}

/// A fresh directory, removed when the returned guard drops (also when the test fails).
fn temp_dir(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("waxell-exit-{name}-"))
        .tempdir()
        .unwrap()
}

/// The child: `RUNS` agent runs with whatever the environment configures, then exit.
#[test]
#[ignore = "run by the tests below in a child process"]
fn child_runs_agents_then_exits() {
    let guard = waxell::init().unwrap();
    for _ in 0..RUNS {
        assert_eq!(run_agent(), 5050);
    }
    drop(guard);
}

fn run_child(env: &[(&str, &str)]) -> (String, Duration) {
    let started = std::time::Instant::now();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "child_runs_agents_then_exits",
            "--exact",
            "--ignored",
            "--nocapture",
        ])
        .envs(env.iter().copied())
        .output()
        .expect("run the child");
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "child failed: {stderr}");
    (stderr, took)
}

fn spans_in(file: &Path) -> usize {
    waxell::export::read_trace_file(file)
        .unwrap()
        .iter()
        .flat_map(|(_, r)| &r.resource_spans)
        .flat_map(|rs| &rs.scope_spans)
        .map(|ss| ss.spans.len())
        .sum()
}

#[test]
fn collector_down_every_span_is_saved_and_replay_delivers_them() {
    let dir_guard = temp_dir("down");
    let dir = dir_guard.path();
    let file = dir.join("run.jsonl");
    let dead = nothing_listening_url();
    let (stderr, _) = run_child(&[
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", dead.as_str()),
        ("WAXELL_TRACE_FILE", file.to_str().unwrap()),
    ]);
    let saved = format!(
        "waxell: could not send {SPANS} spans to the OTLP endpoint at {dead} (connection refused (is the collector running?)); \
         saved them to {}",
        file.display()
    );
    assert!(stderr.contains(&saved), "{stderr}");
    let hint = waxell::export::replay_hint(&file);
    assert!(
        stderr.contains(&format!("send them once the OTLP endpoint is up: {hint}")),
        "{stderr}"
    );
    assert!(!stderr.contains("dropped"), "nothing dropped: {stderr}");
    assert!(
        !stderr.contains("gave up"),
        "a refused connection needs no waiting: {stderr}"
    );
    assert_eq!(spans_in(&file), SPANS);

    // Once the collector is back, the file delivers every span, resource attributes included.
    let receiver = OtlpReceiver::start_http();
    let mut settings = OtlpSettings::from_env().unwrap();
    settings.traces_endpoint = Some(receiver.traces_url());
    let report = waxell::export::replay_with(&file, &settings).unwrap();
    assert!(report.is_success(), "{report:?}");
    assert_eq!(report.spans_accepted, SPANS);
    let arrived = receiver.wait_for_spans(SPANS, Duration::from_secs(10));
    assert_eq!(arrived.len(), SPANS);
    assert!(arrived.iter().all(|s| s.resource.contains_key("service.name")));
    assert_eq!(
        arrived
            .iter()
            .filter(|s| s.span.name == "invoke_agent exit-agent")
            .count(),
        RUNS as usize
    );
}

/// Over `http/json`, a batch is kept as its encoded JSON body: what a failing collector did not take is saved
/// from that body, every span whole (name, attributes, parent), and replays.
#[test]
fn a_failing_collector_over_http_json_gets_every_span_saved_whole() {
    let dir_guard = temp_dir("json");
    let file = dir_guard.path().join("run.jsonl");
    let server = FaultServer::start(Fault::Status(500));
    let url = server.traces_url();
    let (stderr, _) = run_child(&[
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", url.as_str()),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
        ("WAXELL_TRACE_FILE", file.to_str().unwrap()),
    ]);
    assert!(server.requests() > 0, "the collector was called: {stderr}");
    assert!(stderr.contains("HTTP 500"), "{stderr}");
    assert!(!stderr.contains("dropped"), "nothing dropped: {stderr}");
    let requests = waxell::export::read_trace_file(&file).unwrap();
    let spans: Vec<_> = requests
        .iter()
        .flat_map(|(_, r)| &r.resource_spans)
        .flat_map(|rs| &rs.scope_spans)
        .flat_map(|ss| &ss.spans)
        .collect();
    assert_eq!(spans.len(), SPANS);
    let tools: Vec<_> = spans.iter().filter(|s| s.name == "execute_tool work").collect();
    assert_eq!(tools.len(), (RUNS * 100) as usize);
    assert!(tools
        .iter()
        .all(|s| s.parent_span_id.len() == 8 && s.trace_id.len() == 16));
    let tool_name = |s: &&&opentelemetry_proto::tonic::trace::v1::Span| {
        s.attributes.iter().any(|kv| {
            kv.key == "gen_ai.tool.name"
                && kv.value.as_ref().and_then(|v| v.value.as_ref())
                    == Some(
                        &opentelemetry_proto::tonic::common::v1::any_value::Value::StringValue("work".into()),
                    )
        })
    };
    assert!(tools.iter().all(tool_name), "attributes kept");

    let receiver = OtlpReceiver::start_http();
    let mut settings = OtlpSettings::from_env().unwrap();
    settings.traces_endpoint = Some(receiver.traces_url());
    let report = waxell::export::replay_with(&file, &settings).unwrap();
    assert!(report.is_success(), "{report:?}");
    assert_eq!(
        receiver.wait_for_spans(SPANS, Duration::from_secs(10)).len(),
        SPANS
    );
}

#[test]
fn a_hanging_collector_holds_the_exit_only_for_the_budget_and_the_exit_says_it_gave_up() {
    let dir_guard = temp_dir("hang");
    let dir = dir_guard.path();
    let file = dir.join("run.jsonl");
    let server = FaultServer::start(Fault::Slow(Duration::from_secs(60)));
    let (stderr, took) = run_child(&[
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", server.traces_url().as_str()),
        ("WAXELL_TRACE_FILE", file.to_str().unwrap()),
        ("WAXELL_SHUTDOWN_TIMEOUT_MS", "700"),
    ]);
    assert!(
        stderr.contains("waxell: gave up waiting for the collector after the exit budget of 700 ms"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("saved them to {}", file.display())),
        "{stderr}"
    );
    assert!(!stderr.contains("dropped"), "nothing dropped: {stderr}");
    assert!(server.requests() >= 1, "the export reached the hanging collector");
    assert_eq!(spans_in(&file), SPANS, "the batch in flight was saved too");
    // Correctness bound, far above the budget: without it the child would wait a minute on the collector.
    assert!(took < Duration::from_secs(30), "{took:?}");
}

#[test]
fn a_healthy_collector_gets_everything_and_nothing_is_written() {
    let dir_guard = temp_dir("healthy");
    let dir = dir_guard.path();
    let file = dir.join("run.jsonl");
    let receiver = OtlpReceiver::start_http();
    let (stderr, _) = run_child(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.base_url().as_str()),
        ("WAXELL_TRACE_FILE", file.to_str().unwrap()),
    ]);
    assert_eq!(
        receiver.wait_for_spans(SPANS, Duration::from_secs(10)).len(),
        SPANS
    );
    assert!(!file.exists(), "no file when nothing needed saving");
    assert!(!stderr.contains("waxell:"), "no message: {stderr}");
}

#[test]
fn with_the_trace_file_off_unsent_spans_are_dropped_and_counted() {
    let dead = nothing_listening_url();
    let (stderr, _) = run_child(&[
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", dead.as_str()),
        ("WAXELL_TRACE_FILE", "off"),
    ]);
    assert!(
        stderr.contains(&format!("waxell: dropped {SPANS} spans (")),
        "{stderr}"
    );
}
