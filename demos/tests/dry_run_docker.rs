//! The dry-run demo end to end in a container: with `--sandbox docker`, and with the default `auto`
//! where the local sandbox cannot run. Every line of the agents' code runs in a container of the engine
//! at DOCKER_HOST (scripts/setup-container.sh), and the exported sandbox spans say so (backend `docker`,
//! runtime `runc`).

use std::process::Command;
use std::time::Duration;

use waxell_tests::{attr_string, OtlpReceiver};

#[test]
fn dry_run_demo_runs_in_a_container() {
    if let Some(why) = waxell_tests::container_engine_missing() {
        return eprintln!("skipped: {why}");
    }
    run_in_a_container(&["--sandbox", "docker"], &[]);
}

/// Where the local sandbox cannot run (macOS with Docker Desktop, or here: no usable Python for it),
/// the default `--sandbox auto` goes on to the container engine and says why.
#[test]
fn auto_falls_back_to_a_container_when_the_local_sandbox_cannot_run() {
    if let Some(why) = waxell_tests::container_engine_missing() {
        return eprintln!("skipped: {why}");
    }
    let (stdout, stderr) = run_in_a_container(&[], &[("WAXELL_SANDBOX_PYTHON", "/nonexistent/python3")]);
    let said = format!("{stdout}{stderr}");
    assert!(
        said.contains("a container (runc runtime), because the local sandbox is unavailable here")
            && said.contains("WAXELL_SANDBOX_PYTHON=/nonexistent/python3"),
        "the demo says why it uses a container:\n{said}"
    );
}

/// With no local sandbox, no engine and no E2B key, the error names why each one cannot be used.
#[test]
fn with_no_sandbox_at_all_the_error_names_each_reason() {
    let output = Command::new(waxell_tests::bin_exe!("demos"))
        .args(["--dry-run", "--quiet"])
        .env("WAXELL_SANDBOX_PYTHON", "/nonexistent/python3")
        .env("DOCKER_HOST", "unix:///nonexistent/docker.sock")
        .env_remove("E2B_API_KEY")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .output()
        .expect("the demo runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success(),
        "no sandbox, yet the demo succeeded:\n{stderr}"
    );
    for reason in [
        "The local sandbox: ",
        "WAXELL_SANDBOX_PYTHON=/nonexistent/python3",
        "A container: sandbox unavailable: no container engine socket at /nonexistent/docker.sock",
        "E2B: E2B_API_KEY is not set",
    ] {
        assert!(stderr.contains(reason), "missing {reason:?} in:\n{stderr}");
    }
}

/// Run the dry-run demo with `args` and `env` against an OTLP receiver, assert every run_code span came
/// from a container (backend `docker`, runtime `runc`) that is gone afterwards and that the chart made
/// in it was saved; returns the demo's stdout and stderr.
fn run_in_a_container(args: &[&str], env: &[(&str, &str)]) -> (String, String) {
    let rx = OtlpReceiver::start_http();
    let out_dir = std::env::temp_dir().join(format!(
        "waxell-demo-docker-{}-{}",
        std::process::id(),
        args.len()
    ));
    let output = Command::new(waxell_tests::bin_exe!("demos"))
        .arg("--dry-run")
        .args(args)
        .arg("--output-dir")
        .arg(&out_dir)
        .envs(env.iter().copied())
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", rx.base_url())
        .env_remove("OPENAI_API_KEY")
        .output()
        .expect("the demo runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success(),
        "demo failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let spans = rx.wait_for_spans(30, Duration::from_secs(10));
    let runs: Vec<_> = spans
        .iter()
        .filter(|s| s.span.name == "execute_tool docker.run_code")
        .collect();
    assert!(!runs.is_empty(), "container run_code spans exported");
    for run in &runs {
        assert_eq!(
            attr_string(&run.span, "waxell.sandbox.backend").as_deref(),
            Some("docker")
        );
        assert_eq!(
            attr_string(&run.span, "waxell.sandbox.runtime").as_deref(),
            Some("runc")
        );
    }
    // The demo removed its containers before it exited.
    for run in &runs {
        let id = attr_string(&run.span, "waxell.sandbox.id").expect("sandbox id");
        assert_eq!(
            engine_status(&format!("/containers/waxell-{id}/json")),
            404,
            "container of sandbox {id} left behind"
        );
    }
    let chart = std::fs::read_dir(&out_dir)
        .expect("output dir")
        .flatten()
        .any(|e| e.path().extension().is_some_and(|x| x == "png"));
    assert!(chart, "the chart made in the container was saved");
    let _ = std::fs::remove_dir_all(&out_dir);
    (stdout, stderr)
}

/// The HTTP status the engine at DOCKER_HOST answers for a GET of `path`.
fn engine_status(path: &str) -> u16 {
    use std::io::{Read, Write};
    let host =
        std::env::var("DOCKER_HOST").expect("DOCKER_HOST (eval \"$(bash scripts/setup-container.sh)\")");
    let mut stream =
        std::os::unix::net::UnixStream::connect(host.trim_start_matches("unix://")).expect("engine socket");
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: d\r\n\r\n").as_bytes())
        .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .expect("an HTTP status")
}
