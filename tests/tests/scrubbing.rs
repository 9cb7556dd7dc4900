//! Secret scrubbing end to end: every kind of secret is planted in every kind of captured content (tool
//! arguments, results and errors, agent input and output, LLM messages and tool calls, sandbox code, output and
//! errors), exported over real OTLP/HTTP, and the raw request bytes that reached the collector are searched
//! for each secret. Decoding is only used to check that the content did arrive (scrubbed, with its tag).

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message as _;
use serde_json::json;
use waxell::llm::{ChatRequest, Client, Message, ScriptedReply, ScriptedTransport};
use waxell::{agent, tool};
use waxell_tests::faults::{Fault, FaultServer};

/// (kind tag, text planted, the secret part that must never be exported).
fn planted() -> Vec<(&'static str, String, String)> {
    let plain = |kind: &'static str, secret: &str| (kind, secret.to_owned(), secret.to_owned());
    let google = format!("AIza{}", "SyPlantedGoogleKey_0123456789abcdef");
    assert_eq!(google.len(), 39, "AIza + 35 characters");
    vec![
        plain("OPENAI_KEY", "sk-proj-PlantedOpenAiKey0123456789abcdef"),
        plain("ANTHROPIC_KEY", "sk-ant-api03-PlantedAnthropicKey0123456789"),
        plain("E2B_KEY", "e2b_PlantedE2bKey0123456789abcdef"),
        plain("AWS_ACCESS_KEY", "AKIAPLANTEDAWSKEY012"),
        plain("GITHUB_TOKEN", "ghp_PlantedGithubToken0123456789abcdefgh"),
        plain("SLACK_TOKEN", "xoxb-2048-PlantedSlackToken01"),
        plain("STRIPE_KEY", "sk_live_PlantedStripeKey0123456789"),
        ("GOOGLE_API_KEY", google.clone(), google),
        plain(
            "JWT",
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJwbGFudGVkIn0.c2lnbmF0dXJlUGxhbnRlZA",
        ),
        (
            "BEARER",
            "Authorization: Bearer PlantedBearerToken0123".into(),
            "PlantedBearerToken0123".into(),
        ),
        (
            "PRIVATE_KEY",
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEPlantedPrivateKeyBody0123\n-----END RSA PRIVATE KEY-----"
                .into(),
            "MIIEPlantedPrivateKeyBody0123".into(),
        ),
        (
            "connection string",
            "postgres://app:PlantedDbPassw0rd@db.internal:5432/sales".into(),
            "PlantedDbPassw0rd".into(),
        ),
        (
            "password=",
            "password=PlantedInlinePassword".into(),
            "PlantedInlinePassword".into(),
        ),
    ]
}

/// Values under sensitive keys (JSON objects and parameter names).
const KEYED: &[(&str, &str)] = &[
    ("password", "PlantedKeyedPassword"),
    ("secret", "PlantedKeyedSecret"),
    ("token", "PlantedKeyedToken"),
    ("api_key", "PlantedKeyedApiKey"),
    ("authorization", "PlantedKeyedAuthorization"),
];

/// All planted texts in one string.
fn all_text() -> String {
    planted()
        .iter()
        .map(|(_, text, _)| text.as_str())
        .collect::<Vec<_>>()
        .join(" | ")
}

fn keyed_json() -> serde_json::Value {
    KEYED
        .iter()
        .map(|(k, v)| ((*k).to_owned(), json!(v)))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

#[tool]
fn call_service(config: serde_json::Value, password: String, note: String) -> String {
    // The result carries every secret again (a bare value without a label or a known shape cannot be told
    // from ordinary text, so the password comes back labelled).
    format!(
        "called with {} chars of config; {note}; password: {password}",
        config.to_string().len()
    )
}

#[tool]
fn failing_service(note: String) -> Result<String, String> {
    Err(format!("upstream refused: {note}"))
}

async fn llm_calls() {
    let text = all_text();
    let script = ScriptedTransport::new([
        ScriptedReply::tool_call("call_service", json!({"note": text, "credentials": keyed_json()}))
            .with_text(format!("I will use {text}")),
        ScriptedReply::text(format!("done: {text}")),
    ]);
    let client = Client::builder()
        .with_transport(script)
        .with_model("gpt-4o-mini")
        .build()
        .unwrap();
    let request = ChatRequest::new([
        Message::system(format!("You hold these: {text}")),
        Message::user(format!("Use {text}")),
    ]);
    let first = client.chat(request).await.expect("scripted reply");
    assert!(!first.tool_calls().is_empty());
    let followup = ChatRequest::new([
        Message::user(format!("Use {text}")),
        Message::assistant_tool_calls(first.tool_calls().to_vec()),
        Message::tool(first.tool_calls()[0].id.clone(), format!("tool said {text}")),
    ]);
    client.chat(followup).await.expect("scripted reply");
}

/// Run code holding every secret in the local sandbox, if this machine can run one.
async fn sandbox_calls() -> bool {
    use waxell::sandbox::{RunOptions, Sandbox, SandboxOptions};
    let backend =
        match waxell_sandbox::LocalBackend::new(waxell_sandbox::LocalConfig::default().with_pool_size(1)) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("SKIPPED the sandbox part: {e}");
                return false;
            }
        };
    let sandbox = Sandbox::create(&backend, &SandboxOptions::new())
        .await
        .expect("create a local sandbox");
    let secrets = serde_json::to_string(&all_text()).unwrap();
    let code = format!(
        "import sys\n# keys: {}\nsecrets = {secrets}\nprint(secrets)\nprint(secrets, file=sys.stderr)\nsecrets\n",
        all_text().replace('\n', " ")
    );
    let run = sandbox
        .run_code(&code, &RunOptions::default())
        .await
        .expect("run code");
    assert!(run.stdout().contains("PlantedOpenAiKey"), "the code ran: {run:?}");
    let failing = format!("raise ValueError({secrets})\n");
    let failed = sandbox
        .run_code(&failing, &RunOptions::default())
        .await
        .expect("run code");
    assert!(failed.error.is_some(), "the error is reported: {failed:?}");
    let _ = sandbox.kill().await;
    true
}

#[agent(name = "secret-holder")]
async fn secret_agent(brief: String) -> String {
    let mut config = keyed_json();
    config["nested"] = json!({"password": "PlantedKeyedPassword", "dsn": all_text()});
    let result = call_service(config, "PlantedKeyedPassword".into(), all_text());
    let _ = failing_service(all_text());
    llm_calls().await;
    waxell::score_with_comment("safety", 1.0, all_text());
    format!("{brief} -> {result}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_planted_secret_reaches_the_exported_bytes() {
    waxell_tests::own_process!();
    let server = FaultServer::start(Fault::Healthy);
    let guard = waxell::builder()
        .with_otlp_endpoint(server.traces_url())
        .init()
        .unwrap();
    let output = secret_agent(format!("brief: {}", all_text())).await;
    assert!(
        output.contains("PlantedOpenAiKey"),
        "telemetry never changes the user's value"
    );
    let sandboxed = sandbox_calls().await;
    tokio::task::spawn_blocking(move || guard.shutdown())
        .await
        .unwrap()
        .unwrap();

    let bodies = server.bodies();
    assert!(!bodies.is_empty(), "spans arrived");
    // Every byte that reached the collector, metrics included.
    let raw: Vec<u8> = bodies.iter().flat_map(|(_, body)| body.iter().copied()).collect();
    let mut spans = Vec::new();
    for (_, body) in bodies.iter().filter(|(path, _)| path == "/v1/traces") {
        let request = ExportTraceServiceRequest::decode(body.as_slice()).expect("valid OTLP protobuf");
        for rs in request.resource_spans {
            for ss in rs.scope_spans {
                spans.extend(ss.spans);
            }
        }
    }
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    for expected in [
        "invoke_agent secret-holder",
        "execute_tool call_service",
        "execute_tool failing_service",
    ] {
        assert!(names.contains(&expected), "{expected} arrived: {names:?}");
    }
    assert!(
        names.iter().filter(|n| n.starts_with("chat ")).count() >= 2,
        "{names:?}"
    );
    if sandboxed {
        assert!(names.iter().any(|n| n.contains("run_code")), "{names:?}");
    }

    let contains = |needle: &str| raw.windows(needle.len()).any(|w| w == needle.as_bytes());
    let mut leaked = Vec::new();
    for (kind, _, secret) in planted() {
        if contains(&secret) {
            leaked.push(format!("{kind}: {secret}"));
        }
    }
    for (key, value) in KEYED {
        if let Some(at) = raw.windows(value.len()).position(|w| w == value.as_bytes()) {
            let context =
                String::from_utf8_lossy(&raw[at.saturating_sub(120)..(at + 60).min(raw.len())]).into_owned();
            leaked.push(format!("value under {key}: {value} in {context:?}"));
        }
    }
    assert!(leaked.is_empty(), "secrets in the exported bytes: {leaked:#?}");
    // The content itself did arrive, scrubbed: the tags name the kinds.
    for tag in [
        "OPENAI_KEY",
        "ANTHROPIC_KEY",
        "JWT",
        "PRIVATE_KEY",
        "AWS_ACCESS_KEY",
    ] {
        assert!(contains(&format!("[REDACTED:{tag}]")), "tag {tag} in the export");
    }
}
