//! async-openai (the real crate) against a fake OpenAI server on 127.0.0.1, recorded by waxell's tower
//! layer installed with one line: chat (plain and streamed, with tool calls), embeddings, the
//! Responses API (plain and streamed), and errors. Asserts the exported spans.

mod llm_support;

use async_openai::config::OpenAIConfig;
use async_openai::types::chat::{CreateChatCompletionRequest, CreateChatCompletionResponse};
use async_openai::types::embeddings::CreateEmbeddingRequest;
use async_openai::types::responses::CreateResponse;
use async_openai::Client;
use futures_util::StreamExt;
use llm_support::*;
use opentelemetry::trace::Status;
use serde_json::{json, Value};
use waxell::semconv::*;
use waxell::testing::span_data::*;
use waxell_tests::fake_llm::{chat_chunks, chat_completion, FakeLlm, LlmReply, LlmRequest};

fn client(server: &FakeLlm) -> Client<OpenAIConfig> {
    Client::with_config(
        OpenAIConfig::new()
            .with_api_base(server.base_url())
            .with_api_key("test"),
    )
    // The one line: record every call this client makes.
    .with_http_service(waxell::integrations::async_openai::service())
}

fn chat_request(messages: Value, stream: bool) -> CreateChatCompletionRequest {
    serde_json::from_value(json!({
        "model": "gpt-4o-mini",
        "messages": messages,
        "stream": stream,
        "temperature": 0.0,
        "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
    }))
    .unwrap()
}

/// The request's `traceparent` names `span` as the parent of the server's work (its trace and span id).
fn assert_names_span_as_parent(request: &LlmRequest, span: &opentelemetry_sdk::trace::SpanData) {
    let traceparent = request.headers["traceparent"].to_str().unwrap();
    let context = &span.span_context;
    let expected = format!("00-{}-{}-", context.trace_id(), context.span_id());
    assert!(
        traceparent.starts_with(&expected),
        "{traceparent} does not name {expected}"
    );
}

#[waxell::tool]
fn get_weather(city: String) -> String {
    format!("Sunny in {city}")
}

/// A two-turn tool-using agent: the model calls `get_weather`, the agent runs it, the model answers.
#[waxell::agent(name = "weather")]
async fn weather_agent(client: Client<OpenAIConfig>) -> String {
    let mut messages = json!([
        {"role": "system", "content": "You report the weather."},
        {"role": "user", "content": format!("My key is {PLANTED_KEY}. Weather in Paris?")},
    ]);
    let first: CreateChatCompletionResponse = client
        .chat()
        .create(chat_request(messages.clone(), false))
        .await
        .unwrap();
    let call = first.choices[0].message.tool_calls.clone().unwrap();
    let call = serde_json::to_value(&call[0]).unwrap();
    let arguments: Value = serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    let result = get_weather(arguments["city"].as_str().unwrap().to_owned());
    let messages_array = messages.as_array_mut().unwrap();
    messages_array.push(json!({"role": "assistant", "tool_calls": [call.clone()]}));
    messages_array.push(json!({"role": "tool", "tool_call_id": call["id"], "content": result}));
    let second = client.chat().create(chat_request(messages, false)).await.unwrap();
    second.choices[0].message.content.clone().unwrap()
}

#[tokio::test]
async fn chat_calls_of_a_tool_using_agent_are_recorded_under_it() {
    let exporter = capture_spans();
    let server = FakeLlm::start(vec![
        LlmReply::Json(
            200,
            chat_completion(
                "gpt-4o-mini",
                None,
                &[("call_1", "get_weather", json!({"city": "Paris"}))],
                (1000, 50),
            ),
        ),
        LlmReply::Json(
            200,
            chat_completion("gpt-4o-mini", Some("Sunny in Paris."), &[], (1100, 10)),
        ),
    ]);
    let answer = weather_agent(client(&server)).await;
    assert_eq!(answer, "Sunny in Paris.");

    let spans = spans(&exporter);
    let agent = one(&spans, "invoke_agent weather");
    let chats = named(&spans, "chat gpt-4o-mini");
    assert_eq!(chats.len(), 2, "one span per call, none duplicated");
    let tool = one(&spans, "execute_tool get_weather");
    for span in chats.iter().copied().chain([tool]) {
        assert!(is_child(span, agent), "{} is not under the agent", span.name);
    }
    let first = chats
        .iter()
        .find(|s| attr_i64(s, GEN_AI_USAGE_INPUT_TOKENS) == 1000)
        .unwrap();
    assert_eq!(attr_str(first, GEN_AI_PROVIDER_NAME), "openai");
    assert_eq!(attr_str(first, SERVER_ADDRESS), "127.0.0.1");
    assert_eq!(attr_i64(first, SERVER_PORT), i64::from(server.port()));
    assert_eq!(attr_str(first, OI_SPAN_KIND), "LLM");
    assert_eq!(attr_i64(first, GEN_AI_USAGE_OUTPUT_TOKENS), 50);
    assert_eq!(attr_i64(first, OI_LLM_TOKEN_COUNT_TOTAL), 1050);
    let cost = (1000.0 * 0.15 + 50.0 * 0.60) / 1e6;
    assert!((attr_f64(first, WAXELL_LLM_COST) - cost).abs() < 1e-12);
    assert!(attr_str(first, GEN_AI_INPUT_MESSAGES).contains("Weather in Paris?"));
    assert!(attr_str(first, GEN_AI_TOOL_DEFINITIONS).contains("get_weather"));
    let decision = one(&spans, "decide tool_call:get_weather");
    assert!(is_child(decision, first));
    // The server saw the chat span as the parent of its work.
    assert_names_span_as_parent(&server.received()[0], first);
    assert_secret_absent(&spans, PLANTED_KEY);
    assert_semconv(&spans);
}

#[tokio::test]
async fn a_streamed_chat_reaches_the_caller_whole_and_is_recorded_with_its_tool_call() {
    let exporter = capture_spans();
    let chunks = chat_chunks(
        "gpt-4o-mini",
        Some("Let me check."),
        Some(("call_9", "get_weather", json!({"city": "Oslo"}))),
        (200, 20),
    );
    let server = FakeLlm::start(vec![LlmReply::Sse {
        events: chunks.clone(),
        done: true,
        gap: std::time::Duration::from_millis(5),
    }]);
    let client = client(&server);
    let started = std::time::Instant::now();
    let mut stream = client
        .chat()
        .create_stream(chat_request(
            json!([{"role": "user", "content": "Weather in Oslo?"}]),
            true,
        ))
        .await
        .unwrap();
    let mut received = Vec::new();
    let mut first_chunk_seen = None;
    while let Some(chunk) = stream.next().await {
        first_chunk_seen.get_or_insert_with(|| started.elapsed());
        received.push(chunk.unwrap());
    }
    assert_eq!(received.len(), chunks.len(), "every chunk reached the caller");
    let text: String = received
        .iter()
        .filter_map(|chunk| chunk.choices.first()?.delta.content.clone())
        .collect();
    assert_eq!(text, "Let me check.");

    let spans = spans(&exporter);
    let chat = one(&spans, "chat gpt-4o-mini");
    assert_eq!(attr(chat, GEN_AI_REQUEST_STREAM), Some(true.into()));
    assert_eq!(attr_i64(chat, WAXELL_LLM_CHUNK_COUNT), chunks.len() as i64);
    // The layer reads chunks after handing them on (in the stream's pauses), but the time to first
    // chunk is when it arrived: never later than when the caller had it.
    let ttfc = attr_f64(chat, GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK);
    let seen = first_chunk_seen.unwrap().as_secs_f64();
    assert!(
        ttfc > 0.0 && ttfc <= seen,
        "time to first chunk {ttfc} s, the caller had it at {seen} s"
    );
    assert_eq!(attr_i64(chat, GEN_AI_USAGE_INPUT_TOKENS), 200);
    assert!(attr_str(chat, GEN_AI_OUTPUT_MESSAGES).contains("Oslo"));
    assert!(is_child(one(&spans, "decide tool_call:get_weather"), chat));
    assert_eq!(chat.status, Status::Unset);
}

#[tokio::test]
async fn embeddings_and_the_responses_api_are_recorded() {
    let exporter = capture_spans();
    let server = FakeLlm::start(vec![
        LlmReply::Json(
            200,
            json!({"object": "list", "model": "text-embedding-3-small",
            "data": [{"object": "embedding", "index": 0, "embedding": [0.1, 0.2, 0.3]}],
            "usage": {"prompt_tokens": 8, "total_tokens": 8}}),
        ),
        LlmReply::Json(
            200,
            json!({"id": "resp_1", "object": "response", "created_at": 1_700_000_000, "model": "gpt-4.1",
            "status": "completed", "output": [
                {"type": "function_call", "id": "fc_1", "call_id": "call_r", "name": "get_weather", "arguments": "{\"city\":\"Rome\"}", "status": "completed"}],
            "usage": {"input_tokens": 300, "output_tokens": 30, "total_tokens": 330,
                "input_tokens_details": {"cached_tokens": 100}, "output_tokens_details": {"reasoning_tokens": 12}}}),
        ),
        LlmReply::Sse {
            done: false,
            gap: std::time::Duration::ZERO,
            events: vec![
                json!({"type": "response.output_text.delta", "sequence_number": 1, "item_id": "m", "output_index": 0, "content_index": 0, "delta": "Ciao", "logprobs": []}),
                json!({"type": "response.completed", "sequence_number": 2, "response": {"id": "resp_2", "object": "response", "created_at": 1_700_000_000,
                "model": "gpt-4.1", "status": "completed",
                "output": [{"type": "message", "id": "m", "role": "assistant", "status": "completed",
                    "content": [{"type": "output_text", "text": "Ciao", "annotations": []}]}],
                "usage": {"input_tokens": 10, "output_tokens": 2, "total_tokens": 12,
                    "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}}}}),
            ],
        },
    ]);
    let client = client(&server);
    let embedding: CreateEmbeddingRequest =
        serde_json::from_value(json!({"model": "text-embedding-3-small", "input": "hello"})).unwrap();
    client.embeddings().create(embedding).await.unwrap();
    let request: CreateResponse = serde_json::from_value(json!({"model": "gpt-4.1", "instructions": "Be brief.",
        "input": "Weather in Rome?", "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}, "strict": false}]}))
    .unwrap();
    client.responses().create(request).await.unwrap();
    let request: CreateResponse =
        serde_json::from_value(json!({"model": "gpt-4.1", "input": "Say hi in Italian", "stream": true}))
            .unwrap();
    let mut stream = client.responses().create_stream(request).await.unwrap();
    let mut events = 0;
    while let Some(event) = stream.next().await {
        event.unwrap();
        events += 1;
    }
    assert_eq!(events, 2);

    let spans = spans(&exporter);
    let embeddings = one(&spans, "embeddings text-embedding-3-small");
    assert_eq!(attr_i64(embeddings, GEN_AI_USAGE_INPUT_TOKENS), 8);
    assert_eq!(attr_i64(embeddings, "gen_ai.embeddings.dimension.count"), 3);
    let chats = named(&spans, "chat gpt-4.1");
    assert_eq!(chats.len(), 2);
    let tool_turn = chats
        .iter()
        .find(|s| attr(s, GEN_AI_REQUEST_STREAM) == Some(false.into()))
        .unwrap();
    assert_eq!(attr_i64(tool_turn, GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS), 100);
    assert_eq!(attr_i64(tool_turn, GEN_AI_USAGE_REASONING_OUTPUT_TOKENS), 12);
    let cost = (200.0 * 2.0 + 100.0 * 0.5 + 30.0 * 8.0) / 1e6;
    assert!((attr_f64(tool_turn, WAXELL_LLM_COST) - cost).abs() < 1e-12);
    assert!(attr_str(tool_turn, GEN_AI_INPUT_MESSAGES).contains("Be brief."));
    assert!(is_child(one(&spans, "decide tool_call:get_weather"), tool_turn));
    let streamed = chats
        .iter()
        .find(|s| attr(s, GEN_AI_REQUEST_STREAM) == Some(true.into()))
        .unwrap();
    assert_eq!(attr_str(streamed, OI_OUTPUT_VALUE), "Ciao");
    assert!(attr_f64(streamed, GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK) > 0.0);
}

#[tokio::test]
async fn a_failed_call_records_the_servers_error_type() {
    let exporter = capture_spans();
    let server = FakeLlm::start(vec![LlmReply::Json(
        400,
        json!({"error": {"message": format!("bad request from key {PLANTED_KEY}"), "type": "invalid_request_error", "code": "context_length_exceeded"}}),
    )]);
    let error = client(&server)
        .chat()
        .create(chat_request(json!([{"role": "user", "content": "hi"}]), false))
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("bad request"),
        "the caller still gets the server's error: {error}"
    );
    let spans = spans(&exporter);
    let chat = one(&spans, "chat gpt-4o-mini");
    assert_eq!(attr_str(chat, ERROR_TYPE), "context_length_exceeded");
    assert!(matches!(chat.status, Status::Error { .. }));
    assert_secret_absent(&spans, PLANTED_KEY);
}

/// async-openai's retry layer runs inside waxell's: a rate-limited attempt and its retry are one call
/// and one span, and both attempts carry that span to the server as their parent.
#[tokio::test]
async fn a_retried_call_is_one_span_whose_traceparent_every_attempt_carries() {
    let exporter = capture_spans();
    let server = FakeLlm::start(vec![
        LlmReply::Json(
            429,
            json!({"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}}),
        ),
        LlmReply::Json(200, chat_completion("gpt-4o-mini", Some("Sunny."), &[], (20, 5))),
    ]);
    let response = client(&server)
        .chat()
        .create(chat_request(
            json!([{"role": "user", "content": "Weather?"}]),
            false,
        ))
        .await
        .unwrap();
    assert_eq!(response.choices[0].message.content.as_deref(), Some("Sunny."));

    let spans = spans(&exporter);
    let chat = one(&spans, "chat gpt-4o-mini");
    assert_eq!(attr_i64(chat, GEN_AI_USAGE_INPUT_TOKENS), 20);
    assert!(!matches!(chat.status, Status::Error { .. }));
    let received = server.received();
    assert_eq!(received.len(), 2, "the first attempt and its retry");
    for attempt in &received {
        assert_names_span_as_parent(attempt, chat);
        assert_eq!(attempt.body["model"], "gpt-4o-mini");
    }
}

/// A caller that gives up on a call (its future dropped while the request is out) still gets the call's
/// span, marked cancelled, ending when it gave up, with the id the server saw in `traceparent`.
#[tokio::test]
async fn a_call_the_caller_gives_up_on_is_recorded_cancelled() {
    use std::time::Duration;
    let exporter = capture_spans();
    let answer = LlmReply::Json(200, chat_completion("gpt-4o-mini", Some("Late."), &[], (20, 5)));
    let server = FakeLlm::repeating(answer, Duration::from_secs(2));
    let client = client(&server);
    let chat = client.chat();
    let call = chat.create(chat_request(
        json!([{"role": "user", "content": "Weather?"}]),
        false,
    ));
    let gave_up = tokio::time::timeout(Duration::from_millis(200), call).await;
    assert!(gave_up.is_err(), "the server answers after 2 s");

    let spans = spans(&exporter);
    let chat = one(&spans, "chat gpt-4o-mini");
    assert_eq!(attr(chat, WAXELL_CANCELLED), Some(true.into()));
    let lasted = chat.end_time.duration_since(chat.start_time).unwrap();
    assert!(
        lasted >= Duration::from_millis(150) && lasted < Duration::from_secs(1),
        "{lasted:?}"
    );
    assert_names_span_as_parent(&server.received()[0], chat);
}
