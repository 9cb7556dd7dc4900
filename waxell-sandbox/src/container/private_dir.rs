//! A directory of this backend's own on the host, for the files it hands the engine to mount:
//! Podman's copy of the seccomp profile, and each sandbox's host-made mounts (`host_mounts`). Made fresh (so no
//! other user can have planted a file or link in it) and removed with its owner.

use std::path::{Path, PathBuf};

pub(super) struct PrivateDir(PathBuf);

impl PrivateDir {
    /// A new directory `waxell-<what>-<pid>-...` in the temp dir. Those of a dead process of ours
    /// (it crashed before it could remove them) are removed first.
    pub(super) fn new(what: &str) -> std::io::Result<Self> {
        sweep_dead(what);
        for attempt in 0..100u32 {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            let dir = std::env::temp_dir().join(format!("waxell-{what}-{}-{nanos}-{attempt}", std::process::id()));
            match std::fs::create_dir(&dir) {
                Ok(()) => return Ok(Self(dir)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(std::io::Error::other("no fresh directory in the temp dir"))
    }

    pub(super) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        remove(&self.0);
    }
}

/// Remove `dir`, detaching first a sandbox's devpts still mounted in it (`host_mounts`).
fn remove(dir: &Path) {
    use rustix::mount::UnmountFlags;
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                let _ = rustix::mount::unmount(entry.path(), UnmountFlags::DETACH | UnmountFlags::NOFOLLOW);
            }
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// Remove the `waxell-<what>-<pid>-...` directories of dead processes that were ours (same owner:
/// no other user's directory is touched).
fn sweep_dead(what: &str) {
    use std::os::unix::fs::MetadataExt;
    let prefix = format!("waxell-{what}-");
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else { return };
    let me = rustix::process::geteuid().as_raw();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(&prefix)) else { continue };
        let ours = entry
            .path()
            .symlink_metadata()
            .is_ok_and(|m| m.is_dir() && m.uid() == me);
        if ours && crate::naming::owner_is_dead(rest) {
            remove(&entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dead_process_s_directories_are_removed_with_their_mounts_and_a_live_one_s_kept() {
        let dead = (1..4_194_303u32)
            .rev()
            .find(|pid| !Path::new(&format!("/proc/{pid}")).exists())
            .unwrap();
        let what = format!("sweeptest{}", std::process::id());
        let left = std::env::temp_dir().join(format!("waxell-{what}-{dead}-1-0"));
        std::fs::create_dir_all(left.join("sbx-pts")).unwrap();
        // As root, a mount left in it as a crashed backend leaves a sandbox's devpts.
        let mounted = rustix::process::geteuid().is_root()
            && rustix::mount::mount("none", left.join("sbx-pts"), "tmpfs", rustix::mount::MountFlags::empty(), c"")
                .is_ok();
        let live = PrivateDir::new(&what).unwrap();
        assert!(!left.exists(), "the dead process's directory is gone");
        if mounted {
            let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
            assert!(!mounts.contains(&left.display().to_string()), "its mount is detached");
        }
        let again = PrivateDir::new(&what).unwrap();
        assert!(live.path().exists(), "a live process's directory is kept");
        drop((live, again));
    }
}
