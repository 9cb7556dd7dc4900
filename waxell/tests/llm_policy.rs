//! How the chat span follows the SDK's policies: tool-call decisions, content capture switched off,
//! secrets scrubbed from captured messages.

mod llm_support;
#[allow(
    unreachable_pub,
    reason = "shared with the waxell-tests crate, where it is public"
)]
#[path = "../../tests/src/own_process.rs"]
mod own_process;

use llm_support::*;
use serde_json::json;
use waxell::llm::{ChatRequest, Client, Message, ScriptedReply, ScriptedTransport, Tool};
use waxell::semconv::*;
use waxell::testing::span_data::*;

fn tools() -> Vec<Tool> {
    vec![
        Tool::function("run_python", "Run Python", json!({"type": "object"})),
        Tool::function("read_file", "Read a file", json!({"type": "object"})),
    ]
}

fn scripted(replies: Vec<ScriptedReply>) -> Client {
    Client::builder()
        .with_transport(ScriptedTransport::new(replies))
        .with_model("gpt-4o-mini")
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_tool_call_records_a_decision_under_the_chat_span() {
    let spans = capture_spans();
    let client = scripted(vec![
        ScriptedReply::tool_call("run_python", json!({"code": "print(1)"})),
        ScriptedReply::tool_call("run_python", json!({"code": "print(2)"}))
            .and_tool_call("read_file", json!({"path": "a.csv"})),
        ScriptedReply::text("no tools this time"),
    ]);
    let request = ChatRequest::new([Message::user("go")]).tools(tools());
    for _ in 0..3 {
        client.chat(request.clone()).await.unwrap();
    }

    let spans = finished_spans(&spans);
    let chats: Vec<_> = spans
        .iter()
        .filter(|span| span.name == "chat gpt-4o-mini")
        .collect();
    assert_eq!(chats.len(), 3);

    let single = span_named(&spans, "decide tool_call:run_python");
    assert_eq!(single.parent_span_id, chats[0].span_context.span_id());
    assert_eq!(attr_str(&single, WAXELL_DECISION_NAME), "tool_call:run_python");
    assert_eq!(attr_str(&single, WAXELL_DECISION_CHOSEN), "run_python");
    assert_eq!(
        attr_strings(&single, WAXELL_DECISION_OPTIONS),
        ["run_python", "read_file"]
    );

    let parallel = span_named(&spans, "decide tool_calls");
    assert_eq!(parallel.parent_span_id, chats[1].span_context.span_id());
    assert_eq!(
        attr_str(&parallel, WAXELL_DECISION_CHOSEN),
        "run_python,read_file"
    );
    assert_eq!(
        attr_strings(&parallel, WAXELL_DECISION_OPTIONS),
        ["run_python", "read_file"]
    );
    assert!(
        !parallel
            .attributes
            .iter()
            .any(|kv| kv.key.as_str() == "waxell.decision.invalid_choice"),
        "several offered tools chosen at once is a valid choice"
    );

    let decisions = spans
        .iter()
        .filter(|span| span.name.starts_with("decide "))
        .count();
    assert_eq!(decisions, 2, "a text answer records no decision");
}

#[tokio::test]
async fn content_capture_off_keeps_messages_out_of_the_span() {
    let spans = waxell::testing::builder().capture_content(false).start();
    let server = FakeServer::start(vec![FakeReply::ok(completion(
        "c",
        "gpt-4o-mini",
        "secret answer",
        (9, 2),
    ))])
    .await;
    let client = client_for(&server).build().unwrap();
    client
        .chat(ChatRequest::new([Message::user("private question")]).tools(tools()))
        .await
        .unwrap();

    let spans = finished_spans(&spans);
    let chat = span_named(&spans, "chat gpt-4o-mini");
    for key in [
        GEN_AI_INPUT_MESSAGES,
        GEN_AI_OUTPUT_MESSAGES,
        GEN_AI_TOOL_DEFINITIONS,
        OI_INPUT_VALUE,
        OI_OUTPUT_VALUE,
    ] {
        assert_eq!(attr(&chat, key), None, "{key} captured although capture is off");
    }
    let flattened: Vec<_> = chat
        .attributes
        .iter()
        .map(|kv| kv.key.as_str())
        .filter(|key| {
            key.starts_with("llm.input_messages")
                || key.starts_with("llm.output_messages")
                || key.starts_with("llm.tools")
        })
        .collect();
    assert!(
        flattened.is_empty(),
        "captured although capture is off: {flattened:?}"
    );
    let text = span_text(&chat);
    assert!(
        !text.contains("private question") && !text.contains("secret answer"),
        "{text}"
    );
    // Everything that is not content is still there.
    assert_eq!(attr_i64(&chat, GEN_AI_USAGE_INPUT_TOKENS), 9);
    assert_eq!(attr_str(&chat, GEN_AI_RESPONSE_ID), "c");
    assert!(attr(&chat, WAXELL_LLM_COST).is_some());
}

#[tokio::test]
async fn secrets_in_captured_messages_are_scrubbed() {
    let spans = capture_spans();
    let leaked = "sk-proj-abcdefghijklmnopqrstuvwxyz012345";
    let client = scripted(vec![ScriptedReply::tool_call(
        "run_python",
        json!({"code": format!("client = OpenAI(api_key='{leaked}')")}),
    )]);
    client
        .chat(ChatRequest::new([Message::user(format!("My key is {leaked}, use it"))]).tools(tools()))
        .await
        .unwrap();

    let chat = span_named(&finished_spans(&spans), "chat gpt-4o-mini");
    let text = span_text(&chat);
    assert!(!text.contains(leaked), "{text}");
    // The messages are still there, and still valid JSON.
    let input = attr_json(&chat, GEN_AI_INPUT_MESSAGES);
    assert!(input[0]["parts"][0]["content"]
        .as_str()
        .unwrap()
        .starts_with("My key is "));
    let output = attr_json(&chat, GEN_AI_OUTPUT_MESSAGES);
    assert_eq!(output[0]["parts"][0]["name"], "run_python");
}

#[tokio::test]
async fn observation_switched_off_records_nothing_but_the_call_works() {
    // Observation is off for the whole process, and a test capture records regardless of it: this test
    // runs alone in a child process, with spans going to the global provider as without a capture.
    crate::own_process!();
    let off = waxell::builder()
        .with_env(|name| (name == "WAXELL_OBSERVE").then(|| "false".to_owned()))
        .init()
        .unwrap();
    assert!(!off.is_enabled());
    let spans = capture_spans_globally();
    let (provider, metrics) = capture_metrics();
    let client = scripted(vec![ScriptedReply::tool_call("run_python", json!({"code": "1"}))]);
    let response = client
        .chat(ChatRequest::new([Message::user("go")]).tools(tools()))
        .await
        .unwrap();
    assert_eq!(response.tool_calls()[0].function.name, "run_python");
    provider.force_flush().unwrap();
    assert!(spans.get_finished_spans().unwrap().is_empty());
    assert!(histogram_points_f64(&metrics, METRIC_OPERATION_DURATION).is_empty());
}
