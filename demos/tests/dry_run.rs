//! The built demo, run with `--dry-run` as a user would, exporting over OTLP/HTTP to a receiver on 127.0.0.1.
//! Every assertion is on the spans that arrived and on the files the run left.

use std::process::Command;
use std::time::Duration;

use waxell_tests::{attr, attr_string, by_name, is_child, AnyValue, OtlpReceiver, Received};

fn children<'a>(spans: &'a [Received], parent: &Received, name: &str) -> Vec<&'a Received> {
    spans
        .iter()
        .filter(|s| s.span.name == name && is_child(&s.span, &parent.span))
        .collect()
}

fn score(agent: &Received, name: &str) -> Option<f64> {
    agent
        .span
        .events
        .iter()
        .filter(|e| e.name == "gen_ai.evaluation.result")
        .find_map(|e| {
            let named = e.attributes.iter().any(|kv| {
                kv.key == "gen_ai.evaluation.name"
                    && kv.value.as_ref().and_then(|v| v.value.as_ref())
                        == Some(&AnyValue::StringValue(name.into()))
            });
            let value = e
                .attributes
                .iter()
                .find(|kv| kv.key == "gen_ai.evaluation.score.value")?;
            match value.value.as_ref()?.value.as_ref()? {
                AnyValue::DoubleValue(d) if named => Some(*d),
                _ => None,
            }
        })
}

#[test]
fn dry_run_demo_exports_the_whole_agent_trace() {
    let rx = OtlpReceiver::start_http();
    let out_dir = std::env::temp_dir().join(format!("waxell-demo-test-{}", std::process::id()));
    let output = Command::new(waxell_tests::bin_exe!("demos"))
        .args(["--dry-run", "--quiet", "--output-dir"])
        .arg(&out_dir)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", rx.base_url())
        .env("JAEGER_UI_URL", "http://jaeger.test:16686")
        .env_remove("OPENAI_API_KEY")
        .output()
        .expect("the demo runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "demo failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );

    let spans = rx.wait_for_spans(30, Duration::from_secs(10));
    let root = by_name(&spans, "invoke_agent code-sandbox-agent").expect("orchestrator span");
    let trace_hex: String = root.span.trace_id.iter().map(|b| format!("{b:02x}")).collect();
    assert!(
        stdout.contains(&format!("trace id: {trace_hex}")),
        "summary names the exported trace\n{stdout}"
    );
    assert!(
        stdout.contains(&format!("jaeger: http://jaeger.test:16686/trace/{trace_hex}")),
        "{stdout}"
    );

    // The three agents.
    let runner = children(&spans, root, "invoke_agent sandbox-runner");
    let evaluator = children(&spans, root, "invoke_agent sandbox-evaluator");
    assert_eq!((runner.len(), evaluator.len()), (1, 1));
    let (runner, evaluator) = (runner[0], evaluator[0]);

    // The four tools, each with the sandbox call under it.
    for tool in [
        "run_basic_code",
        "run_statistics",
        "run_error_test",
        "analyze_sales",
    ] {
        let t = children(&spans, runner, &format!("execute_tool {tool}"));
        assert_eq!(t.len(), 1, "{tool}");
        assert_eq!(
            attr_string(&t[0].span, "waxell.tool.type").as_deref(),
            Some("sandbox")
        );
    }
    for tool in ["run_basic_code", "run_statistics", "run_error_test"] {
        let t = children(&spans, runner, &format!("execute_tool {tool}"))[0];
        let sandbox_calls = children(&spans, t, "execute_tool local.run_code");
        assert_eq!(sandbox_calls.len(), 1, "sandbox span under {tool}");
    }
    let error_call = children(
        &spans,
        children(&spans, runner, "execute_tool run_error_test")[0],
        "execute_tool local.run_code",
    )[0];
    assert_eq!(
        attr_string(&error_call.span, "waxell.sandbox.error.name").as_deref(),
        Some("ZeroDivisionError")
    );

    // The code agent: LLM calls with tokens, a failed script, the retry that worked.
    let analyze = children(&spans, runner, "execute_tool analyze_sales")[0];
    let chats = children(&spans, analyze, "chat gpt-4o-mini");
    assert_eq!(chats.len(), 3, "write, fix, summarise");
    for chat in &chats {
        assert!(
            matches!(attr(&chat.span, "gen_ai.usage.input_tokens"), Some(AnyValue::IntValue(n)) if *n > 0)
        );
        assert!(
            matches!(attr(&chat.span, "gen_ai.usage.output_tokens"), Some(AnyValue::IntValue(n)) if *n > 0)
        );
        assert_eq!(
            attr(&chat.span, "waxell.dry_run"),
            Some(&AnyValue::BoolValue(true))
        );
    }
    let attempts = children(&spans, analyze, "execute_tool run_code");
    assert_eq!(attempts.len(), 2, "one failed attempt, one retry");
    let errors: Vec<Option<String>> = attempts
        .iter()
        .map(|a| children(&spans, a, "execute_tool local.run_code")[0])
        .map(|s| attr_string(&s.span, "waxell.sandbox.error.name"))
        .collect();
    assert!(
        errors.contains(&Some("KeyError".into())) && errors.contains(&None),
        "{errors:?}"
    );

    // The evaluator: LLM, reasoning, decision, computed scores.
    assert_eq!(children(&spans, evaluator, "chat gpt-4o-mini").len(), 1);
    let reasoning = children(&spans, evaluator, "reasoning execution_quality_assessment");
    assert_eq!(reasoning.len(), 1);
    assert!(attr_string(&reasoning[0].span, "waxell.reasoning.thought")
        .unwrap()
        .contains("2 attempt(s)"));
    let decision = children(&spans, evaluator, "decide output_format");
    assert_eq!(
        attr_string(&decision[0].span, "waxell.decision.chosen").as_deref(),
        Some("markdown_with_chart")
    );
    assert_eq!(score(evaluator, "execution_reliability"), Some(1.0));
    assert_eq!(score(evaluator, "output_quality"), Some(1.0));
    assert_eq!(
        score(evaluator, "first_attempt_success"),
        Some(0.0),
        "the first script failed"
    );
    assert_eq!(score(evaluator, "self_debug_attempts"), Some(2.0));

    // The chart is a real PNG.
    let chart = std::fs::read(out_dir.join("sales_chart.png")).expect("chart written");
    assert!(
        chart.starts_with(b"\x89PNG\r\n\x1a\n") && &chart[12..16] == b"IHDR",
        "valid PNG"
    );
    let _ = std::fs::remove_dir_all(out_dir);
}

#[test]
fn live_mode_without_a_key_fails_with_a_clear_message() {
    let output = Command::new(waxell_tests::bin_exe!("demos"))
        .args(["--quiet"])
        .env_remove("OPENAI_API_KEY")
        .env("WAXELL_OBSERVE", "false")
        .output()
        .expect("the demo runs");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("OPENAI_API_KEY is not set") && stderr.contains("--dry-run"),
        "{stderr}"
    );
}

/// `--sandbox-url`: the same dry run against a `waxell-sandbox serve` (here in-process on 127.0.0.1, with
/// the API key it makes up, passed as E2B's SDKs take it: `E2B_API_KEY`), so every line of code goes
/// through the E2B protocol and the `waxell::e2b` client.
#[test]
fn dry_run_demo_runs_against_a_waxell_sandbox_server() {
    use std::sync::Arc;
    use waxell_sandbox::server::{router, serve, ServerConfig};
    use waxell_sandbox::{LocalBackend, LocalConfig};

    let config = ServerConfig::new();
    let api_key = config.api_key().expect("closed by default").to_owned();
    let server = waxell_tests::ServerThread::spawn(move |listener, stop| async move {
        let backend = LocalBackend::new(LocalConfig::default()).expect("local sandbox backend");
        let app = router(Arc::new(backend), config.clone());
        let _ = serve(listener, app, &config, stop).await;
    });
    let rx = OtlpReceiver::start_http();
    let out_dir = std::env::temp_dir().join(format!("waxell-demo-url-test-{}", std::process::id()));
    let output = Command::new(waxell_tests::bin_exe!("demos"))
        .args(["--dry-run", "--quiet", "--output-dir"])
        .arg(&out_dir)
        .arg("--sandbox-url")
        .arg(format!("http://{}", server.addr))
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", rx.base_url())
        .env_remove("OPENAI_API_KEY")
        .env("E2B_API_KEY", &api_key)
        .output()
        .expect("the demo runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "demo failed\nstderr:\n{stderr}");

    let spans = rx.wait_for_spans(30, Duration::from_secs(10));
    let runs: Vec<_> = spans
        .iter()
        .filter(|s| s.span.name == "execute_tool e2b.run_code")
        .collect();
    // Basic code, statistics, the error test, and the analysis script twice (the self-debug retry).
    assert!(runs.len() >= 5, "{} e2b run_code spans", runs.len());
    for tool in ["run_basic_code", "run_statistics", "run_error_test"] {
        let tool_span = by_name(&spans, &format!("execute_tool {tool}")).expect(tool);
        let nested = children(&spans, tool_span, "execute_tool e2b.run_code");
        assert_eq!(nested.len(), 1, "{tool} ran its code through the server");
    }
    // The code agent's attempts: each `run_code` tool call ran its script through the server.
    let analyze = by_name(&spans, "execute_tool analyze_sales").expect("analyze_sales");
    let attempts = children(&spans, analyze, "execute_tool run_code");
    assert_eq!(attempts.len(), 2, "a failed script, then a working one");
    for attempt in attempts {
        assert_eq!(children(&spans, attempt, "execute_tool e2b.run_code").len(), 1);
    }
    let chart = std::fs::read(out_dir.join("sales_chart.png")).expect("chart downloaded from the server");
    assert!(chart.starts_with(b"\x89PNG\r\n\x1a\n"), "valid PNG");
    let _ = std::fs::remove_dir_all(out_dir);
}

/// The dry run's script needs two attempts; with one, the error says so instead of "no scripted reply".
#[test]
fn dry_run_with_too_few_attempts_says_what_the_script_needs() {
    let out_dir = std::env::temp_dir().join(format!("waxell-demo-one-attempt-{}", std::process::id()));
    let output = Command::new(waxell_tests::bin_exe!("demos"))
        .args(["--dry-run", "--quiet", "--max-attempts", "1", "--output-dir"])
        .arg(&out_dir)
        .env("WAXELL_OBSERVE", "false")
        .env_remove("OPENAI_API_KEY")
        .output()
        .expect("the demo runs");
    let _ = std::fs::remove_dir_all(out_dir);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("--max-attempts stopped the code agent after 1 attempt(s)")
            && stderr.contains("needs 2"),
        "{stderr}"
    );
    assert!(!stderr.contains("no scripted reply"), "{stderr}");
}

/// The number in "<N> spans" of the line of `text` that contains `marker`.
fn spans_on_line(text: &str, marker: &str) -> u64 {
    let line = text
        .lines()
        .find(|l| l.contains(marker))
        .unwrap_or_else(|| panic!("no line with {marker:?} in:\n{text}"));
    let words: Vec<&str> = line.split(|c: char| c.is_whitespace() || c == '(').collect();
    words
        .windows(2)
        .find_map(|w| (w[1].starts_with("spans")).then(|| w[0].parse().ok()).flatten())
        .unwrap_or_else(|| panic!("no span count on {line:?}"))
}

/// The summary links the trace only when the endpoint took all of it. Otherwise it says the export failed and
/// why, where the trace was saved and how to send it, with the same count as the exit report; it never calls a
/// backend by a name its address does not have (no "start Jaeger" for an endpoint that is not Jaeger's).
#[test]
fn the_export_outcome_is_told_once_the_export_has_ended() {
    let out_dir = std::env::temp_dir().join(format!("waxell-demo-link-test-{}", std::process::id()));
    let run = |endpoint: &str, trace_dir: &std::path::Path, env: &[(&str, &str)]| {
        let output = Command::new(waxell_tests::bin_exe!("demos"))
            .args(["--dry-run", "--quiet", "--output-dir"])
            .arg(&out_dir)
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
            .env("WAXELL_TRACE_FILE", trace_dir.join("run.jsonl"))
            .envs(env.iter().copied())
            .env_remove("OPENAI_API_KEY")
            .env_remove("E2B_API_KEY")
            .output()
            .expect("the demo runs");
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(output.status.success(), "demo failed\nstderr:\n{stderr}");
        (String::from_utf8_lossy(&output.stdout).into_owned(), stderr)
    };

    let healthy_dir = out_dir.join("healthy-traces");
    let rx = OtlpReceiver::start_http();
    let (healthy, _) = run(&rx.base_url(), &healthy_dir, &[]);
    assert!(
        healthy.contains(&format!("trace sent to the OTLP endpoint at {}", rx.base_url())),
        "{healthy}"
    );
    assert!(!healthy.contains("failed"), "{healthy}");
    assert!(
        !healthy_dir.join("run.jsonl").exists(),
        "nothing to save when the collector took it all"
    );

    // A port nothing listens on: bind one, then free it.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let down_dir = out_dir.join("down-traces");
    let (down, down_err) = run(&format!("http://{closed}"), &down_dir, &[]);
    assert!(
        !down.contains("trace sent"),
        "no link for a trace that never arrived:\n{down}"
    );
    assert!(
        down.contains("trace export to the OTLP endpoint at") && down.contains("failed"),
        "{down}"
    );
    assert!(down.contains("replay"), "the replay command is named:\n{down}");
    assert!(!down.contains("Jaeger"), "the endpoint is not Jaeger's:\n{down}");
    let saved = std::fs::read_to_string(down_dir.join("run.jsonl")).expect("the trace was saved");
    assert!(
        saved.contains("invoke_agent"),
        "the saved file holds the agent spans"
    );
    assert_eq!(
        spans_on_line(&down, "trace saved to"),
        spans_on_line(&down_err, "could not send"),
        "the summary and the exit report agree:\n{down}\n{down_err}"
    );

    // A collector that takes the connection and never answers, slower than the exit budget: the summary waits
    // for the export to end, so it reports the spans saved, never "dropped" or "the trace file is off".
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let slow_dir = out_dir.join("slow-traces");
    let (slow, slow_err) = run(
        &format!("http://{}", silent.local_addr().unwrap()),
        &slow_dir,
        &[
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "1000"),
            ("WAXELL_SHUTDOWN_TIMEOUT_MS", "1500"),
        ],
    );
    assert!(slow.contains("failed"), "{slow}");
    assert!(!slow.contains("lost") && !slow.contains("file is off"), "{slow}");
    assert_eq!(
        spans_on_line(&slow, "trace saved to"),
        spans_on_line(&slow_err, "could not send"),
        "the summary and the exit report agree:\n{slow}\n{slow_err}"
    );
    drop(silent);
    let _ = std::fs::remove_dir_all(&out_dir);
}

/// With a `waxell ui` up for the working directory (its URL file names an address that accepts connections),
/// the demo's summary links the run's page there, and so does the SDK's exit message when the run went to the
/// trace file the UI follows.
#[test]
fn links_point_to_the_run_in_a_running_waxell_ui() {
    let dir = tempfile::tempdir().expect("a working directory");
    let ui = std::net::TcpListener::bind("127.0.0.1:0").expect("a stand-in for the UI's address");
    let base = format!("http://{}", ui.local_addr().unwrap());
    std::fs::create_dir_all(dir.path().join(".waxell/ui")).unwrap();
    std::fs::write(dir.path().join(".waxell/ui/url"), format!("{base}\n")).unwrap();
    let run = |endpoint: Option<&str>| {
        let mut command = Command::new(waxell_tests::bin_exe!("demos"));
        command
            .args(["--dry-run", "--quiet", "--output-dir", "out"])
            .current_dir(dir.path())
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .env_remove("WAXELL_TRACE_FILE")
            .env_remove("OPENAI_API_KEY")
            .env_remove("E2B_API_KEY");
        if let Some(url) = endpoint {
            command.env("OTEL_EXPORTER_OTLP_ENDPOINT", url);
        }
        let output = command.output().expect("the demo runs");
        let (stdout, stderr) = (
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        );
        assert!(output.status.success(), "demo failed\n{stdout}\n{stderr}");
        let trace = stdout
            .lines()
            .find_map(|l| l.strip_prefix("trace id: "))
            .unwrap_or_else(|| panic!("no trace id in:\n{stdout}"))
            .trim()
            .to_owned();
        (stdout, stderr, format!("{base}/runs/{trace}"))
    };

    let rx = OtlpReceiver::start_http();
    let (stdout, _, page) = run(Some(&rx.base_url()));
    assert!(stdout.contains(&format!("waxell ui: {page}")), "{stdout}");

    let (_, stderr, page) = run(None);
    assert!(
        stderr.contains(&format!("see the run in waxell ui: {page}")),
        "{stderr}"
    );
}

/// The benchmark's anchor: the dry run's cells as one plain Python program, run by the sandbox's Python
/// without the sandbox, do the demo's work (both planted errors reported, the analysis printed, its files
/// written) and exit cleanly.
#[test]
fn the_cells_as_plain_python_do_the_dry_runs_work() {
    let printed = Command::new(waxell_tests::bin_exe!("demos"))
        .arg("--print-cells-as-python")
        .output()
        .expect("the demo runs");
    assert!(
        printed.status.success(),
        "{}",
        String::from_utf8_lossy(&printed.stderr)
    );
    let python = waxell_sandbox::PythonRuntime::detect()
        .expect("the sandbox's Python")
        .executable;
    let work_dir = std::env::temp_dir().join(format!("waxell-demo-cells-{}", std::process::id()));
    std::fs::create_dir_all(&work_dir).unwrap();
    let program = work_dir.join("cells.py");
    std::fs::write(&program, &printed.stdout).unwrap();
    let output = Command::new(python)
        .arg(&program)
        .current_dir(&work_dir)
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    assert!(output.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    for expected in [
        "hello from the sandbox",
        "n=12 mean=17025.00",
        "=== Monthly sales analysis ===",
        "trend: upward",
    ] {
        assert!(stdout.contains(expected), "{expected:?} not in\n{stdout}");
    }
    for expected in ["ZeroDivisionError: division by zero", "KeyError: 'Sales'"] {
        assert!(stderr.contains(expected), "{expected:?} not in\n{stderr}");
    }
    let chart = std::fs::read(work_dir.join("sales_chart.png")).expect("the chart");
    assert!(chart.starts_with(b"\x89PNG"), "the chart is a PNG");
    assert!(work_dir.join("sales_analysis.csv").is_file());
    std::fs::remove_dir_all(&work_dir).unwrap();
}
