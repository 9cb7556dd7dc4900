//! The `waxell` command (the binary's `cli.rs`, compiled into this test), run in process against OTLP
//! receivers on 127.0.0.1: `replay` reads the SDK's variables with the SDK's meaning, flags override them,
//! per-file reports and the exit code; `show` prints the tree the embedded default prints at run time.
//! A test that sets the SDK's variables or writes its trace file through `init()`'s process-wide pipeline
//! runs in a child process of its own (`own_process!`), so neither leaks into the other tests.

use std::path::{Path, PathBuf};
use std::time::Duration;

use waxell::{agent, tool};

// The command's code lives with the binary, not in the library's public API; compiled here as well so it
// runs in process, beside the receivers.
#[path = "../../waxell/src/bin/waxell/cli.rs"]
mod cli;
use waxell_tests::faults::nothing_listening_url;
use waxell_tests::OtlpReceiver;

#[tool]
fn add(a: u64, b: u64) -> u64 {
    a + b
}

#[agent(name = "cli-agent")]
fn agent_run() -> u64 {
    waxell::score("complete", true);
    add(1, 2) + add(3, 4)
}

/// Spans per trace file written by `write_trace_file`: the agent and two tools.
const SPANS: usize = 3;

/// A fresh directory, removed when the returned guard drops (also when the test fails).
fn temp_dir(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("waxell-cli-{name}-"))
        .tempdir()
        .unwrap()
}

/// A trace file as the embedded default writes it.
fn write_trace_file(dir: &Path) -> PathBuf {
    let file = dir.join("run.jsonl");
    let guard = waxell::builder()
        .with_console(false)
        .with_trace_file(Some(file.clone()))
        .init()
        .unwrap();
    assert_eq!(agent_run(), 10);
    drop(guard);
    file
}

fn cli(args: &[&str]) -> (u8, String, String) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = cli::run(
        std::iter::once("waxell").chain(args.iter().copied()),
        &mut out,
        &mut err,
    );
    (
        code,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

fn set(name: &str, value: &str) {
    // SAFETY-free in edition 2021; callers run in a process of their own (`own_process!`).
    std::env::set_var(name, value);
}

#[test]
fn replay_takes_the_base_endpoint_and_the_headers_from_the_sdk_variables() {
    waxell_tests::own_process!();
    let dir_guard = temp_dir("env");
    let dir = dir_guard.path();
    let file = write_trace_file(dir);
    let receiver = OtlpReceiver::start_http_requiring_header("x-mlflow-experiment-id", "7");
    set("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.base_url());
    set("OTEL_EXPORTER_OTLP_HEADERS", "x-mlflow-experiment-id=7");
    let (code, out, err) = cli(&["replay", file.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(&format!(
            "sent {SPANS} spans in 1 requests to {}; accepted {SPANS}",
            receiver.traces_url()
        )),
        "{out}"
    );
    let spans = receiver.wait_for_spans(SPANS, Duration::from_secs(5));
    assert_eq!(spans.len(), SPANS);
    assert_eq!(
        receiver.requests()[0].path,
        "/v1/traces",
        "the base URL got /v1/traces"
    );
    assert_eq!(receiver.requests()[0].headers["x-mlflow-experiment-id"], "7");
}

#[test]
fn replay_without_a_required_header_fails_says_why_and_exits_non_zero() {
    waxell_tests::own_process!();
    let dir_guard = temp_dir("noheader");
    let dir = dir_guard.path();
    let file = write_trace_file(dir);
    let receiver = OtlpReceiver::start_http_requiring_header("x-mlflow-experiment-id", "7");
    set("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.base_url());
    let (code, out, err) = cli(&["replay", file.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains(&format!("sent {SPANS} spans in 1 requests")) && out.contains("accepted 0"),
        "{out}"
    );
    assert!(
        err.contains("line 1: HTTP 422") && err.contains("missing header x-mlflow-experiment-id"),
        "{err}"
    );
    assert!(receiver.spans().is_empty());
}

#[test]
fn replay_flags_override_the_variables_with_the_same_meaning() {
    waxell_tests::own_process!();
    let dir_guard = temp_dir("flags");
    let dir = dir_guard.path();
    let file = write_trace_file(dir);
    let receiver = OtlpReceiver::start_http_requiring_header("x-mlflow-experiment-id", "7");
    // The variables point at nothing and carry the wrong header; the flags win.
    set(
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        &nothing_listening_url().replace("/v1/traces", ""),
    );
    set("OTEL_EXPORTER_OTLP_HEADERS", "x-mlflow-experiment-id=0");
    let (code, out, err) = cli(&[
        "replay",
        file.to_str().unwrap(),
        "--endpoint",
        &receiver.base_url(),
        "--header",
        "x-mlflow-experiment-id=7",
        "--timeout-ms",
        "5000",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        receiver.wait_for_spans(SPANS, Duration::from_secs(5)).len(),
        SPANS
    );
    let headers = &receiver.requests()[0].headers;
    assert_eq!(headers["x-mlflow-experiment-id"], "7", "replaced, not sent twice");

    // --traces-endpoint and OTEL_EXPORTER_OTLP_TRACES_ENDPOINT are used verbatim.
    let other = OtlpReceiver::start_http();
    set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &other.traces_url());
    let (code, out, err) = cli(&["replay", file.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(other.wait_for_spans(SPANS, Duration::from_secs(5)).len(), SPANS);
}

#[test]
fn replay_over_grpc_and_to_a_dead_endpoint() {
    waxell_tests::own_process!();
    let dir_guard = temp_dir("grpc");
    let dir = dir_guard.path();
    let file = write_trace_file(dir);
    let receiver = OtlpReceiver::start_grpc();
    set("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc");
    let (code, out, err) = cli(&[
        "replay",
        file.to_str().unwrap(),
        "--endpoint",
        &receiver.base_url(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        receiver.wait_for_spans(SPANS, Duration::from_secs(5)).len(),
        SPANS
    );

    let dead = nothing_listening_url();
    let (code, out, err) = cli(&[
        "replay",
        file.to_str().unwrap(),
        "--protocol",
        "http/protobuf",
        "--traces-endpoint",
        &dead,
    ]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("connection refused"), "{err}");
    let (code, _, err) = cli(&["replay", "/nonexistent/trace.jsonl"]);
    assert_eq!(code, 1);
    assert!(err.contains("/nonexistent/trace.jsonl"), "{err}");
}

#[test]
fn help_and_version_everywhere_and_bad_usage_is_named() {
    let (code, out, _) = cli(&["--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("replay") && out.contains("show"), "{out}");
    let (code, out, _) = cli(&["replay", "--help"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("OTEL_EXPORTER_OTLP_ENDPOINT") && out.contains("overrides"),
        "{out}"
    );
    let (code, out, _) = cli(&["show", "--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("--follow"), "{out}");
    let (code, out, _) = cli(&["--version"]);
    assert_eq!(code, 0);
    assert!(out.contains(env!("CARGO_PKG_VERSION")), "{out}");
    let (code, _, err) = cli(&["replay", "f.jsonl", "--header", "novalue"]);
    assert_eq!(code, 2);
    assert!(err.contains("expected key=value"), "{err}");
    let (code, _, err) = cli(&["replay", "f.jsonl", "--protocol", "thrift"]);
    assert_eq!(code, 2);
    assert!(err.contains("http/protobuf"), "{err}");
}

/// The child for the test below: the embedded default with the console on, to a file.
#[test]
#[ignore = "run by show_prints_the_tree_the_embedded_default_printed in a child process"]
fn child_prints_the_console_tree() {
    let file = PathBuf::from(std::env::var("CLI_TEST_FILE").unwrap());
    let guard = waxell::builder()
        .with_console(true)
        .with_trace_file(Some(file))
        .init()
        .unwrap();
    assert_eq!(agent_run(), 10);
    drop(guard);
}

#[test]
fn show_prints_the_tree_the_embedded_default_printed() {
    let dir_guard = temp_dir("show");
    let dir = dir_guard.path();
    let file = dir.join("run.jsonl");
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "child_prints_the_console_tree",
            "--exact",
            "--ignored",
            "--nocapture",
        ])
        .env("CLI_TEST_FILE", &file)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let start = stderr.find("\n── waxell trace").expect("a tree on stderr");
    let end = stderr.find("waxell: wrote").expect("the file line");
    let printed = &stderr[start..end];
    let (code, shown, err) = cli(&["show", file.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(shown, printed, "the same renderer, the same tree");
    assert!(
        shown.contains("invoke_agent cli-agent") && shown.contains("★ score complete = true"),
        "{shown}"
    );
    assert!(shown.contains("execute_tool add"), "{shown}");
    // The exit message names a command that works here (from a checkout: cargo run ... --features cli).
    assert!(stderr.contains(&waxell::export::replay_hint(&file)), "{stderr}");
}

#[test]
fn show_follow_prints_each_new_run_as_it_is_written() {
    waxell_tests::own_process!();
    let source_guard = temp_dir("follow-src");
    let source = source_guard.path();
    let file = write_trace_file(source);
    let lines = std::fs::read_to_string(&file).unwrap();
    let watched_guard = temp_dir("follow");
    let watched = watched_guard.path();
    std::fs::write(watched.join("old.jsonl"), &lines).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let printed = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let follower = {
        let (stop, printed, watched) = (stop.clone(), printed.clone(), watched.to_path_buf());
        std::thread::spawn(move || {
            waxell::export::follow(
                &watched,
                Duration::from_millis(50),
                |tree| printed.lock().unwrap().push_str(tree),
                || !stop.load(std::sync::atomic::Ordering::Relaxed),
            )
        })
    };
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        printed.lock().unwrap().is_empty(),
        "runs already there are not printed"
    );
    // A new run, written in two steps: the tree appears once its root is in.
    let new = watched.join("new.jsonl");
    let (first, rest) = lines.split_at(lines.len() / 2);
    std::fs::write(&new, first).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().append(true).open(&new).unwrap();
        f.write_all(rest.as_bytes()).unwrap();
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while printed.lock().unwrap().is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    follower.join().unwrap().unwrap();
    let printed = printed.lock().unwrap().clone();
    assert_eq!(printed, waxell::export::render_trace_file(&file).unwrap());
}
