//! A sandbox's `/home/user` copied out to a directory of the server and back in, through the
//! sandbox's own file calls ([`SandboxSession`]'s list/read/write/make_dir): what a filesystem-only
//! pause, a snapshot and a fork keep, for every backend alike. Bounded by the server's byte and
//! entry caps; names are checked before anything is created on the host, and only regular files
//! and directories are ever created there. What the host copy does not carry (permission bits,
//! modification times, symbolic links, user metadata) is kept beside it in `<copy>.attrs.json`
//! and put back inside the sandbox, as the sandbox user, after the files.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use waxell::sandbox::{EntryInfo, LimitKind, ProcessSpec, SandboxError, SandboxSession};

use super::error::ApiError;

/// The sandbox directory that is saved (the file calls reach only it).
pub(crate) const HOME: &str = "/home/user";

/// How much one save may hold.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SaveLimits {
    pub(crate) max_bytes: u64,
    pub(crate) max_entries: usize,
}

/// What a save kept.
#[derive(Debug, Default)]
pub(crate) struct SaveReport {
    pub(crate) bytes: u64,
    pub(crate) files: usize,
    pub(crate) dirs: usize,
    /// Symbolic links, kept as their targets.
    pub(crate) links: usize,
    /// Entries that are neither a regular file, a directory nor a link the backend reports the
    /// target of (sockets, fifos, ...), which the file calls refuse to read: not kept, and logged.
    pub(crate) skipped: Vec<String>,
}

/// One entry's attributes that the host copy does not carry, by its path below [`HOME`].
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
struct SavedAttributes {
    /// Permission bits (`0o7777` at most).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    mode: Option<u32>,
    /// Modification time, nanoseconds since the epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    mtime_ns: Option<u64>,
    /// A symbolic link's target, as an absolute path inside the sandbox (as the backends report
    /// it; the link comes back pointing there). The link itself is never made on the host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    link: Option<String>,
    /// User metadata (E2B's `X-Metadata-*`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    metadata: BTreeMap<String, String>,
}

impl SavedAttributes {
    fn of(entry: &EntryInfo) -> Self {
        Self {
            mode: entry.mode.map(|mode| mode & 0o7777),
            mtime_ns: entry
                .modified
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
            link: entry.symlink_target.clone(),
            metadata: entry.metadata.clone(),
        }
    }

    /// Whether restoring needs a step inside the sandbox (metadata goes with the file's write).
    fn needs_fixup(&self) -> bool {
        self.mode.is_some() || self.mtime_ns.is_some() || self.link.is_some()
    }
}

/// Where the attributes of the saved copy `copy` live.
fn attributes_path(copy: &Path) -> PathBuf {
    let mut name = copy.as_os_str().to_owned();
    name.push(".attrs.json");
    PathBuf::from(name)
}

/// Puts modes, times and links back, run inside the sandbox as its user: links first, then every
/// entry deepest first (so a directory's time is set after its children changed it). Reads the
/// list of `[relative path, attributes]` on stdin; names what it could not restore on stderr.
const FIXUP_SCRIPT: &str = r#"
import json, os, sys
home = "/home/user"
entries = json.load(sys.stdin)
failed = []
for rel, a in entries:
    if "link" in a:
        try:
            os.symlink(a["link"], os.path.join(home, rel))
        except OSError as e:
            failed.append(f"{rel}: {e}")
for rel, a in sorted(entries, key=lambda e: e[0].count("/"), reverse=True):
    path = os.path.join(home, rel)
    try:
        if "mode" in a and "link" not in a:
            os.chmod(path, a["mode"])
        if "mtime_ns" in a:
            os.utime(path, ns=(a["mtime_ns"], a["mtime_ns"]), follow_symlinks=False)
    except OSError as e:
        failed.append(f"{rel}: {e}")
if failed:
    print("\n".join(failed[:20]), file=sys.stderr)
    sys.exit(1)
"#;

/// 507: the sandbox holds more than one save may keep.
fn too_much(what: String) -> ApiError {
    ApiError::new(StatusCode::INSUFFICIENT_STORAGE, what)
}

fn host_io(what: &str, path: &Path, e: std::io::Error) -> ApiError {
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        format!("{what} {}: {e}", path.display()),
    )
}

/// A directory entry's name as the sandbox listed it, if it is safe as one host path component.
fn safe_name(name: &str) -> Option<&str> {
    let bad = name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']);
    (!bad).then_some(name)
}

/// Copy the sandbox's `/home/user` into `dest` (created; must not exist).
pub(crate) async fn save_home(
    session: &dyn SandboxSession,
    dest: &Path,
    limits: SaveLimits,
) -> Result<SaveReport, ApiError> {
    let mut saved = SaveReport::default();
    let mut attributes: BTreeMap<String, SavedAttributes> = BTreeMap::new();
    tokio::fs::create_dir(dest)
        .await
        .map_err(|e| host_io("cannot create", dest, e))?;
    // (path inside the sandbox, its copy on the host)
    let mut pending: Vec<(String, PathBuf)> = vec![(HOME.to_owned(), dest.to_path_buf())];
    while let Some((dir, host_dir)) = pending.pop() {
        let entries = match session.list_files(&dir).await {
            Ok(entries) => entries,
            // Removed or replaced by a symlink since it was listed: nothing to keep.
            Err(SandboxError::FileNotFound { .. } | SandboxError::InvalidPath { .. }) if dir != HOME => {
                saved.skipped.push(dir);
                continue;
            }
            Err(e) => return Err(ApiError::from_sandbox(e)),
        };
        for entry in entries {
            let Some(name) = safe_name(&entry.name) else {
                saved.skipped.push(format!("{dir}/{}", entry.name));
                continue;
            };
            if saved.files + saved.dirs + saved.links >= limits.max_entries {
                return Err(too_much(format!(
                    "{HOME} holds more than {} files and directories, more than this server saves",
                    limits.max_entries
                )));
            }
            let path = format!("{dir}/{name}");
            let host_path = host_dir.join(name);
            let relative = path[HOME.len() + 1..].to_owned();
            if entry.symlink_target.is_some() {
                // Kept as its target only: nothing is followed and no link is made on the host.
                attributes.insert(relative, SavedAttributes::of(&entry));
                saved.links += 1;
                continue;
            }
            if entry.is_dir {
                tokio::fs::create_dir(&host_path)
                    .await
                    .map_err(|e| host_io("cannot create", &host_path, e))?;
                saved.dirs += 1;
                attributes.insert(relative, SavedAttributes::of(&entry));
                pending.push((path, host_path));
                continue;
            }
            if saved.bytes.saturating_add(entry.size) > limits.max_bytes {
                return Err(too_much(format!(
                    "{HOME} holds more than {} bytes, more than this server saves (at {path})",
                    limits.max_bytes
                )));
            }
            let data = match session.read_file(&path).await {
                Ok(data) => data,
                Err(SandboxError::FileNotFound { .. }) => continue,
                Err(SandboxError::InvalidPath { .. }) => {
                    saved.skipped.push(path);
                    continue;
                }
                Err(SandboxError::LimitExceeded {
                    limit: LimitKind::FileSize,
                    message,
                }) => {
                    return Err(too_much(format!(
                        "cannot save {path}: {message} (larger than the sandbox's file cap)"
                    )))
                }
                Err(e) => return Err(ApiError::from_sandbox(e)),
            };
            saved.bytes = saved.bytes.saturating_add(data.len() as u64);
            if saved.bytes > limits.max_bytes {
                return Err(too_much(format!(
                    "{HOME} holds more than {} bytes, more than this server saves (at {path})",
                    limits.max_bytes
                )));
            }
            tokio::fs::write(&host_path, &data)
                .await
                .map_err(|e| host_io("cannot write", &host_path, e))?;
            saved.files += 1;
            attributes.insert(relative, SavedAttributes::of(&entry));
        }
    }
    let attributes_file = attributes_path(dest);
    let json = serde_json::to_vec(&attributes).map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot encode the saved attributes: {e}"),
        )
    })?;
    tokio::fs::write(&attributes_file, json)
        .await
        .map_err(|e| host_io("cannot write", &attributes_file, e))?;
    if !saved.skipped.is_empty() {
        tracing::warn!(
            skipped = ?saved.skipped,
            "not saved: entries of {HOME} that are not regular files or directories"
        );
    }
    Ok(saved)
}

/// One saved entry: its path below the saved root, and whether it is a directory.
fn saved_entries(root: &Path) -> std::io::Result<Vec<(PathBuf, bool)>> {
    let mut entries = Vec::new();
    let mut pending = vec![PathBuf::new()];
    while let Some(rel) = pending.pop() {
        for entry in std::fs::read_dir(root.join(&rel))? {
            let entry = entry?;
            let kind = entry.file_type()?;
            let path = rel.join(entry.file_name());
            if kind.is_dir() {
                entries.push((path.clone(), true));
                pending.push(path);
            } else if kind.is_file() {
                entries.push((path, false));
            }
        }
    }
    // Parents before children.
    entries.sort();
    Ok(entries)
}

/// Write a saved `/home/user` (from [`save_home`]) into the sandbox.
pub(crate) async fn restore_home(session: &dyn SandboxSession, saved: &Path) -> Result<(), ApiError> {
    let root = saved.to_path_buf();
    let entries = tokio::task::spawn_blocking(move || saved_entries(&root))
        .await
        .map_err(|e| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("restore panicked: {e}"),
            )
        })?
        .map_err(|e| host_io("cannot read", saved, e))?;
    let attributes = read_attributes(saved).await?;
    for (rel, is_dir) in entries {
        let Some(rel_str) = rel.to_str() else { continue };
        let path = format!("{HOME}/{rel_str}");
        if is_dir {
            session.make_dir(&path).await?;
        } else {
            let host_path = saved.join(&rel);
            let data = tokio::fs::read(&host_path)
                .await
                .map_err(|e| host_io("cannot read", &host_path, e))?;
            match attributes.get(rel_str).filter(|a| !a.metadata.is_empty()) {
                Some(a) => {
                    session
                        .write_file_with_metadata(&path, &data, &a.metadata)
                        .await?
                }
                None => session.write_file(&path, &data).await?,
            };
        }
    }
    restore_attributes(session, &attributes).await;
    Ok(())
}

/// The attributes saved beside `saved`; none for a copy saved before they were kept.
async fn read_attributes(saved: &Path) -> Result<BTreeMap<String, SavedAttributes>, ApiError> {
    let file = attributes_path(saved);
    match tokio::fs::read(&file).await {
        Ok(json) => serde_json::from_slice(&json).map_err(|e| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("{} is not a saved attribute list: {e}", file.display()),
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
        Err(e) => Err(host_io("cannot read", &file, e)),
    }
}

/// Put modes, times and links back inside the sandbox. The files are already there, so a
/// backend that runs no processes, or an entry the sandbox refuses, costs only these attributes:
/// logged, not fatal.
async fn restore_attributes(session: &dyn SandboxSession, attributes: &BTreeMap<String, SavedAttributes>) {
    let fixups: Vec<(&String, &SavedAttributes)> =
        attributes.iter().filter(|(_, a)| a.needs_fixup()).collect();
    if fixups.is_empty() {
        return;
    }
    let Ok(input) = serde_json::to_vec(&fixups) else {
        return;
    };
    let spec = ProcessSpec::new("python3")
        .with_args(["-I", "-c", FIXUP_SCRIPT])
        .with_stdin(true);
    let outcome = async {
        let process = session.start_process(&spec).await?;
        process.control.write_stdin(&input).await?;
        process.control.close_stdin().await?;
        Ok::<_, SandboxError>(process.wait().await)
    }
    .await;
    match outcome {
        Ok(output) if output.exit.exit_code == 0 => {}
        Ok(output) => tracing::warn!(
            sandbox = session.sandbox_id(),
            stderr = %output.stderr_text(),
            "some saved modes, times or links could not be restored"
        ),
        Err(e) => tracing::warn!(
            sandbox = session.sandbox_id(),
            "saved modes, times and links not restored: {e}"
        ),
    }
}

/// The bytes the files under `dir` hold (links not followed); 0 when it cannot be read.
pub(crate) async fn tree_bytes(dir: &Path) -> u64 {
    fn walk(dir: &Path) -> u64 {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return 0;
        };
        entries
            .flatten()
            .map(|entry| match entry.file_type() {
                Ok(kind) if kind.is_dir() => walk(&entry.path()),
                Ok(kind) if kind.is_file() => entry.metadata().map_or(0, |m| m.len()),
                _ => 0,
            })
            .sum()
    }
    let dir = dir.to_path_buf();
    tokio::task::spawn_blocking(move || walk(&dir)).await.unwrap_or(0)
}

/// Remove everything in `dir` but its entry `keep`.
pub(crate) async fn keep_only(dir: &Path, keep: &str) {
    let Ok(mut entries) = tokio::fs::read_dir(dir).await else {
        return;
    };
    while let Ok(Some(entry)) = entries.next_entry().await {
        if entry.file_name() == keep {
            continue;
        }
        let path = entry.path();
        let removed = match entry.file_type().await {
            Ok(kind) if kind.is_dir() => tokio::fs::remove_dir_all(&path).await,
            _ => tokio::fs::remove_file(&path).await,
        };
        if let Err(e) = removed {
            tracing::warn!("cannot remove {}: {e}", path.display());
        }
    }
}

/// Copy the kept entry `from` (a checkpoint with its files) into the new directory `to` as hard
/// links (`cp -al`: owners, modes and special files as they are, no data copied): neither copy is
/// ever written in place, and each can be removed on its own.
pub(crate) async fn link_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    let output = tokio::process::Command::new("cp")
        .arg("-al")
        .arg("--")
        .arg(from.join("."))
        .arg(to)
        .output()
        .await?;
    if output.status.success() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!(
            "cp -al {} {}: {}",
            from.display(),
            to.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        )))
    }
}

/// Copy a saved tree (a paused sandbox's files into a snapshot).
pub(crate) async fn copy_saved(from: &Path, to: &Path) -> Result<(), ApiError> {
    let (from, to) = (from.to_path_buf(), to.to_path_buf());
    tokio::task::spawn_blocking(move || -> std::io::Result<()> {
        std::fs::create_dir(&to)?;
        match std::fs::copy(attributes_path(&from), attributes_path(&to)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        for (rel, is_dir) in saved_entries(&from)? {
            if is_dir {
                std::fs::create_dir(to.join(&rel))?;
            } else {
                std::fs::copy(from.join(&rel), to.join(&rel))?;
            }
        }
        Ok(())
    })
    .await
    .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, format!("copy panicked: {e}")))?
    .map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot copy saved files: {e}"),
        )
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Mutex;
    use std::time::Duration;

    use async_trait::async_trait;
    use waxell::sandbox::{CodeContext, EntryInfo, Execution, RunOptions};

    use super::*;

    #[derive(Clone, Debug, PartialEq)]
    enum Node {
        Dir,
        File(Vec<u8>),
        /// What a symlink looks like through the file calls: listed, refused when read.
        Link,
    }

    /// The file calls of a sandbox over a map of absolute paths; `extra` adds names to listings
    /// (as hostile code could make a backend report).
    #[derive(Default)]
    struct Files {
        nodes: Mutex<BTreeMap<String, Node>>,
        extra: Vec<EntryInfo>,
    }

    impl Files {
        fn with(nodes: &[(&str, Node)]) -> Self {
            let mut map: BTreeMap<String, Node> =
                nodes.iter().map(|(p, n)| ((*p).to_owned(), n.clone())).collect();
            map.insert(HOME.to_owned(), Node::Dir);
            Self {
                nodes: Mutex::new(map),
                extra: Vec::new(),
            }
        }

        fn tree(&self) -> BTreeMap<String, Node> {
            self.nodes.lock().unwrap().clone()
        }
    }

    #[async_trait]
    impl SandboxSession for Files {
        fn sandbox_id(&self) -> &str {
            "files"
        }
        async fn run_code(&self, _: &str, _: &RunOptions) -> Result<Execution, SandboxError> {
            unimplemented!()
        }
        async fn create_context(
            &self,
            _: Option<&str>,
            _: Option<&str>,
        ) -> Result<CodeContext, SandboxError> {
            unimplemented!()
        }
        async fn list_contexts(&self) -> Result<Vec<CodeContext>, SandboxError> {
            unimplemented!()
        }
        async fn restart_context(&self, _: &str) -> Result<(), SandboxError> {
            unimplemented!()
        }
        async fn remove_context(&self, _: &str) -> Result<(), SandboxError> {
            unimplemented!()
        }
        async fn write_file(&self, path: &str, data: &[u8]) -> Result<EntryInfo, SandboxError> {
            self.nodes
                .lock()
                .unwrap()
                .insert(path.to_owned(), Node::File(data.to_vec()));
            Ok(EntryInfo {
                name: String::new(),
                path: path.to_owned(),
                is_dir: false,
                size: data.len() as u64,
                ..EntryInfo::default()
            })
        }
        async fn read_file(&self, path: &str) -> Result<Vec<u8>, SandboxError> {
            match self.nodes.lock().unwrap().get(path) {
                Some(Node::File(data)) => Ok(data.clone()),
                Some(_) => Err(SandboxError::InvalidPath {
                    path: path.to_owned(),
                    reason: "refused: a component is a symlink".into(),
                }),
                None => Err(SandboxError::FileNotFound {
                    path: path.to_owned(),
                }),
            }
        }
        async fn list_files(&self, path: &str) -> Result<Vec<EntryInfo>, SandboxError> {
            let nodes = self.nodes.lock().unwrap();
            let prefix = format!("{path}/");
            let mut entries: Vec<EntryInfo> = nodes
                .iter()
                .filter_map(|(p, node)| {
                    let name = p.strip_prefix(&prefix)?;
                    (!name.contains('/')).then(|| EntryInfo {
                        name: name.to_owned(),
                        path: p.clone(),
                        is_dir: *node == Node::Dir,
                        size: match node {
                            Node::File(data) => data.len() as u64,
                            _ => 0,
                        },
                        ..EntryInfo::default()
                    })
                })
                .collect();
            if path == HOME {
                entries.extend(self.extra.iter().cloned());
            }
            Ok(entries)
        }
        async fn make_dir(&self, path: &str) -> Result<bool, SandboxError> {
            Ok(self
                .nodes
                .lock()
                .unwrap()
                .insert(path.to_owned(), Node::Dir)
                .is_none())
        }
        async fn set_timeout(&self, _: Duration) -> Result<(), SandboxError> {
            unimplemented!()
        }
        async fn kill(&self) -> Result<(), SandboxError> {
            unimplemented!()
        }
    }

    const LIMITS: SaveLimits = SaveLimits {
        max_bytes: 1024,
        max_entries: 16,
    };

    fn file(data: &str) -> Node {
        Node::File(data.as_bytes().to_vec())
    }

    #[tokio::test]
    async fn a_saved_home_comes_back_whole_without_links_or_foreign_names() {
        let mut sandbox = Files::with(&[
            ("/home/user/a.txt", file("alpha")),
            ("/home/user/empty", Node::Dir),
            ("/home/user/d", Node::Dir),
            ("/home/user/d/e", Node::Dir),
            ("/home/user/d/e/deep.bin", Node::File(vec![0, 1, 2, 255])),
            ("/home/user/d/link", Node::Link),
        ]);
        sandbox.extra.push(EntryInfo {
            name: "../escape".into(),
            path: "/home/escape".into(),
            is_dir: false,
            size: 1,
            ..EntryInfo::default()
        });
        let dir = tempfile_dir();
        let saved = save_home(&sandbox, &dir.join("home"), LIMITS).await.unwrap();
        assert_eq!((saved.files, saved.dirs, saved.bytes), (2, 3, 9));
        assert!(
            saved.skipped.iter().any(|s| s.ends_with("/d/link")),
            "{:?}",
            saved.skipped
        );
        assert!(
            saved.skipped.iter().any(|s| s.ends_with("../escape")),
            "{:?}",
            saved.skipped
        );
        assert!(!dir.parent().unwrap().join("escape").exists());

        let fresh = Files::with(&[]);
        restore_home(&fresh, &dir.join("home")).await.unwrap();
        let mut expected = sandbox.tree();
        expected.remove("/home/user/d/link");
        assert_eq!(fresh.tree(), expected);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn a_home_over_the_byte_or_entry_cap_is_refused_with_507() {
        let big = Files::with(&[
            ("/home/user/one", Node::File(vec![1; 600])),
            ("/home/user/two", Node::File(vec![2; 600])),
        ]);
        let dir = tempfile_dir();
        let error = save_home(&big, &dir.join("home"), LIMITS).await.unwrap_err();
        assert_eq!(
            error.status(),
            StatusCode::INSUFFICIENT_STORAGE,
            "{}",
            error.message()
        );
        assert!(error.message().contains("1024 bytes"), "{}", error.message());

        let names: Vec<(String, Node)> = (0..20).map(|i| (format!("/home/user/f{i}"), file("x"))).collect();
        let many = Files::with(
            &names
                .iter()
                .map(|(p, n)| (p.as_str(), n.clone()))
                .collect::<Vec<_>>(),
        );
        let error = save_home(&many, &dir.join("home2"), LIMITS).await.unwrap_err();
        assert_eq!(
            error.status(),
            StatusCode::INSUFFICIENT_STORAGE,
            "{}",
            error.message()
        );
        assert!(
            error.message().contains("16 files and directories"),
            "{}",
            error.message()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A fresh directory under the system's temporary one (its parent must exist; it must not).
    fn tempfile_dir() -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "waxell-saved-test-{}-{}",
            std::process::id(),
            rand::random::<u64>()
        ));
        std::fs::create_dir(&dir).unwrap();
        dir
    }

    #[test]
    fn names_that_would_leave_the_directory_are_refused() {
        for bad in ["", ".", "..", "a/b", "/etc", "a\0b"] {
            assert_eq!(safe_name(bad), None, "{bad:?}");
        }
        assert_eq!(safe_name("notes.txt"), Some("notes.txt"));
        assert_eq!(safe_name("..hidden"), Some("..hidden"));
    }
}
