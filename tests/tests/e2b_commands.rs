//! E2B's official Python SDK (`e2b`, in the venv of scripts/setup-e2b-peer.sh) running commands and
//! terminals in sandboxes of an in-process `waxell-sandbox serve` (envd's `process.Process` RPCs):
//! tests/e2b_commands.py must pass, on the local backend (and on containers where the backend
//! has processes).

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
