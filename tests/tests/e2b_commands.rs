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

/// The same through E2B's official JS SDK (`e2b` from npm): tests/e2b_commands.mjs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_js_sdk_runs_commands_and_terminals() {
    let url = e2b_support::start_server(e2b_support::server_config()).await;
    e2b_support::run_js_script("e2b_commands.mjs", &[], &url, Duration::from_secs(180)).await;
}

/// The container backend (engine at DOCKER_HOST, scripts/setup-container.sh), or why not.
async fn container_server() -> Option<String> {
    container_server_at("DOCKER_HOST", None).await
}

/// The container backend on the engine named by `host_var`, under `runtime` (the engine's default
/// when `None`), or why not.
async fn container_server_at(host_var: &str, runtime: Option<&str>) -> Option<String> {
    let backend = e2b_support::container_backend_at(host_var, runtime).await?;
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

/// The same checks under gVisor (engine at WAXELL_RUNSC_DOCKER_HOST). With Podman, runsc refuses
/// the engine's terminal exec, so a terminal there is made by a relay in the sandbox: its size, a
/// resize reaching the foreground program as SIGWINCH, exit and kill must hold as with runc.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_python_sdk_runs_commands_and_terminals_under_gvisor() {
    let Some(url) = container_server_at("WAXELL_RUNSC_DOCKER_HOST", Some("runsc")).await else {
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

fn attribute(span: &opentelemetry_sdk::trace::SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.to_string())
}

/// waxell's own E2B client runs commands through the same RPCs: foreground (a traced
/// `run_command` span with the exit code, the bytes written and the scrubbed command and output),
/// stdin, and a background process killed with SIGKILL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_client_runs_commands_and_traces_them() {
    use waxell::sandbox::{ProcessSignal, ProcessSpec, Sandbox, SandboxOptions};

    let capture = waxell::testing::capture();
    let url = e2b_support::start_server(e2b_support::server_config()).await;
    let backend = waxell::e2b::E2bBackend::new(e2b_support::client_config(&url)).unwrap();
    let sandbox = Sandbox::create(&backend, &SandboxOptions::default())
        .await
        .unwrap();

    let secret = "sk-proj-abcdefghijklmnopqrstuvwxyz0123";
    let spec = ProcessSpec::shell(format!("echo hi; echo key={secret} >&2; exit 3"));
    let output = sandbox.run_command(&spec).await.unwrap();
    assert_eq!(
        (output.stdout_text().as_str(), output.exit.exit_code),
        ("hi\n", 3)
    );
    assert_eq!(
        output.stderr_text(),
        format!("key={secret}\n"),
        "the caller gets the real output"
    );
    assert_eq!(output.exit.status(), "exit status 3");

    let cat = sandbox
        .start_process(&ProcessSpec::new("cat").with_stdin(true))
        .await
        .unwrap();
    cat.control.write_stdin(b"through stdin").await.unwrap();
    cat.control.close_stdin().await.unwrap();
    let echoed = tokio::time::timeout(Duration::from_secs(20), cat.wait())
        .await
        .unwrap();
    assert_eq!(
        (echoed.stdout_text().as_str(), echoed.exit.exit_code),
        ("through stdin", 0)
    );

    let sleeper = sandbox
        .start_process(&ProcessSpec::shell("sleep 30"))
        .await
        .unwrap();
    sleeper.control.signal(ProcessSignal::Kill).await.unwrap();
    let killed = tokio::time::timeout(Duration::from_secs(20), sleeper.wait())
        .await
        .unwrap();
    assert_eq!(
        (killed.exit.exit_code, killed.exit.signal),
        (-1, Some(9)),
        "{killed:?}"
    );
    assert_eq!(killed.exit.status(), "signal: killed");

    let sleeper = sandbox
        .start_process(&ProcessSpec::shell("sleep 30"))
        .await
        .unwrap();
    sleeper.control.signal(ProcessSignal::Terminate).await.unwrap();
    let terminated = tokio::time::timeout(Duration::from_secs(20), sleeper.wait())
        .await
        .unwrap();
    assert_eq!(terminated.exit.status(), "signal: terminated", "{terminated:?}");
    sandbox.kill().await.unwrap();

    let spans: Vec<_> = capture
        .spans_named("execute_tool e2b.run_command")
        .iter()
        .map(|s| s.data().clone())
        .collect();
    assert_eq!(spans.len(), 1, "one span per run_command");
    let span = &spans[0];
    assert_eq!(attribute(span, "waxell.sandbox.exit_code").as_deref(), Some("3"));
    assert_eq!(
        attribute(span, "waxell.sandbox.output_bytes").as_deref(),
        Some(&*(3 + 5 + secret.len()).to_string())
    );
    assert_eq!(attribute(span, "error.type").as_deref(), Some("exit_status"));
    let command = attribute(span, "waxell.sandbox.command").unwrap();
    assert!(command.starts_with("/bin/bash -l -c echo hi;"), "{command}");
    let stderr = attribute(span, "waxell.sandbox.stderr").unwrap();
    for text in [&command, &stderr] {
        assert!(
            !text.contains(secret),
            "the secret is scrubbed from the span: {text}"
        );
    }
    assert_eq!(capture.spans_named("execute_tool sandbox.start_process").len(), 3);
}
