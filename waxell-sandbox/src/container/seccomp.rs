//! The seccomp profile a container sandbox gets: the policy the local backend applies
//! (`crate::syscall_policy`) in the OCI profile format the engines take (`seccomp=<json>`), so
//! what the code may call does not depend on which engine's default profile the user has (Podman's
//! allows new user namespaces, Docker's does not). libseccomp resolves each name for every
//! architecture listed, so the 32-bit entry (`int 0x80`) is filtered by the same rules.
//!
//! Under gVisor (runsc with `--oci-seccomp`) the profile reaches only the container's pid 1: runsc
//! does not apply it to exec'd processes, which every kernel and command is. There the exec first
//! runs a shim ([`SeccompOption::wrap`]) that installs the same policy as BPF programs on itself
//! (no_new_privs, then `PR_SET_SECCOMP`; gVisor enforces guest seccomp filters) and then runs the
//! exec's own Python source in the same interpreter; everything it starts inherits the filters.
//! The shim also names pid 1 its tracer (`PR_SET_PTRACER`), and pid 1's profile there allows
//! `ptrace`: pid 1 checks a kernel's `done` by reading its registers (init.py), which nothing else
//! in a gVisor sandbox can see.

use serde_json::{json, Value};
use waxell::sandbox::SandboxError;

use super::private_dir::PrivateDir;
use crate::syscall_policy::{DENIED, ENOSYS, NAMESPACE_CLONE_FLAGS, TIOCSTI};

/// Installs the BPF programs in `sys.argv[1]` (hex, comma-separated) on this process, then runs
/// the Python source in `sys.argv[2]` as `python3 -c` would, with the remaining arguments. Any
/// failure ends the process before that source runs.
const GUEST_SHIM: &str = r#"import ctypes, sys
def _install():
    libc = ctypes.CDLL(None, use_errno=True)
    class Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
    libc.prctl(0x59616D61, 1, 0, 0, 0)  # PR_SET_PTRACER: pid 1 (init.py) may check a `done`
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS")
    for text in sys.argv.pop(1).split(","):
        code = ctypes.create_string_buffer(bytes.fromhex(text))
        prog = Prog(len(text) // 16, ctypes.cast(code, ctypes.c_void_p))
        if libc.prctl(22, 2, ctypes.byref(prog), 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
            raise OSError(ctypes.get_errno(), "PR_SET_SECCOMP")
    return compile(sys.argv.pop(1), "<string>", "exec")
try:
    _code = _install()
except Exception as e:
    sys.stderr.write("the sandbox's syscall policy could not be installed: %r\n" % (e,))
    sys.exit(126)
del _install
exec(globals().pop("_code"))"#;

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

/// The profile as the JSON text the engine API takes after `seccomp=`. Under gVisor it reaches
/// only pid 1, which may then `ptrace` (the shim denies it to everything else).
fn profile(gvisor: bool) -> String {
    let names = |list: &'static [(&'static str, libc::c_long)]| list.iter().map(|(name, _)| *name).collect::<Vec<_>>();
    let mut denied = names(DENIED);
    if gvisor {
        denied.retain(|name| *name != "ptrace");
    }
    let mut rules = vec![
        json!({ "names": denied, "action": "SCMP_ACT_ERRNO", "errnoRet": libc::EPERM }),
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

/// The policy as BPF programs (hex of native-endian `struct sock_filter` entries), for the shim:
/// the local backend's programs (`crate::seccomp_bpf`) plus the nice guard, which gVisor needs
/// because its `setpriority` ignores `RLIMIT_NICE`.
fn guest_programs() -> Result<String, SandboxError> {
    let failed = |e: String| SandboxError::Unavailable(format!("building the seccomp programs: {e}"));
    let mut programs = crate::seccomp_bpf::programs().map_err(failed)?;
    programs.push(crate::seccomp_bpf::nice_guard().map_err(failed)?);
    let hex = |program: &Vec<u8>| program.iter().map(|b| format!("{b:02x}")).collect::<String>();
    Ok(programs.iter().map(hex).collect::<Vec<_>>().join(","))
}

/// The `seccomp=` security option for one engine. Docker Engine takes the profile's JSON itself;
/// Podman's Docker API takes a path, so the profile is written once into a directory of this
/// process's own (made fresh, so no other user can plant a file or link there) and removed with it.
/// Under gVisor, also the programs the shim installs in each exec ([`SeccompOption::wrap`]).
pub(super) struct SeccompOption {
    option: String,
    /// Podman's copy of the profile, removed with this option.
    _file: Option<PrivateDir>,
    guest: Option<String>,
}

impl SeccompOption {
    pub(super) fn for_engine(podman: bool, gvisor: bool) -> Result<Self, SandboxError> {
        let profile = profile(gvisor);
        let guest = if gvisor { Some(guest_programs()?) } else { None };
        if !podman {
            return Ok(Self {
                option: format!("seccomp={profile}"),
                _file: None,
                guest,
            });
        }
        let unavailable = |e: std::io::Error| SandboxError::Unavailable(format!("writing the seccomp profile: {e}"));
        let dir = PrivateDir::new("seccomp").map_err(unavailable)?;
        let path = dir.path().join("profile.json");
        std::fs::write(&path, profile).map_err(unavailable)?;
        Ok(Self {
            option: format!("seccomp={}", path.display()),
            _file: Some(dir),
            guest,
        })
    }

    /// The command an exec that runs the user's code starts with: under gVisor, `cmd` behind the
    /// shim that installs the policy first. A `python3 -I -c SOURCE ARGS...` command runs in the
    /// shim's own interpreter (no second start-up); any other is exec'd by it.
    pub(super) fn wrap(&self, cmd: Vec<String>) -> Vec<String> {
        let Some(programs) = &self.guest else { return cmd };
        let shim = ["python3", "-I", "-c", GUEST_SHIM, programs].map(str::to_owned);
        match cmd.as_slice() {
            [python, isolated, dash_c, rest @ ..] if python == "python3" && isolated == "-I" && dash_c == "-c" => {
                shim.into_iter().chain(rest.iter().cloned()).collect()
            }
            _ => shim
                .into_iter()
                .chain(["import os, sys\nos.execvp(sys.argv[1], sys.argv[1:])".to_owned()])
                .chain(cmd)
                .collect(),
        }
    }

    /// The option, for `HostConfig::security_opt`.
    pub(super) fn as_str(&self) -> &str {
        &self.option
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shim installs the policy and then runs the command, here on this host's kernel: a
    /// `python3 -I -c` command in its own interpreter (arguments intact), any other through exec.
    #[test]
    fn the_shim_installs_the_policy_then_runs_the_command() {
        let plain = SeccompOption::for_engine(false, false).unwrap();
        let cmd = vec!["python3".to_owned(), "-I".to_owned(), "-c".to_owned(), "pass".to_owned()];
        assert_eq!(plain.wrap(cmd.clone()), cmd, "without gVisor the command is unchanged");
        let gvisor = SeccompOption::for_engine(false, true).unwrap();
        let probe = "import ctypes, os, sys\nlibc = ctypes.CDLL(None, use_errno=True)\nrefused = libc.unshare(0x10000000) != 0 and ctypes.get_errno() == 1\nniced = libc.setpriority(0, 0, -1) != 0 and ctypes.get_errno() == 13\nseccomp = [l.split()[1] for l in open('/proc/self/status') if l.startswith('Seccomp:')]\nprint(sys.argv[1:], refused, niced, seccomp)";
        let run = |cmd: Vec<String>| {
            let out = std::process::Command::new(&cmd[0]).args(&cmd[1..]).output().unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            String::from_utf8(out.stdout).unwrap()
        };
        let python = ["python3", "-I", "-c", probe, "a b", "c"].map(str::to_owned).to_vec();
        assert_eq!(run(gvisor.wrap(python)), "['a b', 'c'] True True ['2']\n");
        let other = ["sh", "-c", "grep '^Seccomp:' /proc/self/status; echo \"$0\"", "x y"].map(str::to_owned).to_vec();
        assert_eq!(run(gvisor.wrap(other)), "Seccomp:\t2\nx y\n");
    }
}
