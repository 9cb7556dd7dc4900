//! A sandbox's life: creation (pool, configuration, host report), kill, drop and expiry.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_and_drop_leave_nothing_behind() {
    let backend = backend();
    let killed = sandbox(&backend).await;
    eval(
        &killed,
        "import subprocess; p = subprocess.Popen(['sleep', '60'])",
    )
    .await;
    let before = footprint(&killed);
    // The scratch dir's tmpfs is mounted in the sandbox's own mount namespace (which has the
    // cell's file), so the host sees a plain empty directory there.
    assert_eq!(eval(&killed, "open('here.txt', 'w').write('x')").await, "1");
    assert!(
        !is_mount_point(&before.scratch),
        "the scratch dir is a mount in the host's table"
    );
    assert_eq!(
        std::fs::read_dir(&before.scratch).unwrap().count(),
        0,
        "the host side of the scratch dir is empty"
    );
    assert!(
        before.pids.len() >= 3,
        "launcher, kernel and child in the cgroup: {:?}",
        before.pids
    );
    killed.kill().await.unwrap();
    assert_gone(&before);
    assert!(matches!(
        killed.run_code("1", &RunOptions::default()).await,
        Err(waxell::sandbox::SandboxError::NotFound(_))
    ));

    let dropped = sandbox(&backend).await;
    eval(
        &dropped,
        "import subprocess; p = subprocess.Popen(['sleep', '60'])",
    )
    .await;
    let before = footprint(&dropped);
    drop(dropped);
    assert_gone(&before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifetime_expiry_kills_the_sandbox() {
    let backend = backend();
    let options = SandboxOptions::default().with_timeout(Duration::from_millis(300));
    let sandbox = backend.create_sandbox(&options).await.unwrap();
    sandbox.set_timeout(Duration::from_millis(600)).await.unwrap();
    let before = footprint(&sandbox);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(matches!(
        sandbox.run_code("1", &RunOptions::default()).await,
        Err(waxell::sandbox::SandboxError::NotFound(_))
    ));
    assert_gone(&before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warm_pool_hands_out_fresh_interpreters() {
    let backend = backend_with(config().with_pool_size(2));
    backend.warm_up().await.unwrap();
    assert_eq!(backend.pool_len(), 2);
    let first = backend
        .create_sandbox(&SandboxOptions::default().with_env("WHO", "first"))
        .await
        .unwrap();
    eval(&first, "marker = 'first'").await;
    let second = backend.create_sandbox(&SandboxOptions::default()).await.unwrap();
    assert_eq!(eval(&second, "'marker' in globals()").await, "False");
    assert_eq!(eval(&second, "import os; 'WHO' in os.environ").await, "False");
    assert_eq!(eval(&first, "import os; os.environ.get('WHO')").await, "first");
    assert_ne!(first.scratch_dir(), second.scratch_dir());
    // The pool refills in the background.
    for _ in 0..100 {
        if backend.pool_len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(backend.pool_len(), 2);
}

#[test]
fn bad_configuration_is_refused_with_a_clear_error() {
    let missing =
        waxell_sandbox::LocalBackend::new(config().with_python("/nonexistent/python3")).unwrap_err();
    assert!(
        matches!(missing, waxell::sandbox::SandboxError::Unavailable(_)),
        "{missing:?}"
    );
    assert!(missing.to_string().contains("/nonexistent/python3"), "{missing}");
    let limits = waxell_sandbox::Limits::default().with_memory_bytes(1 << 20);
    let tiny = waxell_sandbox::LocalBackend::new(config().with_limits(limits)).unwrap_err();
    assert!(tiny.to_string().contains("limits.memory_bytes"), "{tiny}");
}

#[test]
fn sandboxes_outlive_the_thread_that_created_them() {
    // bwrap's --die-with-parent fires when the *forking thread* exits; spawns go through a
    // long-lived thread, so a short-lived caller thread must not take the sandbox with it.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let handle = runtime.handle().clone();
    let (backend, sandbox) = std::thread::spawn(move || {
        handle.block_on(async {
            let backend = backend();
            let sandbox = sandbox(&backend).await;
            (backend, sandbox)
        })
    })
    .join()
    .unwrap();
    runtime.block_on(async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(eval(&sandbox, "6 * 7").await, "42");
        drop((sandbox, backend));
    });
}

#[test]
fn a_shared_or_foreign_scratch_root_is_refused() {
    let mut shared = config();
    shared.scratch_root = Some("/tmp".into());
    let error = waxell_sandbox::LocalBackend::new(shared).unwrap_err().to_string();
    // Root is refused for the sticky world-writable mode, a rootless user first for the owner.
    assert!(
        error.contains("writable by group or others") || error.contains("is not owned by uid"),
        "{error}"
    );
    let tmp_mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata("/tmp").unwrap().permissions());
    assert_eq!(tmp_mode & 0o7777, 0o1777, "/tmp untouched");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooled_interpreter_killed_while_waiting_is_not_handed_out() {
    // It kills every sandbox process of its host process, so it runs alone in a process of its own.
    if ran_in_own_process("lifecycle::a_pooled_interpreter_killed_while_waiting_is_not_handed_out") {
        return;
    }
    let backend = backend_with(config().with_pool_size(1));
    backend.warm_up().await.unwrap();
    // Kill the pooled sandbox from outside: every process below this one (launcher, init, interpreter).
    let pooled = own_descendants();
    assert!(pooled.len() >= 3, "launcher, init and interpreter: {pooled:?}");
    for pid in &pooled {
        std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()
            .unwrap();
    }
    // Died while waiting: SIGKILL is delivered at once, but a loaded machine may take a moment to tear
    // the processes down (one killed but not yet dead when taken from the pool dies in use instead).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while pooled.iter().any(|pid| process_alive(*pid)) && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let sandbox = backend.create_sandbox(&SandboxOptions::default()).await.unwrap();
    assert_eq!(eval(&sandbox, "6 * 7").await, "42");
}

/// The host report matches how this process runs: root mode as root, rootless otherwise, with the
/// limits this host can enforce and a fix for each that it cannot; the sandbox really runs as the
/// identity the report names (rootless: the invoking user's uid, never 0).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_report_matches_the_mode_and_the_sandbox() {
    use waxell_sandbox::{Feature, IsolationMode, Status};
    let backend = backend();
    let report = backend.capabilities();
    let euid = own_euid();
    let expected = if euid == 0 {
        IsolationMode::Rootful
    } else {
        IsolationMode::Rootless
    };
    assert_eq!(report.mode, Some(expected));
    for feature in [
        Feature::User,
        Feature::Namespaces,
        Feature::Seccomp,
        Feature::Network,
        Feature::ReadOnlyRuntime,
        Feature::PrivateTmp,
        Feature::NoNewPrivileges,
        Feature::CpuTime,
        Feature::FileSize,
    ] {
        assert!(report.enforces(feature), "{feature:?} in every mode: {report}");
    }
    for check in &report.checks {
        if check.status != Status::Enforced {
            assert!(check.fix.is_some(), "{:?} without a fix: {report}", check.feature);
        }
    }
    let sandbox = sandbox(&backend).await;
    let uid: u32 = eval(&sandbox, "__import__('os').getuid()").await.parse().unwrap();
    assert_ne!(uid, 0);
    if expected == IsolationMode::Rootless {
        assert_eq!(uid, euid, "rootless: the sandbox is the invoking user");
        let home = report.check(Feature::ScratchSize).unwrap();
        assert_eq!(home.status, Status::Enforced, "{report}");
        assert!(home.detail.contains("own user and mount namespaces"), "{report}");
        assert!(report.summary().contains("rootless"), "{}", report.summary());
    } else {
        assert!(report.enforces(Feature::ScratchSize));
    }
    // The host-side view of every sandbox process: no uid 0 outside the root launchers.
    for pid in sandbox.host_pids() {
        let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
            continue;
        };
        let uids = status.lines().find(|l| l.starts_with("Uid:")).unwrap_or("");
        let launcher = status.lines().next().unwrap_or("").contains("bwrap") && euid == 0;
        assert!(
            launcher || !uids.split_whitespace().skip(1).any(|id| id == "0"),
            "host pid {pid}: {uids}"
        );
    }
}
