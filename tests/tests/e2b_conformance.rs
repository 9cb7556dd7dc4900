//! The official E2B Python SDK (`e2b-code-interpreter`, in the venv of scripts/setup-e2b-peer.sh)
//! against an in-process `waxell-sandbox serve` on 127.0.0.1: tests/e2b_conformance.py must pass,
//! and the server must have been reached the way E2B's protocol says.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::Request;
use axum::middleware::{self, Next};
use axum::response::Response;
use waxell_sandbox::server::{router, ServerConfig};
use waxell_sandbox::{LocalBackend, LocalConfig};

mod e2b_support;

const API_KEY: &str = "e2b_0123456789abcdef";

/// What the server received: method, path, `E2b-Sandbox-Port`, whether `X-API-KEY` was right.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path: String,
    port: Option<String>,
    api_key_ok: bool,
    status: u16,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_python_sdk_passes_the_conformance_script() {
    let backend = LocalBackend::new(LocalConfig::default().with_pool_size(1))
        .expect("local sandbox backend (run scripts/setup-sandbox.sh)");
    conformance(Arc::new(backend)).await;
}

/// The same script against `serve --backend docker` (engine at DOCKER_HOST, scripts/setup-container.sh).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_python_sdk_passes_the_conformance_script_against_containers() {
    if let Some(why) = waxell_tests::container_engine_missing() {
        return eprintln!("skipped: {why}");
    }
    let config = waxell_sandbox::ContainerConfig::default().with_pool_size(1);
    let backend = waxell_sandbox::ContainerBackend::new(config)
        .await
        .expect("container backend (run scripts/setup-container.sh and export the DOCKER_HOST it prints)");
    conformance(Arc::new(backend)).await;
}

async fn conformance(backend: Arc<dyn waxell::sandbox::SandboxBackend>) {
    let python = e2b_support::peer_python();
    let config = ServerConfig::new()
        .with_api_key(API_KEY)
        .with_keepalive_interval(Duration::from_millis(500));
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let recorder = seen.clone();
    let app =
        router(backend, config.clone()).layer(middleware::from_fn(move |request: Request, next: Next| {
            let recorder = recorder.clone();
            async move {
                let headers = request.headers().clone();
                let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
                let mut entry = Seen {
                    method: request.method().to_string(),
                    path: request.uri().path().to_owned(),
                    port: header("e2b-sandbox-port"),
                    api_key_ok: header("x-api-key").as_deref() == Some(API_KEY),
                    status: 0,
                };
                drop(headers);
                let response: Response = next.run(request).await;
                entry.status = response.status().as_u16();
                recorder.lock().unwrap().push(entry);
                response
            }
        }));
    // Through the server's own connection layer (timeouts, caps), as `waxell-sandbox serve` runs.
    let url = e2b_support::serve_with_limits(app, config).await;
    let mut command = tokio::process::Command::new(&python);
    command
        .arg(e2b_support::repo_root().join("tests/e2b_conformance.py"))
        .env_remove("E2B_DEBUG")
        .env_remove("E2B_DOMAIN")
        .env("E2B_API_URL", &url)
        .env("E2B_SANDBOX_URL", &url)
        .env("E2B_API_KEY", API_KEY)
        .kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(240), command.output())
        .await
        .expect("the conformance script took over 240 s")
        .expect("running the conformance script");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}");
    eprintln!("{stderr}");
    assert!(
        output.status.success(),
        "conformance script failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    assert!(stdout.contains("all checks passed"), "{stdout}");

    let seen = seen.lock().unwrap().clone();
    let find = |method: &str, path: &dyn Fn(&str) -> bool, port: Option<&str>| {
        seen.iter()
            .filter(|s| s.method == method && path(&s.path) && s.port.as_deref() == port)
            .cloned()
            .collect::<Vec<_>>()
    };
    let created = find("POST", &|p| p == "/v2/sandboxes", None);
    assert_eq!(created.len(), 1, "one create on the control plane: {seen:#?}");
    assert!(created[0].api_key_ok && created[0].status == 201, "{created:?}");
    let executes = find("POST", &|p| p == "/execute", Some("49999"));
    assert!(executes.len() >= 10, "runs go to port 49999: {seen:#?}");
    assert!(!find("POST", &|p| p == "/contexts", Some("49999")).is_empty());
    assert!(!find("POST", &|p| p == "/files", Some("49983")).is_empty());
    assert!(!find("GET", &|p| p == "/files", Some("49983")).is_empty());
    assert!(!find("POST", &|p| p == "/filesystem.Filesystem/ListDir", Some("49983")).is_empty());
    let timeouts = find("POST", &|p| p.ends_with("/timeout"), None);
    assert!(
        timeouts.iter().any(|s| s.status == 204 && s.api_key_ok),
        "{timeouts:?}"
    );
    let kills = find("DELETE", &|p| p.starts_with("/sandboxes/"), None);
    assert!(kills.iter().any(|s| s.status == 204 && s.api_key_ok), "{kills:?}");
    // After the kill, data-plane calls get E2B's proxy answer for a missing sandbox.
    assert!(
        seen.iter().any(|s| s.port.is_some() && s.status == 502),
        "a data-plane request after kill answered 502: {seen:#?}"
    );
    // Nothing the SDK sent was malformed or unauthorised.
    let rejected: Vec<_> = seen
        .iter()
        .filter(|s| s.status == 400 || s.status == 401)
        .collect();
    assert!(rejected.is_empty(), "rejected requests: {rejected:#?}");
}
