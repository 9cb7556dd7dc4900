//! The sandbox root: the tree the sandbox sees as `/usr` (and the few `/etc` entries it needs),
//! built by `scripts/setup-sandbox.sh` from the files of the Debian packages the sandbox needs and
//! their dependency closure (hard links where the file system allows, copies otherwise). Files no
//! package owns (an app under `/usr/local`, a stray file in `/usr/lib`) are not in it, so sandboxed
//! code cannot read them. See docs/sandbox.md, "What the sandbox sees".

use std::path::{Path, PathBuf};

use waxell::sandbox::SandboxError;

/// Env var naming the sandbox root (default: `~/.local/share/waxell/sandbox-root`).
pub const ROOT_ENV_VAR: &str = "WAXELL_SANDBOX_ROOT";

/// The `/etc` entries the sandbox sees, from the sandbox root (fonts, time zone, CA certificates,
/// OpenSSL's configuration, MIME types; the JDK's `/etc/java-*` are added when present).
const ETC: [&str; 5] = [
    "/etc/fonts",
    "/etc/localtime",
    "/etc/ssl/certs",
    "/etc/ssl/openssl.cnf",
    "/etc/mime.types",
];

/// A built sandbox root.
#[derive(Debug, Clone)]
pub struct SandboxRoot {
    /// The root as configured (the setup script's symlink to the current generation).
    path: PathBuf,
    /// How many packages it holds.
    packages: usize,
    /// Whether the host's package database changed after it was built.
    stale: bool,
}

/// The default location, in the home of the user running the sandbox.
pub(crate) fn default_root() -> Option<PathBuf> {
    let home = std::env::var_os("HOME")?;
    Some(Path::new(&home).join(".local/share/waxell/sandbox-root"))
}

impl SandboxRoot {
    /// `WAXELL_SANDBOX_ROOT`, else the setup script's default; an error naming the fix when it is
    /// not there (the sandbox never falls back to the host's `/usr`).
    pub fn detect() -> Result<Self, SandboxError> {
        let (path, how) = match std::env::var_os(ROOT_ENV_VAR) {
            Some(path) => (PathBuf::from(path), format!("named by {ROOT_ENV_VAR}")),
            None => (
                default_root().ok_or_else(|| {
                    SandboxError::Unavailable(format!(
                        "no sandbox root: HOME is not set and neither is {ROOT_ENV_VAR}"
                    ))
                })?,
                "the default one".to_owned(),
            ),
        };
        Self::open(&path).map_err(|e| {
            SandboxError::Unavailable(format!(
                "the sandbox root {} ({how}) {e}: run scripts/setup-sandbox.sh as this user (it builds the tree \
                 the sandbox sees as /usr from the Debian packages it needs); the local sandbox never binds \
                 the host's whole /usr instead",
                path.display()
            ))
        })
    }

    /// Open the root at `path`: it must hold `manifest` and `usr/bin/sh`.
    pub fn open(path: &Path) -> Result<Self, String> {
        let manifest_path = path.join("manifest");
        let manifest = std::fs::read_to_string(&manifest_path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => "is missing".to_owned(),
            _ => format!("cannot be read ({}: {e})", manifest_path.display()),
        })?;
        if std::fs::symlink_metadata(path.join("usr/bin/sh")).is_err() {
            return Err("is incomplete (no usr/bin/sh)".into());
        }
        let packages = manifest
            .lines()
            .skip(1)
            .filter(|l| !l.starts_with("mountpoint "))
            .count();
        let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        let stale = match (modified(Path::new("/var/lib/dpkg/status")), modified(&manifest_path)) {
            (Some(packages), Some(built)) => packages > built,
            _ => false,
        };
        Ok(Self {
            path: path.to_path_buf(),
            packages,
            stale,
        })
    }

    /// The root's path (a symlink the setup script replaces atomically on a rebuild).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The root with its symlinks resolved, to look runtimes up in.
    pub(crate) fn resolved(&self) -> PathBuf {
        std::fs::canonicalize(&self.path).unwrap_or_else(|_| self.path.clone())
    }

    /// What the sandbox sees at `inside` (an absolute path), on the host.
    pub(crate) fn host_path(&self, inside: &Path) -> PathBuf {
        self.path.join(inside.strip_prefix("/").unwrap_or(inside))
    }

    /// The `/etc` entries to bind from the root, as paths inside the sandbox.
    pub(crate) fn etc_entries(&self) -> Vec<PathBuf> {
        let mut entries: Vec<PathBuf> = ETC.iter().map(PathBuf::from).collect();
        if let Ok(dir) = std::fs::read_dir(self.path.join("etc")) {
            let mut java: Vec<PathBuf> = dir
                .filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().starts_with("java-"))
                .map(|e| Path::new("/etc").join(e.file_name()))
                .collect();
            java.sort();
            entries.extend(java);
        }
        entries
            .into_iter()
            .filter(|inside| std::fs::symlink_metadata(self.host_path(inside)).is_ok())
            .collect()
    }

    /// One line for the host report.
    pub(crate) fn describe(&self) -> String {
        format!(
            "sandbox root {}: the files of {} Debian packages, nothing else of the host's /usr, /opt or /etc",
            self.path.display(),
            self.packages
        )
    }

    /// Why the root may lack programs installed since it was built, if so.
    pub(crate) fn staleness(&self) -> Option<String> {
        self.stale.then(|| {
            "packages were installed or upgraded after the sandbox root was built: run scripts/setup-sandbox.sh to \
             rebuild it (sandboxes see the packages as they were)"
                .to_owned()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_or_incomplete_root_is_named() {
        let dir = std::env::temp_dir().join(format!("waxell-root-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("usr/bin")).unwrap();
        assert_eq!(SandboxRoot::open(&dir).unwrap_err(), "is missing");
        std::fs::write(dir.join("manifest"), "1\nbash 5.2\ncoreutils 9.1\nmountpoint /usr/local/lib true\n").unwrap();
        assert!(SandboxRoot::open(&dir).unwrap_err().contains("usr/bin/sh"));
        std::os::unix::fs::symlink("dash", dir.join("usr/bin/sh")).unwrap();
        let root = SandboxRoot::open(&dir).unwrap();
        assert!(root.describe().contains("of 2 Debian packages"), "{}", root.describe());
        assert_eq!(root.host_path(Path::new("/usr/bin/sh")), dir.join("usr/bin/sh"));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
