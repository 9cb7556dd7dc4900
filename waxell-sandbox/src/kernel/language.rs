//! The languages a context can run, by E2B's names, and which of them a sandbox has the runtime
//! for. Python runs in the kernel itself (IPython); the others run in a runtime the kernel starts
//! as its child (see `kernel.py`), found at the paths below inside the sandbox (the sandbox root's
//! `/usr` on the local backend).

use std::fmt;
use std::path::{Path, PathBuf};

use waxell::sandbox::SandboxError;

/// A context's language.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Language {
    /// IPython, in the kernel itself.
    Python,
    /// Node.js, one long-lived process per context.
    JavaScript,
    /// Node.js with the TypeScript compiler's `transpileModule` (types stripped, not checked).
    TypeScript,
    /// bash, one long-lived shell per context.
    Bash,
    /// R: not run by this kernel yet.
    R,
    /// Java: JShell's API in one JVM per context.
    Java,
}

impl Language {
    /// Every language E2B's SDKs name.
    pub const ALL: [Language; 6] = [
        Language::Python,
        Language::JavaScript,
        Language::TypeScript,
        Language::Bash,
        Language::R,
        Language::Java,
    ];

    /// E2B's spelling: trimmed, case-insensitive, `js`/`ts` for short, empty for Python.
    pub fn parse(name: &str) -> Result<Self, SandboxError> {
        match name.trim().to_ascii_lowercase().as_str() {
            "" | "python" | "python3" => Ok(Language::Python),
            "javascript" | "js" => Ok(Language::JavaScript),
            "typescript" | "ts" => Ok(Language::TypeScript),
            "bash" | "sh" => Ok(Language::Bash),
            "r" => Ok(Language::R),
            "java" => Ok(Language::Java),
            other => Err(SandboxError::InvalidArgument(format!(
                "unknown language {other:?}: one of python, javascript (js), typescript (ts), bash, r, java"
            ))),
        }
    }

    /// The name contexts report (E2B's).
    pub fn name(self) -> &'static str {
        match self {
            Language::Python => "python",
            Language::JavaScript => "javascript",
            Language::TypeScript => "typescript",
            Language::Bash => "bash",
            Language::R => "r",
            Language::Java => "java",
        }
    }

    /// Files inside the sandbox the language needs (besides the Python the kernel runs on).
    fn runtime_files(self) -> &'static [&'static str] {
        match self {
            Language::Python => &[],
            Language::JavaScript => &["/usr/bin/node"],
            Language::TypeScript => &["/usr/bin/node", "/usr/share/nodejs/typescript/package.json"],
            Language::Bash => &["/bin/bash"],
            Language::R => &["/usr/bin/R"],
            // jshell stands for the jdk.jshell module (a JDK, not only a JRE).
            Language::Java => &["/usr/bin/java", "/usr/bin/jshell"],
        }
    }

    /// How to get the runtime (Debian's packages, as scripts/setup-sandbox.sh installs them).
    fn install_hint(self) -> &'static str {
        match self {
            Language::Python => "",
            Language::JavaScript => "install Node.js (`apt-get install nodejs`)",
            Language::TypeScript => {
                "install Node.js and the TypeScript compiler (`apt-get install nodejs node-typescript`)"
            }
            Language::Bash => "install bash",
            Language::R => "install R (`apt-get install r-base`)",
            Language::Java => "install a JDK with jshell (`apt-get install default-jdk-headless`)",
        }
    }

    /// Whether `kernel.py` has a runner for it.
    fn has_runner(self) -> bool {
        self != Language::R
    }
}

impl fmt::Display for Language {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Which languages a backend's sandboxes run, and why the others do not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Languages {
    available: Vec<Language>,
    missing: Vec<(Language, String)>,
    /// Each available language's executable, symlinks resolved (inside the sandbox there is no
    /// /etc/alternatives to resolve them through).
    runtimes: Vec<(Language, PathBuf)>,
    /// Available languages that run with less than their full runtime, and why.
    limited: Vec<(Language, String)>,
}

impl Languages {
    /// The languages whose runtimes are under `root` (the sandbox root on the local backend, which
    /// its sandboxes see as `/`).
    pub(crate) fn detect(root: &Path) -> Self {
        Self::detect_with(|file| {
            let path = root.join(file.trim_start_matches('/'));
            if !path.exists() {
                return None;
            }
            // Relative to `root` for the check, as the sandbox sees it for the kernel.
            Some(
                std::fs::canonicalize(&path)
                    .ok()
                    .and_then(|p| p.strip_prefix(root).ok().map(|p| Path::new("/").join(p)))
                    .unwrap_or_else(|| PathBuf::from(file)),
            )
        })
    }

    /// The files every language's runtime needs (absolute paths inside a sandbox), for a backend
    /// that looks for them itself (in a container image).
    #[cfg(feature = "container")]
    pub(crate) fn runtime_files() -> Vec<&'static str> {
        let mut files: Vec<&'static str> = Language::ALL.iter().flat_map(|l| l.runtime_files().iter().copied()).collect();
        files.sort_unstable();
        files.dedup();
        files
    }

    /// The languages whose runtime files `found` knows: it answers a file's path with symlinks
    /// resolved (as the sandbox sees it), or `None` when the sandbox has no such file.
    pub(crate) fn detect_with(mut found: impl FnMut(&str) -> Option<PathBuf>) -> Self {
        let mut languages = Self {
            available: Vec::new(),
            missing: Vec::new(),
            runtimes: Vec::new(),
            limited: Vec::new(),
        };
        for language in Language::ALL {
            let resolved: Vec<(&str, Option<PathBuf>)> =
                language.runtime_files().iter().map(|&file| (file, found(file))).collect();
            let absent: Vec<&str> = resolved.iter().filter(|(_, p)| p.is_none()).map(|(f, _)| *f).collect();
            if !absent.is_empty() {
                languages.missing.push((
                    language,
                    format!("{} not found: {}", absent.join(" and "), language.install_hint()),
                ));
            } else if !language.has_runner() {
                languages.missing.push((
                    language,
                    format!("its runtime is installed, but this server's kernel does not run {language} yet"),
                ));
            } else {
                languages.available.push(language);
                if let Some((_, Some(executable))) = resolved.into_iter().next() {
                    languages.runtimes.push((language, executable));
                }
            }
        }
        languages
    }

    /// Note that `language` runs with less than its full runtime, and why (e.g. Python cells
    /// without IPython).
    #[cfg(feature = "container")]
    pub(crate) fn limit(&mut self, language: Language, why: String) {
        self.limited.push((language, why));
    }

    /// Python alone (a backend whose image carries no other runtime).
    pub(crate) fn python_only() -> Self {
        Self {
            available: vec![Language::Python],
            missing: Language::ALL[1..]
                .iter()
                .map(|&l| (l, "this backend's sandboxes run only Python".to_owned()))
                .collect(),
            runtimes: Vec::new(),
            limited: Vec::new(),
        }
    }

    /// The languages sandboxes run.
    pub fn available(&self) -> &[Language] {
        &self.available
    }

    /// The languages they do not run, each with the reason and how to get it.
    pub fn missing(&self) -> &[(Language, String)] {
        &self.missing
    }

    /// Languages sandboxes run with less than their full runtime (Python cells without IPython, or
    /// figures without E2B's chart data), each with why and how to get the rest.
    pub fn limited(&self) -> &[(Language, String)] {
        &self.limited
    }

    /// Whether sandboxes run `language`.
    pub fn has(&self, language: Language) -> bool {
        self.available.contains(&language)
    }

    /// The executable the kernel starts for `language` (`None`: Python, or its default path).
    pub(crate) fn runtime(&self, language: Language) -> Option<&Path> {
        self.runtimes.iter().find(|(l, _)| *l == language).map(|(_, path)| path.as_path())
    }

    /// `Ok` if sandboxes run `language`, else an error naming what is missing.
    pub(crate) fn check(&self, language: Language) -> Result<(), SandboxError> {
        match self.missing.iter().find(|(l, _)| *l == language) {
            None => Ok(()),
            Some((_, why)) => Err(SandboxError::InvalidArgument(format!(
                "language {language:?} is not available in this sandbox: {why} (available: {})",
                self.available.iter().map(|l| l.name()).collect::<Vec<_>>().join(", "),
                language = language.name()
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e2b_names_parse() {
        assert_eq!(Language::parse(" JS ").unwrap(), Language::JavaScript);
        assert_eq!(Language::parse("ts").unwrap(), Language::TypeScript);
        assert_eq!(Language::parse("").unwrap(), Language::Python);
        let error = Language::parse("cobol").unwrap_err().to_string();
        assert!(error.contains("cobol") && error.contains("javascript"), "{error}");
    }

    #[test]
    fn a_missing_runtime_is_named_with_its_fix() {
        let root = std::env::temp_dir().join(format!("waxell-languages-{}", std::process::id()));
        std::fs::create_dir_all(root.join("bin")).unwrap();
        std::fs::write(root.join("bin/bash"), "").unwrap();
        let languages = Languages::detect(&root);
        assert!(languages.has(Language::Python) && languages.has(Language::Bash));
        let error = languages.check(Language::JavaScript).unwrap_err().to_string();
        assert!(error.contains("/usr/bin/node not found") && error.contains("apt-get install nodejs"), "{error}");
        assert!(languages.check(Language::R).is_err());
        std::fs::remove_dir_all(root).unwrap();
    }
}
