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
use waxell::semconv::*;
use waxell::testing::span_data::*;
use waxell_tests::fake_llm::FakeLlm;

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
            city_schema(),
        ))
        // rig records content only when asked to (its own switch); waxell's policy then applies.
        .record_content_telemetry(true)
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
    let cost = gpt_4o_mini_cost(input_tokens, 20);
    let chat = check_llm_chat(spans, "openai", "gpt-4o-mini", (input_tokens, 20), cost);
    let tool = one(spans, "execute_tool get_weather");
    assert!(
        is_child(tool, one(spans, "invoke_agent weather")),
        "the #[tool] nests under the #[agent]"
    );
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
}

#[tokio::test]
async fn a_rig_chat_inside_an_agent_becomes_a_waxell_llm_span() {
    let exporter = capture_spans();
    let server = FakeLlm::start(vec![openai_tool_call(1000)]);
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
    let server = FakeLlm::start(vec![openai_tool_call_stream(500)]);
    let _guard = tracing::subscriber::set_default(subscriber());
    assert_eq!(ask(model(&server), true).await, "Sunny in Paris");
    assert_eq!(server.received()[0].body["stream"], true);
    let spans = spans(&exporter);
    check(&spans, 500);
    let chat = one(&spans, "chat gpt-4o-mini");
    assert_eq!(attr(chat, GEN_AI_REQUEST_STREAM), Some(true.into()));
}

/// rig-core's Anthropic provider against the fake Messages API: the provider, the tokens rig reports
/// (cache reads and writes included) and the cost with both cache prices.
#[tokio::test]
async fn a_rig_anthropic_message_is_recorded_with_its_cache_tokens_and_cost() {
    use waxell_tests::fake_llm::{anthropic_message, LlmReply, WireUsage};
    let exporter = capture_spans();
    let usage = WireUsage {
        input: 900,
        output: 20,
        cache_read: 300,
        cache_creation: 100,
    };
    let server = FakeLlm::start(vec![LlmReply::Json(
        200,
        anthropic_message(
            "claude-sonnet-4-5",
            None,
            &[("toolu_01", "get_weather", serde_json::json!({"city": "Paris"}))],
            usage,
        ),
    )]);
    let _guard = tracing::subscriber::set_default(subscriber());
    let model = rig_core::providers::anthropic::AnthropicConfig::new("test-key")
        .with_base_url(server.base_url().trim_end_matches("/v1"))
        .client()
        .completion("claude-sonnet-4-5");
    let response = model.call(request()).await.unwrap();
    assert_eq!(
        &*response.tool_calls().next().expect("a tool call").function.name,
        "get_weather"
    );
    assert_eq!(server.received()[0].path, "/v1/messages");

    let spans = spans(&exporter);
    let chat = one(&spans, "chat claude-sonnet-4-5");
    assert_eq!(attr_str(chat, GEN_AI_PROVIDER_NAME), "anthropic");
    assert_eq!(attr_str(chat, OI_LLM_PROVIDER), "anthropic");
    let input = attr(chat, GEN_AI_USAGE_INPUT_TOKENS).expect("input tokens");
    let (cache_read, cache_write) = (
        attr(chat, GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS),
        attr(chat, GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS),
    );
    assert_eq!(cache_read, Some(300.into()));
    assert_eq!(cache_write, Some(100.into()));
    assert_eq!(
        attr(chat, OI_LLM_TOKEN_COUNT_PROMPT_CACHE_WRITE),
        Some(100.into())
    );
    // Whatever rig counts as input, the uncached part is billed at $3, reads at $0.30 and writes at
    // $3.75 per million: rig sums Anthropic's three input counts, as the GenAI conventions ask.
    assert_eq!(input, 1300.into());
    let cost = (900.0 * 3.0 + 300.0 * 0.30 + 100.0 * 3.75 + 20.0 * 15.0) / 1e6;
    let recorded = match attr(chat, WAXELL_LLM_COST) {
        Some(opentelemetry::Value::F64(cost)) => cost,
        other => panic!("no cost: {other:?}"),
    };
    assert!((recorded - cost).abs() < 1e-12, "{recorded} != {cost}");
    assert!(!attr_str(chat, GEN_AI_INPUT_MESSAGES).contains(PLANTED_KEY));
}

/// rig-core's Gemini provider against the fake Gemini API, plainly (`generateContent`) and streamed
/// (`streamGenerateContent?alt=sse`): the operation and provider in the conventions' spelling, the tokens
/// rig reports (cached ones included) and the cost at the cached price. rig sends the API key in the
/// URL's query; it reaches no span.
async fn rig_gemini_call(stream: bool) {
    use waxell_tests::fake_llm::{gemini_chunks, gemini_response, LlmReply, WireUsage};
    const GEMINI_KEY: &str = "AIzaSyPlantedGeminiKey0123456789abcdefg";
    const MODEL: &str = "gemini-2.5-flash";
    let exporter = capture_spans();
    let usage = WireUsage {
        input: 1000,
        output: 20,
        cache_read: 400,
        cache_creation: 0,
    };
    let call = ("get_weather", serde_json::json!({"city": "Paris"}));
    let reply = if stream {
        LlmReply::Sse {
            events: gemini_chunks(MODEL, Some("Let me check."), Some(call), usage),
            done: false,
            gap: std::time::Duration::from_millis(2),
        }
    } else {
        LlmReply::Json(200, gemini_response(MODEL, None, &[call], usage))
    };
    let server = FakeLlm::start(vec![reply]);
    let _guard = tracing::subscriber::set_default(subscriber());
    let model = rig_core::providers::gemini::GeminiConfig::new(GEMINI_KEY)
        .with_base_url(server.base_url().trim_end_matches("/v1"))
        .client()
        .completion(MODEL);
    let response = if stream {
        let mut events = model.stream(request()).unwrap();
        events.next().await.expect("a first event").unwrap();
        events.finish().await.unwrap()
    } else {
        model.call(request()).await.unwrap()
    };
    assert_eq!(
        &*response.tool_calls().next().expect("a tool call").function.name,
        "get_weather"
    );
    let verb = if stream {
        "streamGenerateContent"
    } else {
        "generateContent"
    };
    assert_eq!(
        server.received()[0].path,
        format!("/v1beta/models/{MODEL}:{verb}")
    );

    let spans = spans(&exporter);
    // rig names Gemini's operation as the conventions do for it: `generate_content`, not `chat`.
    let chat = one(&spans, &format!("generate_content {MODEL}"));
    assert_eq!(attr_str(chat, GEN_AI_OPERATION_NAME), "generate_content");
    assert_eq!(attr_str(chat, OI_SPAN_KIND), "LLM");
    assert_eq!(attr_str(chat, GEN_AI_PROVIDER_NAME), "gcp.gemini");
    assert_eq!(attr_str(chat, OI_LLM_PROVIDER), "google");
    assert_eq!(attr_i64(chat, GEN_AI_USAGE_INPUT_TOKENS), 1000);
    assert_eq!(attr_i64(chat, GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS), 400);
    assert_eq!(attr_i64(chat, GEN_AI_USAGE_OUTPUT_TOKENS), 20);
    // gemini-2.5-flash: $0.30 input, $0.03 cached, $2.50 output per million.
    let cost = (600.0 * 0.30 + 400.0 * 0.03 + 20.0 * 2.50) / 1e6;
    let recorded = attr_f64(chat, WAXELL_LLM_COST);
    assert!((recorded - cost).abs() < 1e-12, "{recorded} != {cost}");
    assert_secret_absent(&spans, GEMINI_KEY);
    assert_secret_absent(&spans, PLANTED_KEY);
}

#[tokio::test]
async fn a_rig_gemini_generate_content_is_recorded_with_its_tokens_and_cost() {
    rig_gemini_call(false).await;
}

#[tokio::test]
async fn a_streamed_rig_gemini_answer_is_recorded_with_its_tokens_and_cost() {
    rig_gemini_call(true).await;
}
