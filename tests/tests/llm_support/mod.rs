//! Span capture for the LLM-crate integration tests: each test captures its own spans with
//! `waxell::testing`, so the tests share one process.
#![allow(dead_code, unreachable_pub)]

use opentelemetry_sdk::trace::SpanData;
use waxell::testing::span_data::{attr_f64, attr_i64, attr_str};

/// A secret that must never reach a span.
pub const PLANTED_KEY: &str = "sk-proj-PlantedOpenAiKey0123456789abcdef";

pub fn capture_spans() -> waxell::testing::Capture {
    waxell::testing::capture()
}

pub fn spans(capture: &waxell::testing::Capture) -> Vec<SpanData> {
    capture.spans().iter().map(|span| span.data().clone()).collect()
}

pub fn named<'a>(spans: &'a [SpanData], name: &str) -> Vec<&'a SpanData> {
    spans.iter().filter(|span| span.name == name).collect()
}

pub fn one<'a>(spans: &'a [SpanData], name: &str) -> &'a SpanData {
    match named(spans, name)[..] {
        [span] => span,
        ref found => panic!(
            "expected one span {name:?}, found {}; spans: {:?}",
            found.len(),
            spans.iter().map(|s| s.name.as_ref()).collect::<Vec<_>>()
        ),
    }
}

pub fn is_child(child: &SpanData, parent: &SpanData) -> bool {
    child.parent_span_id == parent.span_context.span_id()
        && child.span_context.trace_id() == parent.span_context.trace_id()
}

/// No attribute, event or status of any span contains `secret`.
pub fn assert_secret_absent(spans: &[SpanData], secret: &str) {
    for span in spans {
        let text = format!("{:?} {:?} {:?}", span.attributes, span.events, span.status);
        assert!(
            !text.contains(secret),
            "{} leaks the planted key: {text}",
            span.name
        );
    }
}

/// The spans follow the GenAI semantic conventions (tests/src/semconv_check.rs), as OTLP would carry them.
pub fn assert_semconv(spans: &[SpanData]) {
    let received: Vec<waxell_tests::Received> = spans
        .iter()
        .map(|span| waxell_tests::Received {
            span: opentelemetry_proto::tonic::trace::v1::Span::from(span.clone()),
            resource: Default::default(),
            scope: String::new(),
        })
        .collect();
    let problems = waxell_tests::semconv_check::registry().check(&received);
    assert!(problems.is_empty(), "semantic conventions: {problems:#?}");
}

/// The subscriber an application sets up for rig or genai: waxell's layer (the one line).
pub fn subscriber() -> impl tracing::Subscriber + Send + Sync {
    use tracing_subscriber::layer::SubscriberExt as _;
    tracing_subscriber::registry().with(waxell::tracing_layer())
}

/// The tool every LLM test's agent runs when the model asks for it.
#[waxell::tool]
pub fn get_weather(city: String) -> String {
    format!("Sunny in {city}")
}

/// `get_weather`'s parameters.
pub fn city_schema() -> serde_json::Value {
    serde_json::json!({"type": "object", "properties": {"city": {"type": "string"}}})
}

/// gpt-4o-mini asking for `get_weather` in Paris, in one JSON answer.
pub fn openai_tool_call(input_tokens: u64) -> waxell_tests::fake_llm::LlmReply {
    use waxell_tests::fake_llm::{chat_completion, LlmReply};
    LlmReply::Json(
        200,
        chat_completion(
            "gpt-4o-mini",
            None,
            &[("call_1", "get_weather", serde_json::json!({"city": "Paris"}))],
            (input_tokens, 20),
        ),
    )
}

/// The same streamed; the answer starts with text, as genai measures the first chunk on text.
pub fn openai_tool_call_stream(input_tokens: u64) -> waxell_tests::fake_llm::LlmReply {
    use waxell_tests::fake_llm::{chat_chunks, LlmReply};
    LlmReply::Sse {
        events: chat_chunks(
            "gpt-4o-mini",
            Some("Let me check."),
            Some(("call_1", "get_weather", serde_json::json!({"city": "Paris"}))),
            (input_tokens, 20),
        ),
        done: true,
        gap: std::time::Duration::from_millis(2),
    }
}

/// A genai client whose every model goes to `endpoint` through `kind`'s adapter.
pub fn genai_client(kind: genai::adapter::AdapterKind, endpoint: String) -> genai::Client {
    use genai::resolver::{AuthData, Endpoint, ServiceTargetResolver};
    use genai::{ModelIden, ServiceTarget};
    let resolver = ServiceTargetResolver::from_resolver_fn(move |target: ServiceTarget| {
        Ok(ServiceTarget {
            endpoint: Endpoint::from_owned(endpoint.clone()),
            auth: AuthData::from_single("test-key"),
            model: ModelIden::new(kind, target.model.model_name),
        })
    });
    genai::Client::builder()
        .with_service_target_resolver(resolver)
        .build()
        .unwrap()
}

/// The genai request of every genai test: a planted key in the user's message, `get_weather` offered.
pub fn genai_request() -> genai::chat::ChatRequest {
    use genai::chat::{ChatMessage, ChatRequest, Tool};
    ChatRequest::new(vec![ChatMessage::user(format!(
        "My key is {PLANTED_KEY}. Weather in Paris?"
    ))])
    .with_system("You report the weather.")
    .with_tools(vec![Tool::new("get_weather")
        .with_description("Weather of a city")
        .with_schema(city_schema())])
}

/// genai records content only when asked to (its own switch); waxell's policy then applies.
pub fn genai_capture_content() {
    std::env::set_var("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true");
}

/// What every rig/genai test checks of a trace with one `chat {model}` under the `weather` agent:
/// nesting, the one agent span, provider (GenAI and OpenInference names), model, tokens, the price
/// table's cost, no planted key, semantic conventions. Returns the chat span.
pub fn check_llm_chat<'a>(
    spans: &'a [SpanData],
    provider: &str,
    model: &str,
    (input, output): (i64, i64),
    cost: f64,
) -> &'a SpanData {
    use waxell::semconv::*;
    let agent = one(spans, "invoke_agent weather");
    let chat = one(spans, &format!("chat {model}"));
    assert!(is_child(chat, agent), "the chat span nests under the #[agent]");
    let agents = spans
        .iter()
        .filter(|s| s.name.starts_with("invoke_agent"))
        .count();
    assert_eq!(agents, 1, "no duplicate agent span");
    assert_eq!(attr_str(chat, GEN_AI_PROVIDER_NAME), provider);
    let (oi_provider, oi_system) = match provider {
        "gcp.gemini" => ("google", "vertexai"),
        other => (other, other),
    };
    assert_eq!(attr_str(chat, OI_LLM_PROVIDER), oi_provider);
    assert_eq!(attr_str(chat, OI_LLM_SYSTEM), oi_system);
    assert_eq!(attr_str(chat, OI_SPAN_KIND), "LLM");
    assert_eq!(attr_str(chat, GEN_AI_REQUEST_MODEL), model);
    assert_eq!(attr_str(chat, OI_LLM_MODEL_NAME), model);
    assert_eq!(attr_i64(chat, GEN_AI_USAGE_INPUT_TOKENS), input);
    assert_eq!(attr_i64(chat, OI_LLM_TOKEN_COUNT_PROMPT), input);
    assert_eq!(attr_i64(chat, GEN_AI_USAGE_OUTPUT_TOKENS), output);
    let recorded = attr_f64(chat, WAXELL_LLM_COST);
    assert!(
        (recorded - cost).abs() < 1e-12,
        "cost {recorded}, price table says {cost}"
    );
    assert_secret_absent(spans, PLANTED_KEY);
    assert_semconv(spans);
    chat
}

/// gpt-4o-mini's cost: $0.15 input, $0.60 output per million.
pub fn gpt_4o_mini_cost(input: i64, output: i64) -> f64 {
    (input as f64 * 0.15 + output as f64 * 0.60) / 1e6
}
