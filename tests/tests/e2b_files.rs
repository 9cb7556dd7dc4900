//! E2B's filesystem surface (metadata, directory watches, signed URLs, Remove and ListDir as envd
//! answers them) through the official Python SDK against an in-process `waxell-sandbox serve`:
//! tests/e2b_files.py must pass on the local backend and on the container backend (the engine at
//! DOCKER_HOST, scripts/setup-container.sh), where the watch runs inside the container.

use std::sync::Arc;
use std::time::Duration;

use waxell_sandbox::server::router;

mod e2b_support;

async fn run_script(backend: Arc<dyn waxell::sandbox::SandboxBackend>, script: &str) -> (bool, String) {
    let python = e2b_support::peer_python();
    let config = e2b_support::server_config();
    let url = e2b_support::serve_with_limits(router(backend, config.clone()), config).await;
    let mut command = tokio::process::Command::new(&python);
    command
        .arg(e2b_support::repo_root().join(script))
        .env_remove("E2B_DEBUG")
        .env_remove("E2B_DOMAIN")
        .env("E2B_API_URL", &url)
        .env("E2B_SANDBOX_URL", &url)
        .env("E2B_API_KEY", e2b_support::API_KEY)
        .kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(240), command.output())
        .await
        .expect("the script took over 240 s")
        .expect("running the script");
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_python_sdk_uses_metadata_watches_and_signed_urls() {
    let (passed, output) = run_script(e2b_support::local_backend(), "tests/e2b_files.py").await;
    println!("{output}");
    assert!(passed && output.contains("all checks passed"), "{output}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_python_sdk_uses_metadata_watches_and_signed_urls_against_containers() {
    if let Some(why) = waxell_tests::container_engine_missing() {
        return eprintln!("skipped: {why}");
    }
    let config = waxell_sandbox::ContainerConfig::default().with_pool_size(1);
    let backend = waxell_sandbox::ContainerBackend::new(config)
        .await
        .expect("container backend (run scripts/setup-container.sh and export the DOCKER_HOST it prints)");
    let (passed, output) = run_script(Arc::new(backend), "tests/e2b_files.py").await;
    println!("{output}");
    assert!(passed && output.contains("all checks passed"), "{output}");
}
