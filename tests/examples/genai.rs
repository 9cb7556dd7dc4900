//! genai's `tracing` spans recorded as waxell LLM spans by `waxell::tracing_layer()`, run as a dry run
//! against a fake OpenAI server on 127.0.0.1: `cargo run -p waxell-tests --example genai`.

use genai::adapter::AdapterKind;
use genai::chat::{ChatMessage, ChatRequest};
use genai::resolver::{AuthData, Endpoint, ServiceTargetResolver};
use genai::{Client, ModelIden, ServiceTarget};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use waxell_tests::fake_llm::FakeLlm;

#[waxell::agent(name = "greeter")]
async fn greet(client: Client) -> String {
    let request = ChatRequest::new(vec![ChatMessage::user("Say hello in French.")]);
    let response = client
        .exec_chat("gpt-4o-mini", request, None)
        .await
        .expect("the fake server answers");
    response.first_text().unwrap_or_default().to_owned()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let _telemetry = waxell::init()?;
    // The one line (waxell's tracing layer), in the subscriber the application sets up anyway.
    tracing_subscriber::registry()
        .with(waxell::tracing_layer())
        .init();

    let server = FakeLlm::greeting();
    let endpoint = format!("{}/", server.base_url());
    let resolver = ServiceTargetResolver::from_resolver_fn(move |target: ServiceTarget| {
        Ok(ServiceTarget {
            endpoint: Endpoint::from_owned(endpoint.clone()),
            auth: AuthData::from_single("dry-run"),
            model: ModelIden::new(AdapterKind::OpenAI, target.model.model_name),
        })
    });
    let client = Client::builder().with_service_target_resolver(resolver).build()?;
    println!("{}", greet(client).await);
    Ok(())
}
