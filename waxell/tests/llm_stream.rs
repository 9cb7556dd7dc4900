//! Streamed chat completions over SSE from a server on 127.0.0.1: assembly of text and tool-call
//! deltas, usage at the end, a cut stream, and what the span records.

mod llm_support;

use std::time::Duration;

use futures_util::StreamExt;
use llm_support::*;
use opentelemetry::trace::Status;
use serde_json::json;
use waxell::llm::{ChatRequest, Error, Message, Tool};
use waxell::semconv::*;
use waxell::testing::span_data::*;

fn request() -> ChatRequest {
    ChatRequest::new([Message::user("Summarise the sales data.")])
}

#[tokio::test]
async fn streamed_text_is_yielded_in_order_and_assembled_with_usage() {
    let spans = capture_spans();
    let id = "chatcmpl-s1";
    let model = "gpt-4o-mini-2024-07-18";
    let server = FakeServer::start(vec![FakeReply::stream(vec![
        chunk(id, model, json!({"role": "assistant", "content": ""}), None),
        chunk(id, model, json!({"content": "Revenue "}), None),
        chunk(id, model, json!({"content": "grew 12%."}), None),
        chunk(id, model, json!({}), Some("stop")),
        usage_chunk(id, model, (40, 6)),
    ])])
    .await;
    let client = client_for(&server).build().unwrap();

    let mut stream = client.chat_stream(request()).await.unwrap();
    let mut deltas = Vec::new();
    while let Some(chunk) = stream.next().await {
        if let Some(text) = chunk.unwrap().text_delta() {
            deltas.push(text.to_owned());
        }
    }
    assert_eq!(deltas, ["", "Revenue ", "grew 12%."]);
    let response = stream.response().unwrap();
    assert_eq!(response.text(), Some("Revenue grew 12%."));
    assert_eq!(response.finish_reason(), Some("stop"));
    assert_eq!(response.usage.unwrap().prompt_tokens, 40);

    let [received] = server.received().try_into().unwrap();
    assert_eq!(received.body["stream"], true);
    assert_eq!(received.body["stream_options"], json!({"include_usage": true}));
    assert_eq!(received.header("accept"), Some("text/event-stream"));
    assert!(received.header("traceparent").is_some());

    let spans = finished_spans(&spans);
    let chat = span_named(&spans, "chat gpt-4o-mini");
    assert_eq!(attr(&chat, GEN_AI_REQUEST_STREAM), Some(true.into()));
    assert_eq!(attr_i64(&chat, WAXELL_LLM_CHUNK_COUNT), 5);
    let ttfc = attr_f64(&chat, GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK);
    assert!(ttfc > 0.0 && ttfc < 5.0, "{ttfc}");
    assert_eq!(attr_str(&chat, GEN_AI_RESPONSE_ID), id);
    assert_eq!(attr_str(&chat, GEN_AI_RESPONSE_MODEL), model);
    assert_eq!(attr_strings(&chat, GEN_AI_RESPONSE_FINISH_REASONS), ["stop"]);
    assert_eq!(attr_i64(&chat, GEN_AI_USAGE_INPUT_TOKENS), 40);
    assert_eq!(attr_i64(&chat, GEN_AI_USAGE_OUTPUT_TOKENS), 6);
    assert!(attr(&chat, WAXELL_LLM_COST).is_some());
    assert_eq!(
        attr_json(&chat, GEN_AI_OUTPUT_MESSAGES),
        json!([{"role": "assistant", "parts": [{"type": "text", "content": "Revenue grew 12%."}], "finish_reason": "stop"}])
    );
    assert_eq!(chat.status, Status::Unset);
    assert_secret_absent(&spans, TEST_KEY);
}

#[tokio::test]
async fn streamed_parallel_tool_calls_are_assembled_from_fragments() {
    let spans = capture_spans();
    let (id, model) = ("chatcmpl-s2", "gpt-4o-mini");
    let tool_delta = |index: u32, id: Option<&str>, name: Option<&str>, arguments: &str| {
        let mut call = json!({"index": index, "function": {"arguments": arguments}});
        if let Some(id) = id {
            call["id"] = id.into();
            call["type"] = "function".into();
        }
        if let Some(name) = name {
            call["function"]["name"] = name.into();
        }
        json!({"tool_calls": [call]})
    };
    let server = FakeServer::start(vec![FakeReply::stream(vec![
        chunk(id, model, json!({"role": "assistant", "content": null}), None),
        chunk(
            id,
            model,
            tool_delta(0, Some("call_a"), Some("run_python"), ""),
            None,
        ),
        chunk(id, model, tool_delta(0, None, None, "{\"code\": \"print("), None),
        chunk(
            id,
            model,
            tool_delta(1, Some("call_b"), Some("read_file"), "{\"path\": "),
            None,
        ),
        chunk(id, model, tool_delta(0, None, None, "1)\"}"), None),
        chunk(id, model, tool_delta(1, None, None, "\"sales.csv\"}"), None),
        chunk(id, model, json!({}), Some("tool_calls")),
        usage_chunk(id, model, (90, 30)),
    ])])
    .await;
    let client = client_for(&server).build().unwrap();
    let tools = [
        Tool::function("run_python", "Run Python", json!({"type": "object"})),
        Tool::function("read_file", "Read a file", json!({"type": "object"})),
    ];
    let response = client
        .chat_stream(request().tools(tools))
        .await
        .unwrap()
        .into_response()
        .await
        .unwrap();
    let calls = response.tool_calls();
    assert_eq!(calls.len(), 2);
    assert_eq!(
        (calls[0].id.as_str(), calls[0].function.name.as_str()),
        ("call_a", "run_python")
    );
    assert_eq!(calls[0].function.arguments, r#"{"code": "print(1)"}"#);
    assert_eq!(
        (calls[1].id.as_str(), calls[1].function.name.as_str()),
        ("call_b", "read_file")
    );
    assert_eq!(calls[1].function.arguments, r#"{"path": "sales.csv"}"#);

    let chat = span_named(&finished_spans(&spans), "chat gpt-4o-mini");
    assert_eq!(
        attr_strings(&chat, GEN_AI_RESPONSE_FINISH_REASONS),
        ["tool_calls"]
    );
    assert_eq!(attr_i64(&chat, WAXELL_LLM_CHUNK_COUNT), 8);
    assert_eq!(
        attr_json(&chat, GEN_AI_OUTPUT_MESSAGES),
        json!([{"role": "assistant", "finish_reason": "tool_call", "parts": [
            {"type": "tool_call", "id": "call_a", "name": "run_python", "arguments": {"code": "print(1)"}},
            {"type": "tool_call", "id": "call_b", "name": "read_file", "arguments": {"path": "sales.csv"}},
        ]}])
    );
}

#[tokio::test]
async fn a_stream_cut_mid_way_yields_what_arrived_then_an_error() {
    let spans = capture_spans();
    let (id, model) = ("chatcmpl-cut", "gpt-4o-mini");
    let server = FakeServer::start(vec![FakeReply::cut_stream(vec![
        chunk(id, model, json!({"role": "assistant", "content": ""}), None),
        chunk(id, model, json!({"content": "The analysis shows"}), None),
    ])])
    .await;
    let client = client_for(&server).build().unwrap();
    let mut stream = client.chat_stream(request()).await.unwrap();
    let mut text = String::new();
    let mut failure = None;
    while let Some(item) = stream.next().await {
        match item {
            Ok(chunk) => text.push_str(chunk.text_delta().unwrap_or_default()),
            Err(error) => failure = Some(error),
        }
    }
    assert_eq!(text, "The analysis shows");
    let failure = failure.expect("the cut is reported");
    assert!(
        matches!(&failure, Error::StreamCut { chunks: 2, .. }),
        "{failure:?}"
    );
    assert!(stream.response().is_none());
    assert_eq!(server.received().len(), 1, "a started stream is not retried");

    let chat = span_named(&finished_spans(&spans), "chat gpt-4o-mini");
    assert_eq!(attr_str(&chat, ERROR_TYPE), "stream_cut");
    assert_eq!(attr_i64(&chat, WAXELL_LLM_CHUNK_COUNT), 2);
    assert!(matches!(chat.status, Status::Error { .. }));
    assert_eq!(attr(&chat, GEN_AI_RESPONSE_ID), None);
}

#[tokio::test]
async fn a_stream_closed_cleanly_but_unfinished_is_also_cut() {
    let spans = capture_spans();
    let (id, model) = ("chatcmpl-eof", "gpt-4o-mini");
    let server = FakeServer::start(vec![FakeReply::Sse {
        payloads: vec![chunk(id, model, json!({"content": "Half an ans"}), None).to_string()],
        cut: false,
    }])
    .await;
    let error = client_for(&server)
        .build()
        .unwrap()
        .chat_stream(request())
        .await
        .unwrap()
        .into_response()
        .await
        .unwrap_err();
    assert!(
        matches!(&error, Error::StreamCut { chunks: 1, reason } if reason.contains("before it was done")),
        "{error:?}"
    );
    let chat = span_named(&finished_spans(&spans), "chat gpt-4o-mini");
    assert_eq!(attr_str(&chat, ERROR_TYPE), "stream_cut");
}

#[tokio::test]
async fn an_error_before_the_stream_starts_is_retried_and_returned() {
    let spans = capture_spans();
    let (id, model) = ("chatcmpl-r", "gpt-4o-mini");
    let server = FakeServer::start(vec![
        FakeReply::error(503, "overloaded", "server_busy").with_header("retry-after-ms", "100"),
        FakeReply::stream(vec![chunk(id, model, json!({"content": "ok"}), Some("stop"))]),
    ])
    .await;
    let response = client_for(&server)
        .build()
        .unwrap()
        .chat_stream(request())
        .await
        .unwrap()
        .into_response()
        .await
        .unwrap();
    assert_eq!(response.text(), Some("ok"));
    let received = server.received();
    assert_eq!(received.len(), 2);
    assert!(received[1].at - received[0].at >= Duration::from_millis(95));
    let chat = span_named(&finished_spans(&spans), "chat gpt-4o-mini");
    assert_eq!(attr(&chat, ERROR_TYPE), None);
    assert_eq!(
        attr(&chat, GEN_AI_USAGE_INPUT_TOKENS),
        None,
        "no usage chunk was sent"
    );
}

#[tokio::test]
async fn a_stalled_stream_times_out_between_chunks() {
    let spans = capture_spans();
    // Headers and one chunk arrive, then nothing (a raw socket, since the fake server always ends its
    // bodies): the next chunk never comes within the timeout.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut buffer = vec![0; 16 * 1024];
        let _ = socket.read(&mut buffer).await;
        let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
        let event = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"thinking\"}}]}\n\n";
        let chunk = format!("{:x}\r\n{event}\r\n", event.len());
        socket.write_all(head.as_bytes()).await.unwrap();
        socket.write_all(chunk.as_bytes()).await.unwrap();
        tokio::time::sleep(Duration::from_secs(30)).await;
    });
    let client = waxell::llm::Client::builder()
        .with_base_url(format!("http://{addr}/v1"))
        .with_model("gpt-4o-mini")
        .with_request_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let error = client
        .chat_stream(request())
        .await
        .unwrap()
        .into_response()
        .await
        .unwrap_err();
    assert!(matches!(error, Error::Timeout { .. }), "{error:?}");
    let chat = span_named(&finished_spans(&spans), "chat gpt-4o-mini");
    assert_eq!(attr_str(&chat, ERROR_TYPE), "timeout");
    assert_eq!(attr_i64(&chat, WAXELL_LLM_CHUNK_COUNT), 1);
}

#[tokio::test]
async fn dropping_a_stream_early_ends_its_span_as_cancelled() {
    let spans = capture_spans();
    let (id, model) = ("chatcmpl-d", "gpt-4o-mini");
    let server = FakeServer::start(vec![FakeReply::stream(vec![
        chunk(id, model, json!({"content": "one"}), None),
        chunk(id, model, json!({"content": "two"}), Some("stop")),
    ])])
    .await;
    let mut stream = client_for(&server)
        .build()
        .unwrap()
        .chat_stream(request())
        .await
        .unwrap();
    stream.next().await.unwrap().unwrap();
    drop(stream);
    let chat = span_named(&finished_spans(&spans), "chat gpt-4o-mini");
    assert_eq!(attr(&chat, WAXELL_CANCELLED), Some(true.into()));
}
