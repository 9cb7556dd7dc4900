//! The built demo with a sandbox whose Python has only the standard library (a fresh venv, no packages):
//! it stops before the agents start, naming what is missing, the backend and the fix; and with the check
//! skipped, the dry run's script stops with what the sandbox answered instead of a bare transport error.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use waxell_tests::OtlpReceiver;

/// A venv without packages, made from the system's Python; removed when dropped.
struct StdlibPython {
    dir: PathBuf,
}

impl StdlibPython {
    fn create(label: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("waxell-stdlib-venv-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let base = if Path::new("/usr/bin/python3").exists() {
            "/usr/bin/python3"
        } else {
            "python3"
        };
        let status = Command::new(base)
            .args(["-m", "venv", "--without-pip"])
            .arg(&dir)
            .status()
            .expect("python3 runs");
        assert!(status.success(), "python3 -m venv --without-pip");
        let python = Self { dir };
        let has_pandas = Command::new(python.path())
            .args(["-c", "import pandas"])
            .output()
            .expect("the venv's python runs")
            .status
            .success();
        assert!(!has_pandas, "a fresh venv must not see pandas");
        python
    }

    fn path(&self) -> PathBuf {
        self.dir.join("bin/python3")
    }
}

impl Drop for StdlibPython {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn demo(python: &StdlibPython, args: &[&str], rx: &OtlpReceiver) -> Output {
    Command::new(waxell_tests::bin_exe!("demos"))
        .args(["--dry-run", "--quiet"])
        .args(args)
        .env("WAXELL_SANDBOX_PYTHON", python.path())
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", rx.base_url())
        .env_remove("OPENAI_API_KEY")
        .output()
        .expect("the demo runs")
}

#[test]
fn a_local_sandbox_without_pandas_stops_the_demo_before_the_agents_with_the_fix() {
    let python = StdlibPython::create("local");
    let rx = OtlpReceiver::start_http();
    let output = demo(&python, &[], &rx);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("the local sandbox cannot import pandas, numpy, matplotlib"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&python.path().display().to_string()),
        "names the interpreter: {stderr}"
    );
    assert!(
        stderr.contains("bash scripts/setup.sh") && stderr.contains("WAXELL_SANDBOX_PYTHON chose it"),
        "{stderr}"
    );
    assert!(!stderr.contains("scripted LLM transport"), "{stderr}");
    // No agent ran: nothing was traced.
    let spans = rx.wait_for_spans(1, Duration::from_secs(2));
    assert!(
        spans.iter().all(|s| !s.span.name.starts_with("invoke_agent")),
        "{:?}",
        spans.iter().map(|s| &s.span.name).collect::<Vec<_>>()
    );
}

/// The same check through `--sandbox-url`, against a `waxell-sandbox serve` whose Python lacks pandas.
#[test]
fn a_sandbox_server_without_pandas_stops_the_demo_with_the_servers_fix() {
    use std::sync::Arc;
    use waxell_sandbox::server::{router, serve, ServerConfig};
    use waxell_sandbox::{LocalBackend, LocalConfig};

    let python = StdlibPython::create("server");
    let server_python = python.path();
    // The server is closed by default: the demo gets its key as E2B's SDKs do, through E2B_API_KEY.
    let config = ServerConfig::new();
    let api_key = config.api_key().expect("closed by default").to_owned();
    let server = waxell_tests::ServerThread::spawn(move |listener, stop| async move {
        let backend = LocalBackend::new(LocalConfig::default().with_python(server_python))
            .expect("local sandbox backend");
        let app = router(Arc::new(backend), config.clone());
        let _ = serve(listener, app, &config, stop).await;
    });
    let rx = OtlpReceiver::start_http();
    let url = format!("http://{}", server.addr);
    let output = Command::new(waxell_tests::bin_exe!("demos"))
        .args(["--dry-run", "--quiet", "--sandbox-url", &url])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", rx.base_url())
        .env_remove("OPENAI_API_KEY")
        .env("E2B_API_KEY", &api_key)
        .env_remove("WAXELL_SANDBOX_PYTHON")
        .output()
        .expect("the demo runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "the sandbox server at {url} cannot import pandas, numpy, matplotlib"
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains("waxell-sandbox serve") && stderr.contains("image"),
        "{stderr}"
    );
}

#[test]
fn with_the_check_skipped_the_dry_run_says_what_the_sandbox_answered() {
    let python = StdlibPython::create("skip");
    let rx = OtlpReceiver::start_http();
    let output = demo(&python, &["--skip-sandbox-check"], &rx);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("ModuleNotFoundError: No module named 'pandas'"),
        "the sandbox's exception and message: {stderr}"
    );
    assert!(
        stderr.contains("the dry run's script expected a KeyError"),
        "{stderr}"
    );
    assert!(!stderr.contains("no scripted reply"), "{stderr}");
    // The run that failed is in the trace: the analysis's sandbox call recorded the exception.
    let spans = rx.wait_for_spans(10, Duration::from_secs(10));
    assert!(
        spans.iter().any(|s| {
            s.span.name == "execute_tool local.run_code"
                && waxell_tests::attr_string(&s.span, "waxell.sandbox.error.name").as_deref()
                    == Some("ModuleNotFoundError")
        }),
        "the ModuleNotFoundError reached the trace"
    );
}
