//! Sandbox ids. They start with the host pid, so a backend can recognise and sweep the leftovers
//! of a dead host process (cgroups, scratch dirs, containers).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// `<host pid>-<counter>-<nonce>`: unique within the host, safe as a file and cgroup name.
pub(crate) fn new_sandbox_id() -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{}-{n}-{:05x}", std::process::id(), nanos & 0xfffff)
}

/// A fresh random id in the form of the kernel's `boot_id` (a UUID), from the kernel's own generator:
/// each sandbox shows its own at `/proc/sys/kernel/random/boot_id`, new for every start (E2B's SDK
/// tells a cold boot from a memory restore by it), and no sandbox sees the host's.
pub(crate) fn new_boot_id() -> std::io::Result<String> {
    Ok(std::fs::read_to_string("/proc/sys/kernel/random/uuid")?.trim().to_owned())
}

/// True when `name` starts with the pid of a process that no longer exists.
pub(crate) fn owner_is_dead(name: &str) -> bool {
    match name.split('-').next().and_then(|p| p.parse::<u32>().ok()) {
        Some(pid) => pid != std::process::id() && !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        None => false,
    }
}
