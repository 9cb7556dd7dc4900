//! Where paused sandboxes and snapshots live on disk: `<state>/paused/<sandbox id>/` and
//! `<state>/snapshots/<snapshot id>/`, each a `record.json` and the saved `home/`. An entry is
//! built in `<state>/staging/` and renamed into place whole, so a crash leaves either the old
//! state or the new one (staging is emptied at start). With a configured state directory they
//! survive a restart of the server; without one the store is a private temporary directory
//! removed with the server. One server at a time: `<state>/lock` is held (`flock`) while it runs.

use std::collections::BTreeMap;
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use rand::distr::{Alphanumeric, SampleString};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::config::ServerConfig;

const RECORD: &str = "record.json";
/// The saved `/home/user` inside an entry.
pub(crate) const HOME_COPY: &str = "home";

/// The two kinds of entry.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Kind {
    Paused,
    Snapshot,
}

impl Kind {
    fn dir(self) -> &'static str {
        match self {
            Kind::Paused => "paused",
            Kind::Snapshot => "snapshots",
        }
    }
}

/// A paused sandbox: what resuming it needs besides its files.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct PausedRecord {
    pub(crate) id: String,
    pub(crate) template_id: String,
    pub(crate) metadata: BTreeMap<String, String>,
    pub(crate) env_vars: BTreeMap<String, String>,
    pub(crate) envd_token: Option<String>,
    pub(crate) traffic_token: Option<String>,
    pub(crate) started_at_ms: u64,
    pub(crate) paused_at_ms: u64,
    pub(crate) auto_pause: bool,
    #[serde(default)]
    pub(crate) auto_pause_memory: bool,
    pub(crate) auto_resume: bool,
    pub(crate) bytes: u64,
    /// Paused with its memory: the checkpoint in this entry's directory (its `home/` is then a
    /// plain copy of `/home/user`).
    #[serde(default)]
    pub(crate) memory: Option<crate::backend::Checkpoint>,
    /// The pause asked for the files only (`memory: false`): as E2B, traffic does not resume it
    /// (autoResume); connect and resume do.
    #[serde(default)]
    pub(crate) refuses_auto_resume: bool,
    /// Its log up to the pause (`GET /sandboxes/{id}/logs` while paused; it goes on after resume).
    #[serde(default)]
    pub(crate) logs: Vec<super::logs::LogEntry>,
}

/// A snapshot: a saved `/home/user` new sandboxes start from, and their memory where the backend
/// checkpoints.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct SnapshotRecord {
    pub(crate) snapshot_id: String,
    pub(crate) names: Vec<String>,
    /// The sandbox it was taken of.
    pub(crate) sandbox_id: String,
    /// That sandbox's template.
    pub(crate) template_id: String,
    pub(crate) created_at_ms: u64,
    pub(crate) bytes: u64,
    /// Taken with the sandbox's memory: the checkpoint in this entry's directory, which every
    /// sandbox created from it is restored from.
    #[serde(default)]
    pub(crate) memory: Option<crate::backend::Checkpoint>,
}

pub(crate) fn to_ms(time: SystemTime) -> u64 {
    time.duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64
}

pub(crate) fn from_ms(ms: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_millis(ms)
}

/// The state directory.
#[derive(Debug)]
pub(crate) struct Store {
    root: PathBuf,
    /// Made up for this server (no configured state directory): removed on drop.
    temporary: bool,
    /// `<state>/lock`, locked for as long as this server runs (released when the file closes).
    _lock: std::fs::File,
}

/// Lock `root` for this process: two servers on one state directory would resume the same
/// paused sandbox twice and empty each other's staging.
fn lock_state_dir(root: &Path) -> io::Result<std::fs::File> {
    use std::io::{Read, Seek, Write};
    use std::os::unix::fs::OpenOptionsExt;
    let path = root.join("lock");
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)?;
    if let Err(e) = rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        if e != rustix::io::Errno::WOULDBLOCK {
            return Err(io::Error::other(format!("cannot lock {}: {e}", path.display())));
        }
        let mut holder = String::new();
        let _ = file.read_to_string(&mut holder);
        return Err(io::Error::new(
            io::ErrorKind::WouldBlock,
            format!(
                "in use by another waxell-sandbox serve (pid {}); stop it or give this server \
                 another --state-dir",
                holder.trim()
            ),
        ));
    }
    file.set_len(0)?;
    file.seek(io::SeekFrom::Start(0))?;
    writeln!(file, "{}", std::process::id())?;
    Ok(file)
}

fn private_dir(path: &Path) -> io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
}

impl Store {
    /// Open (creating) the configured state directory, or a temporary one.
    pub(crate) fn open(config: &ServerConfig) -> io::Result<Self> {
        let (root, temporary) = match &config.state_dir {
            Some(dir) => (dir.clone(), false),
            None => (
                std::env::temp_dir().join(format!(
                    "waxell-sandbox-state-{}-{}",
                    std::process::id(),
                    Alphanumeric.sample_string(&mut rand::rng(), 8)
                )),
                true,
            ),
        };
        if temporary {
            // Not `recursive`: a directory someone else made at this (random) path is an error.
            std::fs::DirBuilder::new().mode(0o700).create(&root)?;
        } else {
            private_dir(&root)?;
        }
        let lock = lock_state_dir(&root)?;
        let store = Self {
            root,
            temporary,
            _lock: lock,
        };
        for kind in [Kind::Paused, Kind::Snapshot] {
            private_dir(&store.root.join(kind.dir()))?;
        }
        // What a crash left half-built.
        let staging = store.root.join("staging");
        if staging.exists() {
            std::fs::remove_dir_all(&staging)?;
        }
        private_dir(&staging)?;
        Ok(store)
    }

    /// A new empty directory to build an entry in.
    pub(crate) fn staging(&self) -> io::Result<PathBuf> {
        let dir = self
            .root
            .join("staging")
            .join(Alphanumeric.sample_string(&mut rand::rng(), 16));
        private_dir(&dir)?;
        Ok(dir)
    }

    /// The directory of entry `id`.
    pub(crate) fn entry_dir(&self, kind: Kind, id: &str) -> PathBuf {
        self.root.join(kind.dir()).join(id)
    }

    /// Write `record` into `staging` and move it into place as entry `id` (replacing one there).
    pub(crate) fn commit<T: Serialize>(
        &self,
        staging: &Path,
        kind: Kind,
        id: &str,
        record: &T,
    ) -> io::Result<PathBuf> {
        let json = serde_json::to_vec_pretty(record).map_err(io::Error::other)?;
        std::fs::write(staging.join(RECORD), json)?;
        let dir = self.entry_dir(kind, id);
        if dir.exists() {
            std::fs::remove_dir_all(&dir)?;
        }
        std::fs::rename(staging, &dir)?;
        Ok(dir)
    }

    /// Remove entry `id` and its files.
    pub(crate) fn remove(&self, kind: Kind, id: &str) {
        let dir = self.entry_dir(kind, id);
        if let Err(e) = std::fs::remove_dir_all(&dir) {
            if e.kind() != io::ErrorKind::NotFound {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot remove saved sandbox state");
            }
        }
    }

    /// Remove a staging directory that was not committed.
    pub(crate) fn discard(&self, staging: &Path) {
        let _ = std::fs::remove_dir_all(staging);
    }

    /// Every entry of `kind` left by an earlier server (unreadable ones are logged and skipped).
    pub(crate) fn load<T: DeserializeOwned>(&self, kind: Kind) -> Vec<(T, PathBuf)> {
        let Ok(dir) = std::fs::read_dir(self.root.join(kind.dir())) else {
            return Vec::new();
        };
        let mut loaded = Vec::new();
        for entry in dir.flatten() {
            let path = entry.path();
            match std::fs::read(path.join(RECORD))
                .map_err(|e| e.to_string())
                .and_then(|bytes| serde_json::from_slice::<T>(&bytes).map_err(|e| e.to_string()))
            {
                Ok(record) => loaded.push((record, path)),
                Err(e) => {
                    tracing::warn!(dir = %path.display(), error = %e, "skipping unreadable saved sandbox state")
                }
            }
        }
        loaded
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        if self.temporary {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record written before pauses kept memory reads as a files-only pause; one with a
    /// checkpoint keeps it.
    #[test]
    fn paused_records_with_and_without_a_checkpoint_read_back() {
        let old = r#"{"id":"s1","template_id":"t","metadata":{},"env_vars":{},"envd_token":null,
            "traffic_token":null,"started_at_ms":1,"paused_at_ms":2,"auto_pause":false,"auto_resume":false,"bytes":3}"#;
        let record: PausedRecord = serde_json::from_str(old).unwrap();
        assert!(record.memory.is_none() && !record.auto_pause_memory);
        let mut with = record.clone();
        with.memory = Some(crate::backend::Checkpoint {
            backend: "docker".into(),
            kernels: vec![crate::backend::SavedContext {
                id: "default".into(),
                language: "python".into(),
                cwd: "/home/user".into(),
                kernel: Some((7, 3)),
            }],
            state: [("init_key".to_owned(), "00ff".to_owned())].into(),
            processes: vec![crate::backend::SavedProcess {
                sandbox_pid: 12,
                terminal: Some((24, 80)),
                stdin: true,
                owner: serde_json::json!({"pid": 1000, "tag": "t"}),
            }],
        });
        let again: PausedRecord = serde_json::from_str(&serde_json::to_string(&with).unwrap()).unwrap();
        assert_eq!(again.memory, with.memory);
    }

    #[test]
    fn a_state_directory_serves_one_server_at_a_time() {
        let dir = std::env::temp_dir().join(format!("waxell-store-lock-{}", std::process::id()));
        let config = ServerConfig {
            state_dir: Some(dir.clone()),
            ..ServerConfig::default()
        };
        let first = Store::open(&config).expect("the first server opens the state directory");
        let second = Store::open(&config).expect_err("a second server on the same directory is refused");
        assert_eq!(second.kind(), io::ErrorKind::WouldBlock);
        let message = second.to_string();
        assert!(
            message.contains("in use by another waxell-sandbox serve")
                && message.contains(&format!("pid {}", std::process::id())),
            "{message}"
        );
        drop(first);
        let again = Store::open(&config).expect("free again once the first server is gone");
        drop(again);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
