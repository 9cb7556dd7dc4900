//! An async-openai streamed chat, recorded by waxell's layer and exported over OTLP/HTTP to an in-process
//! `waxell ui`, shown as its chat in headless chromium: the messages by role, the model, the tokens and the
//! time to first chunk. The call goes to a fake OpenAI server on 127.0.0.1.

use std::time::{Duration, Instant};

use async_openai::config::OpenAIConfig;
use async_openai::types::chat::CreateChatCompletionRequest;
use async_openai::Client;
use futures_util::StreamExt;
use serde_json::json;
use waxell::ui::{RunFilter, UiOptions, UiServer};
use waxell_tests::browser::{chromium, dump_dom};
use waxell_tests::fake_llm::{chat_chunks, FakeLlm, LlmReply};

#[waxell::agent(name = "forecaster")]
async fn forecast(client: Client<OpenAIConfig>) -> String {
    let request: CreateChatCompletionRequest = serde_json::from_value(json!({
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "system", "content": "You answer in one short sentence."},
            {"role": "user", "content": "Will it rain in Bergen tomorrow?"}
        ],
        "stream": true,
    }))
    .unwrap();
    let mut stream = client.chat().create_stream(request).await.unwrap();
    let mut answer = String::new();
    while let Some(chunk) = stream.next().await {
        if let Some(text) = chunk
            .unwrap()
            .choices
            .first()
            .and_then(|c| c.delta.content.clone())
        {
            answer.push_str(&text);
        }
    }
    answer
}

#[test]
fn a_streamed_async_openai_call_is_shown_as_its_chat() {
    let Some(browser) = chromium() else { return };
    let dir = tempfile::tempdir().unwrap();
    let ui = UiServer::start(UiOptions {
        listen: "127.0.0.1:0".parse().unwrap(),
        otlp: Some("127.0.0.1:0".parse().unwrap()),
        otlp_grpc: None,
        store: dir.path().join("store.redb"),
        follow: Vec::new(),
        poll: Duration::from_millis(50),
        ..UiOptions::default()
    })
    .unwrap();
    let guard = waxell::builder()
        .with_env(|_| None)
        .with_otlp_endpoint(format!("{}/v1/traces", ui.otlp_endpoint().unwrap()))
        .init()
        .unwrap();
    let server = FakeLlm::start(vec![LlmReply::Sse {
        events: chat_chunks("gpt-4o-mini", Some("Yes, bring an umbrella."), None, (41, 7)),
        done: true,
        gap: Duration::from_millis(5),
    }]);
    let client = Client::with_config(
        OpenAIConfig::new()
            .with_api_base(server.base_url())
            .with_api_key("test"),
    )
    .with_http_service(waxell::integrations::async_openai::service());
    // The UI runs its own runtime, which must not be dropped inside another: only the call gets one.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    assert_eq!(runtime.block_on(forecast(client)), "Yes, bring an umbrella.");
    drop(runtime);
    let counter = guard.drop_counter();
    let shut = guard.shutdown();
    assert!(
        shut.is_ok(),
        "every span reached the UI: {shut:?}, last error {:?}",
        counter.last_error()
    );

    let deadline = Instant::now() + Duration::from_secs(20);
    let (trace, chat) = loop {
        let (runs, _) = ui.store().runs(&RunFilter::default()).unwrap();
        let found = runs.iter().find(|r| r.root_seen).and_then(|run| {
            let (_, spans) = ui.store().run(&run.trace_id).unwrap()?;
            let chat = spans.into_iter().find(|s| s.name == "chat gpt-4o-mini")?;
            Some((run.trace_id.clone(), chat.span_id))
        });
        if let Some(found) = found {
            break found;
        }
        assert!(Instant::now() < deadline, "the run did not arrive in the UI");
        std::thread::sleep(Duration::from_millis(100));
    };
    let page = dump_dom(&browser, &format!("{}#span={chat}", ui.run_url(&trace)));
    for text in [
        "Chat",
        ">system<",
        "You answer in one short sentence.",
        ">user<",
        "Will it rain in Bergen tomorrow?",
        ">assistant",
        "Yes, bring an umbrella.",
        "gpt-4o-mini",
        "41 in / 7 out",
        "time to first chunk",
    ] {
        assert!(page.contains(text), "the chat view lacks {text:?}\n{page}");
    }
    ui.shutdown();
}
