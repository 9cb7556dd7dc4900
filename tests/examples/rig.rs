//! rig-core's `tracing` spans recorded as waxell LLM spans by `waxell::tracing_layer()`, run as a dry
//! run against a fake OpenAI server on 127.0.0.1 (no key, no network): `cargo run -p waxell-tests
//! --example rig`.
//!
//! With a real key, drop the fake server and the `with_base_url` line.

use rig_core::completion::CompletionRequest;
use rig_core::providers::openai::OpenAIConfig;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use waxell_tests::fake_llm::FakeLlm;

#[waxell::agent(name = "greeter")]
async fn greet(model: rig_core::Model<rig_core::providers::openai::wire::Chat>) -> String {
    model
        .call(CompletionRequest::new("Say hello in French."))
        .await
        .expect("the fake server answers")
        .text()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let _telemetry = waxell::init()?;
    // The one line (waxell's tracing layer), in the subscriber the application sets up anyway.
    tracing_subscriber::registry()
        .with(waxell::tracing_layer())
        .init();

    let server = FakeLlm::greeting();
    let model = OpenAIConfig::new("dry-run")
        .with_base_url(server.base_url())
        .client()
        .chat("gpt-4o-mini");
    println!("{}", greet(model).await);
    Ok(())
}
