//! The shared core, tested through the process backend (no isolation, no root needed).

use std::time::Duration;

use waxell::sandbox::{RunOptions, SandboxBackend, SandboxError, SandboxOptions, SandboxSession};

use super::{Process, ProcessOptions};
use crate::backend::{Checkpoint, ProcessSpec};
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
    let spec = ProcessSpec {
        cmd: vec!["ls".into()],
        ..ProcessSpec::default()
    };
    unsupported(sandbox.start_process(&spec).await.map(drop), "start_process");
    unsupported(sandbox.checkpoint().await.map(drop), "checkpoint");
    let checkpoint = Checkpoint {
        backend: "process",
        id: "none".into(),
    };
    unsupported(backend.restore(&checkpoint).await.map(drop), "restore");
    // A cwd outside the writable places is refused before the backend is asked.
    let outside = ProcessSpec {
        cwd: Some("/etc".into()),
        ..ProcessSpec::default()
    };
    assert!(matches!(
        sandbox.start_process(&outside).await,
        Err(SandboxError::InvalidArgument(_))
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
