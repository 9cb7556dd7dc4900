//! The library prints only through its console, and `Builder::with_console_writer` sets where that goes: the
//! trace tree, the exit report, a failed endpoint discovery and a bad variable read without a pipeline all
//! arrive in the writer, and the process's stderr stays empty. Each run happens in a child process (this test
//! binary, an ignored test) so that its real stderr can be read.

use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use waxell::{agent, tool};
use waxell_tests::faults::nothing_listening_url;

#[tool]
fn double(x: u32) -> u32 {
    x * 2
}

#[agent(name = "console-agent")]
fn console_agent() -> u32 {
    double(1) + double(2)
}

/// Spans per run: the agent and two tools.
const SPANS: usize = 3;

/// A writer that keeps what it gets, shared with the test that reads it.
#[derive(Clone, Default)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl Write for Buffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Buffer {
    fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

/// A trace file's path in a fresh directory, removed when the returned guard drops.
fn temp_file(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix(&format!("waxell-console-{name}-"))
        .tempdir()
        .unwrap();
    let file = dir.path().join("run.jsonl");
    (dir, file)
}

/// Run the ignored test `child` in a process of its own with `env` (and no export variables inherited);
/// fail unless it passed; return its stderr.
fn stderr_of(child: &str, env: &[(&str, String)]) -> String {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([child, "--exact", "--ignored", "--nocapture", "--test-threads=1"])
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env_remove("WAXELL_API_URL")
        .env_remove("WAXELL_API_KEY")
        .env_remove("WAXELL_CONSOLE")
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .expect("run the child");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(out.status.success(), "child {child} failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("1 passed"), "the child ran {child}:\n{stdout}");
    stderr
}

#[test]
#[ignore = "run by embedded_default_tree_and_file_line_go_to_the_writer in a child process"]
fn child_embedded_default() {
    let console = Buffer::default();
    let (_dir, file) = temp_file("embedded");
    let guard = waxell::builder()
        .with_console(true)
        .with_trace_file(Some(file.clone()))
        .with_console_writer(console.clone())
        .init()
        .unwrap();
    assert_eq!(console_agent(), 6);
    drop(guard);
    let text = console.text();
    assert!(text.contains("── waxell trace "), "{text}");
    assert!(text.contains("console-agent"), "{text}");
    assert!(
        text.contains(&format!("waxell: wrote {SPANS} spans to {}", file.display())),
        "{text}"
    );
}

#[test]
fn embedded_default_tree_and_file_line_go_to_the_writer() {
    let stderr = stderr_of("child_embedded_default", &[]);
    assert_eq!(stderr, "", "nothing on stderr");
}

#[test]
#[ignore = "run by the exit_report_goes_to_the_writer in a child process"]
fn child_exit_report() {
    let dead = std::env::var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").unwrap();
    let console = Buffer::default();
    let (_dir, file) = temp_file("exit");
    let guard = waxell::builder()
        .with_trace_file(Some(file.clone()))
        .with_shutdown_timeout(Duration::from_secs(2))
        .with_console_writer(console.clone())
        .init()
        .unwrap();
    assert_eq!(console_agent(), 6);
    assert!(guard.shutdown().is_err(), "the collector took nothing");
    let text = console.text();
    assert!(
        text.contains(&format!(
            "waxell: could not send {SPANS} spans to the OTLP endpoint at {dead} (connection refused (is the collector running?)); \
             saved them to {}",
            file.display()
        )),
        "{text}"
    );
    assert!(
        text.contains("send them once the OTLP endpoint is up: "),
        "{text}"
    );
}

#[test]
fn exit_report_goes_to_the_writer() {
    let stderr = stderr_of(
        "child_exit_report",
        &[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", nothing_listening_url())],
    );
    assert_eq!(stderr, "", "nothing on stderr");
}

#[test]
#[ignore = "run by failed_discovery_is_reported_to_the_writer in a child process"]
fn child_failed_discovery() {
    let api = std::env::var("WAXELL_API_URL").unwrap();
    let console = Buffer::default();
    let (_dir, discovery_file) = temp_file("discovery");
    let guard = waxell::builder()
        .with_trace_file(Some(discovery_file))
        .with_shutdown_timeout(Duration::from_secs(2))
        .with_console_writer(console.clone())
        .init()
        .unwrap();
    let text = console.text();
    assert!(
        text.contains(&format!("waxell: endpoint discovery at {api} failed (")),
        "{text}"
    );
    drop(guard);
}

#[test]
fn failed_discovery_is_reported_to_the_writer() {
    let api = nothing_listening_url().trim_end_matches("/v1/traces").to_owned();
    let stderr = stderr_of(
        "child_failed_discovery",
        &[
            ("WAXELL_API_URL", api),
            ("WAXELL_API_KEY", "wax_sk_test_0123456789abcdefghij".to_owned()),
        ],
    );
    assert_eq!(stderr, "", "nothing on stderr");
}

#[test]
#[ignore = "run by a_warning_without_a_pipeline_goes_to_the_last_writer in a child process"]
fn child_warning_without_pipeline() {
    let console = Buffer::default();
    let guard = waxell::builder()
        .with_console(false)
        .with_trace_file(None)
        .with_console_writer(console.clone())
        .init()
        .unwrap();
    drop(guard);
    // With the pipeline gone, the next span reads the capture policy from the environment, which is bad.
    std::env::set_var("WAXELL_CAPTURE_CONTENT", "sometimes");
    assert_eq!(console_agent(), 6);
    let text = console.text();
    assert!(text.contains("WAXELL_CAPTURE_CONTENT"), "{text}");
    assert!(text.contains("; using the defaults"), "{text}");
}

#[test]
fn a_warning_without_a_pipeline_goes_to_the_last_writer() {
    let stderr = stderr_of("child_warning_without_pipeline", &[]);
    assert_eq!(stderr, "", "nothing on stderr");
}

#[test]
#[ignore = "run by without_a_writer_the_console_is_stderr in a child process"]
fn child_default_console() {
    let (_dir, default_file) = temp_file("default");
    let guard = waxell::builder()
        .with_console(true)
        .with_trace_file(Some(default_file))
        .init()
        .unwrap();
    assert_eq!(console_agent(), 6);
    drop(guard);
}

/// The control for the tests above: the same run without a writer prints on stderr.
#[test]
fn without_a_writer_the_console_is_stderr() {
    let stderr = stderr_of("child_default_console", &[]);
    assert!(stderr.contains("── waxell trace "), "{stderr}");
    assert!(
        stderr.contains(&format!("waxell: wrote {SPANS} spans to ")),
        "{stderr}"
    );
}

/// Keeps it that way: outside the console module and the binaries, the libraries' source names no printing
/// macro and no standard stream (doc comments and string contents aside).
#[test]
fn only_the_console_prints_in_library_code() {
    fn rust_files(dir: &std::path::Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n != "bin") {
                    rust_files(&path, out);
                }
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let root = waxell_tests::manifest_dir!().join("..");
    let mut files = Vec::new();
    for krate in ["waxell/src", "waxell-sandbox/src"] {
        rust_files(&root.join(krate), &mut files);
    }
    assert!(files.len() > 20, "found the sources: {files:?}");
    let forbidden = [
        "println!",
        "print!",
        "eprintln!",
        "eprint!",
        "dbg!",
        "io::stderr",
        "io::stdout",
    ];
    let mut found = Vec::new();
    for file in files.iter().filter(|f| !f.ends_with("waxell/src/console.rs")) {
        for (n, line) in std::fs::read_to_string(file).unwrap().lines().enumerate() {
            let code = line.trim_start();
            if code.starts_with("//") {
                continue;
            }
            for word in forbidden {
                // `print!` inside `eprint!`/`println!` is the same hit; report each line once.
                if code.contains(word) {
                    found.push(format!("{}:{}: {code}", file.display(), n + 1));
                    break;
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "print through the console instead:\n{}",
        found.join("\n")
    );
}
