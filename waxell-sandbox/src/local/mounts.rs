//! The host side of a local sandbox's files: its size-capped tmpfs mounts (scratch, `/tmp`,
//! `/dev/shm`) in a mount namespace of the sandbox's own, the directories they sit on, the root
//! directory those live in, and the sweep of a dead host's leftovers.
//!
//! The mounts are never in the host's mount table: every context's bwrap starts inside the
//! sandbox's mount namespace (and makes its own namespaces below it), and the host's file calls
//! reach `/home/user` through a directory fd opened there. A host mount per sandbox would make
//! each bwrap slower as sandboxes pile up (it reads the whole mount table for every bind mount),
//! and would be left behind by a host that dies.

use std::ffi::CString;
use std::fs;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

use waxell::sandbox::SandboxError;

use crate::config::Limits;
use crate::local::cgroup::Cgroup;
use crate::local::launcher::{Slot, SHM_BYTES};
use crate::local::spawn::{Stream, Streams};
use crate::naming;

/// A directory of the host that one of a sandbox's tmpfs mounts sits on in the sandbox's mount
/// namespace (empty on the host). Removed on drop.
#[derive(Debug)]
struct TmpfsMount {
    path: PathBuf,
}

impl TmpfsMount {
    /// A new 0700 directory of this process's user under `root`.
    fn create(root: &Path, name: &str) -> Result<Self, SandboxError> {
        let path = root.join(name);
        fs::DirBuilder::new().mode(0o700).create(&path)?;
        Ok(TmpfsMount { path })
    }

    fn remove(&self) {
        unmount_and_remove(&self.path);
    }
}

/// The tmpfs mounts of one sandbox: size- and inode-capped (`size=`, `nr_inodes=`), so no sandbox
/// can fill the host's memory or pin unbounded kernel memory in inodes and dentries; `nosuid`,
/// `nodev`. They sit on host directories whose names start with the sandbox id (host pid first), so
/// the start-up sweep finds leftovers, in the sandbox's own mount namespace (`namespace`, dropped
/// on removal). Nothing is mounted beneath the writable scratch mount.
#[derive(Debug)]
pub(crate) struct SandboxMounts {
    scratch: TmpfsMount,
    tmp: TmpfsMount,
    shm: TmpfsMount,
    namespace: Mutex<Option<Arc<MountNamespace>>>,
    /// Shown at `/proc/sys/kernel/random/boot_id` (naming::new_boot_id).
    boot_id: String,
}

/// Where the host's file calls find a sandbox's `/home/user`: a directory fd of its tmpfs, opened
/// in the sandbox's mount namespace (no path the sandbox controls is followed to get there).
#[derive(Debug, Clone)]
pub(crate) struct ScratchRoot(Arc<MountNamespace>);

impl ScratchRoot {
    /// A new directory fd of the sandbox's `/home/user` tmpfs.
    pub(crate) fn open(&self) -> Result<OwnedFd, SandboxError> {
        self.0.open_scratch()
    }
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
        let scratch = TmpfsMount::create(root, id)?;
        let tmp = TmpfsMount::create(root, &format!("{id}.tmp"))?;
        let shm = TmpfsMount::create(root, &format!("{id}.shm"))?;
        let inodes = limits.tmpfs_inodes;
        // Rootless, the owner is this user (the mounter) inside as outside; as root, the scratch
        // belongs to the sandbox's uid and /tmp, /dev/shm to root, sticky.
        let (private, shared) = if rootless {
            ("mode=0700".to_owned(), "mode=1777".to_owned())
        } else {
            (format!("mode=0700,uid={uid},gid={uid}"), "mode=1777,uid=0,gid=0".to_owned())
        };
        let options = |size: u64, owner: &str| format!("size={size},nr_inodes={inodes},{owner}");
        let namespace = MountNamespace::new(
            &[
                (&scratch.path, options(limits.scratch_bytes, &private)),
                (&tmp.path, options(limits.tmp_bytes, &shared)),
                (&shm.path, options(SHM_BYTES, &shared)),
            ],
            &scratch.path,
            rootless,
        )?;
        Ok(Self {
            scratch,
            tmp,
            shm,
            namespace: Mutex::new(Some(Arc::new(namespace))),
            boot_id: new_boot_id()?,
        })
    }

    /// Host path of the scratch directory (bound at `/home/user` inside; the tmpfs on it is seen
    /// only in the sandbox's mount namespace).
    pub(crate) fn scratch_dir(&self) -> &Path {
        &self.scratch.path
    }

    fn namespace(&self) -> Option<Arc<MountNamespace>> {
        self.namespace.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Where the host's file calls find `/home/user`; `None` once the sandbox is removed.
    pub(crate) fn scratch_root(&self) -> Option<ScratchRoot> {
        self.namespace().map(ScratchRoot)
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
        // The last reference to the namespaces (once the processes are gone) frees the tmpfs.
        self.namespace.lock().unwrap_or_else(|e| e.into_inner()).take();
        for mount in [&self.scratch, &self.tmp, &self.shm] {
            mount.remove();
        }
    }
}

/// Remove a sandbox's directory, first detaching anything mounted on it in the host's mount
/// namespace (normally nothing: the sandbox's tmpfs lives in its own). Never follows a symlink:
/// `remove_dir_all` does not (CVE-2022-21658 was fixed in Rust 1.58.1).
fn unmount_and_remove(path: &Path) {
    // EINVAL: not a mount point (the usual case); ENOENT: already gone.
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

/// One sandbox's mount namespace (rootless, in a user namespace of its own too), holding its tmpfs
/// mounts (on its host directories, seen only inside), and a directory fd of its `/home/user` tmpfs
/// for the host's file calls. Made by a short-lived child
/// ([`crate::local::spawn::spawn_mount_holder`]); these fds keep the namespaces and mounts alive, and
/// once they and every process of the sandbox are gone the kernel frees them.
#[derive(Debug)]
pub(crate) struct MountNamespace {
    /// Rootless only: the user namespace owning the mount namespace, joined first.
    user: Option<OwnedFd>,
    mount: OwnedFd,
    scratch: OwnedFd,
}

const TMPFS_MAGIC: i64 = 0x0102_1994;

impl MountNamespace {
    /// Mount a tmpfs with `options` on each of `mounts` (existing empty directories of this user)
    /// in a new mount namespace (with `user_namespace`, owned by a new user namespace mapping only
    /// this user's ids); `scratch` is the one whose fd the host's file calls use.
    pub(crate) fn new(mounts: &[(&Path, String)], scratch: &Path, user_namespace: bool) -> Result<Self, SandboxError> {
        let c = |bytes: &[u8]| CString::new(bytes).map_err(|e| SandboxError::InvalidArgument(e.to_string()));
        let (uid, gid) = (
            rustix::process::geteuid().as_raw(),
            rustix::process::getegid().as_raw(),
        );
        let setup = crate::local::spawn::HolderSetup {
            id_maps: user_namespace.then(|| {
                (
                    format!("{uid} {uid} 1\n").into_bytes(),
                    format!("{gid} {gid} 1\n").into_bytes(),
                )
            }),
            mounts: mounts
                .iter()
                .map(|(path, options)| Ok((c(path.as_os_str().as_bytes())?, c(options.as_bytes())?)))
                .collect::<Result<_, SandboxError>>()?,
        };
        let mut command = Command::new("cat");
        command.env_clear().env("PATH", "/usr/bin:/bin");
        let streams = Streams([Stream::Piped, Stream::Null, Stream::Null]);
        let mut child = crate::local::spawn::spawn_mount_holder(command, streams, setup).map_err(|e| {
            let needs = if user_namespace {
                "in a user namespace of its own"
            } else {
                "in a mount namespace of its own (this takes CAP_SYS_ADMIN, as bubblewrap does as root)"
            };
            SandboxError::Unavailable(format!("cannot mount the sandbox's tmpfs file systems {needs}: {e}"))
        })?;
        let pid = child.id();
        let open = |path: String, flags: rustix::fs::OFlags| {
            rustix::fs::open(&path, flags | rustix::fs::OFlags::CLOEXEC, rustix::fs::Mode::empty())
                .map_err(|e| SandboxError::Unavailable(format!("{path}: {e}")))
        };
        let opened = (|| {
            let user = match user_namespace {
                true => Some(open(format!("/proc/{pid}/ns/user"), rustix::fs::OFlags::RDONLY)?),
                false => None,
            };
            let mount = open(format!("/proc/{pid}/ns/mnt"), rustix::fs::OFlags::RDONLY)?;
            // Our own path (the scratch root is not writable by others), in the holder's view;
            // without symlinks, which would resolve in the host's view and miss the tmpfs.
            let path = fs::canonicalize(scratch)?;
            let scratch = open(
                format!("/proc/{pid}/root{}", path.display()),
                rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::NOFOLLOW,
            )?;
            let fs = rustix::fs::fstatfs(&scratch).map_err(|e| SandboxError::Unavailable(e.to_string()))?;
            if fs.f_type as i64 != TMPFS_MAGIC {
                return Err(SandboxError::IsolationCheck(
                    "the scratch directory is not the sandbox's tmpfs inside its mount namespace".into(),
                ));
            }
            Ok(Self { user, mount, scratch })
        })();
        drop(child.stdin.take());
        let _ = child.kill();
        let _ = child.wait();
        opened
    }

    /// Copies of the namespace fds for a launcher to join (the user namespace first).
    pub(crate) fn join_fds(&self) -> Result<Vec<OwnedFd>, SandboxError> {
        let mut fds = Vec::with_capacity(2);
        if let Some(user) = &self.user {
            fds.push(user.try_clone()?);
        }
        fds.push(self.mount.try_clone()?);
        Ok(fds)
    }

    fn open_scratch(&self) -> Result<OwnedFd, SandboxError> {
        rustix::fs::openat(
            &self.scratch,
            ".",
            rustix::fs::OFlags::DIRECTORY
                | rustix::fs::OFlags::NOFOLLOW
                | rustix::fs::OFlags::CLOEXEC
                | rustix::fs::OFlags::RDONLY,
            rustix::fs::Mode::empty(),
        )
        .map_err(|e| SandboxError::NotFound(format!("the sandbox's home directory: {e}")))
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

