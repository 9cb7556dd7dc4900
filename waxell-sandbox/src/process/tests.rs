//! The shared core, tested through the process backend (no isolation, no root needed).

use std::time::Duration;

use waxell::sandbox::{
    ProcessEvent, ProcessSignal, ProcessSpec, PtySize, RunOptions, SandboxBackend, SandboxError, SandboxOptions,
    SandboxSession,
};

use super::{Process, ProcessOptions};
use crate::backend::Checkpoint;
use crate::pool::KeepsMemory;
use crate::config::SandboxConfig;
use crate::pool::Pooled;

fn backend(config: SandboxConfig<ProcessOptions>) -> Pooled<Process> {
    Pooled::process(config)
}

async fn eval(sandbox: &dyn SandboxSession, code: &str) -> String {
    let execution = sandbox.run_code(code, &RunOptions::default()).await.unwrap();
    assert!(execution.error.is_none(), "{:?}", execution.error);
    execution.text().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_context_keeps_its_state_and_contexts_are_separate() {
    let backend = backend(SandboxConfig::default());
    assert_eq!(backend.name(), "process");
    let sandbox = backend.create_sandbox(&SandboxOptions::default()).await.unwrap();
    eval(&sandbox, "x = 41").await;
    assert_eq!(eval(&sandbox, "x + 1").await, "42");
    let context = sandbox.create_context(None, Some("/tmp")).await.unwrap();
    let in_context = RunOptions::default().with_context(&context.id);
    let execution = sandbox.run_code("'x' in globals()", &in_context).await.unwrap();
    assert_eq!(execution.text(), Some("False"));
    assert_eq!(sandbox.list_contexts().await.unwrap().len(), 2);
    assert!(matches!(
        sandbox.remove_context("default").await,
        Err(SandboxError::InvalidArgument(_))
    ));
    sandbox.remove_context(&context.id).await.unwrap();
    assert!(matches!(
        sandbox.remove_context(&context.id).await,
        Err(SandboxError::ContextNotFound(_))
    ));
    assert!(matches!(
        sandbox.create_context(Some("ruby"), None).await,
        Err(SandboxError::InvalidArgument(message)) if message.contains("process backend")
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_run_is_interrupted_and_the_state_kept() {
    let backend = backend(SandboxConfig::<ProcessOptions>::default().with_run_timeout(Duration::from_millis(300)));
    let sandbox = backend.create_sandbox(&SandboxOptions::default()).await.unwrap();
    eval(&sandbox, "y = 7").await;
    let execution = sandbox
        .run_code("import time\ntime.sleep(30)", &RunOptions::default())
        .await
        .unwrap();
    assert!(execution.error.is_some());
    assert_eq!(eval(&sandbox, "y").await, "7");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_are_typed_errors_when_missing() {
    let backend = backend(SandboxConfig::default());
    let sandbox = backend.create_sandbox(&SandboxOptions::default()).await.unwrap();
    sandbox.write_file("a/b.txt", b"hello").await.unwrap();
    assert_eq!(eval(&sandbox, "open('a/b.txt').read()").await, "hello");
    assert_eq!(sandbox.read_file("/home/user/a/b.txt").await.unwrap(), b"hello");
    assert!(matches!(
        sandbox.read_file("nope").await,
        Err(SandboxError::FileNotFound { path }) if path == "nope"
    ));
    assert!(matches!(
        sandbox.read_file("../etc/passwd").await,
        Err(SandboxError::InvalidPath { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_backend_lacks_is_unsupported_not_a_string() {
    let backend = backend(SandboxConfig::default());
    let sandbox = backend.create_sandbox(&SandboxOptions::default()).await.unwrap();
    let unsupported = |result: Result<(), SandboxError>, operation: &str| match result {
        Err(SandboxError::Unsupported { backend, operation: op }) => {
            assert_eq!((backend, op), ("process", operation));
        }
        other => panic!("{operation}: {other:?}"),
    };
    let dir = std::env::temp_dir();
    unsupported(sandbox.checkpoint(&dir).await.map(drop), "checkpoint");
    let checkpoint = Checkpoint {
        backend: "process".into(),
        kernels: Vec::new(),
        state: Default::default(),
        processes: Vec::new(),
    };
    let restored = KeepsMemory::restore(&backend, &checkpoint, &dir, &SandboxOptions::default()).await;
    unsupported(restored.map(drop), "restore");
    assert!(crate::pool::keeps_memory(&backend).is_none());
    // A process spec that cannot reach a program is refused before the backend is asked.
    let nul = ProcessSpec::shell("echo hi").with_env("A", "b\0c");
    assert!(matches!(
        SandboxSession::start_process(&sandbox, &nul).await,
        Err(SandboxError::InvalidArgument(message)) if message.contains("NUL")
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pool_hands_out_ready_sandboxes_and_refills() {
    let backend = backend(SandboxConfig::<ProcessOptions>::default().with_pool_size(1));
    backend.warm_up().await.unwrap();
    assert_eq!(backend.pool_len(), 1);
    let sandbox = backend.create_sandbox(&SandboxOptions::default()).await.unwrap();
    assert_eq!(eval(&sandbox, "1 + 1").await, "2");
    backend.warm_up().await.unwrap();
    assert_eq!(backend.pool_len(), 1);
}

/// When the kernel of a sandbox started: (clock ticks since boot, pid).
async fn kernel_started(sandbox: &dyn SandboxSession) -> (u64, u32) {
    let code = "import os\nf'{open(\"/proc/self/stat\").read().rsplit(\")\", 1)[1].split()[19]} {os.getpid()}'";
    let text = eval(sandbox, code).await;
    let (ticks, pid) = text.trim_matches('\'').split_once(' ').expect("ticks and pid");
    (ticks.parse().unwrap(), pid.parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_during_the_first_fill_takes_the_sandbox_being_started() {
    let backend = backend(SandboxConfig::<ProcessOptions>::default().with_pool_size(1));
    // Right away: the pool's first kernel is still starting, and this create waits for it rather
    // than starting one beside it; the refill then starts the next one.
    let first = backend.create_sandbox(&SandboxOptions::default()).await.unwrap();
    backend.warm_up().await.unwrap();
    let second = backend.create_sandbox(&SandboxOptions::default()).await.unwrap();
    let (first, second) = (kernel_started(&first).await, kernel_started(&second).await);
    assert!(
        first < second,
        "the first create took kernel {first:?} (ticks, pid), started after the pooled {second:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_ends_when_killed_or_its_lifetime_passes() {
    let backend = backend(SandboxConfig::default());
    let options = SandboxOptions::default().with_timeout(Duration::from_millis(300));
    let expiring = backend.create_sandbox(&options).await.unwrap();
    let killed = backend.create_sandbox(&SandboxOptions::default()).await.unwrap();
    killed.kill().await.unwrap();
    assert!(matches!(
        killed.run_code("1", &RunOptions::default()).await,
        Err(SandboxError::NotFound(_))
    ));
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(matches!(
        expiring.list_contexts().await,
        Err(SandboxError::NotFound(_))
    ));
}

/// Everything a process produced until it ended (terminal output as stdout).
async fn collect(process: waxell::sandbox::SandboxProcess) -> (String, String, waxell::sandbox::ProcessExit) {
    let output = tokio::time::timeout(Duration::from_secs(20), process.wait()).await.expect("the process ends");
    (output.stdout_text(), output.stderr_text(), output.exit)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_reports_its_output_exit_code_env_and_cwd() {
    let backend = backend(SandboxConfig::default());
    let sandbox = backend.create_sandbox(&SandboxOptions::default().with_env("FROM_SANDBOX", "s")).await.unwrap();
    let spec = ProcessSpec::shell("echo out $FROM_SANDBOX $FOO; echo err >&2; basename $PWD; exit 3")
        .with_env("FOO", "bar")
        .with_cwd("/tmp");
    let (out, err, exit) = collect(SandboxSession::start_process(&sandbox, &spec).await.unwrap()).await;
    assert_eq!(out, "out s bar\ntmp\n");
    assert_eq!(err, "err\n");
    assert_eq!((exit.exit_code, exit.status()), (3, "exit status 3".to_owned()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdin_reaches_a_process_and_closing_it_ends_cat() {
    let backend = backend(SandboxConfig::default());
    let sandbox = backend.create_sandbox(&SandboxOptions::default()).await.unwrap();
    let process = SandboxSession::start_process(&sandbox, &ProcessSpec::new("cat").with_stdin(true)).await.unwrap();
    process.control.write_stdin(b"hello").await.unwrap();
    process.control.close_stdin().await.unwrap();
    let (out, _, exit) = collect(process).await;
    assert_eq!((out.as_str(), exit.exit_code), ("hello", 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_process_ends_with_the_signal() {
    let backend = backend(SandboxConfig::default());
    let sandbox = backend.create_sandbox(&SandboxOptions::default()).await.unwrap();
    let process = SandboxSession::start_process(&sandbox, &ProcessSpec::shell("sleep 30")).await.unwrap();
    process.control.signal(ProcessSignal::Kill).await.unwrap();
    let (_, _, exit) = collect(process).await;
    assert_eq!((exit.exit_code, exit.status()), (-1, "signal: killed".to_owned()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_is_a_tty_of_the_asked_size_and_resizes() {
    let backend = backend(SandboxConfig::default());
    let sandbox = backend.create_sandbox(&SandboxOptions::default()).await.unwrap();
    let spec = ProcessSpec::new("/bin/bash")
        .with_args(["-c", "test -t 0 && test -t 1 && echo tty; stty size; read line; stty size"])
        .with_pty(PtySize { rows: 24, cols: 80 });
    let mut process = SandboxSession::start_process(&sandbox, &spec).await.unwrap();
    let mut seen = String::new();
    while !seen.contains("24 80") {
        match process.output.next_event().await {
            Some(ProcessEvent::Pty(bytes)) => seen.push_str(&String::from_utf8_lossy(&bytes)),
            other => panic!("{other:?} after {seen:?}"),
        }
    }
    assert!(seen.contains("tty"), "{seen:?}");
    process.control.resize(PtySize { rows: 30, cols: 100 }).await.unwrap();
    process.control.write_stdin(b"go\n").await.unwrap();
    let (out, _, exit) = collect(process).await;
    assert!(out.contains("30 100"), "{out:?}");
    assert_eq!(exit.exit_code, 0);
    // Its terminal was given back.
    assert_eq!(sandbox.inner_open_ptys(), 0);
}
