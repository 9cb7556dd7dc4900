//! What the host must provide, checked once per backend: bubblewrap >= 0.8, and setpriv (root) or
//! working user namespaces (rootless), and a Python runtime. Each failure names the missing piece
//! and how to get it. Limits (cgroups or the watchdog) are chosen by `cgroup::Limiter`.

use std::path::{Path, PathBuf};
use std::process::Command;

use waxell::sandbox::SandboxError;

const SETUP_HINT: &str = "run scripts/setup-sandbox.sh";

/// Tools and paths the launcher uses.
#[derive(Debug, Clone)]
pub(crate) struct HostTools {
    pub(crate) bwrap: PathBuf,
    pub(crate) setpriv: PathBuf,
    /// Not root: bubblewrap's user-namespace mode (see `rootless.rs`).
    pub(crate) rootless: bool,
}

pub(crate) fn check_host() -> Result<HostTools, SandboxError> {
    let rootless = crate::rootless::is_rootless();
    let bwrap = find_in_path("bwrap").ok_or_else(|| {
        SandboxError::Unavailable(format!(
            "bubblewrap not found: {SETUP_HINT} or `apt-get install bubblewrap`"
        ))
    })?;
    check_bwrap_version(&bwrap)?;
    if rootless {
        crate::rootless::probe_userns(&bwrap).map_err(SandboxError::Unavailable)?;
        return Ok(HostTools {
            bwrap,
            setpriv: PathBuf::new(),
            rootless,
        });
    }
    let setpriv = find_in_path("setpriv").ok_or_else(|| {
        SandboxError::Unavailable(format!(
            "setpriv not found: {SETUP_HINT} or `apt-get install util-linux`"
        ))
    })?;
    Ok(HostTools {
        bwrap,
        setpriv,
        rootless,
    })
}

fn check_bwrap_version(bwrap: &Path) -> Result<(), SandboxError> {
    let out = Command::new(bwrap).arg("--version").output().map_err(|e| {
        SandboxError::Unavailable(format!("cannot run {}: {e}; {SETUP_HINT}", bwrap.display()))
    })?;
    let text = String::from_utf8_lossy(&out.stdout);
    let version: Vec<u32> = text
        .split_whitespace()
        .nth(1)
        .unwrap_or("")
        .split('.')
        .map(|p| p.parse().unwrap_or(0))
        .collect();
    // --disable-userns is 0.8; --add-seccomp-fd 0.6; tmpfs --size 0.7.
    if version.len() < 2 || (version[0], version[1]) < (0, 8) {
        return Err(SandboxError::Unavailable(format!(
            "bubblewrap >= 0.8 required, found `{}`: upgrade the bubblewrap package",
            text.trim()
        )));
    }
    Ok(())
}

pub(crate) fn find_in_path(name: &str) -> Option<PathBuf> {
    let path =
        std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin".into());
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")])
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// The interpreter the sandbox runs, with the prefixes that must be visible (read-only) inside.
#[derive(Debug, Clone)]
pub struct PythonRuntime {
    /// Absolute path of the interpreter (`sys.executable`), a venv's `bin/python3` when a venv is used.
    pub executable: PathBuf,
    /// `sys.prefix` (the venv when one is used).
    pub prefix: PathBuf,
    /// `sys.base_prefix` (the installation the venv was made from).
    pub base_prefix: PathBuf,
    /// `sys.version`, e.g. `3.11.7`.
    pub version: String,
}

/// Env var naming the sandbox's python binary.
pub const PYTHON_ENV_VAR: &str = "WAXELL_SANDBOX_PYTHON";

/// The default venv made by `scripts/setup-sandbox.sh`.
pub fn default_venv_python() -> Option<PathBuf> {
    let home = std::env::var_os("HOME")?;
    Some(Path::new(&home).join(".local/share/waxell/sandbox-venv/bin/python3"))
}

impl PythonRuntime {
    /// `WAXELL_SANDBOX_PYTHON`, else the setup script's venv, else the system `python3` (stdlib only).
    pub fn detect() -> Result<Self, SandboxError> {
        if let Some(explicit) = std::env::var_os(PYTHON_ENV_VAR) {
            return Self::probe(Path::new(&explicit)).map_err(|e| {
                SandboxError::Unavailable(format!(
                    "{PYTHON_ENV_VAR}={}: {e}",
                    Path::new(&explicit).display()
                ))
            });
        }
        if let Some(venv) = default_venv_python().filter(|p| p.exists()) {
            if let Ok(runtime) = Self::probe(&venv) {
                return Ok(runtime);
            }
        }
        for candidate in ["/usr/bin/python3", "/usr/local/bin/python3"] {
            if let Ok(runtime) = Self::probe(Path::new(candidate)) {
                return Ok(runtime);
            }
        }
        Err(SandboxError::Unavailable(format!(
            "no Python found for the sandbox: set {PYTHON_ENV_VAR}, {SETUP_HINT}, or `apt-get install python3`"
        )))
    }

    /// Ask `python` for its prefixes (runs it once on the host, unsandboxed, with a fixed script).
    pub fn probe(python: &Path) -> Result<Self, String> {
        const SCRIPT: &str =
            "import sys, json; print(json.dumps([sys.executable, sys.prefix, sys.base_prefix, \
                              sys.version.split()[0], sys.version_info[:2] >= (3, 8)]))";
        let out = Command::new(python)
            .args(["-I", "-c", SCRIPT])
            .env_clear()
            .output()
            .map_err(|e| format!("cannot run it: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "it failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let (executable, prefix, base_prefix, version, recent): (String, String, String, String, bool) =
            serde_json::from_slice(&out.stdout).map_err(|e| format!("unexpected probe output: {e}"))?;
        if !recent {
            return Err(format!(
                "Python {version} is too old, the kernel needs 3.8 or later"
            ));
        }
        let executable = PathBuf::from(executable);
        if !executable.is_absolute() {
            return Err("sys.executable is not an absolute path".into());
        }
        Ok(Self {
            executable,
            prefix: prefix.into(),
            base_prefix: base_prefix.into(),
            version,
        })
    }

    /// Directories to bind read-only at their real paths: the venv and its base installation, unless
    /// they are under `/usr`, which is bound anyway.
    pub(crate) fn bind_roots(&self) -> Vec<PathBuf> {
        let mut roots: Vec<PathBuf> = Vec::new();
        for dir in [&self.base_prefix, &self.prefix] {
            if dir.starts_with("/usr") || roots.iter().any(|r| dir.starts_with(r)) {
                continue;
            }
            roots.push(dir.clone());
        }
        roots
    }
}
