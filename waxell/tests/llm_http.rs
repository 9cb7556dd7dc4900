//! The LLM client against an OpenAI-compatible server on 127.0.0.1: what goes over the wire, what comes
//! back, and what the `chat {model}` span records, for successes and each kind of failure.

mod llm_support;

use std::time::{Duration, Instant};

use llm_support::*;
use opentelemetry::trace::{FutureExt, SpanKind, Status, TraceContextExt, Tracer};
use opentelemetry::Context;
use serde_json::json;
use waxell::llm::{ChatRequest, Error, Message, ResponseFormat, Tool};
use waxell::semconv::*;
use waxell::testing::span_data::*;

fn question() -> ChatRequest {
    ChatRequest::new([
        Message::system("You are a data analyst."),
        Message::user("What is the mean of 3, 4 and 5?"),
    ])
}

#[tokio::test]
async fn plain_reply_is_traced_with_request_response_usage_cost_and_content() {
    let spans = capture_spans();
    let mut body = completion(
        "chatcmpl-abc",
        "gpt-4o-mini-2024-07-18",
        "The mean is 4.",
        (1200, 30),
    );
    body["usage"]["prompt_tokens_details"] = json!({"cached_tokens": 200});
    body["usage"]["completion_tokens_details"] = json!({"reasoning_tokens": 0});
    let server = FakeServer::start(vec![FakeReply::ok(body)]).await;
    let client = client_for(&server).build().unwrap();

    let tracer = spans.tracer();
    let parent = Context::current_with_span(tracer.start("invoke_agent analyst"));
    let request = question()
        .temperature(0.2)
        .top_p(0.9)
        .max_tokens(100)
        .seed(7)
        .stop(["END"])
        .response_format(ResponseFormat::JsonObject);
    let response = client.chat(request).with_context(parent.clone()).await.unwrap();
    parent.span().end();
    assert_eq!(response.text(), Some("The mean is 4."));

    let spans = finished_spans(&spans);
    let chat = span_named(&spans, "chat gpt-4o-mini");
    let agent = span_named(&spans, "invoke_agent analyst");

    // Over the wire: auth, trace context of the chat span, the body as the API expects it.
    let [received] = server.received().try_into().unwrap();
    assert_eq!(
        received.header("authorization"),
        Some(format!("Bearer {TEST_KEY}").as_str())
    );
    assert_eq!(received.header("content-type"), Some("application/json"));
    let expected_traceparent = format!(
        "00-{}-{}-01",
        chat.span_context.trace_id(),
        chat.span_context.span_id()
    );
    assert_eq!(
        received.header("traceparent"),
        Some(expected_traceparent.as_str())
    );
    assert_eq!(
        received.body,
        json!({
            "model": "gpt-4o-mini",
            "messages": [
                {"role": "system", "content": "You are a data analyst."},
                {"role": "user", "content": "What is the mean of 3, 4 and 5?"},
            ],
            "response_format": {"type": "json_object"},
            "temperature": 0.2, "top_p": 0.9, "max_tokens": 100, "stop": ["END"], "seed": 7,
        })
    );

    // The span nests under the caller's context.
    assert_eq!(chat.span_context.trace_id(), agent.span_context.trace_id());
    assert_eq!(chat.parent_span_id, agent.span_context.span_id());
    assert_eq!(chat.span_kind, SpanKind::Client);
    assert_eq!(chat.status, Status::Unset);

    // GenAI attributes.
    assert_eq!(attr_str(&chat, GEN_AI_OPERATION_NAME), "chat");
    assert_eq!(attr_str(&chat, GEN_AI_PROVIDER_NAME), "openai");
    assert_eq!(attr_str(&chat, GEN_AI_REQUEST_MODEL), "gpt-4o-mini");
    assert_eq!(attr_str(&chat, SERVER_ADDRESS), "127.0.0.1");
    assert_eq!(attr_i64(&chat, SERVER_PORT), i64::from(server.addr.port()));
    assert_eq!(attr_f64(&chat, GEN_AI_REQUEST_TEMPERATURE), 0.2);
    assert_eq!(attr_f64(&chat, GEN_AI_REQUEST_TOP_P), 0.9);
    assert_eq!(attr_i64(&chat, GEN_AI_REQUEST_MAX_TOKENS), 100);
    assert_eq!(attr_i64(&chat, GEN_AI_REQUEST_SEED), 7);
    assert_eq!(attr_strings(&chat, GEN_AI_REQUEST_STOP_SEQUENCES), ["END"]);
    assert_eq!(attr_str(&chat, GEN_AI_OUTPUT_TYPE), "json");
    assert_eq!(attr(&chat, GEN_AI_REQUEST_STREAM), Some(false.into()));
    assert_eq!(attr_str(&chat, GEN_AI_RESPONSE_ID), "chatcmpl-abc");
    assert_eq!(attr_str(&chat, GEN_AI_RESPONSE_MODEL), "gpt-4o-mini-2024-07-18");
    assert_eq!(attr_strings(&chat, GEN_AI_RESPONSE_FINISH_REASONS), ["stop"]);
    assert_eq!(attr_i64(&chat, GEN_AI_USAGE_INPUT_TOKENS), 1200);
    assert_eq!(attr_i64(&chat, GEN_AI_USAGE_OUTPUT_TOKENS), 30);
    assert_eq!(attr_i64(&chat, GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS), 200);
    assert_eq!(attr_i64(&chat, GEN_AI_USAGE_REASONING_OUTPUT_TOKENS), 0);
    assert_eq!(
        attr(&chat, GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK),
        None,
        "not a stream"
    );
    assert_eq!(attr(&chat, WAXELL_DRY_RUN), None);

    // OpenInference attributes.
    assert_eq!(attr_str(&chat, OI_SPAN_KIND), "LLM");
    assert_eq!(attr_str(&chat, OI_LLM_MODEL_NAME), "gpt-4o-mini-2024-07-18");
    assert_eq!(attr_i64(&chat, OI_LLM_TOKEN_COUNT_PROMPT), 1200);
    assert_eq!(attr_i64(&chat, OI_LLM_TOKEN_COUNT_COMPLETION), 30);
    assert_eq!(attr_i64(&chat, OI_LLM_TOKEN_COUNT_TOTAL), 1230);
    assert_eq!(
        attr_json(&chat, OI_LLM_INVOCATION_PARAMETERS),
        json!({"model": "gpt-4o-mini", "response_format": {"type": "json_object"}, "temperature": 0.2,
               "top_p": 0.9, "max_tokens": 100, "stop": ["END"], "seed": 7})
    );

    // Cost: gpt-4o-mini at 0.15 / 0.075 (cached) / 0.60 USD per million tokens.
    let expected_cost = (1000.0 * 0.15 + 200.0 * 0.075 + 30.0 * 0.60) / 1e6;
    assert!((attr_f64(&chat, WAXELL_LLM_COST) - expected_cost).abs() < 1e-12);
    assert!((attr_f64(&chat, OI_LLM_COST_TOTAL) - expected_cost).abs() < 1e-12);

    // Content, in the spec's parts shape.
    assert_eq!(
        attr_json(&chat, GEN_AI_INPUT_MESSAGES),
        json!([
            {"role": "system", "parts": [{"type": "text", "content": "You are a data analyst."}]},
            {"role": "user", "parts": [{"type": "text", "content": "What is the mean of 3, 4 and 5?"}]},
        ])
    );
    assert_eq!(
        attr_json(&chat, GEN_AI_OUTPUT_MESSAGES),
        json!([{"role": "assistant", "parts": [{"type": "text", "content": "The mean is 4."}], "finish_reason": "stop"}])
    );
    assert_eq!(attr_str(&chat, OI_OUTPUT_VALUE), "The mean is 4.");
    assert_eq!(attr_str(&chat, OI_OUTPUT_MIME_TYPE), "text/plain");
    assert_eq!(
        attr_json(&chat, OI_INPUT_VALUE),
        attr_json(&chat, GEN_AI_INPUT_MESSAGES)
    );

    assert_secret_absent(&spans, TEST_KEY);
}

#[tokio::test]
async fn tool_call_reply_records_the_call_and_the_offered_tools() {
    let spans = capture_spans();
    let code = "import pandas as pd\nprint(pd.read_csv('sales.csv')['revenue'].mean())";
    let body = json!({
        "id": "chatcmpl-tool", "model": "gpt-4o-mini",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": null,
            "tool_calls": [{"id": "call_1", "type": "function",
                "function": {"name": "run_python", "arguments": json!({"code": code}).to_string()}}],
        }}],
        "usage": {"prompt_tokens": 80, "completion_tokens": 25, "total_tokens": 105},
    });
    let server = FakeServer::start(vec![FakeReply::ok(body)]).await;
    let client = client_for(&server).build().unwrap();
    let tools = [
        Tool::function("run_python", "Run Python code", json!({"type": "object"})),
        Tool::function("read_file", "Read a file", json!({"type": "object"})),
    ];
    let response = client.chat(question().tools(tools)).await.unwrap();
    assert_eq!(
        response.tool_calls()[0]
            .parse_arguments::<serde_json::Value>()
            .unwrap()["code"],
        code
    );

    let [received] = server.received().try_into().unwrap();
    assert_eq!(received.body["tools"][0]["type"], "function");
    assert_eq!(received.body["tools"][0]["function"]["name"], "run_python");
    assert_eq!(received.body["tools"][1]["function"]["name"], "read_file");

    let spans = finished_spans(&spans);
    let chat = span_named(&spans, "chat gpt-4o-mini");
    assert_eq!(
        attr_strings(&chat, GEN_AI_RESPONSE_FINISH_REASONS),
        ["tool_calls"]
    );
    assert_eq!(
        attr_json(&chat, GEN_AI_OUTPUT_MESSAGES),
        json!([{"role": "assistant", "finish_reason": "tool_call", "parts": [
            {"type": "tool_call", "id": "call_1", "name": "run_python", "arguments": {"code": code}},
        ]}])
    );
    assert_eq!(attr_str(&chat, OI_OUTPUT_MIME_TYPE), "application/json");
    let definitions = attr_json(&chat, GEN_AI_TOOL_DEFINITIONS);
    assert_eq!(definitions[0]["name"], "run_python");
    assert_eq!(definitions[1]["name"], "read_file");

    // The OpenInference family, flattened, for Phoenix and other OpenInference readers.
    let call = "llm.output_messages.0.message.tool_calls.0.tool_call";
    assert_eq!(attr_str(&chat, "llm.output_messages.0.message.role"), "assistant");
    assert_eq!(attr_str(&chat, &format!("{call}.id")), "call_1");
    assert_eq!(attr_str(&chat, &format!("{call}.function.name")), "run_python");
    assert_eq!(
        attr_json(&chat, &format!("{call}.function.arguments"))["code"],
        code
    );
    assert_eq!(attr_str(&chat, "llm.input_messages.0.message.role"), "system");
    assert_eq!(
        attr_str(&chat, "llm.input_messages.1.message.content"),
        "What is the mean of 3, 4 and 5?"
    );
    let schema = attr_json(&chat, "llm.tools.1.tool.json_schema");
    assert_eq!(schema["type"], "function");
    assert_eq!(schema["function"]["name"], "read_file");
    assert_eq!(schema["function"]["description"], "Read a file");
}

#[tokio::test]
async fn a_long_conversation_keeps_its_latest_messages_within_the_span_attribute_limit() {
    let spans = capture_spans();
    let server = FakeServer::start(vec![FakeReply::ok(completion(
        "c3",
        "gpt-4o-mini",
        "ok",
        (500, 1),
    ))])
    .await;
    let client = client_for(&server).build().unwrap();
    let messages: Vec<_> = (0..100).map(|i| Message::user(format!("turn {i}"))).collect();
    client.chat(ChatRequest::new(messages)).await.unwrap();

    let chat = span_named(&finished_spans(&spans), "chat gpt-4o-mini");
    assert_eq!(chat.dropped_attributes_count, 0, "the SDK dropped attributes");
    // 36 attributes of budget, two per user message: the last 18 turns, re-indexed from 0.
    assert_eq!(attr_i64(&chat, WAXELL_LLM_INPUT_MESSAGES_OMITTED), 82);
    assert_eq!(attr_str(&chat, "llm.input_messages.0.message.content"), "turn 82");
    assert_eq!(
        attr_str(&chat, "llm.input_messages.17.message.content"),
        "turn 99"
    );
    assert_eq!(attr(&chat, "llm.input_messages.18.message.role"), None);
    // The GenAI family still has the whole conversation.
    assert_eq!(
        attr_json(&chat, GEN_AI_INPUT_MESSAGES).as_array().unwrap().len(),
        100
    );
    assert_eq!(attr_str(&chat, "llm.output_messages.0.message.content"), "ok");
}

#[tokio::test]
async fn tool_results_in_the_conversation_are_captured_as_tool_call_responses() {
    let spans = capture_spans();
    let server = FakeServer::start(vec![FakeReply::ok(completion(
        "c2",
        "gpt-4o-mini",
        "Done.",
        (50, 2),
    ))])
    .await;
    let client = client_for(&server).build().unwrap();
    let call = waxell::llm::ToolCall::function("call_9", "run_python", r#"{"code": "print(4)"}"#);
    let request = question()
        .message(Message::assistant_tool_calls([call]))
        .message(Message::tool("call_9", "4\n"));
    client.chat(request).await.unwrap();

    let [received] = server.received().try_into().unwrap();
    assert_eq!(
        received.body["messages"][2],
        json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_9", "type": "function", "function": {"name": "run_python", "arguments": "{\"code\": \"print(4)\"}"}}]})
    );
    assert_eq!(
        received.body["messages"][3],
        json!({"role": "tool", "tool_call_id": "call_9", "content": "4\n"})
    );

    let chat = span_named(&finished_spans(&spans), "chat gpt-4o-mini");
    let input = attr_json(&chat, GEN_AI_INPUT_MESSAGES);
    assert_eq!(
        input[2],
        json!({"role": "assistant", "parts": [{"type": "tool_call", "id": "call_9", "name": "run_python", "arguments": {"code": "print(4)"}}]})
    );
    assert_eq!(
        input[3],
        json!({"role": "tool", "parts": [{"type": "tool_call_response", "id": "call_9", "response": "4\n"}]})
    );
    assert_eq!(
        attr_str(
            &chat,
            "llm.input_messages.2.message.tool_calls.0.tool_call.function.name"
        ),
        "run_python"
    );
    assert_eq!(
        attr(&chat, "llm.input_messages.2.message.content"),
        None,
        "no text in that turn"
    );
    assert_eq!(attr_str(&chat, "llm.input_messages.3.message.role"), "tool");
    assert_eq!(
        attr_str(&chat, "llm.input_messages.3.message.tool_call_id"),
        "call_9"
    );
    assert_eq!(attr_str(&chat, "llm.input_messages.3.message.content"), "4\n");
}

#[tokio::test]
async fn a_retry_after_date_is_waited_for() {
    let _spans = capture_spans();
    // Two seconds ahead at whole-second resolution: a wait of one to two seconds.
    let at = httpdate::fmt_http_date(std::time::SystemTime::now() + Duration::from_secs(2));
    let server = FakeServer::start(vec![
        FakeReply::error(503, "overloaded", "server_error").with_header("retry-after", &at),
        FakeReply::ok(completion("chatcmpl-3", "gpt-4o-mini", "ok", (5, 1))),
    ])
    .await;
    let client = client_for(&server).with_max_retries(2).build().unwrap();
    assert_eq!(client.chat(question()).await.unwrap().id, "chatcmpl-3");
    let received = server.received();
    let waited = received[1].at - received[0].at;
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(5),
        "retried after {waited:?} for Retry-After: {at}"
    );
}

#[tokio::test]
async fn rate_limit_is_retried_after_the_servers_retry_after() {
    let spans = capture_spans();
    let server = FakeServer::start(vec![
        FakeReply::error(429, "Rate limit reached for gpt-4o-mini", "rate_limit_exceeded")
            .with_header("retry-after", "1"),
        FakeReply::ok(completion("chatcmpl-2", "gpt-4o-mini", "ok", (5, 1))),
    ])
    .await;
    let client = client_for(&server).with_max_retries(2).build().unwrap();
    let response = client.chat(question()).await.unwrap();
    assert_eq!(response.id, "chatcmpl-2");

    let received = server.received();
    assert_eq!(received.len(), 2, "one rate-limited request, one retry");
    let waited = received[1].at - received[0].at;
    assert!(
        waited >= Duration::from_millis(950),
        "retried after {waited:?}, not after Retry-After: 1"
    );
    assert!(waited < Duration::from_secs(3), "waited {waited:?}");
    assert_eq!(received[0].body, received[1].body);

    let spans = finished_spans(&spans);
    let chat = span_named(&spans, "chat gpt-4o-mini");
    assert_eq!(chat.status, Status::Unset);
    assert_eq!(attr(&chat, ERROR_TYPE), None);
    assert_eq!(attr_str(&chat, GEN_AI_RESPONSE_ID), "chatcmpl-2");
}

#[tokio::test]
async fn server_error_is_retried_then_reported_with_the_servers_message() {
    let spans = capture_spans();
    let server = FakeServer::start(vec![
        FakeReply::error(500, "The server had an error", "server_error"),
        FakeReply::error(502, "Bad gateway", "server_error"),
        FakeReply::error(
            500,
            "The server had an error while processing your request",
            "server_error",
        ),
    ])
    .await;
    let client = client_for(&server).with_max_retries(2).build().unwrap();
    let error = client.chat(question()).await.unwrap_err();
    match &error {
        Error::Api {
            status: 500,
            message,
            code,
            attempts: 3,
        } => {
            assert_eq!(message, "The server had an error while processing your request");
            assert_eq!(code.as_deref(), Some("server_error"));
        }
        other => panic!("expected a 500 after 3 attempts, got {other:?}"),
    }
    assert!(error.to_string().contains("HTTP 500"), "{error}");
    assert_eq!(server.received().len(), 3);

    let chat = span_named(&finished_spans(&spans), "chat gpt-4o-mini");
    assert_eq!(attr_str(&chat, ERROR_TYPE), "server_error");
    let Status::Error { description } = &chat.status else {
        panic!("status {:?}", chat.status)
    };
    assert!(
        description.contains("The server had an error while processing"),
        "{description}"
    );
    assert_eq!(attr(&chat, GEN_AI_RESPONSE_ID), None);
}

#[tokio::test]
async fn client_errors_are_not_retried() {
    let spans = capture_spans();
    let server = FakeServer::start(vec![FakeReply::Json {
        status: 404,
        body: json!({"error": {"message": "The model `gpt-9` does not exist", "type": "invalid_request_error", "code": "model_not_found"}}).to_string(),
        headers: vec![],
    }])
    .await;
    let client = client_for(&server).build().unwrap();
    let error = client.chat(question().model("gpt-9")).await.unwrap_err();
    assert!(
        matches!(&error, Error::Api { status: 404, attempts: 1, message, .. } if message.contains("gpt-9")),
        "{error:?}"
    );
    assert_eq!(server.received().len(), 1);
    let chat = span_named(&finished_spans(&spans), "chat gpt-9");
    assert_eq!(attr_str(&chat, ERROR_TYPE), "model_not_found");
}

#[tokio::test]
async fn malformed_json_is_an_error_that_shows_what_was_received() {
    let spans = capture_spans();
    let server = FakeServer::start(vec![FakeReply::raw("{\"id\": \"x\", \"choices\": [ oops")]).await;
    let client = client_for(&server).build().unwrap();
    let error = client.chat(question()).await.unwrap_err();
    let Error::MalformedResponse { received, reason } = &error else {
        panic!("expected a malformed response, got {error:?}")
    };
    assert!(received.contains("[ oops"), "{received}");
    assert!(reason.contains("not a chat completion"), "{reason}");
    assert_eq!(server.received().len(), 1, "a malformed 200 is not retried");

    let chat = span_named(&finished_spans(&spans), "chat gpt-4o-mini");
    assert_eq!(attr_str(&chat, ERROR_TYPE), "malformed_response");
    assert!(matches!(chat.status, Status::Error { .. }));
}

#[tokio::test]
async fn a_json_body_without_choices_is_malformed() {
    let _spans = capture_spans();
    let server = FakeServer::start(vec![FakeReply::ok(json!({"object": "list", "data": []}))]).await;
    let error = client_for(&server)
        .build()
        .unwrap()
        .chat(question())
        .await
        .unwrap_err();
    assert!(
        matches!(&error, Error::MalformedResponse { reason, received } if reason.contains("no choices") && received.contains("\"list\"")),
        "{error:?}"
    );
}

#[tokio::test]
async fn slow_server_times_out_on_every_attempt() {
    let spans = capture_spans();
    let slow =
        FakeReply::ok(completion("late", "gpt-4o-mini", "too late", (1, 1))).after(Duration::from_secs(3));
    let server = FakeServer::start(vec![slow.clone(), slow]).await;
    let client = client_for(&server)
        .with_request_timeout(Duration::from_millis(300))
        .with_max_retries(1)
        .build()
        .unwrap();
    let started = Instant::now();
    let error = client.chat(question()).await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_millis(2500),
        "gave up after {:?}",
        started.elapsed()
    );
    assert!(
        matches!(error, Error::Timeout { after, attempts: 2 } if after == Duration::from_millis(300)),
        "{error:?}"
    );
    assert_eq!(
        server.received().len(),
        2,
        "the timed-out request was retried once"
    );

    let chat = span_named(&finished_spans(&spans), "chat gpt-4o-mini");
    assert_eq!(attr_str(&chat, ERROR_TYPE), "timeout");
}

#[tokio::test]
async fn unreachable_server_is_a_connection_error_naming_the_url() {
    let spans = capture_spans();
    // A port that was just free: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let client = waxell::llm::Client::builder()
        .with_base_url(format!("http://127.0.0.1:{port}/v1"))
        .with_model("gpt-4o-mini")
        .with_max_retries(0)
        .build()
        .unwrap();
    let error = client.chat(question()).await.unwrap_err();
    let Error::Connection { url, attempts: 1, .. } = &error else {
        panic!("expected a connection error, got {error:?}")
    };
    assert_eq!(url, &format!("http://127.0.0.1:{port}/v1/chat/completions"));
    let chat = span_named(&finished_spans(&spans), "chat gpt-4o-mini");
    assert_eq!(attr_str(&chat, ERROR_TYPE), "connection_error");
}

#[tokio::test]
async fn a_request_without_any_model_is_refused_before_sending() {
    let spans = capture_spans();
    let server = FakeServer::start(vec![]).await;
    let client = waxell::llm::Client::builder()
        .with_base_url(server.base_url())
        .build()
        .unwrap();
    let error = client.chat(question()).await.unwrap_err();
    assert!(
        matches!(&error, Error::InvalidRequest(message) if message.contains("with_model")),
        "{error:?}"
    );
    assert!(server.received().is_empty());
    assert!(finished_spans(&spans).is_empty());
}

#[tokio::test]
async fn unknown_models_get_no_cost_and_overrides_apply() {
    let spans = capture_spans();
    let server = FakeServer::start(vec![
        FakeReply::ok(completion("a", "llama3.2:3b", "hi", (100, 10))),
        FakeReply::ok(completion("b", "my-finetune", "hi", (1_000_000, 1_000_000))),
    ])
    .await;
    let prices = waxell::llm::PriceTable::openai_defaults()
        .with_price("my-finetune", waxell::llm::ModelPrice::new(1.0, 3.0));
    let client = client_for(&server).with_price_table(prices).build().unwrap();
    client.chat(question().model("llama3.2:3b")).await.unwrap();
    client.chat(question().model("my-finetune")).await.unwrap();

    let spans = finished_spans(&spans);
    let local = span_named(&spans, "chat llama3.2:3b");
    assert_eq!(
        attr(&local, WAXELL_LLM_COST),
        None,
        "unknown model: no cost, not zero"
    );
    assert_eq!(attr(&local, OI_LLM_COST_TOTAL), None);
    assert_eq!(attr_i64(&local, GEN_AI_USAGE_INPUT_TOKENS), 100);
    let tuned = span_named(&spans, "chat my-finetune");
    assert!((attr_f64(&tuned, WAXELL_LLM_COST) - 4.0).abs() < 1e-9);
}

#[tokio::test]
async fn metrics_record_duration_and_token_usage() {
    let _spans = capture_spans();
    let (provider, metrics) = capture_metrics();
    let server = FakeServer::start(vec![
        FakeReply::ok(completion("a", "gpt-4o-mini", "hi", (120, 7))),
        FakeReply::error(400, "bad request", "invalid_request_error"),
    ])
    .await;
    let client = client_for(&server).build().unwrap();
    client.chat(question()).await.unwrap();
    client.chat(question()).await.unwrap_err();
    provider.force_flush().unwrap();

    let has = |attributes: &[opentelemetry::KeyValue], key: &str, value: &str| {
        attributes
            .iter()
            .any(|kv| kv.key.as_str() == key && kv.value.as_str() == value)
    };
    // The meter provider is process-wide: other tests' calls are recorded too, against their own servers.
    let port = server.addr.port().to_string();
    let mut durations = histogram_points_f64(&metrics, METRIC_OPERATION_DURATION);
    durations.retain(|(attributes, ..)| has(attributes, SERVER_PORT, &port));
    assert_eq!(durations.len(), 2, "{durations:?}");
    let failed = durations
        .iter()
        .find(|(attributes, ..)| has(attributes, ERROR_TYPE, "invalid_request_error"));
    assert!(failed.is_some(), "{durations:?}");
    for (attributes, seconds, count) in &durations {
        assert_eq!(*count, 1);
        assert!(*seconds > 0.0 && *seconds < 5.0);
        assert!(has(attributes, GEN_AI_OPERATION_NAME, "chat"));
        assert!(has(attributes, GEN_AI_PROVIDER_NAME, "openai"));
        assert!(has(attributes, GEN_AI_REQUEST_MODEL, "gpt-4o-mini"));
        assert!(has(attributes, SERVER_ADDRESS, "127.0.0.1"));
    }

    let mut tokens = histogram_points_u64(&metrics, METRIC_TOKEN_USAGE);
    tokens.retain(|(attributes, ..)| has(attributes, SERVER_PORT, &port));
    let input = tokens
        .iter()
        .find(|(attributes, ..)| has(attributes, GEN_AI_TOKEN_TYPE, "input"))
        .unwrap();
    let output = tokens
        .iter()
        .find(|(attributes, ..)| has(attributes, GEN_AI_TOKEN_TYPE, "output"))
        .unwrap();
    assert_eq!((input.1, output.1), (120, 7));
    assert_eq!(input.2.first(), Some(&1.0));
    assert_eq!(input.2.last(), Some(&67108864.0));
    assert_eq!(input.2.len(), 14, "the spec's token buckets");
}

#[tokio::test]
async fn configured_headers_are_sent_and_user_agent_is_set() {
    let _spans = capture_spans();
    let server = FakeServer::start(vec![FakeReply::ok(completion("a", "gpt-4o-mini", "hi", (1, 1)))]).await;
    let client = client_for(&server)
        .with_header("HTTP-Referer", "https://example.test/agent")
        .build()
        .unwrap();
    client.chat(question()).await.unwrap();
    let [received] = server.received().try_into().unwrap();
    assert_eq!(
        received.header("http-referer"),
        Some("https://example.test/agent")
    );
    assert!(received.header("user-agent").unwrap().starts_with("waxell-rs/"));
}
