//! E2B's filesystem surface (metadata, directory watches, signed URLs, Remove and ListDir as envd
//! answers them) through the official Python SDK against an in-process `waxell-sandbox serve`:
//! tests/e2b_files.py must pass on the local backend and on the container backend (the engine at
//! DOCKER_HOST, scripts/setup-container.sh), where the watch runs inside the container.

use std::sync::Arc;
use std::time::Duration;

use waxell_sandbox::server::router;

mod e2b_support;

/// tests/e2b_files.py against `serve` over `backend` (`args`: the script's options).
async fn run_script(backend: Arc<dyn waxell::sandbox::SandboxBackend>, args: &[&str]) {
    let config = e2b_support::server_config();
    let url = e2b_support::serve_with_limits(router(backend, config.clone()), config).await;
    e2b_support::run_peer_script("e2b_files.py", args, &url, Duration::from_secs(240)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_python_sdk_uses_metadata_watches_and_signed_urls() {
    // Each local sandbox shows a boot id of its own (runc shows the host's, runsc none).
    run_script(e2b_support::local_backend(), &["--own-boot-id"]).await;
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
    run_script(Arc::new(backend), &[]).await;
}
