//! Shared by the e2b_* tests: an in-process `waxell-sandbox serve` and fake E2B servers, all on
//! 127.0.0.1 port 0.
#![allow(dead_code, unreachable_pub)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use waxell::e2b::E2bConfig;
use waxell_sandbox::server::{router, ServerConfig};
use waxell_sandbox::{LocalBackend, LocalConfig};

pub const API_KEY: &str = "e2b_0123456789abcdef";

/// Serve `app` on 127.0.0.1:0 (with the peer address available to handlers); returns the base URL.
pub async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await
    });
    format!("http://{address}")
}

/// The local backend (isolated Python) with one pre-started interpreter.
pub fn local_backend() -> Arc<LocalBackend> {
    Arc::new(
        LocalBackend::new(LocalConfig::default().with_pool_size(1))
            .expect("local sandbox backend (run scripts/setup-sandbox.sh)"),
    )
}

/// The container backend (one pre-started container) on the engine named by `host_var`
/// (scripts/setup-container.sh), under `runtime` (the engine's default when `None`), or `None`
/// after saying why it is skipped.
pub async fn container_backend_at(
    host_var: &str,
    runtime: Option<&str>,
) -> Option<waxell_sandbox::ContainerBackend> {
    if let Some(why) = waxell_tests::container_engine_missing_at(host_var) {
        eprintln!("skipped: {why}");
        return None;
    }
    let host = std::env::var(host_var).expect("checked above");
    let mut config = waxell_sandbox::ContainerConfig::default()
        .with_pool_size(1)
        .with_docker_host(host);
    if let Some(runtime) = runtime {
        config = config.with_runtime(runtime);
    }
    let backend = waxell_sandbox::ContainerBackend::new(config)
        .await
        .expect("container backend (run scripts/setup-container.sh and export what it prints)");
    Some(backend)
}

/// The server config the tests use: an API key (so tokens are enforced) and fast keepalives, so a
/// client that leaves is noticed quickly.
pub fn server_config() -> ServerConfig {
    ServerConfig::new()
        .with_api_key(API_KEY)
        .with_keepalive_interval(Duration::from_millis(200))
}

/// `waxell-sandbox serve` over the local backend, in-process with its own connection layer;
/// returns the base URL.
pub async fn start_server(config: ServerConfig) -> String {
    serve_with_limits(router(local_backend(), config.clone()), config).await
}

/// Serve `app` on 127.0.0.1:0 through `waxell_sandbox::server::serve` (the connection limits of
/// `config`); returns the base URL.
pub async fn serve_with_limits(app: Router, config: ServerConfig) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        waxell_sandbox::server::serve(listener, app, &config, std::future::pending()).await
    });
    format!("http://{address}")
}

/// The client pointed at one server for both planes, as E2B's SDKs are with E2B_API_URL and
/// E2B_SANDBOX_URL.
pub fn client_config(url: &str) -> E2bConfig {
    E2bConfig::new()
        .with_api_key(API_KEY)
        .with_api_url(url)
        .with_sandbox_url(url)
        .with_request_timeout(Duration::from_secs(30))
}

/// The repository's root.
pub fn repo_root() -> PathBuf {
    waxell_tests::manifest_dir!()
        .parent()
        .expect("tests/ has a parent")
        .to_owned()
}

/// Where a peer lives: `var`, else `~/.local/share/waxell/<default>`.
pub fn peer_dir(var: &str, default: &str) -> PathBuf {
    std::env::var_os(var).map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into()))
            .join(".local/share/waxell")
            .join(default)
    })
}

/// The official E2B SDKs' venv (Python) and directory (JS), installed by scripts/setup-e2b-peer.sh when its
/// ready mark is missing. Tests in parallel processes may get here at once: the script lets one install and the
/// others wait; the venv's python exists before the install ends, so it is no sign of a finished one.
pub fn ensure_peers() -> (PathBuf, PathBuf) {
    let venv = peer_dir("WAXELL_E2B_PEER_VENV", "e2b-peer-venv");
    if !venv.join(".waxell-peers-ready").exists() {
        let status = std::process::Command::new("bash")
            .arg(repo_root().join("scripts/setup-e2b-peer.sh"))
            .status()
            .expect("running scripts/setup-e2b-peer.sh");
        assert!(status.success(), "scripts/setup-e2b-peer.sh failed: {status}");
    }
    let python = venv.join("bin/python");
    assert!(python.exists(), "no python at {}", python.display());
    (python, peer_dir("WAXELL_E2B_PEER_JS", "e2b-peer-js"))
}

/// The python of the official E2B SDK's venv, installed when missing.
pub fn peer_python() -> PathBuf {
    ensure_peers().0
}

/// Run a script of tests/ with the peer python against the server at `url`; its output, after
/// asserting it passed (printed "all checks passed").
pub async fn run_peer_script(script: &str, args: &[&str], url: &str, limit: Duration) -> String {
    let script = repo_root().join("tests").join(script);
    run_sdk_script(&peer_python(), &script, args, url, None, limit).await
}

/// Run `program` (a Python or node) on `script` with `args` against the server at `url`, configured
/// as E2B's SDKs read it (and `js_peer` as the JS SDKs' directory); its output, after asserting it
/// passed (printed "all checks passed").
pub async fn run_sdk_script(
    program: &std::path::Path,
    script: &std::path::Path,
    args: &[&str],
    url: &str,
    js_peer: Option<&std::path::Path>,
    limit: Duration,
) -> String {
    let name = script.display();
    let mut command = tokio::process::Command::new(program);
    command
        .arg(script)
        .args(args)
        .env_remove("E2B_DEBUG")
        .env_remove("E2B_DOMAIN")
        .env("E2B_API_URL", url)
        .env("E2B_SANDBOX_URL", url)
        .env("E2B_API_KEY", API_KEY)
        .kill_on_drop(true);
    if let Some(js_peer) = js_peer {
        command.env("WAXELL_E2B_PEER_JS", js_peer);
    }
    let output = tokio::time::timeout(limit, command.output())
        .await
        .unwrap_or_else(|_| panic!("{name} took over {limit:?}"))
        .unwrap_or_else(|e| panic!("running {name}: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}");
    eprintln!("{stderr}");
    assert!(
        output.status.success() && stdout.contains("all checks passed"),
        "{name} failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    stdout
}

/// The directory with E2B's JS SDK (`node_modules/e2b`; scripts/setup-e2b-peer.sh installs it with
/// the code interpreter's), or why the JS checks cannot run here.
pub fn js_peer() -> Result<PathBuf, String> {
    let (_, dir) = ensure_peers();
    if !dir.join("node_modules/e2b/package.json").exists() {
        return Err(format!(
            "no E2B JS SDK in {}: run scripts/setup-e2b-peer.sh",
            dir.display()
        ));
    }
    if std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_err()
    {
        return Err("node not found".into());
    }
    Ok(dir)
}

/// Run a script of tests/ with node and E2B's JS SDK against the server at `url`, after asserting
/// it passed (printed "all checks passed"); its output. `None` (and a line saying why) where the
/// JS SDK or node is missing, unless WAXELL_REQUIRE_JS_TESTS=1.
pub async fn run_js_script(script: &str, args: &[&str], url: &str, limit: Duration) -> Option<String> {
    let js = match js_peer() {
        Ok(js) => js,
        Err(why) => {
            assert!(
                std::env::var("WAXELL_REQUIRE_JS_TESTS").as_deref() != Ok("1"),
                "WAXELL_REQUIRE_JS_TESTS=1 but {why}"
            );
            eprintln!("skipped: {why}");
            return None;
        }
    };
    let script = repo_root().join("tests").join(script);
    let node = std::path::Path::new("node");
    Some(run_sdk_script(node, &script, args, url, Some(&js), limit).await)
}
