//! The host side of a local sandbox's files: its size-capped tmpfs mounts (scratch, `/tmp`,
//! `/dev/shm`), the root directory they live in, and the sweep of a dead host's leftovers.

use std::fs;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use waxell::sandbox::SandboxError;

use crate::config::Limits;
use crate::local::cgroup::Cgroup;
use crate::local::launcher::{Slot, SHM_BYTES};
use crate::local::rootless::MountNamespace;
use crate::naming;

/// A per-sandbox tmpfs on the host: the scratch directory (host side of `/home/user`), `/tmp` and
/// `/dev/shm`. Size- and inode-capped (`size=`, `nr_inodes=`), so no sandbox can fill the host's
/// disk or pin unbounded kernel memory in inodes and dentries. Unmounted and removed on drop.
#[derive(Debug)]
struct TmpfsMount {
    path: PathBuf,
}

/// What one [`TmpfsMount`] is for.
struct TmpfsSpec<'a> {
    name: &'a str,
    size_bytes: u64,
    inodes: u64,
    /// `0700` owned by the sandbox uid (scratch) or `1777` owned by root (`/tmp`, `/dev/shm`).
    private_to: Option<u32>,
}

impl TmpfsMount {
    pub(crate) fn create(root: &Path, spec: TmpfsSpec<'_>) -> Result<Self, SandboxError> {
        let path = root.join(spec.name);
        fs::DirBuilder::new().mode(0o700).create(&path)?;
        let dir = TmpfsMount { path };
        let owner = match spec.private_to {
            Some(uid) => format!("mode=0700,uid={uid},gid={uid}"),
            None => "mode=1777,uid=0,gid=0".to_owned(),
        };
        // nosuid/nodev: nothing the sandbox writes there can gain privileges on the host.
        let options = std::ffi::CString::new(format!(
            "size={},nr_inodes={},{owner}",
            spec.size_bytes, spec.inodes
        ))
        .expect("mount options have no NUL");
        rustix::mount::mount(
            "waxell-sandbox",
            &dir.path,
            "tmpfs",
            rustix::mount::MountFlags::NOSUID | rustix::mount::MountFlags::NODEV,
            options.as_c_str(),
        )
        .map_err(|e| {
            SandboxError::Unavailable(format!(
                "cannot mount a sandbox tmpfs at {} ({e}): the sandbox needs CAP_SYS_ADMIN, as bubblewrap does",
                dir.path.display()
            ))
        })?;
        Ok(dir)
    }

    /// Rootless: a plain 0700 directory of this user, on which the sandbox's own mount namespace
    /// mounts the tmpfs (rootless.rs).
    fn create_unmounted(root: &Path, id: &str) -> Result<Self, SandboxError> {
        let path = root.join(id);
        fs::DirBuilder::new().mode(0o700).create(&path)?;
        Ok(TmpfsMount { path })
    }

    pub(crate) fn remove(&self) {
        unmount_and_remove(&self.path);
    }
}

/// The host tmpfs mounts of one sandbox. Their names start with the sandbox id (host pid first), so
/// the start-up sweep finds leftovers. Nothing is mounted beneath the writable scratch mount.
/// Rootless, the directories stay empty on the host: the same size- and inode-capped tmpfs mounts
/// sit on them in the sandbox's own mount namespace (`namespace`, dropped on removal).
#[derive(Debug)]
pub(crate) struct SandboxMounts {
    scratch: TmpfsMount,
    tmp: TmpfsMount,
    shm: TmpfsMount,
    namespace: Mutex<Option<Arc<MountNamespace>>>,
    /// Shown at `/proc/sys/kernel/random/boot_id` (naming::new_boot_id).
    boot_id: String,
}

/// Where the host's file calls find a sandbox's `/home/user`.
#[derive(Debug, Clone)]
pub(crate) enum ScratchRoot {
    /// The host tmpfs (root mode).
    Host(PathBuf),
    /// Rootless: a directory fd of the tmpfs in the sandbox's mount namespace.
    Namespace(Arc<MountNamespace>),
}

fn new_boot_id() -> Result<String, SandboxError> {
    crate::naming::new_boot_id()
        .map_err(|e| SandboxError::Unavailable(format!("cannot read a random id from the kernel: {e}")))
}

impl SandboxMounts {
    pub(crate) fn create(
        root: &Path,
        id: &str,
        uid: u32,
        limits: &Limits,
        rootless: bool,
    ) -> Result<Self, SandboxError> {
        let inodes = limits.tmpfs_inodes;
        if rootless {
            let scratch = TmpfsMount::create_unmounted(root, id)?;
            let tmp = TmpfsMount::create_unmounted(root, &format!("{id}.tmp"))?;
            let shm = TmpfsMount::create_unmounted(root, &format!("{id}.shm"))?;
            // The owner is this user (the mounter) inside as outside.
            let options = |size: u64, mode: &str| format!("size={size},nr_inodes={inodes},mode={mode}");
            let namespace = MountNamespace::new(
                &[
                    (&scratch.path, options(limits.scratch_bytes, "0700")),
                    (&tmp.path, options(limits.tmp_bytes, "1777")),
                    (&shm.path, options(SHM_BYTES, "1777")),
                ],
                &scratch.path,
            )?;
            return Ok(Self {
                scratch,
                tmp,
                shm,
                namespace: Mutex::new(Some(Arc::new(namespace))),
                boot_id: new_boot_id()?,
            });
        }
        Ok(Self {
            scratch: TmpfsMount::create(
                root,
                TmpfsSpec {
                    name: id,
                    size_bytes: limits.scratch_bytes,
                    inodes,
                    private_to: Some(uid),
                },
            )?,
            tmp: TmpfsMount::create(
                root,
                TmpfsSpec {
                    name: &format!("{id}.tmp"),
                    size_bytes: limits.tmp_bytes,
                    inodes,
                    private_to: None,
                },
            )?,
            shm: TmpfsMount::create(
                root,
                TmpfsSpec {
                    name: &format!("{id}.shm"),
                    size_bytes: SHM_BYTES,
                    inodes,
                    private_to: None,
                },
            )?,
            namespace: Mutex::new(None),
            boot_id: new_boot_id()?,
        })
    }

    /// Host path of the scratch directory (bound at `/home/user` inside; rootless, the tmpfs on it
    /// is seen only in the sandbox's mount namespace).
    pub(crate) fn scratch_dir(&self) -> &Path {
        &self.scratch.path
    }

    fn namespace(&self) -> Option<Arc<MountNamespace>> {
        self.namespace.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Where the host's file calls find `/home/user`; `None` once a rootless sandbox is removed.
    pub(crate) fn scratch_root(&self, rootless: bool) -> Option<ScratchRoot> {
        if rootless {
            self.namespace().map(ScratchRoot::Namespace)
        } else {
            Some(ScratchRoot::Host(self.scratch.path.clone()))
        }
    }

    pub(crate) fn slot<'a>(&'a self, uid: u32, cgroup: &'a Cgroup) -> Slot<'a> {
        Slot {
            uid,
            scratch: &self.scratch.path,
            tmp: &self.tmp.path,
            shm: &self.shm.path,
            namespace: self.namespace(),
            cgroup,
            boot_id: &self.boot_id,
        }
    }

    pub(crate) fn remove(&self) {
        // Rootless: the last reference to the namespaces (once the processes are gone) frees the tmpfs.
        self.namespace.lock().unwrap_or_else(|e| e.into_inner()).take();
        for mount in [&self.scratch, &self.tmp, &self.shm] {
            mount.remove();
        }
    }
}

/// Detach the scratch tmpfs (frees its pages) and remove the directory it sat on. Never follows
/// a symlink: `remove_dir_all` does not (CVE-2022-21658 was fixed in Rust 1.58.1).
fn unmount_and_remove(path: &Path) {
    // EINVAL: not a mount point (already unmounted); ENOENT: already gone.
    match rustix::mount::unmount(
        path,
        rustix::mount::UnmountFlags::DETACH | rustix::mount::UnmountFlags::NOFOLLOW,
    ) {
        // EPERM: rootless, nothing was mounted.
        Ok(()) | Err(rustix::io::Errno::INVAL) | Err(rustix::io::Errno::NOENT) | Err(rustix::io::Errno::PERM) => {}
        Err(e) => tracing::warn!(path = %path.display(), "could not unmount sandbox scratch: {e}"),
    }
    if let Err(e) = fs::remove_dir_all(path) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(path = %path.display(), "could not remove sandbox scratch dir: {e}");
        }
    }
}

impl Drop for TmpfsMount {
    fn drop(&mut self) {
        self.remove();
    }
}

/// The directory holding the scratch dirs: ours (`$TMPDIR/waxell-sandbox`, made root 0711 so
/// sandboxes' directories cannot be listed) or a configured one, which must already be a real
/// directory owned by root and not writable by others (the sweep deletes entries in it).
pub(crate) fn prepare_scratch_root(configured: Option<&Path>) -> Result<PathBuf, SandboxError> {
    let (root, ours) = match configured {
        Some(path) => (path.to_path_buf(), false),
        None => (std::env::temp_dir().join("waxell-sandbox"), true),
    };
    if ours {
        match fs::DirBuilder::new().mode(0o711).create(&root) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(SandboxError::Io(e)),
        }
    }
    let meta = fs::symlink_metadata(&root)
        .map_err(|e| SandboxError::InvalidArgument(format!("scratch_root {}: {e}", root.display())))?;
    let unsafe_reason = if !meta.is_dir() {
        Some("is not a directory (or is a symlink)")
    } else if std::os::unix::fs::MetadataExt::uid(&meta) != 0 {
        Some("is not owned by root")
    } else if !ours && meta.permissions().mode() & 0o022 != 0 {
        Some("is writable by group or others")
    } else {
        None
    };
    if let Some(reason) = unsafe_reason {
        return Err(SandboxError::InvalidArgument(format!(
            "scratch_root {} {reason}",
            root.display()
        )));
    }
    if ours {
        // Root-owned and not listable: sandboxes cannot find each other's directories.
        fs::set_permissions(&root, fs::Permissions::from_mode(0o711))?;
    }
    Ok(root)
}

pub(crate) fn sweep_stale_scratch(root: &Path) {
    let Ok(entries) = fs::read_dir(root) else { return };
    for entry in entries.flatten() {
        if naming::owner_is_dead(&entry.file_name().to_string_lossy()) {
            unmount_and_remove(&entry.path());
        }
    }
}

