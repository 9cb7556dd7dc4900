//! E2B's official Python SDK (`e2b`, in the venv of scripts/setup-e2b-peer.sh) running commands and
//! terminals in sandboxes of an in-process `waxell-sandbox serve` (envd's `process.Process` RPCs):
//! tests/e2b_commands.py must pass, on the local backend (root, and rootless in the rootless run
//! of scripts/test.sh) and the container backend.

use std::time::Duration;

mod e2b_support;

/// Foreground, background + connect + kill, stdin, env/cwd, timeout, and a real terminal (isatty,
/// TERM, size, a resize reaching the program as SIGWINCH, kill).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_python_sdk_runs_commands_and_terminals() {
    let url = e2b_support::start_server(e2b_support::server_config()).await;
    e2b_support::run_peer_script("e2b_commands.py", &[], &url, Duration::from_secs(180)).await;
}

/// A fork bomb, a memory bomb, a disk fill and a network call started with `commands.run` are held
/// by the sandbox's limits, and the sandbox keeps working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_are_held_by_the_sandbox_limits() {
    let url = e2b_support::start_server(e2b_support::server_config()).await;
    e2b_support::run_peer_script("e2b_commands.py", &["abuse"], &url, Duration::from_secs(240)).await;
}

/// The container backend (engine at DOCKER_HOST, scripts/setup-container.sh), or why not.
async fn container_server() -> Option<String> {
    if let Some(why) = waxell_tests::container_engine_missing() {
        eprintln!("skipped: {why}");
        return None;
    }
    let config = waxell_sandbox::ContainerConfig::default().with_pool_size(1);
    let backend = waxell_sandbox::ContainerBackend::new(config)
        .await
        .expect("container backend (run scripts/setup-container.sh and export the DOCKER_HOST it prints)");
    let config = e2b_support::server_config();
    let app = waxell_sandbox::server::router(std::sync::Arc::new(backend), config.clone());
    Some(e2b_support::serve_with_limits(app, config).await)
}

/// The same checks with each process an exec in the sandbox's container.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_python_sdk_runs_commands_and_terminals_in_containers() {
    let Some(url) = container_server().await else {
        return;
    };
    e2b_support::run_peer_script("e2b_commands.py", &[], &url, Duration::from_secs(240)).await;
}

/// The bombs through commands, held by the container's limits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_are_held_by_the_container_limits() {
    let Some(url) = container_server().await else {
        return;
    };
    e2b_support::run_peer_script("e2b_commands.py", &["abuse"], &url, Duration::from_secs(300)).await;
}
