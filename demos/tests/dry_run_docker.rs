//! The dry-run demo end to end with `--sandbox docker`: every line of the agents' code runs in a
//! container of the engine at DOCKER_HOST (scripts/setup-container.sh), and the exported sandbox spans
//! say so (backend `docker`, runtime `runc`).

use std::process::Command;
use std::time::Duration;

use waxell_tests::{attr_string, OtlpReceiver};

#[test]
fn dry_run_demo_runs_in_a_container() {
    let rx = OtlpReceiver::start_http();
    let out_dir = std::env::temp_dir().join(format!("waxell-demo-docker-{}", std::process::id()));
    let output = Command::new(env!("CARGO_BIN_EXE_demos"))
        .args(["--dry-run", "--quiet", "--sandbox", "docker", "--output-dir"])
        .arg(&out_dir)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", rx.base_url())
        .env_remove("OPENAI_API_KEY")
        .output()
        .expect("the demo runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
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
    for run in runs {
        assert_eq!(
            attr_string(&run.span, "waxell.sandbox.backend").as_deref(),
            Some("docker")
        );
        assert_eq!(
            attr_string(&run.span, "waxell.sandbox.runtime").as_deref(),
            Some("runc")
        );
    }
    let chart = std::fs::read_dir(&out_dir)
        .expect("output dir")
        .flatten()
        .any(|e| e.path().extension().is_some_and(|x| x == "png"));
    assert!(chart, "the chart made in the container was saved");
    let _ = std::fs::remove_dir_all(&out_dir);
}
