//! The E2B backend is instrumented by the `Sandbox` wrapper like every backend, its requests carry
//! the span's W3C trace context, and the API key shows in no span and no `Debug` output.

mod e2b_support;

use std::sync::{Arc, Mutex};

use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{delete, post};
use axum::{Json, Router};
use e2b_support::{client_config, serve, API_KEY};
use opentelemetry::trace::{TraceContextExt, Tracer};
use opentelemetry::Value;
use opentelemetry_sdk::trace::SpanData;
use waxell::e2b::E2bBackend;
use waxell::sandbox::{RunOptions, Sandbox, SandboxOptions};

fn attribute<'a>(span: &'a SpanData, key: &str) -> Option<&'a Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| &kv.value)
}

#[tokio::test]
async fn client_calls_are_spans_and_carry_traceparent() {
    let capture = waxell::testing::capture();

    // (path, traceparent header) of each /execute request.
    type Seen = Arc<Mutex<Vec<(String, Option<String>)>>>;
    let traceparents: Seen = Arc::default();
    let record = traceparents.clone();
    let app = Router::new()
        .route(
            "/v2/sandboxes",
            post(|| async {
                (
                    StatusCode::CREATED,
                    Json(serde_json::json!({
                        "templateID": "t", "sandboxID": "spansandbox000000000", "clientID": "6532622b",
                        "envdVersion": "0.6.13", "envdAccessToken": "secret-envd-token",
                    })),
                )
            }),
        )
        .route(
            "/execute",
            post(move |headers: HeaderMap| {
                let record = record.clone();
                async move {
                    let traceparent = headers
                        .get("traceparent")
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned);
                    record.lock().unwrap().push(("/execute".into(), traceparent));
                    concat!(
                        "{\"type\": \"stdout\", \"text\": \"hi\\n\"}\n",
                        "{\"type\": \"result\", \"text\": \"2\", \"is_main_result\": true}\n",
                        "{\"type\": \"number_of_executions\", \"execution_count\": 1}\n",
                        "{\"type\": \"end_of_execution\"}\n"
                    )
                    .into_response()
                }
            }),
        )
        .route("/sandboxes/{id}", delete(|| async { StatusCode::NO_CONTENT }));
    let url = serve(app).await;
    let backend = E2bBackend::new(client_config(&url)).unwrap();
    assert!(!format!("{backend:?}").contains(API_KEY), "{backend:?}");

    let caller = capture.tracer();
    let parent = caller.start("agent tool");
    let cx = opentelemetry::Context::current_with_span(parent);
    let (sandbox, execution) = {
        use opentelemetry::trace::FutureExt;
        async {
            let sandbox = Sandbox::create(&backend, &SandboxOptions::new().with_template("t"))
                .await
                .unwrap();
            let execution = sandbox
                .run_code("print('hi')\n1 + 1", &RunOptions::new())
                .await
                .unwrap();
            sandbox.kill().await.unwrap();
            (sandbox, execution)
        }
        .with_context(cx.clone())
        .await
    };
    cx.span().end();
    assert_eq!(execution.text(), Some("2"));
    assert!(
        !format!("{sandbox:?}").contains("secret-envd-token"),
        "{sandbox:?}"
    );

    let spans: Vec<SpanData> = capture.spans().iter().map(|s| s.data().clone()).collect();
    let by_name = |name: &str| {
        spans.iter().find(|s| s.name == name).unwrap_or_else(|| {
            panic!(
                "no span {name}: {:?}",
                spans.iter().map(|s| &s.name).collect::<Vec<_>>()
            )
        })
    };
    let parent = by_name("agent tool");
    let create = by_name("execute_tool sandbox.create");
    let run = by_name("execute_tool e2b.run_code");
    let kill = by_name("execute_tool sandbox.kill");
    for span in [create, run, kill] {
        assert_eq!(
            span.parent_span_id,
            parent.span_context.span_id(),
            "{} nests under the caller",
            span.name
        );
        assert_eq!(
            attribute(span, "waxell.sandbox.backend"),
            Some(&Value::from("e2b"))
        );
    }
    assert_eq!(
        attribute(run, "waxell.sandbox.id"),
        Some(&Value::from("spansandbox000000000"))
    );

    // The /execute request carried the run_code span as its parent.
    let traceparents = traceparents.lock().unwrap().clone();
    let expected = format!(
        "00-{}-{}-01",
        run.span_context.trace_id(),
        run.span_context.span_id()
    );
    assert_eq!(traceparents, [("/execute".to_owned(), Some(expected))]);

    // No span attribute or event holds the API key or the sandbox's token.
    for span in &spans {
        let dump = format!("{:?} {:?} {:?}", span.attributes, span.events, span.status);
        assert!(
            !dump.contains(API_KEY) && !dump.contains("secret-envd-token"),
            "{}: {dump}",
            span.name
        );
    }
}
