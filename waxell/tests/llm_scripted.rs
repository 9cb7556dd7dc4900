//! Dry runs: the scripted transport goes through the same client and produces the same spans as a real
//! server, marked `waxell.dry_run=true`, deterministically.

mod llm_support;

use std::collections::BTreeSet;

use futures_util::StreamExt;
use llm_support::*;
use opentelemetry::trace::Status;
use opentelemetry_sdk::trace::SpanData;
use serde_json::json;
use waxell::llm::{ChatRequest, Client, Error, Message, ScriptedReply, ScriptedTransport, Tool};
use waxell::semconv::*;
use waxell::testing::span_data::*;

const BUGGY: &str = "import pandas as pd\ndf = pd.read_csv('sales.csv')\nprint(df['revenue'].sum() / len(df['region']).mean())";
const FIXED: &str =
    "import pandas as pd\ndf = pd.read_csv('sales.csv')\nprint(df.groupby('region')['revenue'].mean())";

fn tools() -> [Tool; 1] {
    [Tool::function(
        "run_python",
        "Run a Python script in the sandbox",
        json!({"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]}),
    )]
}

fn analyst_request() -> ChatRequest {
    ChatRequest::new([
        Message::system("You are a data analyst. Use run_python."),
        Message::user("Average revenue per region?"),
    ])
    .tools(tools())
    .temperature(0.0)
}

fn attribute_keys(span: &SpanData) -> BTreeSet<String> {
    span.attributes.iter().map(|kv| kv.key.to_string()).collect()
}

/// A scripted call and an HTTP call with the same reply record the same attributes, except that only
/// the HTTP one has a server and only the scripted one is a dry run.
#[tokio::test]
async fn scripted_and_http_calls_produce_the_same_span_shape() {
    let spans = capture_spans();
    let arguments = json!({"code": BUGGY}).to_string();
    let server = FakeServer::start(vec![FakeReply::ok(json!({
        "id": "chatcmpl-live", "model": "gpt-4o-mini",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": null,
            "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "run_python", "arguments": arguments}}]}}],
        "usage": {"prompt_tokens": 120, "completion_tokens": 40, "total_tokens": 160},
    }))])
    .await;
    let live = client_for(&server).build().unwrap();
    let script = ScriptedTransport::new([
        ScriptedReply::tool_call("run_python", json!({"code": BUGGY})).with_usage(120, 40)
    ]);
    let dry = Client::builder()
        .with_transport(script.clone())
        .with_model("gpt-4o-mini")
        .build()
        .unwrap();
    assert!(dry.is_dry_run() && !live.is_dry_run());

    let live_response = live.chat(analyst_request()).await.unwrap();
    let dry_response = dry.chat(analyst_request()).await.unwrap();
    assert_eq!(
        live_response.tool_calls()[0].function,
        dry_response.tool_calls()[0].function
    );

    let spans = finished_spans(&spans);
    let chats: Vec<_> = spans
        .iter()
        .filter(|span| span.name == "chat gpt-4o-mini")
        .collect();
    let [live_span, dry_span] = chats[..] else {
        panic!("expected two chat spans, got {spans:?}")
    };
    let (live_span, dry_span) = if attr(live_span, WAXELL_DRY_RUN).is_some() {
        (dry_span, live_span)
    } else {
        (live_span, dry_span)
    };

    let mut live_keys = attribute_keys(live_span);
    let mut dry_keys = attribute_keys(dry_span);
    assert!(live_keys.remove(SERVER_ADDRESS) && live_keys.remove(SERVER_PORT));
    assert!(dry_keys.remove(WAXELL_DRY_RUN));
    assert_eq!(live_keys, dry_keys);
    assert_eq!(attr(dry_span, WAXELL_DRY_RUN), Some(true.into()));
    assert_eq!(dry_span.span_kind, live_span.span_kind);
    for key in [
        GEN_AI_OPERATION_NAME,
        GEN_AI_PROVIDER_NAME,
        GEN_AI_REQUEST_MODEL,
        GEN_AI_RESPONSE_MODEL,
        OI_SPAN_KIND,
        GEN_AI_OUTPUT_MESSAGES,
        GEN_AI_INPUT_MESSAGES,
        OI_LLM_INVOCATION_PARAMETERS,
    ] {
        if key == GEN_AI_OUTPUT_MESSAGES {
            // Same parts; only the generated call id differs.
            let mut live_out = attr_json(live_span, key);
            let mut dry_out = attr_json(dry_span, key);
            live_out[0]["parts"][0]["id"] = json!("*");
            dry_out[0]["parts"][0]["id"] = json!("*");
            assert_eq!(live_out, dry_out);
        } else {
            assert_eq!(attr(live_span, key), attr(dry_span, key), "{key}");
        }
    }
    assert_eq!(
        attr_f64(live_span, WAXELL_LLM_COST),
        attr_f64(dry_span, WAXELL_LLM_COST)
    );
    assert_eq!(attr_str(dry_span, GEN_AI_RESPONSE_ID), "chatcmpl-dryrun-1");
    assert_eq!(script.requests()[0].model.as_deref(), Some("gpt-4o-mini"));
}

/// The demo's conversation: a buggy script, a fixed one after the tool result, the answer, and an
/// evaluator reply picked by its matcher.
#[tokio::test]
async fn a_scripted_agent_conversation_is_deterministic() {
    let spans = capture_spans();
    let script = ScriptedTransport::new([
        ScriptedReply::text(r#"{"score": 0.9, "reason": "correct per-region means"}"#)
            .when(|request| request.system_text().contains("evaluator")),
        ScriptedReply::tool_call("run_python", json!({"code": BUGGY})).with_usage(310, 64),
        ScriptedReply::tool_call("run_python", json!({"code": FIXED}))
            .with_usage(402, 58)
            .when(|request| request.has_tool_results()),
        ScriptedReply::text("North averages 1,250 and South 980.").with_usage(520, 22),
    ]);
    let client = Client::builder()
        .with_transport(script.clone())
        .with_model("gpt-4o-mini")
        .build()
        .unwrap();

    let mut conversation = analyst_request();
    let first = client.chat(conversation.clone()).await.unwrap();
    let call = first.tool_calls()[0].clone();
    assert_eq!(call.id, "call_dryrun_1_0");
    assert_eq!(
        call.parse_arguments::<serde_json::Value>().unwrap()["code"],
        BUGGY
    );
    conversation = conversation
        .message(first.to_message().unwrap())
        .message(Message::tool(
            &call.id,
            "TypeError: 'int' object has no attribute 'mean'",
        ));

    let second = client.chat(conversation.clone()).await.unwrap();
    assert_eq!(
        second.tool_calls()[0]
            .parse_arguments::<serde_json::Value>()
            .unwrap()["code"],
        FIXED
    );
    conversation = conversation
        .message(second.to_message().unwrap())
        .message(Message::tool(&second.tool_calls()[0].id, "North 1250\nSouth 980"));

    // The final answer comes from the unconditional reply, although the evaluator's is queued first.
    let answer = client.chat(conversation).await.unwrap();
    assert_eq!(answer.text(), Some("North averages 1,250 and South 980."));
    let verdict = client
        .chat(ChatRequest::new([
            Message::system("You are an evaluator. Reply with JSON."),
            Message::user("Question and answer: ..."),
        ]))
        .await
        .unwrap();
    assert!(verdict.text().unwrap().contains("0.9"));
    assert_eq!(script.remaining(), 0);

    let requests = script.requests();
    assert_eq!(requests.len(), 4);
    assert_eq!(
        requests[1].messages.len(),
        4,
        "system, user, assistant tool call, tool result"
    );
    let error = client.chat(analyst_request()).await.unwrap_err();
    assert!(
        matches!(&error, Error::Script(message) if message.contains("request #5")),
        "{error}"
    );

    let spans = finished_spans(&spans);
    let chats: Vec<_> = spans
        .iter()
        .filter(|span| span.name == "chat gpt-4o-mini")
        .collect();
    assert_eq!(chats.len(), 5);
    assert!(chats
        .iter()
        .all(|span| attr(span, WAXELL_DRY_RUN) == Some(true.into())));
    let ids: Vec<_> = chats[..4]
        .iter()
        .map(|span| attr_str(span, GEN_AI_RESPONSE_ID))
        .collect();
    assert_eq!(
        ids,
        [
            "chatcmpl-dryrun-1",
            "chatcmpl-dryrun-2",
            "chatcmpl-dryrun-3",
            "chatcmpl-dryrun-4"
        ]
    );
    let outputs: Vec<_> = chats[..4]
        .iter()
        .map(|span| attr_i64(span, GEN_AI_USAGE_OUTPUT_TOKENS))
        .collect();
    assert_eq!(outputs[..3], [64, 58, 22]);
    assert_eq!(attr_str(chats[4], ERROR_TYPE), "script_exhausted");
}

#[tokio::test]
async fn scripted_streams_go_through_the_same_assembly() {
    let spans = capture_spans();
    let script = ScriptedTransport::new([
        ScriptedReply::text("Revenue grew twelve percent.")
            .chunked(5)
            .with_usage(30, 6),
        ScriptedReply::tool_call("run_python", json!({"code": FIXED})).chunked(10),
    ]);
    let client = Client::builder()
        .with_transport(script.clone())
        .with_model("gpt-4o-mini")
        .build()
        .unwrap();

    let mut stream = client.chat_stream(analyst_request()).await.unwrap();
    let mut deltas = Vec::new();
    while let Some(chunk) = stream.next().await {
        deltas.extend(chunk.unwrap().text_delta().map(str::to_owned));
    }
    assert_eq!(deltas, ["Reven", "ue gr", "ew tw", "elve ", "perce", "nt."]);
    assert_eq!(
        stream.response().unwrap().text(),
        Some("Revenue grew twelve percent.")
    );

    let response = client
        .chat_stream(analyst_request())
        .await
        .unwrap()
        .into_response()
        .await
        .unwrap();
    assert_eq!(
        response.tool_calls()[0]
            .parse_arguments::<serde_json::Value>()
            .unwrap()["code"],
        FIXED
    );
    assert!(script.requests().iter().all(|request| request.stream));

    let spans = finished_spans(&spans);
    let chats: Vec<_> = spans
        .iter()
        .filter(|span| span.name == "chat gpt-4o-mini")
        .collect();
    assert_eq!(chats.len(), 2);
    // role chunk + 6 text chunks + finish chunk + usage chunk
    assert_eq!(attr_i64(chats[0], WAXELL_LLM_CHUNK_COUNT), 9);
    assert_eq!(attr(chats[0], GEN_AI_REQUEST_STREAM), Some(true.into()));
    assert!(attr_f64(chats[0], GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK) >= 0.0);
    assert_eq!(attr_i64(chats[0], GEN_AI_USAGE_OUTPUT_TOKENS), 6);
    assert_eq!(attr(chats[0], WAXELL_DRY_RUN), Some(true.into()));
    assert_eq!(
        attr_strings(chats[1], GEN_AI_RESPONSE_FINISH_REASONS),
        ["tool_calls"]
    );
    // Estimated usage when none is scripted.
    assert!(attr_i64(chats[1], GEN_AI_USAGE_INPUT_TOKENS) > 0);
}

#[tokio::test]
async fn scripted_failures_are_recorded_like_real_ones() {
    let spans = capture_spans();
    let script = ScriptedTransport::new([
        ScriptedReply::http_error(429, "Rate limit reached"),
        ScriptedReply::text("partial answer that never finishes")
            .chunked(4)
            .cut_after_chunks(3),
    ]);
    let client = Client::builder()
        .with_transport(script)
        .with_model("gpt-4o-mini")
        .build()
        .unwrap();
    let error = client.chat(analyst_request()).await.unwrap_err();
    assert!(
        matches!(&error, Error::Api { status: 429, message, .. } if message == "Rate limit reached"),
        "{error:?}"
    );
    let error = client
        .chat_stream(analyst_request())
        .await
        .unwrap()
        .into_response()
        .await
        .unwrap_err();
    assert!(matches!(error, Error::StreamCut { chunks: 3, .. }), "{error:?}");

    let spans = finished_spans(&spans);
    let chats: Vec<_> = spans
        .iter()
        .filter(|span| span.name == "chat gpt-4o-mini")
        .collect();
    assert_eq!(attr_str(chats[0], ERROR_TYPE), "429");
    assert_eq!(attr_str(chats[1], ERROR_TYPE), "stream_cut");
    assert!(chats
        .iter()
        .all(|span| matches!(span.status, Status::Error { .. })));
    assert!(chats
        .iter()
        .all(|span| attr(span, WAXELL_DRY_RUN) == Some(true.into())));
}
