//! What the host must provide, checked once per backend: bubblewrap >= 0.8, and setpriv (root) or
//! working user namespaces (rootless), and a Python runtime. Each failure names the missing piece
//! and how to get it. Limits (cgroups or the watchdog) are chosen by `cgroup::Limiter`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use waxell::sandbox::SandboxError;

use crate::kernel::{KERNEL_PATH, KERNEL_SOURCE};
use crate::local::root::SandboxRoot;

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
    let rootless = crate::local::rootless::is_rootless();
    let bwrap = find_in_path("bwrap").ok_or_else(|| {
        SandboxError::Unavailable(format!(
            "bubblewrap not found: {SETUP_HINT} or `apt-get install bubblewrap`"
        ))
    })?;
    check_bwrap_version(&bwrap)?;
    if rootless {
        crate::local::rootless::probe_userns(&bwrap).map_err(SandboxError::Unavailable)?;
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
    /// The standard library directories (`sysconfig` `stdlib`, `platstdlib`).
    stdlib: Vec<PathBuf>,
    /// Package directories (`purelib`, `platlib`): needed only without a venv.
    site: Vec<PathBuf>,
    /// The shared libpython the binary links to, if built with `--enable-shared`.
    libpython: Option<PathBuf>,
    /// The kernel compiled by this interpreter (a `.pyc` file's bytes).
    kernel_pyc: KernelPyc,
}

/// The kernel as this interpreter's byte code, made once by the probe: a kernel start then loads
/// it instead of compiling 50 KB of source (18 of a cold create's 75 ms to `ready`, measured).
#[derive(Clone)]
pub(crate) struct KernelPyc(Arc<[u8]>);

impl KernelPyc {
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for KernelPyc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KernelPyc({} bytes)", self.0.len())
    }
}

/// One piece of the interpreter made visible inside the sandbox, read-only at its host path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PythonMount {
    Bind(PathBuf),
    /// A symlink on the way from `sys.executable` to the real binary.
    Symlink {
        link: PathBuf,
        target: PathBuf,
    },
    /// A directory inside a bound one that stays empty (the base installation's site-packages).
    Hide(PathBuf),
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

    /// Ask `python` for its prefixes and have it compile the kernel (runs it once on the host,
    /// unsandboxed, with a fixed script; compiling runs none of the kernel). Its output: a JSON
    /// line, then the kernel's `.pyc` bytes.
    pub fn probe(python: &Path) -> Result<Self, String> {
        const SCRIPT: &str = "import sys, json, os, sysconfig, marshal, importlib.util\n\
            v = sysconfig.get_config_var\n\
            lib = os.path.join(v('LIBDIR') or '', v('INSTSONAME') or '') if v('Py_ENABLE_SHARED') else None\n\
            recent = sys.version_info[:2] >= (3, 8)\n\
            print(json.dumps({'executable': sys.executable, 'prefix': sys.prefix, 'base_prefix': sys.base_prefix, \
            'version': sys.version.split()[0], 'recent': recent, \
            'stdlib': [sysconfig.get_path('stdlib'), sysconfig.get_path('platstdlib')], \
            'site': [sysconfig.get_path('purelib'), sysconfig.get_path('platlib')], 'libpython': lib}), flush=True)\n\
            recent and sys.stdout.buffer.write(importlib.util.MAGIC_NUMBER + bytes(12) + \
            marshal.dumps(compile(sys.argv[1], sys.argv[2], 'exec')))";
        #[derive(serde::Deserialize)]
        struct Probe {
            executable: String,
            prefix: PathBuf,
            base_prefix: PathBuf,
            version: String,
            recent: bool,
            stdlib: Vec<PathBuf>,
            site: Vec<PathBuf>,
            libpython: Option<PathBuf>,
        }
        let out = Command::new(python)
            .args(["-I", "-c", SCRIPT, KERNEL_SOURCE, KERNEL_PATH])
            .env_clear()
            .output()
            .map_err(|e| format!("cannot run it: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "it failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let (line, kernel_pyc) = out.stdout.split_at(out.stdout.iter().position(|&b| b == b'\n').unwrap_or(out.stdout.len()));
        let probe: Probe = serde_json::from_slice(line).map_err(|e| format!("unexpected probe output: {e}"))?;
        if !probe.recent {
            return Err(format!(
                "Python {} is too old, the kernel needs 3.8 or later",
                probe.version
            ));
        }
        let executable = PathBuf::from(probe.executable);
        if !executable.is_absolute() {
            return Err("sys.executable is not an absolute path".into());
        }
        for prefix in [&probe.prefix, &probe.base_prefix] {
            if let Some(home) = exposes_home(prefix) {
                return Err(format!(
                    "its prefix {} is `/` or contains the home directory {}: the sandbox binds parts of the prefix, \
                     so install the interpreter or a venv in a prefix of its own (scripts/setup-sandbox.sh makes one)",
                    prefix.display(),
                    home.display()
                ));
            }
        }
        let dedup = |paths: Vec<PathBuf>| {
            let mut out: Vec<PathBuf> = Vec::new();
            for p in paths.into_iter().filter(|p| p.is_absolute()) {
                if !out.contains(&p) {
                    out.push(p);
                }
            }
            out
        };
        // After the newline: at least the 16-byte header and some code.
        let kernel_pyc = kernel_pyc.get(1..).filter(|code| code.len() > 16).ok_or("it did not compile the kernel")?;
        Ok(Self {
            executable,
            prefix: probe.prefix,
            base_prefix: probe.base_prefix,
            version: probe.version,
            stdlib: dedup(probe.stdlib),
            site: dedup(probe.site),
            libpython: probe.libpython.filter(|p| p.is_absolute() && p.is_file()),
            kernel_pyc: KernelPyc(kernel_pyc.into()),
        })
    }

    /// The kernel as this interpreter's byte code.
    pub(crate) fn kernel_pyc(&self) -> &KernelPyc {
        &self.kernel_pyc
    }

    /// What the interpreter needs inside the sandbox, nothing more: the venv (it is the sandbox's),
    /// the chain of symlinks to the real binary and the binary, the standard library, libpython,
    /// and (without a venv) the package directories. The rest of the base installation (its own
    /// site-packages, other versions beside it, `bin/`, `include/`, `share/`) stays invisible.
    /// Under `/usr` (the sandbox root there) the pieces are bound from the host all the same (the
    /// standard library's byte code is made by the package's scripts, not in the package), onto the
    /// mount points the setup script left in the root; symlinks the root already has are skipped.
    pub(crate) fn mounts(&self, root: &SandboxRoot) -> Vec<PythonMount> {
        let venv = self.prefix != self.base_prefix;
        let in_venv = |p: &Path| venv && p.starts_with(&self.prefix);
        let mut mounts = Vec::new();
        if venv {
            mounts.push(PythonMount::Bind(self.prefix.clone()));
        }
        let mut path = self.executable.clone();
        for _ in 0..16 {
            let Ok(target) = std::fs::read_link(&path) else {
                break;
            };
            let next = path.parent().unwrap_or(Path::new("/")).join(&target);
            let in_root = path.starts_with("/usr") && std::fs::read_link(root.host_path(&path)).is_ok();
            if !in_venv(&path) && !in_root {
                mounts.push(PythonMount::Symlink {
                    link: path.clone(),
                    target,
                });
            }
            path = next;
        }
        let mut binds: Vec<PathBuf> = vec![path];
        binds.extend(self.stdlib.iter().cloned());
        if !venv {
            binds.extend(self.site.iter().cloned());
        }
        // Under /usr, libpython only when the root has it: the setup script puts it there when the
        // binary loads it (a Debian `python3` is linked statically, its libpython is another package's).
        let libpython = self.libpython.iter().filter(|lib| {
            !lib.starts_with("/usr") || std::fs::symlink_metadata(root.host_path(lib)).is_ok()
        });
        binds.extend(libpython.cloned());
        for bind in binds {
            let already = mounts
                .iter()
                .any(|m| matches!(m, PythonMount::Bind(b) if bind.starts_with(b)));
            if !in_venv(&bind) && !already && bind.exists() {
                mounts.push(PythonMount::Bind(bind));
            }
        }
        if venv {
            for dir in &self.stdlib {
                let site = dir.join("site-packages");
                if !in_venv(&site) && site.is_dir() {
                    mounts.push(PythonMount::Hide(site));
                }
            }
        }
        mounts
    }

    /// The mounts under `/usr` whose mount point the sandbox root lacks (bwrap cannot make one in
    /// the read-only root): the root was built for another interpreter.
    pub(crate) fn missing_mount_points(&self, root: &SandboxRoot) -> Vec<PathBuf> {
        let mut bound: Vec<PathBuf> = Vec::new();
        let mut missing = Vec::new();
        for mount in self.mounts(root) {
            let (path, bind) = match mount {
                PythonMount::Bind(p) => (p, true),
                // Inside a bound directory of the host's.
                PythonMount::Hide(_) => continue,
                PythonMount::Symlink { link, .. } => (link, false),
            };
            let inside_bind = bound.iter().any(|b| path.starts_with(b));
            if path.starts_with("/usr") && !inside_bind && std::fs::symlink_metadata(root.host_path(&path)).is_err() {
                missing.push(path.clone());
            }
            if bind {
                bound.push(path);
            }
        }
        missing
    }
}

/// The home directory `prefix` equals or contains (`/` contains them all), if any: accounts with
/// uid 0 or >= 1000 in /etc/passwd, `$HOME` and `/home`.
fn exposes_home(prefix: &Path) -> Option<PathBuf> {
    if prefix == Path::new("/") {
        return Some(PathBuf::from("/"));
    }
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let accounts = passwd.lines().filter_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        let uid: u32 = fields.get(2)?.parse().ok()?;
        let home = fields.get(5)?;
        (uid == 0 || (1000..60_000).contains(&uid)).then(|| PathBuf::from(home))
    });
    let env_home = std::env::var_os("HOME").map(PathBuf::from);
    accounts
        .chain(env_home)
        .chain([PathBuf::from("/home")])
        .filter(|home| home.is_absolute() && home != Path::new("/"))
        .find(|home| home.starts_with(prefix))
}
