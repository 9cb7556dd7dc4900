//! The code interpreter's kernel through E2B's official SDKs against an in-process `waxell-sandbox
//! serve` on the local backend: tests/e2b_kernel.py (Python SDK) and tests/e2b_kernel.mjs (JS SDK)
//! must pass. They cover IPython's behaviour (one message per print, dedent, `!cmd`, magics,
//! display()), DataFrame data and chart results, JavaScript, TypeScript, bash and Java contexts (R
//! refused with the reason when the host has none), contexts as E2B lists them, any cwd, and a kill
//! mid-run ending the run with an error.

use std::path::PathBuf;
use std::time::Duration;

mod e2b_support;

fn repo_root() -> PathBuf {
    waxell_tests::manifest_dir!()
        .parent()
        .expect("tests/ has a parent")
        .to_owned()
}

fn peer_dir(var: &str, default: &str) -> PathBuf {
    std::env::var_os(var).map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into()))
            .join(".local/share/waxell")
            .join(default)
    })
}

/// The SDK peers, installed with the setup script when missing (idempotent).
fn peers() -> (PathBuf, PathBuf) {
    let python = peer_dir("WAXELL_E2B_PEER_VENV", "e2b-peer-venv").join("bin/python");
    let js = peer_dir("WAXELL_E2B_PEER_JS", "e2b-peer-js");
    if !python.exists() || !js.join("node_modules/@e2b/code-interpreter").exists() {
        let status = std::process::Command::new("bash")
            .arg(repo_root().join("scripts/setup-e2b-peer.sh"))
            .status()
            .expect("running scripts/setup-e2b-peer.sh");
        assert!(status.success(), "scripts/setup-e2b-peer.sh failed: {status}");
    }
    (python, js)
}

async fn run_script(program: &std::path::Path, script: &str, url: &str, js_peer: &std::path::Path) {
    let mut command = tokio::process::Command::new(program);
    command
        .arg(repo_root().join(script))
        .env_remove("E2B_DEBUG")
        .env_remove("E2B_DOMAIN")
        .env("E2B_API_URL", url)
        .env("E2B_SANDBOX_URL", url)
        .env("E2B_API_KEY", e2b_support::API_KEY)
        .env("WAXELL_E2B_PEER_JS", js_peer)
        .kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(300), command.output())
        .await
        .unwrap_or_else(|_| panic!("{script} took over 300 s"))
        .unwrap_or_else(|e| panic!("running {script}: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}");
    eprintln!("{stderr}");
    assert!(
        output.status.success() && stdout.contains("all checks passed"),
        "{script} failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
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
