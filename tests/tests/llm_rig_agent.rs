//! rig's agent runtime (the real `rig-agent` crate over rig-core's OpenAI provider) inside a waxell
//! `#[agent]`, against a fake OpenAI server on 127.0.0.1: the model asks for a tool, rig runs it, the
//! model answers, prompted plainly and streamed. Asserts the exported spans: one agent span, the model's
//! tool call as a decision under its chat span, rig's `execute_tool`, all in the `#[agent]`'s trace.

mod llm_support;

use futures_util::TryStreamExt as _;
use llm_support::*;
use waxell::semconv::*;
use waxell::testing::span_data::*;
use waxell_tests::fake_llm::{chat_chunks, chat_completion, FakeLlm, LlmReply};

#[path = "llm_support/rig_weather.rs"]
mod rig_weather;

#[waxell::agent(name = "weather")]
async fn ask(server: &FakeLlm, stream: bool) -> String {
    let model = rig_core::providers::openai::OpenAIConfig::new("test-key")
        .with_base_url(server.base_url())
        .client()
        .chat("gpt-4o-mini");
    let agent = rig_agent::AgentBuilder::new(model)
        .name("weather")
        .preamble(format!("You report the weather. The key is {PLANTED_KEY}."))
        // The tool's answer quotes a key, to check the result is scrubbed on rig's tool span.
        .tool(rig_weather::Weather {
            note: format!(" (station key {PLANTED_KEY})"),
        })
        .record_content_telemetry(true)
        .build();
    if !stream {
        return agent
            .prompt("Weather in Paris?")
            .max_turns(2)
            .await
            .unwrap()
            .to_string();
    }
    let mut items = agent.prompt("Weather in Paris?").max_turns(2).stream();
    while let Some(item) = items.try_next().await.unwrap() {
        if let rig_agent::agent::MultiTurnStreamItem::FinalResponse(response) = item {
            return response.to_string();
        }
    }
    panic!("the stream ended without a final response")
}

#[tokio::test]
async fn a_rig_agent_run_inside_an_agent_records_its_tool_call_decision_once() {
    let exporter = capture_spans();
    let server = FakeLlm::start(vec![
        openai_tool_call(1000),
        LlmReply::Json(
            200,
            chat_completion("gpt-4o-mini", Some("It is sunny in Paris."), &[], (1100, 8)),
        ),
    ]);
    let _guard = tracing::subscriber::set_default(subscriber());
    let answer = ask(&server, false).await;
    assert!(answer.contains("sunny"), "{answer}");
    check(&spans(&exporter));
}

#[tokio::test]
async fn a_streamed_rig_agent_run_is_recorded_the_same_way() {
    let exporter = capture_spans();
    let server = FakeLlm::start(vec![
        openai_tool_call_stream(1000),
        LlmReply::Sse {
            events: chat_chunks("gpt-4o-mini", Some("It is sunny in Paris."), None, (1100, 8)),
            done: true,
            gap: std::time::Duration::from_millis(1),
        },
    ]);
    let _guard = tracing::subscriber::set_default(subscriber());
    let answer = ask(&server, true).await;
    assert!(answer.contains("sunny"), "{answer}");
    let spans = spans(&exporter);
    check(&spans);
    for chat in named(&spans, "chat gpt-4o-mini") {
        assert_eq!(
            attr(chat, GEN_AI_REQUEST_STREAM),
            Some(true.into()),
            "{}",
            chat.name
        );
    }
}

fn check(spans: &[opentelemetry_sdk::trace::SpanData]) {
    let names: Vec<&str> = spans.iter().map(|span| span.name.as_ref()).collect();

    // One agent span: rig's own `invoke_agent` run is the `#[agent]`'s, not a second root or trace.
    let agent = one(spans, "invoke_agent weather");
    assert_eq!(named(spans, "invoke_agent").len(), 0, "{names:?}");
    let trace = agent.span_context.trace_id();
    assert!(
        spans.iter().all(|span| span.span_context.trace_id() == trace),
        "{names:?}"
    );

    // Two model turns, named and identified once rig's provider layer filled them in.
    let chats = named(spans, "chat gpt-4o-mini");
    assert_eq!(chats.len(), 2, "{names:?}");
    for chat in &chats {
        assert!(is_child(chat, agent), "a turn nests under the #[agent]");
        for key in [
            GEN_AI_OPERATION_NAME,
            GEN_AI_PROVIDER_NAME,
            GEN_AI_REQUEST_MODEL,
            OI_LLM_MODEL_NAME,
        ] {
            let set = chat.attributes.iter().filter(|kv| kv.key.as_str() == key).count();
            assert_eq!(set, 1, "{key} is set once on {}", chat.name);
        }
        assert_eq!(attr_str(chat, GEN_AI_PROVIDER_NAME), "openai");
    }
    let (first, second) = if attr(chats[0], GEN_AI_USAGE_INPUT_TOKENS) == Some(1000.into()) {
        (chats[0], chats[1])
    } else {
        (chats[1], chats[0])
    };
    assert_eq!(attr(first, GEN_AI_USAGE_INPUT_TOKENS), Some(1000.into()));
    assert_eq!(attr(second, GEN_AI_USAGE_INPUT_TOKENS), Some(1100.into()));
    assert_eq!(
        attr(first, WAXELL_LLM_COST),
        Some(gpt_4o_mini_cost(1000, 20).into())
    );
    // The planted key in the preamble is scrubbed from the re-captured messages.
    assert!(attr_str(first, GEN_AI_INPUT_MESSAGES).contains("You report the weather."));
    assert!(!attr_str(first, GEN_AI_INPUT_MESSAGES).contains(PLANTED_KEY));

    // The model's tool call is a decision under the turn that made it, with the offered tool.
    let decision = one(spans, "decide tool_call:get_weather");
    assert!(is_child(decision, first));
    assert_eq!(attr_str(decision, WAXELL_DECISION_CHOSEN), "get_weather");

    // rig's tool execution in waxell's tool schema, under the agent, its result scrubbed.
    let tool = one(spans, "execute_tool get_weather");
    assert!(is_child(tool, agent));
    assert_eq!(attr_str(tool, OI_SPAN_KIND), "TOOL");
    assert_eq!(attr_str(tool, WAXELL_TOOL_NAME), "get_weather");
    assert!(attr_str(tool, GEN_AI_TOOL_CALL_ARGUMENTS).contains("Paris"));
    let result = attr_str(tool, GEN_AI_TOOL_CALL_RESULT);
    assert!(
        result.contains("Sunny in Paris") && !result.contains(PLANTED_KEY),
        "{result}"
    );
    for span in spans {
        for kv in &span.attributes {
            let key = kv.key.as_str();
            assert!(
                !key.starts_with("rig.") && !key.starts_with("code.") && key != "busy_ns",
                "{}: {key}",
                span.name
            );
            assert!(
                !kv.value.as_str().contains(PLANTED_KEY),
                "{}: {key} leaks the planted key",
                span.name
            );
        }
    }
}
