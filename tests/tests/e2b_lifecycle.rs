//! A sandbox's life (pause and resume, auto-pause, fork, snapshots, metrics, lists, route errors)
//! through the official E2B Python and JS SDKs (the venv and directory of
//! scripts/setup-e2b-peer.sh) against an in-process `waxell-sandbox serve` on 127.0.0.1:
//! tests/e2b_lifecycle.py and tests/e2b_lifecycle.mjs must pass. And a paused sandbox and a
//! snapshot survive a restart of the server over the same state directory.

use std::sync::Arc;
use std::time::Duration;

use waxell_sandbox::server::{router, ServerConfig};

mod e2b_support;

use e2b_support::{client_config, local_backend, server_config, start_server, API_KEY};
use opentelemetry::{Array, StringValue, Value};
use waxell::e2b::E2bBackend;
use waxell::sandbox::{Sandbox, SandboxBackend, SandboxError, SandboxOptions};

fn config(state_dir: &std::path::Path) -> ServerConfig {
    ServerConfig::new()
        .with_api_key(API_KEY)
        .with_keepalive_interval(Duration::from_millis(500))
        .with_state_dir(state_dir)
}

/// Run tests/e2b_lifecycle.py with `args` against `url`; its stdout, after asserting it passed.
async fn script(url: &str, args: &[&str]) -> String {
    e2b_support::run_peer_script("e2b_lifecycle.py", args, url, Duration::from_secs(300)).await
}

/// Serve the local backend until `stop` resolves; returns the URL and the server's task.
async fn start(
    config: ServerConfig,
    stop: tokio::sync::oneshot::Receiver<()>,
) -> (String, tokio::task::JoinHandle<std::io::Result<()>>) {
    start_with(local_backend(), config, stop).await
}

async fn start_with(
    backend: Arc<dyn SandboxBackend>,
    config: ServerConfig,
    stop: tokio::sync::oneshot::Receiver<()>,
) -> (String, tokio::task::JoinHandle<std::io::Result<()>>) {
    let app = router(backend, config.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        waxell_sandbox::server::serve(listener, app, &config, async {
            let _ = stop.await;
        })
        .await
    });
    (url, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_python_sdk_pauses_resumes_forks_snapshots_and_lists() {
    let state = tempfile::tempdir().unwrap();
    let (_stop, stopped) = tokio::sync::oneshot::channel();
    let (url, _server) = start(config(state.path()), stopped).await;
    let stdout = script(&url, &["all"]).await;
    assert!(stdout.contains("all checks passed"), "{stdout}");
    // Everything the script made it also removed: no paused sandbox or snapshot is left on disk.
    for kind in ["paused", "snapshots"] {
        let left: Vec<_> = std::fs::read_dir(state.path().join(kind)).unwrap().collect();
        assert!(left.is_empty(), "{kind} left in the state directory: {left:?}");
    }
}

/// The same script against `serve --backend docker` (engine at DOCKER_HOST, scripts/setup-container.sh):
/// every backend pauses, snapshots and forks through its file calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_python_sdk_lifecycle_against_containers() {
    if let Some(why) = waxell_tests::container_engine_missing() {
        return eprintln!("skipped: {why}");
    }
    let backend =
        waxell_sandbox::ContainerBackend::new(waxell_sandbox::ContainerConfig::default().with_pool_size(1))
            .await
            .expect(
                "container backend (run scripts/setup-container.sh and export the DOCKER_HOST it prints)",
            );
    let state = tempfile::tempdir().unwrap();
    let (_stop, stopped) = tokio::sync::oneshot::channel();
    let (url, _server) = start_with(Arc::new(backend), config(state.path()), stopped).await;
    let stdout = script(&url, &["all"]).await;
    assert!(stdout.contains("all checks passed"), "{stdout}");
}

/// The container backend under gVisor on Docker Engine (WAXELL_DOCKER_ENGINE_HOST; started with
/// `--experimental` by scripts/setup-container.sh), without a warm pool (the script counts the
/// server's containers), after checking it keeps memory; `None` when the engine is not set.
async fn gvisor_on_docker_engine() -> Option<Arc<dyn SandboxBackend>> {
    if let Some(why) = waxell_tests::container_engine_missing_at("WAXELL_DOCKER_ENGINE_HOST") {
        eprintln!("skipped: {why}");
        return None;
    }
    let config = waxell_sandbox::ContainerConfig::default()
        .with_pool_size(0)
        .with_docker_host(std::env::var("WAXELL_DOCKER_ENGINE_HOST").unwrap())
        .with_runtime("runsc");
    let backend = waxell_sandbox::ContainerBackend::new(config)
        .await
        .expect("container backend on Docker Engine (run scripts/setup-container.sh)");
    let report = backend.report();
    let pause = report
        .check(waxell_sandbox::Feature::PauseMemory)
        .expect("the report says what a pause keeps");
    assert!(
        report.enforces(waxell_sandbox::Feature::PauseMemory),
        "{}",
        pause.detail
    );
    Some(Arc::new(backend))
}

/// The same life through E2B's official JS SDK (`e2b` from npm): pause and resume three times,
/// auto-pause then connect, fork, a snapshot and a sandbox from it, metrics, and lists read page by
/// page with the metadata and state filters (tests/e2b_lifecycle.mjs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_js_sdk_pauses_forks_snapshots_and_lists() {
    let state = tempfile::tempdir().unwrap();
    let (_stop, stopped) = tokio::sync::oneshot::channel();
    let (url, _server) = start(config(state.path()), stopped).await;
    e2b_support::run_js_script("e2b_lifecycle.mjs", &["all"], &url, Duration::from_secs(300)).await;
}

/// E2B's default pause keeps memory under gVisor on Docker Engine: three pauses and resumes keep a
/// variable, a background process's count and the files, no container runs while paused; commands
/// and terminals live on across a pause and a fork (tests/e2b_lifecycle.py `memory`, and through
/// the JS SDK tests/e2b_lifecycle.mjs `memory`); and a new
/// server over the same state directory resumes a sandbox paused with memory by the one before,
/// memory and a command waiting for input included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_python_sdk_pauses_with_memory_under_gvisor_on_docker_engine() {
    let Some(backend) = gvisor_on_docker_engine().await else {
        return;
    };
    let state = tempfile::tempdir().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel();
    let (url, server) = start_with(backend, config(state.path()), stopped).await;
    script(&url, &["memory", &std::process::id().to_string()]).await;
    e2b_support::run_js_script("e2b_lifecycle.mjs", &["memory"], &url, Duration::from_secs(300)).await;
    let stdout = script(&url, &["memory-pause-for-restart"]).await;
    let line = stdout
        .lines()
        .find(|l| l.starts_with("paused "))
        .expect("the script names what it paused");
    let sandbox_id = line.trim_start_matches("paused ").trim().to_owned();
    let pid = stdout
        .lines()
        .find_map(|l| l.strip_prefix("process "))
        .expect("the script names the command it left waiting")
        .trim()
        .to_owned();
    let kept = state.path().join("paused").join(&sandbox_id);
    let record = std::fs::read_to_string(kept.join("record.json")).unwrap();
    let parsed: serde_json::Value = serde_json::from_str(&record).unwrap();
    assert!(
        parsed["memory"]["kernels"].is_array(),
        "paused with its checkpoint: {record}"
    );
    assert_eq!(
        parsed["memory"]["processes"][0]["owner"]["pid"].to_string(),
        pid,
        "the command is in the checkpoint: {record}"
    );
    assert!(
        kept.join("image").is_dir() && kept.join("home").is_dir(),
        "the image and files are in the state directory"
    );

    stop.send(()).unwrap();
    server.await.unwrap().unwrap();
    let Some(backend) = gvisor_on_docker_engine().await else {
        return;
    };
    let (_stop, stopped) = tokio::sync::oneshot::channel();
    let (url, _server) = start_with(backend, config(state.path()), stopped).await;
    script(&url, &["memory-resume-after-restart", &sandbox_id, &pid]).await;
    assert!(
        !kept.exists(),
        "resumed: its checkpoint is gone from the state directory"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_sandbox_and_a_snapshot_survive_a_restart() {
    let state = tempfile::tempdir().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel();
    let (url, server) = start(config(state.path()), stopped).await;
    let stdout = script(&url, &["pause-for-restart"]).await;
    let line = stdout
        .lines()
        .find(|l| l.starts_with("paused "))
        .expect("the script names what it paused");
    let ids: Vec<&str> = line.split_whitespace().skip(1).collect();
    let [sandbox_id, snapshot_id] = ids[..] else {
        panic!("{line}")
    };

    // Stop the server as SIGTERM does, and start a new one over the same state directory.
    stop.send(()).unwrap();
    server.await.unwrap().unwrap();
    assert!(state
        .path()
        .join("paused")
        .join(sandbox_id)
        .join("record.json")
        .exists());
    let (_stop, stopped) = tokio::sync::oneshot::channel();
    let (url, _server) = start(config(state.path()), stopped).await;
    let stdout = script(&url, &["resume-after-restart", sandbox_id, snapshot_id]).await;
    assert!(stdout.contains("all checks passed"), "{stdout}");
    assert!(
        !state.path().join("paused").join(sandbox_id).exists(),
        "resumed: its saved files are gone"
    );
}

/// waxell's own E2B client: pause, resume, snapshots, fork and metrics through the traced
/// `Sandbox` wrapper.
#[tokio::test]
async fn the_rust_client_pauses_resumes_snapshots_forks_and_reads_metrics_in_spans() {
    let capture = waxell::testing::capture();
    let url = start_server(server_config()).await;
    let backend = E2bBackend::new(client_config(&url)).unwrap();
    let options = SandboxOptions::new().with_timeout(Duration::from_secs(120));
    let sandbox = Sandbox::create(&backend, &options).await.unwrap();
    sandbox.write_file("kept.txt", b"through a pause").await.unwrap();
    let metrics = sandbox.metrics().await.unwrap();
    assert!(
        metrics.mem_used > 0 && metrics.mem_used < metrics.mem_total,
        "{metrics:?}"
    );
    assert!(metrics.disk_used > 0 && metrics.cpu_count >= 1, "{metrics:?}");

    sandbox.pause().await.unwrap();
    let paused = sandbox.run_code("1", &Default::default()).await;
    assert!(paused.is_err(), "a paused sandbox runs nothing: {paused:?}");
    assert!(
        sandbox.metrics().await.is_err(),
        "a paused sandbox has no metrics"
    );
    sandbox.resume(Duration::from_secs(60)).await.unwrap();
    assert_eq!(sandbox.read_file("kept.txt").await.unwrap(), b"through a pause");
    assert_eq!(
        sandbox
            .run_code("6 * 7", &Default::default())
            .await
            .unwrap()
            .text(),
        Some("42")
    );

    // A snapshot keeps the files as they were when it was taken.
    let snapshot = sandbox.snapshot(Some("rust-client")).await.unwrap();
    assert!(snapshot.id.starts_with("snapshot-"), "{snapshot:?}");
    assert_eq!(snapshot.names, ["rust-client"]);
    sandbox
        .write_file("kept.txt", b"after the snapshot")
        .await
        .unwrap();
    let from_snapshot = Sandbox::create(&backend, &options.clone().with_template(&snapshot.id))
        .await
        .unwrap();
    assert_ne!(from_snapshot.sandbox_id(), sandbox.sandbox_id());
    assert_eq!(
        from_snapshot.read_file("kept.txt").await.unwrap(),
        b"through a pause"
    );
    from_snapshot.kill().await.unwrap();
    assert!(backend.delete_snapshot(&snapshot.id).await.unwrap(), "deleted");
    assert!(
        !backend.delete_snapshot(&snapshot.id).await.unwrap(),
        "deleted once only"
    );
    let deleted = Sandbox::create(&backend, &options.clone().with_template(&snapshot.id)).await;
    assert!(
        matches!(deleted, Err(SandboxError::NotFound(_))),
        "a deleted snapshot starts nothing: {deleted:?}"
    );

    // Forks start with the files as they are now, and each has its own.
    let forks: Vec<Sandbox> = sandbox
        .fork(2, Duration::from_secs(60))
        .await
        .unwrap()
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(forks.len(), 2);
    let fork_ids: Vec<String> = forks.iter().map(|f| f.sandbox_id().to_owned()).collect();
    assert!(
        fork_ids[0] != fork_ids[1] && !fork_ids.iter().any(|id| id == sandbox.sandbox_id()),
        "{fork_ids:?}"
    );
    for fork in &forks {
        assert_eq!(fork.backend(), "e2b");
        assert_eq!(fork.read_file("kept.txt").await.unwrap(), b"after the snapshot");
    }
    forks[0]
        .write_file("kept.txt", b"in the first fork")
        .await
        .unwrap();
    assert_eq!(
        forks[0].read_file("kept.txt").await.unwrap(),
        b"in the first fork"
    );
    assert_eq!(
        forks[1].read_file("kept.txt").await.unwrap(),
        b"after the snapshot"
    );
    assert_eq!(
        sandbox.read_file("kept.txt").await.unwrap(),
        b"after the snapshot"
    );
    for fork in &forks {
        fork.kill().await.unwrap();
    }
    sandbox.kill().await.unwrap();
    let of_killed = sandbox.fork(1, Duration::from_secs(60)).await;
    assert!(
        matches!(of_killed, Err(SandboxError::NotFound(_))),
        "a killed sandbox forks nothing: {of_killed:?}"
    );

    for name in [
        "execute_tool sandbox.pause",
        "execute_tool sandbox.resume",
        "execute_tool sandbox.metrics",
    ] {
        let spans = capture.spans_named(name);
        assert!(!spans.is_empty(), "no span {name}: {:?}", capture.names());
        for span in spans {
            assert_eq!(
                span.attr("waxell.sandbox.backend")
                    .map(|v| v.to_string())
                    .as_deref(),
                Some("e2b"),
                "{name}"
            );
        }
    }
    let metrics_spans = capture.spans_named("execute_tool sandbox.metrics");
    assert!(
        metrics_spans[0].attr("waxell.sandbox.mem_used").is_some(),
        "the metrics span carries the figures"
    );

    let snapshot_span = capture.span("execute_tool sandbox.snapshot");
    snapshot_span
        .assert_attr("waxell.sandbox.snapshot.id", snapshot.id.clone())
        .assert_attr("waxell.sandbox.id", sandbox.sandbox_id().to_owned());
    assert!(!snapshot_span.is_error());
    let fork_spans = capture.spans_named("execute_tool sandbox.fork");
    assert_eq!(fork_spans.len(), 2, "{:?}", capture.names());
    let (failed, forked): (Vec<_>, Vec<_>) = fork_spans.into_iter().partition(|s| s.is_error());
    let ids = Value::Array(Array::String(
        fork_ids.into_iter().map(StringValue::from).collect(),
    ));
    forked[0]
        .assert_attr("waxell.sandbox.fork.count", 2i64)
        .assert_attr("waxell.sandbox.fork.ids", ids)
        .assert_no_attr("error.type");
    failed[0]
        .assert_attr("waxell.sandbox.fork.count", 1i64)
        .assert_attr("error.type", "not_found")
        .assert_no_attr("waxell.sandbox.fork.ids");
}

/// With `refuse_memory_pause`, a pause asking for memory (E2B's default) is refused with 501, as is
/// an auto-pause that would ask for it; `memory: false` pauses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_refusing_memory_pauses_says_so() {
    let url = start_server(server_config().with_refuse_memory_pause(true)).await;
    let client = reqwest::Client::new();
    let call = |method: reqwest::Method, path: &str| {
        client
            .request(method, format!("{url}{path}"))
            .header("X-API-KEY", API_KEY)
    };
    let created: serde_json::Value = call(reqwest::Method::POST, "/v2/sandboxes")
        .json(&serde_json::json!({"templateID": "base", "timeout": 60}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = created["sandboxID"].as_str().unwrap().to_owned();
    let pause = format!("/sandboxes/{id}/pause");

    let refused = call(reqwest::Method::POST, &pause)
        .json(&serde_json::json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 501);
    let body: serde_json::Value = refused.json().await.unwrap();
    assert_eq!(body["code"], 501);
    assert!(
        body["message"].as_str().unwrap().contains("memory: false"),
        "{body}"
    );

    let paused = call(reqwest::Method::POST, &pause)
        .json(&serde_json::json!({"memory": false}))
        .send()
        .await
        .unwrap();
    assert_eq!(paused.status(), 204);
    assert_eq!(paused.headers()["waxell-pause"], "filesystem");
    assert!(
        paused.headers().get("warning").is_none(),
        "memory was not asked for"
    );
    let again = call(reqwest::Method::POST, &pause)
        .json(&serde_json::json!({"memory": false}))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 409, "already paused");

    let auto = call(reqwest::Method::POST, "/v2/sandboxes")
        .json(&serde_json::json!({"templateID": "base", "autoPause": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        auto.status(),
        501,
        "autoPause keeping memory is refused at create"
    );
    let files_only = call(reqwest::Method::POST, "/v2/sandboxes")
        .json(&serde_json::json!({"templateID": "base", "autoPause": true, "autoPauseMemory": false}))
        .send()
        .await
        .unwrap();
    assert_eq!(files_only.status(), 201);
    let killed = call(reqwest::Method::DELETE, &format!("/sandboxes/{id}"))
        .send()
        .await
        .unwrap();
    assert_eq!(killed.status(), 204, "a paused sandbox is killed");
}
