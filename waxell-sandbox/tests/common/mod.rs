//! Shared helpers: a backend with short timeouts, and a check that a sandbox left nothing behind.
#![allow(dead_code, unreachable_pub)]

pub mod suite;

use std::path::PathBuf;
use std::time::Duration;

use waxell::sandbox::{Execution, RunOptions, SandboxOptions, SandboxSession};
use waxell_sandbox::{Feature, IsolationMode, LocalBackend, LocalConfig, LocalSandbox};

pub fn config() -> LocalConfig {
    LocalConfig::default()
        .with_run_timeout(Duration::from_secs(20))
        .with_interrupt_grace(Duration::from_millis(1500))
}

pub fn backend() -> LocalBackend {
    backend_with(config())
}

pub fn backend_with(config: LocalConfig) -> LocalBackend {
    LocalBackend::new(config).expect("the sandbox must be available: run scripts/setup-sandbox.sh")
}

/// The `waxell-sandbox` program: `NEXTEST_BIN_EXE_waxell-sandbox` when nextest runs the test
/// (remapped when it runs from an archive, as the rootless CI run does), else Cargo's path.
pub fn sandbox_exe() -> PathBuf {
    std::env::var_os("NEXTEST_BIN_EXE_waxell-sandbox")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_waxell-sandbox")))
}

/// This process's effective uid.
pub fn euid() -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let uids = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    uids.split_whitespace().nth(2).unwrap().parse().unwrap()
}

/// Every directory a local backend keeps its sandboxes' scratch directories in: as root
/// `$TMPDIR/waxell-sandbox`; rootless `$XDG_RUNTIME_DIR/waxell-sandbox` or
/// `$TMPDIR/waxell-sandbox-<uid>`.
pub fn scratch_roots() -> Vec<PathBuf> {
    let mut roots = vec![
        std::env::temp_dir().join("waxell-sandbox"),
        std::env::temp_dir().join(format!("waxell-sandbox-{}", euid())),
    ];
    if let Some(runtime) = std::env::var_os("XDG_RUNTIME_DIR") {
        roots.push(PathBuf::from(runtime).join("waxell-sandbox"));
    }
    roots
}

/// Whether the backend runs rootless (a user namespace; see docs/sandbox.md for what differs).
pub fn rootless(backend: &LocalBackend) -> bool {
    backend.capabilities().mode == Some(IsolationMode::Rootless)
}

/// Whether `backend` fully enforces `feature` on this host. When it does not, the test log states
/// which limit this host cannot enforce, quoting the host report (which the caller then relies on).
pub fn enforced(backend: &LocalBackend, feature: Feature) -> bool {
    let report = backend.capabilities();
    if report.enforces(feature) {
        return true;
    }
    let check = report
        .check(feature)
        .unwrap_or_else(|| panic!("the host report has no line for {feature:?}"));
    eprintln!(
        "NOT ENFORCED on this host ({feature:?}, {:?}): {}; fix: {}",
        check.status,
        check.detail,
        check.fix.as_deref().unwrap_or("none given")
    );
    assert!(check.fix.is_some(), "the report gives no fix for {feature:?}");
    false
}

pub async fn sandbox(backend: &LocalBackend) -> LocalSandbox {
    backend
        .create_sandbox(&SandboxOptions::default())
        .await
        .expect("create sandbox")
}

pub async fn run(sandbox: &LocalSandbox, code: &str) -> Execution {
    sandbox
        .run_code(code, &RunOptions::default())
        .await
        .expect("run_code")
}

pub async fn run_with_timeout(sandbox: &LocalSandbox, code: &str, timeout: Duration) -> Execution {
    sandbox
        .run_code(code, &RunOptions::default().with_timeout(timeout))
        .await
        .expect("run_code")
}

/// Run code that must succeed; return its main text.
pub async fn eval(sandbox: &LocalSandbox, code: &str) -> String {
    let execution = run(sandbox, code).await;
    assert!(
        execution.error.is_none(),
        "unexpected error for {code:?}: {:?}",
        execution.error
    );
    execution.text().unwrap_or_default().to_owned()
}

/// Everything a sandbox owns on the host.
pub struct Footprint {
    pub scratch: PathBuf,
    /// The host tmpfs mounts bound at /tmp and /dev/shm.
    pub mounts: Vec<PathBuf>,
    pub cgroups: Vec<PathBuf>,
    pub pids: Vec<u32>,
}

pub fn footprint(sandbox: &LocalSandbox) -> Footprint {
    let id = sandbox.sandbox_id().to_owned();
    let scratch = sandbox.scratch_dir().to_owned();
    Footprint {
        mounts: ["tmp", "shm"]
            .iter()
            .map(|m| scratch.with_file_name(format!("{id}.{m}")))
            .collect(),
        scratch,
        cgroups: ["memory", "pids", "cpu"]
            .iter()
            .map(|c| waxell_sandbox::cgroup_subtree_dir(c).join(&id))
            .collect(),
        pids: sandbox.host_pids(),
    }
}

pub fn assert_gone(footprint: &Footprint) {
    assert!(
        !footprint.scratch.exists(),
        "scratch dir {} left behind",
        footprint.scratch.display()
    );
    assert!(
        !is_mount_point(&footprint.scratch),
        "scratch tmpfs {} left mounted",
        footprint.scratch.display()
    );
    for mount in &footprint.mounts {
        assert!(!mount.exists(), "tmpfs {} left behind", mount.display());
        assert!(!is_mount_point(mount), "tmpfs {} left mounted", mount.display());
    }
    for cgroup in &footprint.cgroups {
        assert!(!cgroup.exists(), "cgroup {} left behind", cgroup.display());
    }
    for pid in &footprint.pids {
        assert!(!process_alive(*pid), "process {pid} left behind");
    }
}

/// Whether `path` is a mount point in this process's mount namespace (field 5 of mountinfo).
pub fn is_mount_point(path: &std::path::Path) -> bool {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let path = path.to_string_lossy();
    mountinfo
        .lines()
        .any(|line| line.split(' ').nth(4) == Some(path.as_ref()))
}

pub fn process_alive(pid: u32) -> bool {
    // A zombie has no memory left; treat a missing or zombie /proc entry as gone.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z'),
        Err(_) => false,
    }
}

/// For a test that acts on every sandbox process of its host process (say, kills them from outside):
/// re-runs this test binary with only `test` selected, in a child process, and asserts that it passed.
/// Returns `true` in the parent, which then returns, and `false` in the child, which runs the test.
/// Under `cargo test` the other tests of the binary run beside it and own sandboxes of this process too.
pub fn ran_in_own_process(test: &str) -> bool {
    const CHILD_VAR: &str = "WAXELL_SANDBOX_TEST_OWN_PROCESS";
    if std::env::var(CHILD_VAR).is_ok_and(|running| running == test) {
        return false;
    }
    let out = std::process::Command::new(std::env::current_exe().expect("the test binary's path"))
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_VAR, test)
        .output()
        .expect("run the test in a child process");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{test} failed in its own process ({}):\n--- stdout\n{stdout}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    true
}

/// Every live descendant of this process: alone in its process (`ran_in_own_process`), a test's sandboxes.
pub fn own_descendants() -> Vec<u32> {
    let mut found = Vec::new();
    let mut queue = vec![std::process::id()];
    while let Some(pid) = queue.pop() {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let children = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            for child in children.split_whitespace().filter_map(|c| c.parse::<u32>().ok()) {
                if process_alive(child) && !found.contains(&child) {
                    found.push(child);
                    queue.push(child);
                }
            }
        }
    }
    found
}

/// Why the container tests cannot run here, if they cannot: they need an engine named by `env_var`
/// (`DOCKER_HOST`, or `WAXELL_RUNSC_DOCKER_HOST` for the runsc service), which `scripts/setup-container.sh`
/// prints and `scripts/test.sh` exports. Without it a plain `cargo test` skips them with this reason, unless
/// `WAXELL_REQUIRE_CONTAINER_TESTS=1` makes their absence a failure.
pub fn container_engine_missing(env_var: &str) -> Option<String> {
    if std::env::var(env_var).is_ok_and(|v| !v.is_empty()) {
        return None;
    }
    let why = format!(
        "{env_var} is not set: run `eval \"$(bash scripts/setup-container.sh)\"` as root, or point it at a \
         Docker or Podman socket"
    );
    assert!(
        std::env::var("WAXELL_REQUIRE_CONTAINER_TESTS").as_deref() != Ok("1"),
        "WAXELL_REQUIRE_CONTAINER_TESTS=1 but {why}"
    );
    Some(why)
}
