//! genai (the real crate, feature `otel`) against fakes of Anthropic Messages and Gemini
//! `generateContent` on 127.0.0.1, streamed and not, each answer a tool call run by `#[tool]`: the
//! provider names are the GenAI conventions' (`anthropic`, `gcp.gemini`), tokens include what each wire
//! reports as cached, the cost is the price table's, and the chat and the tool nest under one `#[agent]`.

mod llm_support;

use futures_util::StreamExt;
use genai::adapter::AdapterKind;
use genai::chat::{ChatOptions, ChatStreamEvent};
use genai::Client;
use llm_support::*;
use opentelemetry_sdk::trace::SpanData;
use serde_json::json;
use waxell::semconv::*;
use waxell::testing::span_data::*;
use waxell_tests::fake_llm::{
    anthropic_events, anthropic_message, gemini_chunks, gemini_response, FakeLlm, LlmReply, WireUsage,
};

const CLAUDE: &str = "claude-sonnet-4-5";
const GEMINI: &str = "gemini-2.5-flash";

fn anthropic_client(server: &FakeLlm) -> Client {
    genai_client(AdapterKind::Anthropic, format!("{}/", server.base_url()))
}

fn gemini_client(server: &FakeLlm) -> Client {
    genai_client(AdapterKind::Gemini, server.gemini_base_url())
}

/// One model turn through genai, then the tool it asked for through `#[tool]`.
#[waxell::agent(name = "weather")]
async fn ask(client: Client, model: &'static str, stream: bool) -> String {
    let options = ChatOptions::default()
        .with_capture_usage(true)
        .with_capture_tool_calls(true);
    let calls = if stream {
        let mut stream = client
            .exec_chat_stream(model, genai_request(), Some(&options))
            .await
            .unwrap()
            .stream;
        let mut calls = Vec::new();
        while let Some(event) = stream.next().await {
            if let ChatStreamEvent::End(end) = event.unwrap() {
                calls = end.captured_into_tool_calls().unwrap_or_default();
            }
        }
        calls
    } else {
        client
            .exec_chat(model, genai_request(), Some(&options))
            .await
            .unwrap()
            .into_tool_calls()
    };
    let [call] = &calls[..] else {
        panic!("one tool call expected, got {calls:?}")
    };
    assert_eq!(call.fn_name, "get_weather");
    get_weather(call.fn_arguments["city"].as_str().unwrap().to_owned())
}

/// What every test checks of the trace; returns the chat span.
fn check<'a>(
    spans: &'a [SpanData],
    provider: &str,
    model: &str,
    input: i64,
    cached: i64,
    cost: f64,
) -> &'a SpanData {
    let chat = check_llm_chat(spans, provider, model, (input, 20), cost);
    let tool = one(spans, "execute_tool get_weather");
    assert!(
        is_child(tool, one(spans, "invoke_agent weather")),
        "the #[tool] nests under the #[agent]"
    );
    assert_eq!(attr_str(chat, SERVER_ADDRESS), "127.0.0.1");
    assert_eq!(attr_i64(chat, GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS), cached);
    assert!(attr_str(chat, OI_INPUT_VALUE).contains("Weather in Paris?"));
    assert!(attr_str(chat, GEN_AI_TOOL_DEFINITIONS).contains("get_weather"));
    let decision = one(spans, "decide tool_call:get_weather");
    assert!(
        is_child(decision, chat),
        "the tool-call decision nests under the chat"
    );
    chat
}

/// Anthropic's `input_tokens` excludes cache reads and writes; genai adds them back, so the input is
/// 900 + 300 read + 100 written: 300 billed at the cache-read price, 100 at the cache-write price.
const ANTHROPIC_USAGE: WireUsage = WireUsage {
    input: 900,
    output: 20,
    cache_read: 300,
    cache_creation: 100,
};
/// claude-sonnet-4-5: $3 input, $0.30 cache read, $3.75 cache write (1.25 times input), $15 output per
/// million.
const ANTHROPIC_COST: f64 = (900.0 * 3.0 + 300.0 * 0.30 + 100.0 * 3.75 + 20.0 * 15.0) / 1e6;

/// Gemini's `promptTokenCount` includes the 400 cached ones.
const GEMINI_USAGE: WireUsage = WireUsage {
    input: 1000,
    output: 20,
    cache_read: 400,
    cache_creation: 0,
};
/// gemini-2.5-flash: $0.30 input, $0.03 cached, $2.50 output per million.
const GEMINI_COST: f64 = (600.0 * 0.30 + 400.0 * 0.03 + 20.0 * 2.50) / 1e6;

#[tokio::test]
async fn a_genai_anthropic_message_with_a_tool_call_is_an_llm_span() {
    genai_capture_content();
    let exporter = capture_spans();
    let server = FakeLlm::start(vec![LlmReply::Json(
        200,
        anthropic_message(
            CLAUDE,
            Some("Let me check."),
            &[("toolu_01", "get_weather", json!({"city": "Paris"}))],
            ANTHROPIC_USAGE,
        ),
    )]);
    let _guard = tracing::subscriber::set_default(subscriber());
    assert_eq!(
        ask(anthropic_client(&server), CLAUDE, false).await,
        "Sunny in Paris"
    );
    let spans = spans(&exporter);
    let chat = check(&spans, "anthropic", CLAUDE, 1300, 300, ANTHROPIC_COST);
    assert_eq!(attr(chat, GEN_AI_REQUEST_STREAM), Some(false.into()));
    assert_eq!(attr_i64(chat, "gen_ai.usage.cache_creation.input_tokens"), 100);
    assert_eq!(attr_i64(chat, "llm.token_count.prompt_details.cache_write"), 100);
    let [sent] = &server.received()[..] else { panic!() };
    assert_eq!(sent.path, "/v1/messages");
    assert_eq!(sent.body["model"], CLAUDE);
}

#[tokio::test]
async fn a_streamed_genai_anthropic_message_is_recorded_with_usage_from_both_events() {
    genai_capture_content();
    let exporter = capture_spans();
    let server = FakeLlm::start(vec![LlmReply::Events {
        events: anthropic_events(
            CLAUDE,
            Some("Let me check."),
            Some(("toolu_01", "get_weather", json!({"city": "Paris"}))),
            ANTHROPIC_USAGE,
        ),
        gap: std::time::Duration::from_millis(2),
    }]);
    let _guard = tracing::subscriber::set_default(subscriber());
    assert_eq!(
        ask(anthropic_client(&server), CLAUDE, true).await,
        "Sunny in Paris"
    );
    let spans = spans(&exporter);
    let chat = check(&spans, "anthropic", CLAUDE, 1300, 300, ANTHROPIC_COST);
    assert_eq!(attr(chat, GEN_AI_REQUEST_STREAM), Some(true.into()));
    assert!(attr_f64(chat, GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK) > 0.0);
    assert_eq!(server.received()[0].body["stream"], true);
}

#[tokio::test]
async fn a_genai_gemini_generate_content_with_a_function_call_is_an_llm_span() {
    genai_capture_content();
    let exporter = capture_spans();
    let server = FakeLlm::start(vec![LlmReply::Json(
        200,
        gemini_response(
            GEMINI,
            None,
            &[("get_weather", json!({"city": "Paris"}))],
            GEMINI_USAGE,
        ),
    )]);
    let _guard = tracing::subscriber::set_default(subscriber());
    assert_eq!(ask(gemini_client(&server), GEMINI, false).await, "Sunny in Paris");
    let spans = spans(&exporter);
    let chat = check(&spans, "gcp.gemini", GEMINI, 1000, 400, GEMINI_COST);
    assert_eq!(attr(chat, GEN_AI_REQUEST_STREAM), Some(false.into()));
    let [sent] = &server.received()[..] else { panic!() };
    assert_eq!(sent.path, format!("/v1beta/models/{GEMINI}:generateContent"));
}

#[tokio::test]
async fn a_streamed_genai_gemini_answer_is_recorded_with_its_last_usage() {
    genai_capture_content();
    let exporter = capture_spans();
    let server = FakeLlm::start(vec![LlmReply::Sse {
        events: gemini_chunks(
            GEMINI,
            Some("Let me check."),
            Some(("get_weather", json!({"city": "Paris"}))),
            GEMINI_USAGE,
        ),
        done: false,
        gap: std::time::Duration::from_millis(2),
    }]);
    let _guard = tracing::subscriber::set_default(subscriber());
    assert_eq!(ask(gemini_client(&server), GEMINI, true).await, "Sunny in Paris");
    let spans = spans(&exporter);
    let chat = check(&spans, "gcp.gemini", GEMINI, 1000, 400, GEMINI_COST);
    assert_eq!(attr(chat, GEN_AI_REQUEST_STREAM), Some(true.into()));
    assert!(attr_f64(chat, GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK) > 0.0);
    let [sent] = &server.received()[..] else { panic!() };
    assert_eq!(
        sent.path,
        format!("/v1beta/models/{GEMINI}:streamGenerateContent")
    );
}

#[tokio::test]
async fn the_fake_providers_refuse_requests_without_their_auth_headers() {
    let server = FakeLlm::start(Vec::new());
    let http = reqwest::Client::new();
    let anthropic = http
        .post(format!("{}/messages", server.base_url()))
        .json(&json!({"model": CLAUDE, "max_tokens": 10, "messages": []}))
        .send()
        .await
        .unwrap();
    assert_eq!(anthropic.status(), 401);
    let gemini = http
        .post(format!(
            "{}models/{GEMINI}:generateContent",
            server.gemini_base_url()
        ))
        .json(&json!({"contents": []}))
        .send()
        .await
        .unwrap();
    assert_eq!(gemini.status(), 403);
    assert!(server.received().is_empty(), "refused before the script");
}
