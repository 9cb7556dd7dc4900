//! async-openai traced by waxell with one line, run as a dry run against a fake OpenAI server on
//! 127.0.0.1 (no key, no network): `cargo run -p waxell-tests --example async_openai`.
//!
//! With a real key, drop the fake server and the `with_api_base` line.

use async_openai::config::OpenAIConfig;
use async_openai::types::chat::CreateChatCompletionRequest;
use serde_json::json;
use waxell_tests::fake_llm::{chat_completion, FakeLlm, LlmReply};

#[waxell::agent(name = "haiku_writer")]
async fn write_haiku(client: async_openai::Client<OpenAIConfig>) -> String {
    let request: CreateChatCompletionRequest = serde_json::from_value(json!({
        "model": "gpt-4o-mini",
        "messages": [{"role": "user", "content": "A haiku about tracing, please."}],
    }))
    .expect("a valid request");
    let response = client
        .chat()
        .create(request)
        .await
        .expect("the fake server answers");
    response.choices[0].message.content.clone().unwrap_or_default()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let _telemetry = waxell::init()?; // a trace tree on stderr unless OTEL_EXPORTER_OTLP_ENDPOINT is set
    let server = FakeLlm::start(vec![LlmReply::Json(
        200,
        chat_completion(
            "gpt-4o-mini",
            Some("Spans nest like leaves / one trace from agent to call / the cost, in cents"),
            &[],
            (24, 18),
        ),
    )]);
    let client = async_openai::Client::with_config(OpenAIConfig::new().with_api_base(server.base_url()))
        // The one line: every call of this client is recorded.
        .with_http_service(waxell::integrations::async_openai::service());
    println!("{}", write_haiku(client).await);
    Ok(())
}
