//! genai (the real crate, feature `otel`) against a fake OpenAI server on 127.0.0.1, its `tracing`
//! spans turned into waxell's LLM spans by `waxell::tracing_layer()`: names, nesting under
//! `#[agent]`, tokens, cost, tool-call decisions, content re-captured and scrubbed.

mod llm_support;

use futures_util::StreamExt;
use genai::adapter::AdapterKind;
use genai::chat::{ChatMessage, ChatOptions, ChatRequest, ChatStreamEvent, Tool};
use genai::resolver::{AuthData, Endpoint, ServiceTargetResolver};
use genai::{Client, ModelIden, ServiceTarget};
use llm_support::*;
use serde_json::json;
use tracing_subscriber::layer::SubscriberExt as _;
use waxell::semconv::*;
use waxell_tests::fake_llm::{chat_chunks, chat_completion, FakeLlm, LlmReply};

fn client(server: &FakeLlm) -> Client {
    let endpoint = format!("{}/", server.base_url());
    let resolver = ServiceTargetResolver::from_resolver_fn(move |target: ServiceTarget| {
        Ok(ServiceTarget {
            endpoint: Endpoint::from_owned(endpoint.clone()),
            auth: AuthData::from_single("test-key"),
            model: ModelIden::new(AdapterKind::OpenAI, target.model.model_name),
        })
    });
    Client::builder()
        .with_service_target_resolver(resolver)
        .build()
        .unwrap()
}

fn request() -> ChatRequest {
    ChatRequest::new(vec![ChatMessage::user(format!(
        "My key is {PLANTED_KEY}. Weather in Paris?"
    ))])
    .with_system("You report the weather.")
    .with_tools(vec![Tool::new("get_weather")
        .with_description("Weather of a city")
        .with_schema(
            json!({"type": "object", "properties": {"city": {"type": "string"}}}),
        )])
}

/// The subscriber an application sets up: waxell's layer (the one line).
fn subscriber() -> impl tracing::Subscriber + Send + Sync {
    tracing_subscriber::registry().with(waxell::tracing_layer())
}

#[waxell::agent(name = "weather")]
async fn ask(client: Client, stream: bool) -> usize {
    let options = ChatOptions::default()
        .with_capture_usage(true)
        .with_capture_tool_calls(true);
    if stream {
        let response = client
            .exec_chat_stream("gpt-4o-mini", request(), Some(&options))
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
            .exec_chat("gpt-4o-mini", request(), Some(&options))
            .await
            .unwrap()
            .into_tool_calls()
            .len()
    }
}

fn check_chat(spans: &[opentelemetry_sdk::trace::SpanData], input_tokens: i64) {
    let agent = one(spans, "invoke_agent weather");
    let chat = one(spans, "chat gpt-4o-mini");
    assert!(is_child(chat, agent), "the chat span nests under the #[agent]");
    assert_eq!(attr_str(chat, GEN_AI_PROVIDER_NAME), "openai");
    assert_eq!(attr_str(chat, OI_SPAN_KIND), "LLM");
    assert_eq!(attr_str(chat, OI_LLM_MODEL_NAME), "gpt-4o-mini");
    assert_eq!(attr_str(chat, SERVER_ADDRESS), "127.0.0.1");
    assert_eq!(attr_i64(chat, GEN_AI_USAGE_INPUT_TOKENS), input_tokens);
    assert_eq!(attr_i64(chat, OI_LLM_TOKEN_COUNT_PROMPT), input_tokens);
    let cost = (input_tokens as f64 * 0.15 + 20.0 * 0.60) / 1e6;
    assert!((attr_f64(chat, WAXELL_LLM_COST) - cost).abs() < 1e-12);
    // Content is re-captured from genai's fields: mirrored to OpenInference, the key scrubbed.
    assert!(attr_str(chat, OI_INPUT_VALUE).contains("Weather in Paris?"));
    assert!(attr_str(chat, GEN_AI_TOOL_DEFINITIONS).contains("get_weather"));
    let decision = one(spans, "decide tool_call:get_weather");
    assert!(is_child(decision, chat));
    assert_eq!(
        named(spans, "invoke_agent weather").len(),
        1,
        "no duplicate agent span"
    );
    assert_secret_absent(spans, PLANTED_KEY);
}

#[tokio::test]
async fn a_genai_chat_inside_an_agent_becomes_a_waxell_llm_span() {
    // genai records content only when asked to (its own switch); waxell's policy then applies.
    std::env::set_var("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true");
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
    assert_eq!(ask(client(&server), false).await, 1);
    check_chat(&spans(&exporter), 1000);
}

#[tokio::test]
async fn a_streamed_genai_chat_is_recorded_with_its_first_chunk_and_tool_call() {
    std::env::set_var("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true");
    let exporter = capture_spans();
    // genai measures the first chunk on text, so the answer starts with some.
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
    assert_eq!(ask(client(&server), true).await, 1);
    let spans = spans(&exporter);
    check_chat(&spans, 500);
    let chat = one(&spans, "chat gpt-4o-mini");
    assert_eq!(attr(chat, GEN_AI_REQUEST_STREAM), Some(true.into()));
    assert!(attr_f64(chat, GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK) > 0.0);
}
