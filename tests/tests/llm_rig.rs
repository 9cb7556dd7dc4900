//! rig-core (the real crate, its OpenAI provider on the bundled reqwest transport) against a fake
//! OpenAI server on 127.0.0.1, its `tracing` spans turned into waxell's LLM spans by
//! `waxell::tracing_layer()`: names, nesting under `#[agent]` and next to `#[tool]`, tokens, cost,
//! tool-call decisions, content re-captured and scrubbed, one agent span.
//!
//! rig-core 0.44 opens no agent span of its own (its agent runtime moved to the `rig-agent` crate):
//! the only span it emits per call is `chat` (target `rig::completions`), so the surrounding
//! `#[agent]` is the one agent span of the trace.

mod llm_support;

use futures_util::StreamExt;
use llm_support::*;
use rig_core::completion::{CompletionRequest, ToolDefinition};
use rig_core::message::ToolName;
use rig_core::providers::openai::OpenAIConfig;
use serde_json::json;
use tracing_subscriber::layer::SubscriberExt as _;
use waxell::semconv::*;
use waxell_tests::fake_llm::{chat_chunks, chat_completion, FakeLlm, LlmReply};

fn model(server: &FakeLlm) -> rig_core::Model<rig_core::providers::openai::wire::Chat> {
    OpenAIConfig::new("test-key")
        .with_base_url(server.base_url())
        .client()
        .chat("gpt-4o-mini")
}

fn request() -> CompletionRequest {
    CompletionRequest::new("Weather in Paris?")
        .preamble(format!("You report the weather. The key is {PLANTED_KEY}."))
        .tool(ToolDefinition::new(
            ToolName::new("get_weather").unwrap(),
            "Weather of a city",
            json!({"type": "object", "properties": {"city": {"type": "string"}}}),
        ))
        // rig records content only when asked to (its own switch); waxell's policy then applies.
        .record_content_telemetry(true)
}

/// The subscriber an application sets up: waxell's layer (the one line).
fn subscriber() -> impl tracing::Subscriber + Send + Sync {
    tracing_subscriber::registry().with(waxell::tracing_layer())
}

#[waxell::tool]
fn get_weather(city: String) -> String {
    format!("Sunny in {city}")
}

/// One model turn through rig, then the tool it asked for through `#[tool]`.
#[waxell::agent(name = "weather")]
async fn ask(server_model: rig_core::Model<rig_core::providers::openai::wire::Chat>, stream: bool) -> String {
    let response = if stream {
        // The caller reads the first event as it arrives, then folds the rest with `finish()`
        // (rig records usage on its span when the reply is concluded).
        let mut stream = server_model.stream(request()).unwrap();
        stream.next().await.expect("a first event").unwrap();
        stream.finish().await.unwrap()
    } else {
        server_model.call(request()).await.unwrap()
    };
    let city = {
        let call = response.tool_calls().next().expect("a tool call").clone();
        assert_eq!(&*call.function.name, "get_weather");
        call.function.arguments_value()["city"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    get_weather(city)
}

fn check(spans: &[opentelemetry_sdk::trace::SpanData], input_tokens: i64) {
    let agent = one(spans, "invoke_agent weather");
    let chat = one(spans, "chat gpt-4o-mini");
    let tool = one(spans, "execute_tool get_weather");
    assert!(is_child(chat, agent), "the chat span nests under the #[agent]");
    assert!(is_child(tool, agent), "the #[tool] nests under the #[agent]");
    assert_eq!(attr_str(chat, GEN_AI_PROVIDER_NAME), "openai");
    assert_eq!(attr_str(chat, OI_SPAN_KIND), "LLM");
    assert_eq!(attr_str(chat, OI_LLM_MODEL_NAME), "gpt-4o-mini");
    assert_eq!(attr_i64(chat, GEN_AI_USAGE_INPUT_TOKENS), input_tokens);
    assert_eq!(attr_i64(chat, GEN_AI_USAGE_OUTPUT_TOKENS), 20);
    assert_eq!(attr_i64(chat, OI_LLM_TOKEN_COUNT_PROMPT), input_tokens);
    let cost = (input_tokens as f64 * 0.15 + 20.0 * 0.60) / 1e6;
    assert!((attr_f64(chat, WAXELL_LLM_COST) - cost).abs() < 1e-12);
    // rig-core records the system instructions (with `record_content_telemetry`), not the messages:
    // they are re-captured under waxell's policy, mirrored to OpenInference, the planted key scrubbed.
    assert!(attr_str(chat, OI_INPUT_VALUE).contains("You report the weather."));
    assert!(attr_str(chat, GEN_AI_INPUT_MESSAGES).contains("You report the weather."));
    // Nor does it record the answer, so no `tool_call:` decision can be derived from its span.
    assert!(named(spans, "decide tool_call:get_weather").is_empty());
    // rig's own non-spec fields never pass through.
    for span in spans {
        for kv in &span.attributes {
            assert!(!kv.key.as_str().starts_with("rig."), "{}: {}", span.name, kv.key);
        }
    }
    assert_eq!(
        spans
            .iter()
            .filter(|s| s.name.starts_with("invoke_agent"))
            .count(),
        1,
        "no duplicate agent span"
    );
    assert_secret_absent(spans, PLANTED_KEY);
    assert_semconv(spans);
}

#[tokio::test]
async fn a_rig_chat_inside_an_agent_becomes_a_waxell_llm_span() {
    let exporter = capture_spans();
    let server = FakeLlm::start(vec![LlmReply::Json(
        200,
        chat_completion(
            "gpt-4o-mini",
            None,
            &[("call_1", "get_weather", json!({"city": "Paris"}))],
            (1000, 20),
        ),
    )]);
    let _guard = tracing::subscriber::set_default(subscriber());
    assert_eq!(ask(model(&server), false).await, "Sunny in Paris");
    let received = server.received();
    assert_eq!(received[0].path, "/v1/chat/completions");
    assert_eq!(received[0].body["tools"][0]["function"]["name"], "get_weather");
    let spans = spans(&exporter);
    check(&spans, 1000);
    let chat = one(&spans, "chat gpt-4o-mini");
    assert_ne!(attr(chat, GEN_AI_REQUEST_STREAM), Some(true.into()));
}

#[tokio::test]
async fn a_streamed_rig_chat_is_recorded_with_its_tool_call() {
    let exporter = capture_spans();
    let chunks = chat_chunks(
        "gpt-4o-mini",
        Some("Let me check."),
        Some(("call_1", "get_weather", json!({"city": "Paris"}))),
        (500, 20),
    );
    let server = FakeLlm::start(vec![LlmReply::Sse {
        events: chunks,
        done: true,
        gap: std::time::Duration::from_millis(2),
    }]);
    let _guard = tracing::subscriber::set_default(subscriber());
    assert_eq!(ask(model(&server), true).await, "Sunny in Paris");
    assert_eq!(server.received()[0].body["stream"], true);
    let spans = spans(&exporter);
    check(&spans, 500);
    let chat = one(&spans, "chat gpt-4o-mini");
    assert_eq!(attr(chat, GEN_AI_REQUEST_STREAM), Some(true.into()));
}
