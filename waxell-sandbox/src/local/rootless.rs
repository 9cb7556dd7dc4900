//! Rootless mode: the launcher is an ordinary user, so bubblewrap makes a user namespace in which
//! the sandbox's uid and gid are the invoking user's own ids (non-zero, mapped to that user on the
//! host, never to host uid 0), drops every capability, forbids further user namespaces and
//! remounts its root read-only. The same seccomp programs, namespaces, read-only runtime, private
//! `/tmp`, cleared environment and no-new-privs apply as in root mode.
//!
//! The sandbox's tmpfs file systems (`/home/user`, `/tmp`, `/dev/shm`, size- and inode-capped as
//! in root mode) live in a mount namespace of the sandbox's own, as in root mode
//! ([`crate::local::mounts::MountNamespace`]); rootless, it belongs to a user namespace of the
//! sandbox's own too, since mounting takes capabilities this user has only there.
//!
//! What differs, and is reported by the host report (`capabilities.rs`):
//! * `RLIMIT_NPROC` is set on each interpreter after it starts (see [`cap_processes`]) instead of on
//!   bwrap, because a user's process count is per user namespace only below the namespace bwrap
//!   creates;
//! * the invoking user's supplementary groups stay (an unprivileged process cannot drop them).

use std::fs;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

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
