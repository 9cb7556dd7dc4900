//! rig's agent runtime (`rig-agent`) inside a waxell `#[agent]`, recorded by `waxell::tracing_layer()`:
//! rig's run is the `#[agent]`'s, each model turn an LLM span with its tool-call decision, rig's tool
//! call a tool span. A dry run against a fake OpenAI server on 127.0.0.1 (no key, no network):
//! `cargo run -p waxell-tests --example rig_agent`.
//!
//! With a real key, drop the fake server and the `with_base_url` line.

use rig_agent::AgentBuilder;
use rig_core::providers::openai::OpenAIConfig;
use serde_json::json;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use waxell_tests::fake_llm::{chat_completion, FakeLlm, LlmReply};

#[path = "../tests/llm_support/rig_weather.rs"]
mod rig_weather;

#[waxell::agent(name = "weather")]
async fn forecast(base_url: String) -> String {
    let model = OpenAIConfig::new("dry-run")
        .with_base_url(base_url)
        .client()
        .chat("gpt-4o-mini");
    let agent = AgentBuilder::new(model)
        .name("weather")
        .preamble("You report the weather.")
        .tool(rig_weather::Weather { note: String::new() })
        // rig records messages and answers only when asked; waxell's content policy then applies.
        .record_content_telemetry(true)
        .build();
    agent
        .prompt("What is the weather in Paris?")
        .max_turns(2)
        .await
        .expect("the fake server answers")
        .to_string()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let _telemetry = waxell::init()?;
    // The one line (waxell's tracing layer), in the subscriber the application sets up anyway.
    tracing_subscriber::registry()
        .with(tracing_subscriber::filter::LevelFilter::INFO)
        .with(waxell::tracing_layer())
        .init();

    // The model asks for the tool, then answers with its result.
    let server = FakeLlm::start(vec![
        LlmReply::Json(
            200,
            chat_completion(
                "gpt-4o-mini",
                None,
                &[("call_1", "get_weather", json!({"city": "Paris"}))],
                (120, 18),
            ),
        ),
        LlmReply::Json(
            200,
            chat_completion("gpt-4o-mini", Some("It is sunny in Paris."), &[], (160, 9)),
        ),
    ]);
    println!("{}", forecast(server.base_url()).await);
    Ok(())
}
