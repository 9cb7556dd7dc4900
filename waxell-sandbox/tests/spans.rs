//! The `Sandbox` wrapper emits spans at the boundary, nested under the caller's span.
//! Each test captures its own spans with `waxell::testing`, so the tests share one process.
#![cfg(target_os = "linux")]

mod common;

use opentelemetry::trace::{FutureExt, Status, TraceContextExt, Tracer};
use opentelemetry::{Context, Value};
use opentelemetry_sdk::trace::SpanData;
use waxell::sandbox::{RunOptions, Sandbox, SandboxOptions};

fn attribute<'a>(span: &'a SpanData, key: &str) -> Option<&'a Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| &kv.value)
}

fn captured(capture: &waxell::testing::Capture) -> Vec<SpanData> {
    capture.spans().iter().map(|s| s.data().clone()).collect()
}

fn string(span: &SpanData, key: &str) -> String {
    attribute(span, key)
        .map(|v| v.as_str().into_owned())
        .unwrap_or_else(|| panic!("{key} missing on {}", span.name))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_calls_emit_nested_spans() {
    let capture = waxell::testing::builder().capture_content(true).start();

    let backend = common::backend();
    let caller = capture.tracer();
    let parent = caller.start("execute_tool analyse");
    let parent_cx = Context::current_with_span(parent);
    let parent_span_id = parent_cx.span().span_context().span_id();

    async {
        let sandbox = Sandbox::create(&backend, &SandboxOptions::default())
            .await
            .unwrap();
        let ok = sandbox
            .run_code("x = 20\nx * 2 + 2", &RunOptions::default())
            .await
            .unwrap();
        assert_eq!(ok.text(), Some("42"));
        let failed = sandbox.run_code("1 / 0", &RunOptions::default()).await.unwrap();
        assert_eq!(failed.error.unwrap().name, "ZeroDivisionError");
        let bad = RunOptions::default()
            .with_language("python")
            .with_context("default");
        assert!(sandbox.run_code("1", &bad).await.is_err());
        sandbox.write_file("a.txt", b"hello").await.unwrap();
        assert_eq!(sandbox.read_file("a.txt").await.unwrap(), b"hello");
        assert!(sandbox.read_file("missing.txt").await.is_err());
        sandbox.list_files("/home/user").await.unwrap();
        assert!(sandbox.make_dir("out").await.unwrap());
        assert!(!sandbox.make_dir("out").await.unwrap());
        sandbox.rename("out", "out2").await.unwrap();
        sandbox.remove("out2").await.unwrap();
        sandbox.kill().await.unwrap();
    }
    .with_context(parent_cx.clone())
    .await;
    parent_cx.span().end();
    let spans = captured(&capture);
    let named = |name: &str| spans.iter().filter(|s| s.name == name).collect::<Vec<_>>();
    for span in spans.iter().filter(|s| s.name != "execute_tool analyse") {
        assert_eq!(
            span.parent_span_id, parent_span_id,
            "{} nests under the caller's span",
            span.name
        );
        assert_eq!(string(span, "waxell.sandbox.backend"), "local", "{}", span.name);
    }

    let create = named("execute_tool sandbox.create");
    assert_eq!(create.len(), 1);
    let sandbox_id = string(create[0], "waxell.sandbox.id");

    let runs = named("execute_tool local.run_code");
    assert_eq!(runs.len(), 3);
    let ok = runs[0];
    assert_eq!(string(ok, "gen_ai.operation.name"), "execute_tool");
    assert_eq!(string(ok, "gen_ai.tool.name"), "local.run_code");
    assert_eq!(string(ok, "gen_ai.tool.type"), "extension");
    assert_eq!(string(ok, "openinference.span.kind"), "TOOL");
    assert_eq!(string(ok, "waxell.sandbox.id"), sandbox_id);
    assert_eq!(string(ok, "waxell.sandbox.language"), "python");
    assert_eq!(attribute(ok, "waxell.sandbox.code_length"), Some(&Value::I64(16)));
    assert_eq!(string(ok, "waxell.sandbox.code_preview"), "x = 20\nx * 2 + 2");
    assert_eq!(string(ok, "input.value"), "x = 20\nx * 2 + 2");
    assert_eq!(string(ok, "output.value"), "42");
    assert_eq!(string(ok, "waxell.sandbox.result_types"), "text");
    assert_eq!(
        attribute(ok, "waxell.sandbox.execution_count"),
        Some(&Value::I64(1))
    );
    assert_eq!(ok.status, Status::Unset);

    let failed = runs[1];
    assert_eq!(string(failed, "waxell.sandbox.error.name"), "ZeroDivisionError");
    assert_eq!(string(failed, "waxell.sandbox.error.value"), "division by zero");
    assert!(matches!(failed.status, Status::Error { .. }));

    let rejected = runs[2];
    assert_eq!(string(rejected, "error.type"), "invalid_argument");
    assert!(matches!(rejected.status, Status::Error { .. }));

    let reads = named("execute_tool sandbox.read_file");
    assert_eq!(reads.len(), 2);
    assert_eq!(
        attribute(reads[0], "waxell.sandbox.file.size"),
        Some(&Value::I64(5))
    );
    assert!(matches!(reads[1].status, Status::Error { .. }));
    assert_eq!(string(reads[1], "error.type"), "file_not_found");
    assert_eq!(named("execute_tool sandbox.write_file").len(), 1);
    assert_eq!(
        string(
            named("execute_tool sandbox.write_file")[0],
            "waxell.sandbox.file.path"
        ),
        "a.txt"
    );
    assert_eq!(named("execute_tool sandbox.list_files").len(), 1);
    let made: Vec<_> = named("execute_tool sandbox.make_dir")
        .iter()
        .map(|s| attribute(s, "waxell.sandbox.file.created").cloned())
        .collect();
    assert_eq!(made, [Some(Value::Bool(true)), Some(Value::Bool(false))]);
    assert_eq!(
        string(
            named("execute_tool sandbox.remove")[0],
            "waxell.sandbox.file.path"
        ),
        "out2"
    );
    let renamed = named("execute_tool sandbox.rename");
    assert_eq!(string(renamed[0], "waxell.sandbox.file.path"), "out");
    assert_eq!(string(renamed[0], "waxell.sandbox.file.destination"), "out2");
    assert_eq!(named("execute_tool sandbox.kill").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_is_not_captured_when_capture_is_off() {
    let capture = waxell::testing::builder().capture_content(false).start();
    let backend = common::backend();
    let sandbox = Sandbox::create(&backend, &SandboxOptions::default())
        .await
        .unwrap();
    sandbox
        .run_code("secret = 'sk-123'\nsecret", &RunOptions::default())
        .await
        .unwrap();
    let spans = captured(&capture);
    let run = spans
        .iter()
        .find(|s| s.name == "execute_tool local.run_code")
        .unwrap();
    for key in [
        "waxell.sandbox.code_preview",
        "input.value",
        "output.value",
        "waxell.sandbox.output_preview",
    ] {
        assert!(attribute(run, key).is_none(), "{key} must not be captured");
    }
    assert_eq!(
        attribute(run, "waxell.sandbox.code_length"),
        Some(&Value::I64(24))
    );
}
