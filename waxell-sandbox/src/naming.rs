//! Sandbox ids and per-slot uids. Ids start with the host pid so leftovers of a dead host process
//! (cgroups, scratch dirs) can be recognised and swept.

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

/// A uid for the sandbox in `[base, base + span)`, spread so parallel host processes rarely share one.
/// Sharing would not break isolation (no shared pid namespace or scratch dir), it only merges
/// RLIMIT_NPROC accounting.
pub(crate) fn slot_uid(base: u32, span: u32, sandbox_id: &str) -> u32 {
    // FNV-1a: cheap and stable.
    let hash = sandbox_id.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    base + (hash % u64::from(span.max(1))) as u32
}

/// True when `name` starts with the pid of a process that no longer exists.
pub(crate) fn owner_is_dead(name: &str) -> bool {
    match name.split('-').next().and_then(|p| p.parse::<u32>().ok()) {
        Some(pid) => pid != std::process::id() && !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        None => false,
    }
}
