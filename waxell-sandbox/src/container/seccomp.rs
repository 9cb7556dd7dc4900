//! The seccomp profile a container sandbox gets: the policy the local backend applies
//! (`crate::syscall_policy`) in the OCI profile format the engines take (`seccomp=<json>`), so
//! what the code may call does not depend on which engine's default profile the user has (Podman's
//! allows new user namespaces, Docker's does not). libseccomp resolves each name for every
//! architecture listed, so the 32-bit entry (`int 0x80`) is filtered by the same rules.

use std::path::PathBuf;

use serde_json::{json, Value};
use waxell::sandbox::SandboxError;

use crate::syscall_policy::{DENIED, ENOSYS, NAMESPACE_CLONE_FLAGS, TIOCSTI};

/// The architectures a profile covers: the native one and the 32-bit ABIs its CPU also runs.
fn architectures() -> &'static [&'static str] {
    if cfg!(target_arch = "x86_64") {
        &["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"]
    } else if cfg!(target_arch = "aarch64") {
        &["SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM"]
    } else {
        &[]
    }
}

/// The profile as the JSON text the engine API takes after `seccomp=`.
fn profile() -> String {
    let names = |list: &'static [(&'static str, libc::c_long)]| list.iter().map(|(name, _)| *name).collect::<Vec<_>>();
    let mut rules = vec![
        json!({ "names": names(DENIED), "action": "SCMP_ACT_ERRNO", "errnoRet": libc::EPERM }),
        json!({ "names": names(ENOSYS), "action": "SCMP_ACT_ERRNO", "errnoRet": libc::ENOSYS }),
        // Only local (AF_UNIX) sockets, as on the local backend (the container has no network).
        arg_rule("socket", 0, libc::AF_UNIX as u64, "SCMP_CMP_NE"),
        arg_rule("socketpair", 0, libc::AF_UNIX as u64, "SCMP_CMP_NE"),
        arg_rule("ioctl", 1, TIOCSTI, "SCMP_CMP_EQ"),
    ];
    // `clone` with any namespace flag: one rule per flag (rules are OR-ed).
    for &flag in NAMESPACE_CLONE_FLAGS {
        rules.push(json!({
            "names": ["clone"],
            "action": "SCMP_ACT_ERRNO",
            "errnoRet": libc::EPERM,
            "args": [{ "index": 0, "value": flag as u64, "valueTwo": flag as u64, "op": "SCMP_CMP_MASKED_EQ" }],
        }));
    }
    json!({
        "defaultAction": "SCMP_ACT_ALLOW",
        "architectures": architectures(),
        "syscalls": rules,
    })
    .to_string()
}

fn arg_rule(name: &str, index: u32, value: u64, op: &str) -> Value {
    json!({
        "names": [name],
        "action": "SCMP_ACT_ERRNO",
        "errnoRet": libc::EPERM,
        "args": [{ "index": index, "value": value, "op": op }],
    })
}

/// The `seccomp=` security option for one engine. Docker Engine takes the profile's JSON itself;
/// Podman's Docker API takes a path, so the profile is written once into a directory of this
/// process's own (made fresh, so no other user can plant a file or link there) and removed with it.
pub(super) struct SeccompOption {
    option: String,
    file: Option<PathBuf>,
}

impl SeccompOption {
    pub(super) fn for_engine(podman: bool) -> Result<Self, SandboxError> {
        let profile = profile();
        if !podman {
            return Ok(Self {
                option: format!("seccomp={profile}"),
                file: None,
            });
        }
        let unavailable = |e: std::io::Error| SandboxError::Unavailable(format!("writing the seccomp profile: {e}"));
        let dir = (0..100u32)
            .map(|attempt| {
                let nanos = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.subsec_nanos());
                std::env::temp_dir().join(format!("waxell-seccomp-{}-{nanos}-{attempt}", std::process::id()))
            })
            .find(|dir| std::fs::create_dir(dir).is_ok())
            .ok_or_else(|| unavailable(std::io::Error::other("no fresh directory in the temp dir")))?;
        let path = dir.join("profile.json");
        std::fs::write(&path, profile).map_err(unavailable)?;
        Ok(Self {
            option: format!("seccomp={}", path.display()),
            file: Some(dir),
        })
    }

    /// The option, for `HostConfig::security_opt`.
    pub(super) fn as_str(&self) -> &str {
        &self.option
    }
}

impl Drop for SeccompOption {
    fn drop(&mut self) {
        if let Some(dir) = &self.file {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}
