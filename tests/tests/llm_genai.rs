//! genai (the real crate, feature `otel`) against a fake OpenAI server on 127.0.0.1, its `tracing`
//! spans turned into waxell's LLM spans by `waxell::tracing_layer()`: names, nesting under
//! `#[agent]`, tokens, cost, tool-call decisions, content re-captured and scrubbed.
//! (Anthropic and Gemini through genai: llm_genai_providers.rs.)

mod llm_support;

use futures_util::StreamExt;
use genai::adapter::AdapterKind;
use genai::chat::{ChatOptions, ChatStreamEvent};
use genai::Client;
use llm_support::*;
use waxell::semconv::*;
use waxell::testing::span_data::*;
use waxell_tests::fake_llm::FakeLlm;

fn client(server: &FakeLlm) -> Client {
    genai_client(AdapterKind::OpenAI, format!("{}/", server.base_url()))
}

#[waxell::agent(name = "weather")]
async fn ask(client: Client, stream: bool) -> usize {
    let options = ChatOptions::default()
        .with_capture_usage(true)
        .with_capture_tool_calls(true);
    if stream {
        let response = client
            .exec_chat_stream("gpt-4o-mini", genai_request(), Some(&options))
            .await
            .unwrap();
        let mut stream = response.stream;
        let mut events = 0;
        while let Some(event) = stream.next().await {
            if let ChatStreamEvent::End(_) = event.unwrap() {
                events += 1;
            }
        }
        events
    } else {
        client
            .exec_chat("gpt-4o-mini", genai_request(), Some(&options))
            .await
            .unwrap()
            .into_tool_calls()
            .len()
    }
}

fn check_chat(spans: &[opentelemetry_sdk::trace::SpanData], input_tokens: i64) {
    let cost = gpt_4o_mini_cost(input_tokens, 20);
    let chat = check_llm_chat(spans, "openai", "gpt-4o-mini", (input_tokens, 20), cost);
    assert_eq!(attr_str(chat, SERVER_ADDRESS), "127.0.0.1");
    // Content is re-captured from genai's fields: mirrored to OpenInference, the key scrubbed.
    assert!(attr_str(chat, OI_INPUT_VALUE).contains("Weather in Paris?"));
    assert!(attr_str(chat, GEN_AI_TOOL_DEFINITIONS).contains("get_weather"));
    let decision = one(spans, "decide tool_call:get_weather");
    assert!(is_child(decision, chat));
}

#[tokio::test]
async fn a_genai_chat_inside_an_agent_becomes_a_waxell_llm_span() {
    genai_capture_content();
    let exporter = capture_spans();
    let server = FakeLlm::start(vec![openai_tool_call(1000)]);
    let _guard = tracing::subscriber::set_default(subscriber());
    assert_eq!(ask(client(&server), false).await, 1);
    check_chat(&spans(&exporter), 1000);
}

#[tokio::test]
async fn a_streamed_genai_chat_is_recorded_with_its_first_chunk_and_tool_call() {
    genai_capture_content();
    let exporter = capture_spans();
    let server = FakeLlm::start(vec![openai_tool_call_stream(500)]);
    let _guard = tracing::subscriber::set_default(subscriber());
    assert_eq!(ask(client(&server), true).await, 1);
    let spans = spans(&exporter);
    check_chat(&spans, 500);
    let chat = one(&spans, "chat gpt-4o-mini");
    assert_eq!(attr(chat, GEN_AI_REQUEST_STREAM), Some(true.into()));
    assert!(attr_f64(chat, GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK) > 0.0);
}

/// genai's chat span is recorded on the recording thread when genai closes it, under the ids it got when
/// genai opened it: it still starts when the call began, lasts the round trip and nests under the agent,
/// and the tool-call decision nests under it.
#[tokio::test]
async fn a_genai_chat_span_keeps_the_calls_own_start_and_duration() {
    use std::time::{Duration, SystemTime};
    genai_capture_content();
    let exporter = capture_spans();
    // The model answers after 500 ms: a span opened at the answer starts at least that long after
    // the call, one opened at the call well before it, even on a loaded machine.
    let server = FakeLlm::repeating(openai_tool_call(1000), Duration::from_millis(500));
    let _guard = tracing::subscriber::set_default(subscriber());
    let before = SystemTime::now();
    assert_eq!(ask(client(&server), false).await, 1);
    let spans = spans(&exporter);
    check_chat(&spans, 1000);
    let chat = one(&spans, "chat gpt-4o-mini");
    let began = chat.start_time.duration_since(before).unwrap();
    assert!(
        began < Duration::from_millis(400),
        "started {began:?} after the call"
    );
    let lasted = chat.end_time.duration_since(chat.start_time).unwrap();
    assert!(
        lasted >= Duration::from_millis(500) && lasted < Duration::from_secs(3),
        "{lasted:?}"
    );
}
