//! Rootless mode: the launcher is an ordinary user, so bubblewrap makes a user namespace in which
//! the sandbox's uid and gid are the invoking user's own ids (non-zero, mapped to that user on the
//! host, never to host uid 0), drops every capability, forbids further user namespaces and
//! remounts its root read-only. The same seccomp programs, namespaces, read-only runtime, private
//! `/tmp`, cleared environment and no-new-privs apply as in root mode.
//!
//! The sandbox's tmpfs file systems (`/home/user`, `/tmp`, `/dev/shm`, size- and inode-capped as
//! in root mode) cannot be mounted on the host without root. They are mounted instead in a user and
//! mount namespace of the sandbox's own ([`MountNamespace`]), made once per sandbox; every context's
//! bwrap starts inside it (and makes its own namespaces below it), and the host's file calls reach
//! `/home/user` through a directory fd opened there.
//!
//! What differs, and is reported by the host report (`capabilities.rs`):
//! * `RLIMIT_NPROC` is set on each interpreter after it starts (see [`cap_processes`]) instead of on
//!   bwrap, because a user's process count is per user namespace only below the namespace bwrap
//!   creates;
//! * the invoking user's supplementary groups stay (an unprivileged process cannot drop them).

use std::ffi::CString;
use std::fs;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use waxell::sandbox::SandboxError;

/// Whether this process launches sandboxes rootless (it is not root).
pub(crate) fn is_rootless() -> bool {
    !rustix::process::geteuid().is_root()
}

/// The ids the sandboxed code has inside, equal to the invoking user's uid (non-zero: rootless
/// mode is only used when not root).
pub(crate) fn sandbox_uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// bwrap flags that make the user namespace (placed before the other flags).
pub(crate) fn userns_args(uid: u32) -> Vec<String> {
    let id = uid.to_string();
    [
        "--unshare-user",
        "--disable-userns",
        "--uid",
        &id,
        "--gid",
        &id,
        "--cap-drop",
        "ALL",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// bwrap flags placed after every mount: the root tmpfs and the directories bwrap made belong to
/// the sandbox user in a user namespace, so the root is made read-only (`/tmp`, `/dev/shm` and
/// the scratch dir are mounts of their own and stay writable).
pub(crate) const AFTER_MOUNTS: [&str; 2] = ["--remount-ro", "/"];

/// Check once that bwrap can make a user namespace here; on failure name the cause and the fix.
pub(crate) fn probe_userns(bwrap: &Path) -> Result<(), String> {
    let out = Command::new(bwrap)
        .args([
            "--unshare-user",
            "--disable-userns",
            "--unshare-pid",
            "--unshare-net",
            // Only /usr: binding / would remount every host mount beneath it, and one that goes
            // away meanwhile (a root-mode sandbox's tmpfs under /tmp) would fail the probe.
            "--ro-bind",
            "/usr",
            "/usr",
            "--symlink",
            "usr/lib",
            "/lib",
            "--symlink",
            "usr/lib64",
            "/lib64",
            "--dev",
            "/dev",
            "--proc",
            "/proc",
            "--",
            "/usr/bin/true",
        ])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .output()
        .map_err(|e| format!("cannot run {}: {e}", bwrap.display()))?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr).trim().to_owned();
    Err(diagnose_userns_failure(&stderr, &read_sysctl))
}

fn read_sysctl(name: &str) -> Option<String> {
    fs::read_to_string(Path::new("/proc/sys").join(name.replace('.', "/")))
        .ok()
        .map(|s| s.trim().to_owned())
}

/// The message for a failed user-namespace probe: the cause the host's sysctls point at, and the fix.
pub(crate) fn diagnose_userns_failure(stderr: &str, sysctl: &dyn Fn(&str) -> Option<String>) -> String {
    let intro = format!(
        "rootless sandbox unavailable: bubblewrap cannot create a user namespace as this user (bwrap: {stderr})"
    );
    let alternatives = "or run as root (the sandbox then drops to its own uid without a user namespace), or use \
                        `--sandbox e2b` or a container backend";
    if sysctl("kernel.apparmor_restrict_unprivileged_userns").as_deref() == Some("1") {
        return format!(
            "{intro}. Cause: AppArmor restricts unprivileged user namespaces \
             (kernel.apparmor_restrict_unprivileged_userns = 1, the default since Ubuntu 24.04). Fix: give bwrap an \
             AppArmor profile that allows them: write `abi <abi/4.0>, include <tunables/global> profile bwrap \
             /usr/bin/bwrap flags=(unconfined) {{ userns, include if exists <local/bwrap> }}` to \
             /etc/apparmor.d/bwrap and run `sudo apparmor_parser -r /etc/apparmor.d/bwrap` (newer bubblewrap \
             packages ship such a profile), {alternatives}"
        );
    }
    if sysctl("user.max_user_namespaces").as_deref() == Some("0") {
        return format!(
            "{intro}. Cause: user namespaces are disabled (user.max_user_namespaces = 0). Fix: `sudo sysctl -w \
             user.max_user_namespaces=15000` (persist it in /etc/sysctl.d/), {alternatives}"
        );
    }
    if sysctl("kernel.unprivileged_userns_clone").as_deref() == Some("0") {
        return format!(
            "{intro}. Cause: unprivileged user namespaces are disabled (kernel.unprivileged_userns_clone = 0). Fix: \
             `sudo sysctl -w kernel.unprivileged_userns_clone=1` (persist it in /etc/sysctl.d/), {alternatives}"
        );
    }
    format!(
        "{intro}. Cause: unknown (no sysctl disables user namespaces here; a container or a security module may \
         forbid them). Fix: allow unprivileged user namespaces for bwrap, {alternatives}"
    )
}

/// The directory holding a rootless backend's scratch dirs: the configured one, or
/// `$XDG_RUNTIME_DIR/waxell-sandbox`, else `$TMPDIR/waxell-sandbox-<uid>`. It must be a real
/// directory owned by this user and not writable by anyone else (the sweep deletes entries in it).
pub(crate) fn scratch_root(configured: Option<&Path>) -> Result<PathBuf, SandboxError> {
    let uid = sandbox_uid();
    let (root, ours) = match configured {
        Some(path) => (path.to_path_buf(), false),
        None => {
            let runtime = std::env::var_os("XDG_RUNTIME_DIR")
                .map(PathBuf::from)
                .filter(|d| fs::metadata(d).is_ok_and(|m| m.is_dir() && m.uid() == uid));
            match runtime {
                Some(dir) => (dir.join("waxell-sandbox"), true),
                None => (std::env::temp_dir().join(format!("waxell-sandbox-{uid}")), true),
            }
        }
    };
    if ours {
        match fs::DirBuilder::new().mode(0o700).create(&root) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(SandboxError::Io(e)),
        }
    }
    let meta = fs::symlink_metadata(&root)
        .map_err(|e| SandboxError::InvalidArgument(format!("scratch_root {}: {e}", root.display())))?;
    let reason = if !meta.is_dir() {
        Some("is not a directory (or is a symlink)".to_owned())
    } else if meta.uid() != uid {
        Some(format!("is not owned by uid {uid} (this user)"))
    } else if meta.permissions().mode() & 0o022 != 0 {
        Some("is writable by group or others".to_owned())
    } else {
        None
    };
    if let Some(reason) = reason {
        return Err(SandboxError::InvalidArgument(format!(
            "scratch_root {} {reason}",
            root.display()
        )));
    }
    Ok(root)
}

/// One sandbox's user and mount namespaces, holding its tmpfs mounts (on its host directories, seen
/// only inside), and a directory fd of its `/home/user` tmpfs for the host's file calls. Made by a
/// short-lived child ([`crate::local::spawn::spawn_mount_holder`]); these fds keep the namespaces and
/// mounts alive, and once they and every process of the sandbox are gone the kernel frees them.
#[derive(Debug)]
pub(crate) struct MountNamespace {
    user: OwnedFd,
    mount: OwnedFd,
    scratch: OwnedFd,
}

const TMPFS_MAGIC: i64 = 0x0102_1994;

impl MountNamespace {
    /// Mount a tmpfs with `options` on each of `mounts` (existing empty directories of this user)
    /// in new namespaces; `scratch` is the one whose fd the host's file calls use.
    pub(crate) fn new(mounts: &[(&Path, String)], scratch: &Path) -> Result<Self, SandboxError> {
        let c = |bytes: &[u8]| CString::new(bytes).map_err(|e| SandboxError::InvalidArgument(e.to_string()));
        let (uid, gid) = (
            rustix::process::geteuid().as_raw(),
            rustix::process::getegid().as_raw(),
        );
        let setup = crate::local::spawn::HolderSetup {
            uid_map: format!("{uid} {uid} 1\n").into_bytes(),
            gid_map: format!("{gid} {gid} 1\n").into_bytes(),
            mounts: mounts
                .iter()
                .map(|(path, options)| Ok((c(path.as_os_str().as_bytes())?, c(options.as_bytes())?)))
                .collect::<Result<_, SandboxError>>()?,
        };
        let mut command = Command::new("cat");
        command
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut child = crate::local::spawn::spawn_mount_holder(command, setup).map_err(|e| {
            SandboxError::Unavailable(format!(
                "cannot mount the sandbox's tmpfs file systems in a user namespace of its own: {e}"
            ))
        })?;
        let pid = child.id();
        let open = |path: String, flags: rustix::fs::OFlags| {
            rustix::fs::open(&path, flags | rustix::fs::OFlags::CLOEXEC, rustix::fs::Mode::empty())
                .map_err(|e| SandboxError::Unavailable(format!("{path}: {e}")))
        };
        let opened = (|| {
            let user = open(format!("/proc/{pid}/ns/user"), rustix::fs::OFlags::RDONLY)?;
            let mount = open(format!("/proc/{pid}/ns/mnt"), rustix::fs::OFlags::RDONLY)?;
            // Our own path (the scratch root is this user's 0700 directory), in the holder's view;
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

    /// Copies of the namespace fds for a launcher to join (user namespace first).
    pub(crate) fn join_fds(&self) -> Result<Vec<OwnedFd>, SandboxError> {
        Ok(vec![self.user.try_clone()?, self.mount.try_clone()?])
    }

    /// A new directory fd of the sandbox's `/home/user` tmpfs.
    pub(crate) fn open_scratch(&self) -> Result<OwnedFd, SandboxError> {
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

/// Cap the tasks of an interpreter (and everything it starts) at `max`, applied from the host
/// once it is ready. In its own user namespace the kernel counts `RLIMIT_NPROC` per namespace
/// (Linux 5.14+), so this caps this interpreter, not all of the user's processes; set on bwrap
/// instead it would be checked against every process the user runs.
pub(crate) fn cap_processes(pid: u32, max: u64) -> Result<(), SandboxError> {
    let pid = rustix::process::Pid::from_raw(pid as i32)
        .ok_or_else(|| SandboxError::IsolationCheck(format!("invalid interpreter pid {pid}")))?;
    rustix::process::prlimit(
        Some(pid),
        rustix::process::Resource::Nproc,
        rustix::process::Rlimit {
            current: Some(max),
            maximum: Some(max),
        },
    )
    .map(|_| ())
    .map_err(|e| SandboxError::IsolationCheck(format!("cannot cap the interpreter's processes (prlimit): {e}")))
}

/// Whether the kernel counts `RLIMIT_NPROC` per user namespace (Linux 5.14+).
pub(crate) fn nproc_is_per_userns() -> bool {
    let release = rustix::system::uname().release().to_string_lossy().into_owned();
    let mut parts = release.split(|c: char| !c.is_ascii_digit()).filter_map(|p| p.parse::<u32>().ok());
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0)) >= (5, 14)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sysctls(values: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| values.iter().find(|(n, _)| *n == name).map(|(_, v)| (*v).to_owned())
    }

    #[test]
    fn apparmor_restriction_is_named_with_its_fix() {
        let message = diagnose_userns_failure(
            "setting up uid map: Permission denied",
            &sysctls(&[
                ("kernel.apparmor_restrict_unprivileged_userns", "1"),
                ("user.max_user_namespaces", "63000"),
            ]),
        );
        assert!(message.contains("AppArmor"), "{message}");
        assert!(message.contains("apparmor_parser"), "{message}");
        assert!(message.contains("setting up uid map: Permission denied"), "{message}");
        assert!(message.contains("--sandbox e2b"), "{message}");
    }

    #[test]
    fn disabled_user_namespaces_are_named_with_their_fix() {
        let message = diagnose_userns_failure(
            "No space left on device",
            &sysctls(&[("user.max_user_namespaces", "0")]),
        );
        assert!(message.contains("user.max_user_namespaces = 0"), "{message}");
        assert!(message.contains("sysctl -w user.max_user_namespaces="), "{message}");
        let message = diagnose_userns_failure(
            "Operation not permitted",
            &sysctls(&[("kernel.unprivileged_userns_clone", "0")]),
        );
        assert!(message.contains("kernel.unprivileged_userns_clone=1"), "{message}");
        let message = diagnose_userns_failure("Operation not permitted", &sysctls(&[]));
        assert!(message.contains("Cause: unknown"), "{message}");
    }

    #[test]
    fn the_kernel_version_decides_per_namespace_nproc() {
        // This machine kind runs 6.x; the parser must see that.
        assert!(nproc_is_per_userns());
    }
}
