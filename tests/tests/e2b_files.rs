//! E2B's filesystem surface (metadata, directory watches, signed URLs, Remove and ListDir as envd
//! answers them) through the official Python SDK against an in-process `waxell-sandbox serve`:
//! tests/e2b_files.py must pass on the local backend and on the container backend (the engine at
//! DOCKER_HOST, scripts/setup-container.sh), where the watch runs inside the container, and under
//! gVisor.

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
    // Each local sandbox shows a boot id of its own (runc shows the host's).
    run_script(e2b_support::local_backend(), &["--own-boot-id"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_python_sdk_uses_metadata_watches_and_signed_urls_against_containers() {
    if let Some(backend) = e2b_support::container_backend_at("DOCKER_HOST", None).await {
        run_script(Arc::new(backend), &[]).await;
    }
}

/// Under gVisor the scratch volumes refuse extended attributes, so the metadata is in a store
/// volume (not visible to the code as attributes); each sandbox has a boot id of its own there, as
/// on the local backend; everything else holds as under runc.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_python_sdk_uses_metadata_watches_and_signed_urls_under_gvisor() {
    if let Some(backend) = e2b_support::container_backend_at("WAXELL_RUNSC_DOCKER_HOST", Some("runsc")).await
    {
        run_script(Arc::new(backend), &["--metadata-store", "--own-boot-id"]).await;
    }
}
