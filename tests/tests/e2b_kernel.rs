//! The code interpreter's kernel through E2B's official SDKs against an in-process `waxell-sandbox
//! serve` on the local backend and on the container backend (scripts/setup-container.sh's image,
//! under runc and under gVisor): tests/e2b_kernel.py (Python SDK) and tests/e2b_kernel.mjs (JS SDK)
//! must pass. They cover IPython's behaviour (one message per print, dedent, `!cmd`, magics,
//! display()), DataFrame data and chart results, JavaScript, TypeScript, bash and Java contexts (R
//! refused with the reason when the host has none), contexts as E2B lists them, any cwd, and a kill
//! mid-run ending the run with an error. One server per backend serves both scripts.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use waxell_sandbox::{ContainerBackend, ContainerConfig, Language, Limits};

mod e2b_support;

/// The SDK peers, installed with the setup script when missing (idempotent).
fn peers() -> (PathBuf, PathBuf) {
    e2b_support::ensure_peers()
}

async fn run_script(program: &std::path::Path, script: &str, url: &str, js_peer: &std::path::Path) {
    let script = e2b_support::repo_root().join(script);
    e2b_support::run_sdk_script(
        program,
        &script,
        &[],
        url,
        Some(js_peer),
        Duration::from_secs(300),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_sees_an_ipython_kernel_and_every_language() {
    let (python, js) = peers();
    let url = e2b_support::start_server(e2b_support::server_config()).await;
    run_script(&python, "tests/e2b_kernel.py", &url, &js).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_js_sdk_sees_an_ipython_kernel_and_every_language() {
    let (_, js) = peers();
    let url = e2b_support::start_server(e2b_support::server_config()).await;
    run_script(std::path::Path::new("node"), "tests/e2b_kernel.mjs", &url, &js).await;
}

/// The Python script (and the JS one if `js_too`) against one `serve --backend docker` over the
/// engine at `host_var`'s socket, under `runtime` (the engine's default: None). scripts/test.sh runs
/// these again against Docker Engine.
async fn against_containers(host_var: &str, runtime: Option<&str>, js_too: bool) {
    if let Some(why) = waxell_tests::container_engine_missing_at(host_var) {
        return eprintln!("skipped: {why}");
    }
    let (python, js) = peers();
    let host = std::env::var(host_var).expect("checked above");
    // Five runtimes at once in one sandbox (IPython with pandas and matplotlib, two Node.js, a JVM,
    // bash) pass the default 512 MiB; under gVisor that ends the whole sandbox (docs/container-sandbox.md).
    let limits = Limits::default().with_memory_bytes(1 << 30);
    let mut config = ContainerConfig::default()
        .with_pool_size(1)
        .with_limits(limits)
        .with_docker_host(host);
    if let Some(runtime) = runtime {
        config = config.with_runtime(runtime);
    }
    let backend = ContainerBackend::new(config)
        .await
        .expect("container backend (run scripts/setup-container.sh and export what it prints)");
    // The set-up script's image has every runtime the kernel runs (R has no runner) and IPython
    // with E2B's chart extractor, so the backend reports them all, under gVisor too.
    let languages = backend.languages();
    assert_eq!(
        languages.available(),
        [
            Language::Python,
            Language::JavaScript,
            Language::TypeScript,
            Language::Bash,
            Language::Java
        ],
        "{languages:?}"
    );
    assert!(languages.limited().is_empty(), "{:?}", languages.limited());
    let config = e2b_support::server_config();
    let app = waxell_sandbox::server::router(Arc::new(backend), config.clone());
    let url = e2b_support::serve_with_limits(app, config).await;
    run_script(&python, "tests/e2b_kernel.py", &url, &js).await;
    if js_too {
        run_script(std::path::Path::new("node"), "tests/e2b_kernel.mjs", &url, &js).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kernel_scripts_in_containers_under_runc() {
    against_containers("DOCKER_HOST", None, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kernel_scripts_in_containers_under_gvisor() {
    // The JS SDK's script adds nothing runtime-specific (its kill waits out the victim's sleep).
    against_containers("WAXELL_RUNSC_DOCKER_HOST", Some("runsc"), false).await;
}
