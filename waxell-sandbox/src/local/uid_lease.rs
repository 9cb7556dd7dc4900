//! Sandbox uids (local backend, as root): each live sandbox leases a uid of its own, unique across
//! the host's processes, from a range checked against the host's accounts and subordinate ids.

use waxell::sandbox::{LimitKind, SandboxError};

/// Where the uid leases live: one lock file per uid, shared by every process on the host.
pub(crate) const LEASE_DIR: &str = "/run/waxell-sandbox/uids";

/// The uids this process holds leases on: skipped without a syscall when looking for a free one
/// (their locks would refuse anyway), so a lease costs no more with thousands live here.
static HELD: std::sync::Mutex<std::collections::BTreeSet<u32>> = std::sync::Mutex::new(std::collections::BTreeSet::new());

/// Exclusive use of one sandbox uid on this host, across processes: an `flock` on
/// `LEASE_DIR/<uid>`. Released when dropped; the kernel releases it too when the holder dies
/// (SIGKILL, abort), so a dead host's uids are reclaimed without any sweep. Two live sandboxes
/// never share a uid, so per-uid kernel limits (RLIMIT_NPROC, inotify, pipe buffers, signals)
/// are never shared either.
#[derive(Debug)]
pub(crate) struct UidLease {
    uid: u32,
    _lock: std::fs::File,
}

impl UidLease {
    /// The lowest free uid in `[base, base + span)`.
    pub(crate) fn acquire(base: u32, span: u32) -> Result<Self, SandboxError> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        let dir = std::path::Path::new(LEASE_DIR);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| SandboxError::Unavailable(format!("cannot create the uid lease directory {LEASE_DIR}: {e}")))?;
        let mut held = HELD.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for uid in base..base.saturating_add(span) {
            if held.contains(&uid) {
                continue;
            }
            let lock = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(dir.join(uid.to_string()))
                .map_err(|e| {
                    SandboxError::Unavailable(format!("cannot open the lease of uid {uid} in {LEASE_DIR}: {e}"))
                })?;
            match rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => {
                    held.insert(uid);
                    return Ok(Self { uid, _lock: lock });
                }
                Err(rustix::io::Errno::WOULDBLOCK) => continue,
                Err(e) => {
                    return Err(SandboxError::Unavailable(format!(
                        "cannot lock the lease of uid {uid}: {e}"
                    )))
                }
            }
        }
        Err(SandboxError::LimitExceeded {
            limit: LimitKind::Sandboxes,
            message: format!(
                "all {span} sandbox uids ({base}..{}) are in use by live sandboxes on this host",
                u64::from(base) + u64::from(span)
            ),
        })
    }

    pub(crate) fn uid(&self) -> u32 {
        self.uid
    }
}

impl Drop for UidLease {
    fn drop(&mut self) {
        // The lock itself is released just after, when `_lock` closes.
        HELD.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&self.uid);
    }
}

/// Refuse a uid range that overlaps a user's subordinate ids (`/etc/subuid`, `/etc/subgid`: a
/// rootless container's files and processes) or an account in `/etc/passwd`.
pub(crate) fn check_uid_range(base: u32, span: u32) -> Result<(), String> {
    let end = u64::from(base) + u64::from(span);
    let overlaps = |start: u64, count: u64| start < end && u64::from(base) < start + count;
    for file in ["/etc/subuid", "/etc/subgid"] {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        for line in text.lines() {
            let mut fields = line.trim().split(':');
            let (Some(_), Some(start), Some(count)) = (fields.next(), fields.next(), fields.next()) else {
                continue;
            };
            let (Ok(start), Ok(count)) = (start.parse::<u64>(), count.parse::<u64>()) else {
                continue;
            };
            if overlaps(start, count) {
                return Err(format!(
                    "the sandbox uid range {base}..{end} overlaps `{line}` in {file}: choose another uid_base"
                ));
            }
        }
    }
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    for line in passwd.lines() {
        if let Some(uid) = line.split(':').nth(2).and_then(|u| u.parse::<u64>().ok()) {
            if overlaps(uid, 1) {
                return Err(format!(
                    "the sandbox uid range {base}..{end} contains the account `{}` of /etc/passwd: choose another \
                     uid_base",
                    line.split(':').next().unwrap_or("")
                ));
            }
        }
    }
    Ok(())
}

