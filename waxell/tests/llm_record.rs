//! The public recording API (`waxell::llm::record`) produces the span our own client produces: a call
//! recorded by hand and the same call made with `waxell::llm::Client` have the same attributes.

mod llm_support;

use std::collections::BTreeSet;

use llm_support::*;
use opentelemetry::trace::{FutureExt as _, Status};
use opentelemetry_sdk::trace::SpanData;
use serde_json::json;
use waxell::llm::record::{LlmCall, Provider};
use waxell::llm::{ChatChunk, ChatRequest, ChatResponse, Message, Tool, Usage};
use waxell::semconv::*;
use waxell::testing::span_data::*;

const PLANTED_KEY: &str = "sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789";

fn request() -> ChatRequest {
    ChatRequest::new([
        Message::system("Be brief."),
        Message::user(format!("My key is {PLANTED_KEY}; weather in Paris?")),
    ])
    .model("gpt-4o-mini")
    .tools([Tool::function(
        "get_weather",
        "Weather",
        json!({"type": "object"}),
    )])
    .temperature(0.0)
}

fn reply() -> serde_json::Value {
    json!({
        "id": "chatcmpl-1", "model": "gpt-4o-mini",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": null,
            "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]}}],
        "usage": {"prompt_tokens": 1000, "completion_tokens": 100, "total_tokens": 1100,
            "prompt_tokens_details": {"cached_tokens": 400}, "completion_tokens_details": {"reasoning_tokens": 30}},
    })
}

fn keys(span: &SpanData) -> BTreeSet<String> {
    span.attributes.iter().map(|kv| kv.key.to_string()).collect()
}

#[tokio::test]
async fn a_recorded_call_has_the_span_of_our_own_client() {
    let spans = capture_spans();
    let server = FakeServer::start(vec![FakeReply::ok(reply())]).await;
    let client = client_for(&server).build().unwrap();
    client.chat(request()).await.unwrap();

    // The same call, recorded by hand (as an integration with another client does).
    let provider = Provider::new("openai").with_server_url(&server.base_url());
    let mut call = LlmCall::start(&provider, &request());
    let response: ChatResponse = serde_json::from_value(reply()).unwrap();
    async {}.with_context(call.context().clone()).await;
    call.finish(&response);

    let spans = finished_spans(&spans);
    let chats: Vec<_> = spans.iter().filter(|s| s.name == "chat gpt-4o-mini").collect();
    let [ours, recorded] = chats[..] else {
        panic!("expected two chat spans: {spans:?}")
    };
    assert_eq!(keys(ours), keys(recorded));
    for key in [
        SERVER_ADDRESS,
        SERVER_PORT,
        GEN_AI_USAGE_INPUT_TOKENS,
        GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
        GEN_AI_USAGE_REASONING_OUTPUT_TOKENS,
        WAXELL_LLM_COST,
        GEN_AI_INPUT_MESSAGES,
        GEN_AI_OUTPUT_MESSAGES,
    ] {
        assert_eq!(attr(ours, key), attr(recorded, key), "{key}");
    }
    assert_eq!(attr_str(recorded, SERVER_ADDRESS), "127.0.0.1");
    // 600 uncached at 0.15, 400 cached at 0.075, 100 out at 0.60 per million.
    let expected = (600.0 * 0.15 + 400.0 * 0.075 + 100.0 * 0.60) / 1e6;
    assert!((attr_f64(recorded, WAXELL_LLM_COST) - expected).abs() < 1e-12);
    // Both made a tool-call decision under their chat span.
    let decisions: Vec<_> = spans
        .iter()
        .filter(|s| s.name == "decide tool_call:get_weather")
        .collect();
    assert_eq!(decisions.len(), 2);
    assert_eq!(decisions[1].parent_span_id, recorded.span_context.span_id());
    assert_secret_absent(&spans, PLANTED_KEY);
}

#[tokio::test]
async fn a_recorded_stream_measures_the_first_chunk_and_assembles_the_answer() {
    let spans = capture_spans();
    let provider = Provider::new("deepseek").with_server("api.deepseek.com", 443);
    let mut request = request().model("deepseek-chat");
    request.stream = true;
    let mut call = LlmCall::start(&provider, &request);
    for payload in [
        json!({"id": "c", "model": "deepseek-chat", "choices": [{"index": 0, "delta": {"content": "Sunny"}}]}),
        json!({"id": "c", "choices": [{"index": 0, "delta": {"content": " today."}, "finish_reason": "stop"}]}),
        json!({"id": "c", "choices": [], "usage": {"prompt_tokens": 1_000_000, "completion_tokens": 1_000_000}}),
    ] {
        let chunk: ChatChunk = serde_json::from_value(payload).unwrap();
        call.chunk(&chunk);
    }
    let response = call.finish_stream();
    assert_eq!(response.text(), Some("Sunny today."));

    let span = span_named(&finished_spans(&spans), "chat deepseek-chat");
    assert_eq!(attr_str(&span, GEN_AI_PROVIDER_NAME), "deepseek");
    assert_eq!(attr_i64(&span, SERVER_PORT), 443);
    assert_eq!(attr_i64(&span, WAXELL_LLM_CHUNK_COUNT), 3);
    assert!(attr_f64(&span, GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK) >= 0.0);
    assert!((attr_f64(&span, WAXELL_LLM_COST) - (0.28 + 0.42)).abs() < 1e-9);
    assert_eq!(attr_str(&span, OI_OUTPUT_VALUE), "Sunny today.");
}

#[tokio::test]
async fn a_failed_call_records_its_error_type_and_an_unknown_model_no_cost() {
    let spans = capture_spans();
    let provider = Provider::new("anthropic").with_server("api.anthropic.com", 443);
    let mut failed = LlmCall::start(&provider, &request().model("claude-sonnet-4-5"));
    failed.fail("overloaded_error", &format!("overloaded; you sent {PLANTED_KEY}"));

    let mut unknown = LlmCall::start(&provider, &request().model("claude-next"));
    unknown.set_usage(Usage::new(10, 10));
    let response: ChatResponse = serde_json::from_value(json!({"model": "claude-next",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}]}))
    .unwrap();
    unknown.finish(&response);

    let spans = finished_spans(&spans);
    let failed = span_named(&spans, "chat claude-sonnet-4-5");
    assert_eq!(attr_str(&failed, ERROR_TYPE), "overloaded_error");
    assert!(matches!(failed.status, Status::Error { .. }));
    let unknown = span_named(&spans, "chat claude-next");
    assert_eq!(attr_i64(&unknown, GEN_AI_USAGE_INPUT_TOKENS), 10);
    assert_eq!(attr(&unknown, WAXELL_LLM_COST), None);
    assert_secret_absent(&spans, PLANTED_KEY);
}

#[tokio::test]
async fn embeddings_are_recorded_with_their_own_operation() {
    let spans = capture_spans();
    let provider = Provider::new("openai").with_server("api.openai.com", 443);
    let mut call = LlmCall::start_embeddings(&provider, "text-embedding-3-small", &["hello".to_owned()]);
    call.finish_embeddings(
        "text-embedding-3-small",
        Some(Usage::new(1_000_000, 0)),
        Some(1536),
    );
    let span = span_named(&finished_spans(&spans), "embeddings text-embedding-3-small");
    assert_eq!(attr_str(&span, GEN_AI_OPERATION_NAME), "embeddings");
    assert_eq!(attr_str(&span, OI_SPAN_KIND), "EMBEDDING");
    assert_eq!(attr_i64(&span, "gen_ai.embeddings.dimension.count"), 1536);
    assert!((attr_f64(&span, WAXELL_LLM_COST) - 0.02).abs() < 1e-9);
}
