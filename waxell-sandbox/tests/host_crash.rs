//! A host process that panics (unwinding) or aborts (no destructors at all) leaves nothing behind:
//! `--die-with-parent` kills the sandbox with the host, and the next backend sweeps the dead host's
//! cgroups and scratch directories.
#![cfg(target_os = "linux")]

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::*;

const MODE_VAR: &str = "WAXELL_CRASH_HELPER_MODE";
const OUT_VAR: &str = "WAXELL_CRASH_HELPER_OUT";

/// Not a test of its own: the crashing host process, started by the tests below.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the crashing host process, run by the tests below in a child process"]
async fn crash_helper() {
    let (Ok(mode), Ok(out)) = (std::env::var(MODE_VAR), std::env::var(OUT_VAR)) else {
        return;
    };
    let backend = backend();
    let sandbox = sandbox(&backend).await;
    eval(
        &sandbox,
        "import subprocess; p = subprocess.Popen(['sleep', '120'])",
    )
    .await;
    let footprint = footprint(&sandbox);
    let record = serde_json::json!({
        "scratch": footprint.scratch, "mounts": footprint.mounts, "cgroups": footprint.cgroups, "pids": footprint.pids,
    });
    std::fs::write(&out, record.to_string()).unwrap();
    match mode.as_str() {
        "abort" => std::process::abort(),
        _ => panic!("host panics with a live sandbox"),
    }
}

fn crash(mode: &str) -> Footprint {
    let out = std::env::temp_dir().join(format!("waxell-crash-{mode}-{}.json", std::process::id()));
    // Its output is captured: the helper's own "FAILED" report must not read as this test's.
    let helper = Command::new(std::env::current_exe().unwrap())
        .args(["crash_helper", "--exact", "--ignored", "--nocapture"])
        .env(MODE_VAR, mode)
        .env(OUT_VAR, &out)
        .output()
        .unwrap();
    let output = format!(
        "{}{}",
        String::from_utf8_lossy(&helper.stdout),
        String::from_utf8_lossy(&helper.stderr)
    );
    assert!(!helper.status.success(), "the helper must crash:\n{output}");
    let record = std::fs::read_to_string(&out)
        .unwrap_or_else(|e| panic!("the helper wrote no record ({e}):\n{output}"));
    let record: serde_json::Value = serde_json::from_str(&record).unwrap();
    std::fs::remove_file(&out).unwrap();
    let paths = |v: &serde_json::Value| {
        v.as_array()
            .unwrap()
            .iter()
            .map(|p| PathBuf::from(p.as_str().unwrap()))
            .collect()
    };
    Footprint {
        scratch: record["scratch"].as_str().unwrap().into(),
        mounts: paths(&record["mounts"]),
        cgroups: paths(&record["cgroups"]),
        pids: record["pids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p.as_u64().unwrap() as u32)
            .collect(),
    }
}

fn wait_for_processes_to_exit(footprint: &Footprint) {
    for _ in 0..200 {
        if footprint.pids.iter().all(|pid| !process_alive(*pid)) {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn host_panic_leaves_nothing_behind() {
    let footprint = crash("panic");
    assert!(
        footprint.pids.len() >= 4,
        "launcher, init, kernel and child: {:?}",
        footprint.pids
    );
    // Unwinding ran the destructors: everything is gone without a sweep.
    assert_gone(&footprint);
}

#[test]
fn host_abort_leaves_nothing_behind_after_the_next_start() {
    let footprint = crash("abort");
    // No destructor ran: the processes die with their parent (PR_SET_PDEATHSIG via --die-with-parent).
    wait_for_processes_to_exit(&footprint);
    for pid in &footprint.pids {
        assert!(!process_alive(*pid), "process {pid} outlived its aborted host");
    }
    // The next backend sweeps the dead host's cgroups and scratch dir.
    let _backend = backend();
    assert_gone(&footprint);
}
