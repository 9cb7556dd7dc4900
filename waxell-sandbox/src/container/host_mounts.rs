//! What the host itself makes for one sandbox and binds into its container, in the backend's
//! [`PrivateDir`], removed with the sandbox:
//! - under gVisor, its boot id (a file bound over `/proc/sys/kernel/random/boot_id`: gVisor's
//!   `/proc` has none, and runc refuses any mount inside `/proc`);
//! - with Podman and runc, a devpts instance of its own with at most [`MAX_TERMINALS`] terminals,
//!   bound at `/dev/pts`. Podman mounts its own devpts there too and puts a devpts *volume* over or
//!   under it in no fixed order; a bind of that path replaces Podman's. Mounting needs root (the
//!   engine is then rootful on this host); without it the report says the cap does not hold;
//! - where the sandbox's memory is checkpointed (gVisor on Docker Engine, as root), its writable
//!   file systems ([`Scratch`]): tmpfs mounts the host makes and binds in instead of the engine's
//!   volumes, which the engine unmounts (emptying them) when the container stops. So a pause can
//!   copy them out after the checkpoint and a resume put them back before the restore, which
//!   fails when a file a process holds open, or its working directory, is missing.

use std::path::{Path, PathBuf};

use bollard::models::{Mount, MountType};
use rustix::mount::{MountFlags, UnmountFlags};

use super::private_dir::PrivateDir;
use super::spec::{Scratch, MAX_TERMINALS};
use waxell::sandbox::SandboxError;

/// The devpts options runc gives `/dev/pts` (gid 5 is `tty`), with the cap.
fn devpts_options() -> String {
    format!("newinstance,ptmxmode=0666,mode=0620,gid=5,max={MAX_TERMINALS}")
}

/// Whether this process can give sandboxes devpts instances of their own (it can mount: root).
pub(super) fn can_mount_devpts(dir: &PrivateDir) -> bool {
    let probe = dir.path().join("probe-pts");
    let made = std::fs::create_dir(&probe).is_ok() && mount_devpts(&probe).is_ok();
    if made {
        let _ = rustix::mount::unmount(&probe, UnmountFlags::DETACH | UnmountFlags::NOFOLLOW);
    }
    let _ = std::fs::remove_dir(&probe);
    made
}

fn mount_devpts(at: &Path) -> std::io::Result<()> {
    let options = std::ffi::CString::new(devpts_options()).map_err(std::io::Error::other)?;
    rustix::mount::mount(
        "devpts",
        at,
        "devpts",
        MountFlags::NOSUID | MountFlags::NOEXEC,
        options.as_c_str(),
    )?;
    Ok(())
}

/// One sandbox's host-made mounts.
#[derive(Debug, Default)]
pub(super) struct HostMounts {
    /// Its boot id file (gVisor).
    pub(super) boot_id: Option<PathBuf>,
    /// Its devpts instance's mount point (Podman with runc, as root).
    pub(super) pts: Option<PathBuf>,
    /// Its writable file systems, when the host makes them: (suffix, target, mount point).
    pub(super) scratch: Vec<(&'static str, &'static str, PathBuf)>,
}

impl HostMounts {
    /// Make what sandbox `id` gets in `dir`: a boot id file if `boot_id`, a devpts instance if
    /// `pts`, the `scratch` file systems. On failure nothing is left behind.
    pub(super) fn make(
        dir: Option<&PrivateDir>,
        id: &str,
        boot_id: bool,
        pts: bool,
        scratch: &[Scratch],
    ) -> Result<Self, SandboxError> {
        let mut made = HostMounts::default();
        let Some(dir) = dir.filter(|_| boot_id || pts || !scratch.is_empty()) else {
            return Ok(made);
        };
        for fs in scratch {
            let at = dir.path().join(format!("{id}-{}", fs.suffix));
            let mounted = std::fs::create_dir(&at).and_then(|()| mount_tmpfs(&at, &fs.options));
            if let Err(e) = mounted {
                let _ = std::fs::remove_dir(&at);
                made.remove();
                return Err(SandboxError::Unavailable(format!(
                    "mounting the sandbox's {} (tmpfs): {e}",
                    fs.target
                )));
            }
            made.scratch.push((fs.suffix, fs.target, at));
        }
        if boot_id {
            made.boot_id = Some(write_boot_id(dir, id)?);
        }
        if pts {
            let at = dir.path().join(format!("{id}-pts"));
            let mounted = std::fs::create_dir(&at).and_then(|()| mount_devpts(&at));
            if let Err(e) = mounted {
                let _ = std::fs::remove_dir(&at);
                made.remove();
                return Err(SandboxError::Unavailable(format!(
                    "mounting the sandbox's own pseudo-terminals (devpts): {e}"
                )));
            }
            made.pts = Some(at);
        }
        Ok(made)
    }

    /// Whether the host made the writable file systems.
    pub(super) fn has_scratch(&self) -> bool {
        !self.scratch.is_empty()
    }

    /// The binds for the container.
    pub(super) fn mounts(&self) -> Vec<Mount> {
        let bind = |source: &Path, target: &str, read_only: bool| Mount {
            target: Some(target.to_owned()),
            source: Some(source.display().to_string()),
            typ: Some(MountType::BIND),
            read_only: Some(read_only),
            ..Default::default()
        };
        let mut mounts = Vec::new();
        if let Some(file) = &self.boot_id {
            mounts.push(bind(file, "/proc/sys/kernel/random/boot_id", true));
        }
        if let Some(pts) = &self.pts {
            mounts.push(bind(pts, "/dev/pts", false));
        }
        for (_, target, at) in &self.scratch {
            mounts.push(bind(at, target, false));
        }
        mounts
    }

    /// Remove them (once the container is gone; a devpts still bound there is detached).
    pub(super) fn remove(&self) {
        if let Some(file) = &self.boot_id {
            let _ = std::fs::remove_file(file);
        }
        let points = self.pts.iter().chain(self.scratch.iter().map(|(_, _, at)| at));
        for at in points {
            let _ = rustix::mount::unmount(at, UnmountFlags::DETACH | UnmountFlags::NOFOLLOW);
            let _ = std::fs::remove_dir(at);
        }
    }
}

fn mount_tmpfs(at: &Path, options: &str) -> std::io::Result<()> {
    let options = std::ffi::CString::new(options).map_err(std::io::Error::other)?;
    rustix::mount::mount("tmpfs", at, "tmpfs", MountFlags::NOSUID | MountFlags::NODEV, options.as_c_str())?;
    Ok(())
}

/// Copy the tree `from` into the directory `to` as it is (owners, modes, times, links, FIFOs),
/// with `cp -a`: a sandbox's scratch file system out to the state directory at a pause, and back at
/// a resume. Links are copied, never followed.
pub(super) async fn copy_tree(from: &Path, to: &Path) -> Result<(), SandboxError> {
    let source = from.join(".");
    let output = tokio::process::Command::new("cp")
        .arg("-a")
        .arg("--")
        .arg(&source)
        .arg(to)
        .output()
        .await
        .map_err(|e| SandboxError::Unavailable(format!("running cp -a: {e}")))?;
    if !output.status.success() {
        return Err(SandboxError::Unavailable(format!(
            "copying {} to {}: {}",
            from.display(),
            to.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    Ok(())
}

/// Write a fresh boot id for sandbox `id` into `dir` (readable by the sandbox user, through the
/// engine's bind mount); the path of the file.
fn write_boot_id(dir: &PrivateDir, id: &str) -> Result<PathBuf, SandboxError> {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.path().join(id);
    crate::naming::new_boot_id()
        .and_then(|uuid| std::fs::write(&path, uuid + "\n"))
        .and_then(|()| std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)))
        .map_err(|e| SandboxError::Unavailable(format!("writing the sandbox's boot id: {e}")))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    /// What a pause copies out and a resume back: modes, times, links (not followed) and FIFOs.
    #[tokio::test]
    async fn a_tree_is_copied_as_it_is() {
        let root = std::env::temp_dir().join(format!("waxell-copy-test-{}-{}", std::process::id(), rand::random::<u32>()));
        let from = root.join("from");
        std::fs::create_dir_all(from.join("private")).unwrap();
        std::fs::set_permissions(from.join("private"), std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::write(from.join("tool.sh"), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(from.join("tool.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", from.join("link")).unwrap();
        rustix::fs::mknodat(rustix::fs::CWD, from.join("fifo"), rustix::fs::FileType::Fifo, rustix::fs::Mode::from_raw_mode(0o600), 0).unwrap();
        let to = root.join("to");
        std::fs::create_dir(&to).unwrap();
        copy_tree(&from, &to).await.unwrap();
        let mode = |p: &str| std::fs::symlink_metadata(to.join(p)).unwrap().mode() & 0o7777;
        assert_eq!(mode("private"), 0o700);
        assert_eq!(mode("tool.sh"), 0o755);
        assert_eq!(std::fs::read_link(to.join("link")).unwrap(), Path::new("/etc/passwd"));
        let fifo = std::fs::symlink_metadata(to.join("fifo")).unwrap().file_type();
        assert!(std::os::unix::fs::FileTypeExt::is_fifo(&fifo));
        let mtime = |p: &Path| std::fs::metadata(p).unwrap().mtime();
        assert_eq!(mtime(&to.join("tool.sh")), mtime(&from.join("tool.sh")));
        assert!(copy_tree(&root.join("missing"), &to).await.is_err(), "a failed copy is an error");
        std::fs::remove_dir_all(&root).unwrap();
    }
}
