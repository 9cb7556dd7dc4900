//! A directory of this backend's own on the host, for the files it hands the engine to mount:
//! Podman's copy of the seccomp profile, and under gVisor each sandbox's boot id. Made fresh (so no
//! other user can have planted a file or link in it) and removed with its owner.

use std::path::{Path, PathBuf};

pub(super) struct PrivateDir(PathBuf);

impl PrivateDir {
    /// A new directory `waxell-<what>-<pid>-...` in the temp dir.
    pub(super) fn new(what: &str) -> std::io::Result<Self> {
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
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
