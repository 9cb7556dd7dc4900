//! Host-side file access to a sandbox's scratch directory (requirement R2: the host never follows a
//! path the sandbox controls). Every lookup goes through a directory fd with
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)` plus `O_NOFOLLOW`, only
//! regular files are read or written, and sizes are capped. A symlink planted by the code gives an
//! error (ELOOP / ENOTDIR), never the target's content.

use std::io::{Read, Write};
use std::collections::BTreeMap;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Gid, Mode, OFlags, ResolveFlags, Uid, XattrFlags};
use waxell::sandbox::{EntryInfo, LimitKind, SandboxError};

use crate::local::mounts::ScratchRoot;
use crate::metadata::XATTR_PREFIX;
use crate::paths::HOME_DIR;

const RESOLVE: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS);

/// The scratch directory of one sandbox, seen from the host.
#[derive(Debug, Clone)]
pub(crate) struct ScratchFiles {
    pub(crate) root: ScratchRoot,
    pub(crate) uid: u32,
    pub(crate) max_file_bytes: u64,
}

fn invalid(path: &str, reason: impl Into<String>) -> SandboxError {
    SandboxError::InvalidPath {
        path: path.to_owned(),
        reason: reason.into(),
    }
}

fn too_large(path: &str, what: String) -> SandboxError {
    SandboxError::LimitExceeded {
        limit: LimitKind::FileSize,
        message: format!("{path}: {what}"),
    }
}

fn io_error(path: &str, e: rustix::io::Errno) -> SandboxError {
    let reason = match e {
        rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR | rustix::io::Errno::XDEV => {
            format!("refused: a component is a symlink or not a directory ({e})")
        }
        rustix::io::Errno::NOENT => return SandboxError::FileNotFound { path: path.to_owned() },
        rustix::io::Errno::ISDIR => "is a directory".to_owned(),
        other => other.to_string(),
    };
    invalid(path, reason)
}

impl ScratchFiles {
    /// The path relative to the scratch root (see [`crate::paths::sandbox_path`] for what is refused).
    fn relative(&self, path: &str) -> Result<PathBuf, SandboxError> {
        let inside = crate::paths::sandbox_path(path)?;
        Ok(PathBuf::from(inside[HOME_DIR.len()..].trim_start_matches('/')))
    }

    /// Bytes the scratch file system holds (its tmpfs's used blocks).
    pub(crate) fn disk_used(&self) -> Result<u64, SandboxError> {
        let root = self.open_root()?;
        let stat = rustix::fs::fstatvfs(&root).map_err(|e| SandboxError::Io(e.into()))?;
        Ok(stat.f_blocks.saturating_sub(stat.f_bfree).saturating_mul(stat.f_frsize))
    }

    fn open_root(&self) -> Result<OwnedFd, SandboxError> {
        self.root.open()
    }

    fn sandbox_path(rel: &Path) -> String {
        if rel.as_os_str().is_empty() {
            HOME_DIR.to_owned()
        } else {
            format!("{HOME_DIR}/{}", rel.display())
        }
    }

    pub(crate) fn read(&self, path: &str) -> Result<Vec<u8>, SandboxError> {
        let rel = self.relative(path)?;
        if rel.as_os_str().is_empty() {
            return Err(invalid(path, "is a directory"));
        }
        let root = self.open_root()?;
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK | OFlags::NOCTTY;
        let fd =
            rustix::fs::openat2(&root, &rel, flags, Mode::empty(), RESOLVE).map_err(|e| io_error(path, e))?;
        let stat = rustix::fs::fstat(&fd).map_err(|e| io_error(path, e))?;
        if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
            return Err(invalid(path, "not a regular file"));
        }
        if stat.st_size as u64 > self.max_file_bytes {
            return Err(too_large(
                path,
                format!("{} bytes exceed the {} byte file limit", stat.st_size, self.max_file_bytes),
            ));
        }
        let mut data = Vec::with_capacity(stat.st_size as usize);
        // Bounded read: the file may grow while we read it.
        std::fs::File::from(fd)
            .take(self.max_file_bytes + 1)
            .read_to_end(&mut data)?;
        if data.len() as u64 > self.max_file_bytes {
            return Err(too_large(
                path,
                format!("larger than the {} byte file limit", self.max_file_bytes),
            ));
        }
        Ok(data)
    }

    pub(crate) fn write(&self, path: &str, data: &[u8]) -> Result<EntryInfo, SandboxError> {
        let rel = self.relative(path)?;
        let Some(name) = rel.file_name().map(|n| n.to_owned()) else {
            return Err(invalid(path, "no file name"));
        };
        if data.len() as u64 > self.max_file_bytes {
            return Err(too_large(
                path,
                format!("{} bytes exceed the {} byte file limit", data.len(), self.max_file_bytes),
            ));
        }
        let (dir, _) = self.make_dirs(rel.parent().unwrap_or(Path::new("")), path)?;
        let flags = OFlags::WRONLY
            | OFlags::CREATE
            | OFlags::NOFOLLOW
            | OFlags::CLOEXEC
            | OFlags::NONBLOCK
            | OFlags::NOCTTY;
        let fd = rustix::fs::openat2(&dir, &name, flags, Mode::from_raw_mode(0o644), RESOLVE)
            .map_err(|e| io_error(path, e))?;
        let stat = rustix::fs::fstat(&fd).map_err(|e| io_error(path, e))?;
        if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
            return Err(invalid(path, "not a regular file"));
        }
        // The same steps as envd's upload (create or truncate, chown, write), so a directory
        // watch sees the same events: CREATE, CHMOD, WRITE for a new file.
        if stat.st_size > 0 {
            rustix::fs::ftruncate(&fd, 0).map_err(|e| io_error(path, e))?;
        }
        let (uid, gid) = self.owner();
        rustix::fs::fchown(&fd, Some(uid), Some(gid)).map_err(|e| io_error(path, e))?;
        let mut file = std::fs::File::from(fd);
        file.write_all(data)?;
        entry_at(&dir, &name, Self::sandbox_path(&rel)).map_err(|e| io_error(path, e))
    }

    /// Who owns what the host creates in the scratch directory: the sandbox uid, or this
    /// process's own user when rootless (the sandbox runs as it).
    fn owner(&self) -> (Uid, Gid) {
        if rustix::process::geteuid().as_raw() == self.uid {
            return (rustix::process::geteuid(), rustix::process::getegid());
        }
        (Uid::from_raw(self.uid), Gid::from_raw(self.uid))
    }

    /// Walk `rel` from the root one component at a time, creating what is missing (owned by the
    /// sandbox uid) and never following a symlink. Returns the last directory and whether it was
    /// created by this call.
    fn make_dirs(&self, rel: &Path, path: &str) -> Result<(OwnedFd, bool), SandboxError> {
        let mut dir = self.open_root()?;
        let mut created = false;
        let (owner_uid, owner_gid) = self.owner();
        for part in rel.components() {
            match rustix::fs::mkdirat(&dir, part.as_os_str(), Mode::from_raw_mode(0o755)) {
                Ok(()) => {
                    let new = self.open_dir_beneath(&dir, part.as_os_str(), path)?;
                    rustix::fs::fchown(&new, Some(owner_uid), Some(owner_gid)).map_err(|e| io_error(path, e))?;
                    dir = new;
                    created = true;
                }
                Err(rustix::io::Errno::EXIST) => {
                    dir = self.open_dir_beneath(&dir, part.as_os_str(), path)?;
                    created = false;
                }
                Err(e) => return Err(io_error(path, e)),
            }
        }
        Ok((dir, created))
    }

    /// Create a directory and its missing parents: `true` if the last one is new.
    pub(crate) fn make_dir(&self, path: &str) -> Result<bool, SandboxError> {
        let rel = self.relative(path)?;
        if rel.as_os_str().is_empty() {
            return Ok(false);
        }
        Ok(self.make_dirs(&rel, path)?.1)
    }

    /// Rename `from` to `to` (replacing a file there, as rename(2) does). Both parents are reached
    /// beneath the root without following symlinks (the destination's are created), and `renameat`
    /// moves the entry itself: a symlink moves as a link, never its target.
    pub(crate) fn rename(&self, from: &str, to: &str) -> Result<EntryInfo, SandboxError> {
        let (rel_from, rel_to) = (self.relative(from)?, self.relative(to)?);
        let (Some(from_name), Some(to_name)) = (rel_from.file_name(), rel_to.file_name()) else {
            return Err(invalid(
                from,
                "the sandbox's home directory itself cannot be renamed",
            ));
        };
        let from_parent = self.open_parent(&rel_from, from)?;
        let (to_parent, _) = self.make_dirs(rel_to.parent().unwrap_or(Path::new("")), to)?;
        rustix::fs::renameat(&from_parent, from_name, &to_parent, to_name).map_err(|e| io_error(from, e))?;
        entry_at(&to_parent, to_name, Self::sandbox_path(&rel_to)).map_err(|e| io_error(to, e))
    }

    /// Remove a file, a symlink (never its target) or a directory tree. The parent is reached
    /// beneath the root without following symlinks, and the tree is removed through directory fds
    /// with `unlinkat`, which never follows a link either.
    pub(crate) fn remove(&self, path: &str) -> Result<(), SandboxError> {
        let rel = self.relative(path)?;
        let Some(name) = rel.file_name().map(|n| n.to_owned()) else {
            return Err(invalid(
                path,
                "the sandbox's home directory itself cannot be removed",
            ));
        };
        remove_entry(&self.open_parent(&rel, path)?, &name, path, 0)
    }

    /// The existing directory holding `rel`, reached beneath the root without following symlinks.
    fn open_parent(&self, rel: &Path, path: &str) -> Result<OwnedFd, SandboxError> {
        let root = self.open_root()?;
        match rel.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => {
                self.open_dir_beneath(&root, parent.as_os_str(), path)
            }
            _ => Ok(root),
        }
    }

    fn open_dir_beneath(
        &self,
        dir: &OwnedFd,
        name: &std::ffi::OsStr,
        path: &str,
    ) -> Result<OwnedFd, SandboxError> {
        rustix::fs::openat2(
            dir,
            name,
            OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::RDONLY,
            Mode::empty(),
            RESOLVE,
        )
        .map_err(|e| io_error(path, e))
    }

    pub(crate) fn list(&self, path: &str) -> Result<Vec<EntryInfo>, SandboxError> {
        let rel = self.relative(path)?;
        let root = self.open_root()?;
        let dir = if rel.as_os_str().is_empty() {
            root
        } else {
            self.open_dir_beneath(&root, rel.as_os_str(), path)?
        };
        let mut entries = Vec::new();
        let mut reader = rustix::fs::Dir::read_from(dir.as_fd()).map_err(|e| io_error(path, e))?;
        while let Some(entry) = reader.read() {
            let entry = entry.map_err(|e| io_error(path, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name == "." || name == ".." {
                continue;
            }
            // The entry itself: a symlink is reported as a link, never followed. One that
            // vanished since readdir is skipped.
            if let Ok(info) = entry_at(&dir, std::ffi::OsStr::from_bytes(entry.file_name().to_bytes()), Self::sandbox_path(&rel.join(&name))) {
                entries.push(info);
            }
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(entries)
    }
    /// Replace the `user.e2b.*` extended attributes of a regular file or directory with
    /// `metadata` (envd's upload metadata). The entry is opened beneath the root without
    /// following a symlink; other extended attributes are left alone.
    pub(crate) fn set_metadata(&self, path: &str, metadata: &BTreeMap<String, String>) -> Result<EntryInfo, SandboxError> {
        let rel = self.relative(path)?;
        let Some(name) = rel.file_name().map(|n| n.to_owned()) else {
            return Err(invalid(path, "the sandbox's home directory carries no metadata"));
        };
        let parent = self.open_parent(&rel, path)?;
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK | OFlags::NOCTTY;
        let fd = rustix::fs::openat2(&parent, &name, flags, Mode::empty(), RESOLVE).map_err(|e| io_error(path, e))?;
        let kind = FileType::from_raw_mode(rustix::fs::fstat(&fd).map_err(|e| io_error(path, e))?.st_mode);
        if kind != FileType::RegularFile && kind != FileType::Directory {
            return Err(invalid(path, "metadata goes on regular files and directories only"));
        }
        let mut names = vec![0u8; XATTR_LIST_BYTES];
        let len = rustix::fs::flistxattr(&fd, &mut names[..]).map_err(|e| io_error(path, e))?;
        for stale in names[..len].split(|b| *b == 0).filter_map(|n| std::str::from_utf8(n).ok()) {
            if let Some(key) = stale.strip_prefix(XATTR_PREFIX) {
                if !metadata.contains_key(key) {
                    rustix::fs::fremovexattr(&fd, stale).map_err(|e| io_error(path, e))?;
                }
            }
        }
        for (key, value) in metadata {
            rustix::fs::fsetxattr(&fd, format!("{XATTR_PREFIX}{key}"), value.as_bytes(), XattrFlags::empty())
                .map_err(|e| match e {
                    rustix::io::Errno::NOSPC | rustix::io::Errno::TOOBIG => SandboxError::LimitExceeded {
                        limit: LimitKind::FileSize,
                        message: format!("{path}: no room for its metadata ({e})"),
                    },
                    e => io_error(path, e),
                })?;
        }
        entry_at(&parent, &name, Self::sandbox_path(&rel)).map_err(|e| io_error(path, e))
    }

    /// A directory inside the scratch directory, opened beneath the root without following a
    /// symlink (what a directory watch holds on to), and its path inside the sandbox.
    pub(crate) fn open_dir(&self, path: &str) -> Result<(OwnedFd, String), SandboxError> {
        let rel = self.relative(path)?;
        let root = self.open_root()?;
        let dir = if rel.as_os_str().is_empty() {
            root
        } else {
            self.open_dir_beneath(&root, rel.as_os_str(), path)?
        };
        Ok((dir, Self::sandbox_path(&rel)))
    }
}

/// Room for the names of one entry's extended attributes (the metadata cap keeps ours small).
const XATTR_LIST_BYTES: usize = 16 << 10;

/// The entry `name` of `dir`, never following it: type, size, mode, modification time, a
/// symlink's target and the user metadata.
pub(crate) fn entry_at(dir: &OwnedFd, name: &std::ffi::OsStr, path: String) -> Result<EntryInfo, rustix::io::Errno> {
    let stat = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)?;
    let kind = FileType::from_raw_mode(stat.st_mode);
    let is_dir = kind == FileType::Directory;
    // A link's target as an absolute path inside the sandbox (as envd reports it), worked out
    // from the text alone: the host never follows a link the sandbox made.
    let symlink_target = (kind == FileType::Symlink)
        .then(|| rustix::fs::readlinkat(dir, name, Vec::new()).ok())
        .flatten()
        .map(|target| absolute_target(&path, &target.to_string_lossy()));
    let metadata = if kind == FileType::RegularFile || is_dir {
        read_metadata(dir, name)
    } else {
        BTreeMap::new()
    };
    let modified = std::time::UNIX_EPOCH
        + std::time::Duration::new(stat.st_mtime.max(0) as u64, stat.st_mtime_nsec as u32);
    Ok(EntryInfo {
        name: name.to_string_lossy().into_owned(),
        path,
        is_dir,
        size: stat.st_size as u64,
        mode: Some(stat.st_mode & 0o7777),
        modified: Some(modified),
        symlink_target,
        metadata,
    })
}

/// `target` of the link at `link_path`, made absolute and normalised without touching the disk.
fn absolute_target(link_path: &str, target: &str) -> String {
    let base = if target.starts_with('/') {
        ""
    } else {
        link_path.rsplit_once('/').map_or("", |(parent, _)| parent)
    };
    let mut parts: Vec<&str> = Vec::new();
    for part in base.split('/').chain(target.split('/')) {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            part => parts.push(part),
        }
    }
    format!("/{}", parts.join("/"))
}

/// The `user.e2b.*` attributes of `name` in `dir`, read through the directory fd's magic link so
/// no path the sandbox controls is followed (`l*xattr`: a final symlink is not followed either).
/// Unreadable or non-UTF-8 ones are skipped, as envd does.
fn read_metadata(dir: &OwnedFd, name: &std::ffi::OsStr) -> BTreeMap<String, String> {
    let mut metadata = BTreeMap::new();
    let mut link = std::ffi::OsString::from(format!("/proc/self/fd/{}/", dir.as_raw_fd()));
    link.push(name);
    let mut names = vec![0u8; XATTR_LIST_BYTES];
    let Ok(len) = rustix::fs::llistxattr(&link, &mut names[..]) else {
        return metadata;
    };
    let mut value = vec![0u8; 4096];
    for attr in names[..len].split(|b| *b == 0).filter_map(|n| std::str::from_utf8(n).ok()) {
        let Some(key) = attr.strip_prefix(XATTR_PREFIX) else {
            continue;
        };
        if let Ok(n) = rustix::fs::lgetxattr(&link, attr, &mut value[..]) {
            if let Ok(text) = std::str::from_utf8(&value[..n]) {
                metadata.insert(key.to_owned(), text.to_owned());
            }
        }
    }
    metadata
}

/// Deepest directory tree `remove` descends into (the sandbox controls the tree).
const MAX_REMOVE_DEPTH: usize = 64;

/// Remove `name` in `parent`: a directory's entries first (through its own fd), then the entry.
fn remove_entry(
    parent: &OwnedFd,
    name: &std::ffi::OsStr,
    path: &str,
    depth: usize,
) -> Result<(), SandboxError> {
    let stat = rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW).map_err(|e| io_error(path, e))?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::Directory {
        return rustix::fs::unlinkat(parent, name, AtFlags::empty()).map_err(|e| io_error(path, e));
    }
    if depth >= MAX_REMOVE_DEPTH {
        return Err(invalid(
            path,
            format!("deeper than {MAX_REMOVE_DEPTH} directories"),
        ));
    }
    // O_NOFOLLOW + RESOLVE_NO_SYMLINKS: a directory swapped for a symlink since the stat is refused.
    let dir = rustix::fs::openat2(
        parent,
        name,
        OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::RDONLY,
        Mode::empty(),
        RESOLVE,
    )
    .map_err(|e| io_error(path, e))?;
    let mut names = Vec::new();
    let mut reader = rustix::fs::Dir::read_from(dir.as_fd()).map_err(|e| io_error(path, e))?;
    while let Some(entry) = reader.read() {
        let entry = entry.map_err(|e| io_error(path, e))?;
        let child = entry.file_name().to_bytes();
        if child != b"." && child != b".." {
            names.push(std::ffi::OsStr::from_bytes(child).to_owned());
        }
    }
    for child in names {
        remove_entry(&dir, &child, path, depth + 1)?;
    }
    rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR).map_err(|e| io_error(path, e))
}
