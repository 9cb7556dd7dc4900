//! The built demo in live mode, against a fake OpenAI-compatible model on 127.0.0.1 that answers from what
//! it is asked (a failing script, then the fix, then a summary; a plain answer to the evaluator), exporting
//! over OTLP/HTTP to a receiver on 127.0.0.1. The code really runs in the local sandbox.

use std::process::{Command, Output};
use std::time::Duration;

use waxell_tests::fake_model::FakeModel;
use waxell_tests::{attr, attr_string, by_name, is_child, AnyValue, OtlpReceiver, Received};

const MODEL: &str = "local-test-model";

fn children<'a>(spans: &'a [Received], parent: &Received, name: &str) -> Vec<&'a Received> {
    spans
        .iter()
        .filter(|s| s.span.name == name && is_child(&s.span, &parent.span))
        .collect()
}

struct Run {
    output: Output,
    spans: Vec<Received>,
    chart: Option<Vec<u8>>,
}

/// Run the demo live; `configure` sets the key, the base URL and any flag.
fn run_live(label: &str, configure: impl FnOnce(&mut Command)) -> Run {
    let rx = OtlpReceiver::start_http();
    let out_dir = std::env::temp_dir().join(format!("waxell-demo-live-{label}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out_dir);
    let mut command = Command::new(waxell_tests::bin_exe!("demos"));
    command
        .args(["--quiet", "--model", MODEL, "--output-dir"])
        .arg(&out_dir)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", rx.base_url())
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("WAXELL_DEMO_MODEL");
    configure(&mut command);
    let output = command.output().expect("the demo runs");
    let spans = rx.wait_for_spans(25, Duration::from_secs(10));
    let chart = std::fs::read(out_dir.join("sales_chart.png")).ok();
    let _ = std::fs::remove_dir_all(out_dir);
    Run { output, spans, chart }
}

/// What every live run must show: success, a real chart, and the trace of a model that debugged its script.
fn assert_live_run(run: &Run, stream: bool, server: &FakeModel) {
    let stdout = String::from_utf8_lossy(&run.output.stdout);
    let stderr = String::from_utf8_lossy(&run.output.stderr);
    assert!(
        run.output.status.success(),
        "demo failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(
        stdout.contains("analyze_sales:   succeeded after 2 attempt(s)"),
        "{stdout}"
    );
    let chart = run.chart.as_deref().expect("chart written");
    assert!(
        chart.starts_with(b"\x89PNG\r\n\x1a\n") && &chart[12..16] == b"IHDR",
        "valid PNG"
    );

    let spans = &run.spans;
    let problems = waxell_tests::semconv_check::registry().check(spans);
    assert!(
        problems.is_empty(),
        "semantic conventions:\n{}",
        problems.join("\n")
    );
    let root = by_name(spans, "invoke_agent code-sandbox-agent").expect("orchestrator span");
    let trace_hex: String = root.span.trace_id.iter().map(|b| format!("{b:02x}")).collect();
    assert!(stdout.contains(&format!("trace id: {trace_hex}")), "{stdout}");
    let runner = children(spans, root, "invoke_agent sandbox-runner")[0];
    let evaluator = children(spans, root, "invoke_agent sandbox-evaluator")[0];
    let analyze = children(spans, runner, "execute_tool analyze_sales")[0];

    let chats = children(spans, analyze, &format!("chat {MODEL}"));
    assert_eq!(chats.len(), 3, "write, fix, summarise");
    let evaluator_chats = children(spans, evaluator, &format!("chat {MODEL}"));
    assert_eq!(evaluator_chats.len(), 1);
    for chat in chats.iter().chain(&evaluator_chats) {
        assert_eq!(attr(&chat.span, "waxell.dry_run"), None, "a live call");
        // A server was called: the semantic conventions want where (server.port is required with it).
        assert_eq!(
            attr_string(&chat.span, "server.address").as_deref(),
            Some("127.0.0.1")
        );
        assert_eq!(
            attr(&chat.span, "server.port"),
            Some(&AnyValue::IntValue(i64::from(server.port())))
        );
        assert_eq!(
            attr(&chat.span, "gen_ai.request.stream"),
            Some(&AnyValue::BoolValue(stream))
        );
        assert!(
            matches!(attr(&chat.span, "gen_ai.usage.input_tokens"), Some(AnyValue::IntValue(n)) if *n > 100),
            "usage reported by the server"
        );
        assert!(
            attr_string(&chat.span, "gen_ai.response.id").is_some_and(|id| id.starts_with("chatcmpl-fake-")),
            "the server's response id"
        );
    }
    let attempts = children(spans, analyze, "execute_tool run_code");
    assert_eq!(attempts.len(), 2, "one failed attempt, one retry");
    let errors: Vec<Option<String>> = attempts
        .iter()
        .map(|a| children(spans, a, "execute_tool local.run_code")[0])
        .map(|s| attr_string(&s.span, "waxell.sandbox.error.name"))
        .collect();
    assert!(
        errors.contains(&Some("KeyError".into())) && errors.contains(&None),
        "{errors:?}"
    );
}

#[test]
fn live_mode_reads_the_key_and_base_url_from_the_environment() {
    let model = FakeModel::start();
    let run = run_live("env", |c| {
        c.env("OPENAI_API_KEY", "sk-test-key")
            .env("OPENAI_BASE_URL", model.base_url());
    });
    assert_live_run(&run, false, &model);
    let received = model.received();
    assert_eq!(received.len(), 4, "three code-agent turns and the evaluator");
    for request in &received {
        assert_eq!(request.authorization.as_deref(), Some("Bearer sk-test-key"));
        assert_eq!(request.body["model"], MODEL);
        assert_ne!(request.body["stream"], true);
    }
}

#[test]
fn live_mode_streams_from_a_keyless_server_given_by_flag() {
    let model = FakeModel::start();
    let run = run_live("stream", |c| {
        c.args(["--stream", "--base-url"]).arg(model.base_url());
    });
    assert_live_run(&run, true, &model);
    let received = model.received();
    assert_eq!(received.len(), 4);
    for request in &received {
        assert_eq!(request.authorization, None, "no key configured, none sent");
        assert_eq!(request.body["stream"], true);
    }
}

#[test]
fn base_url_flag_wins_over_the_environment() {
    let model = FakeModel::start();
    let run = run_live("flag", |c| {
        c.env("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
            .arg("--base-url")
            .arg(model.base_url());
    });
    assert!(
        run.output.status.success(),
        "{}",
        String::from_utf8_lossy(&run.output.stderr)
    );
    assert_eq!(model.received().len(), 4);
}
