//! `process`: the smallest backend, built only for the core's own tests. **It isolates nothing**:
//! the kernel is a plain child process of the host (same uid, same file system, network and all),
//! and the sandbox's home is a temporary directory. It exists to show what a backend has to say
//! (start a kernel, remove the sandbox, move files) and to test the shared core (contexts, runs,
//! the warm pool, lifetimes, the answers of operations a backend lacks) on any machine, without
//! root, bubblewrap or a container engine. See docs/sandbox.md, "Adding a backend".

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use tokio::io::AsyncReadExt;
use waxell::sandbox::{EntryInfo, SandboxError};

use crate::backend::{Backend, Prepared};
use crate::config::{BackendOptions, SandboxConfig};
use crate::kernel::{append_tail, ExitInfo, KernelProcess, ProcessControl, StderrTail, KERNEL_BOOT, KERNEL_SOURCE};
use crate::paths::{sandbox_path, HOME_DIR};
use crate::pool::Pooled;

/// The process backend has no options of its own.
#[derive(Debug, Clone, Default)]
pub(crate) struct ProcessOptions;

impl BackendOptions for ProcessOptions {
    const READY_TIMEOUT: Duration = Duration::from_secs(30);
}

/// Unisolated kernels as child processes (tests only).
#[derive(Debug)]
pub(crate) struct Process {
    config: SandboxConfig<ProcessOptions>,
}

/// One "sandbox": a temporary home directory, removed with the shell.
pub(crate) struct Home {
    id: String,
    dir: PathBuf,
}

impl Drop for Home {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Pooled<Process> {
    pub(crate) fn process(config: SandboxConfig<ProcessOptions>) -> Self {
        Pooled::with_backend(Process { config })
    }
}

/// A kernel running as a plain child process.
struct Child(tokio::process::Child);

#[async_trait]
impl ProcessControl for Child {
    fn has_exited(&mut self) -> bool {
        !matches!(self.0.try_wait(), Ok(None))
    }

    async fn exit_info(&mut self, stderr_tail: &str) -> ExitInfo {
        let status = tokio::time::timeout(Duration::from_millis(100), self.0.wait()).await;
        let detail = match (stderr_tail.lines().next(), status) {
            (Some(line), _) if !line.is_empty() => line.to_owned(),
            (_, Ok(Ok(status))) => status.to_string(),
            _ => "no exit status".to_owned(),
        };
        ExitInfo {
            oom_killed: false,
            detail,
        }
    }

    fn interrupt(&self) -> std::io::Result<()> {
        let pid = self
            .0
            .id()
            .and_then(|pid| rustix::process::Pid::from_raw(pid as i32))
            .ok_or_else(|| std::io::Error::other("the kernel has exited"))?;
        rustix::process::kill_process(pid, rustix::process::Signal::INT).map_err(std::io::Error::from)
    }

    fn kill(&mut self) {
        let _ = self.0.start_kill();
    }
}

impl Process {
    /// The host path of a caller's path in `home`.
    fn host_path(home: &Home, path: &str) -> Result<PathBuf, SandboxError> {
        let inside = sandbox_path(path)?;
        Ok(home.dir.join(inside[HOME_DIR.len()..].trim_start_matches('/')))
    }

    fn entry(path: &str, host: &Path) -> Result<EntryInfo, SandboxError> {
        let meta = std::fs::metadata(host)?;
        Ok(EntryInfo {
            name: host.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
            path: sandbox_path(path)?,
            is_dir: meta.is_dir(),
            size: if meta.is_dir() { 0 } else { meta.len() },
            modified: meta.modified().ok(),
            ..EntryInfo::default()
        })
    }

    fn io(path: &str, e: std::io::Error) -> SandboxError {
        if e.kind() == std::io::ErrorKind::NotFound {
            SandboxError::FileNotFound { path: path.to_owned() }
        } else {
            SandboxError::Io(e)
        }
    }
}

#[async_trait]
impl Backend for Process {
    const NAME: &'static str = "process";
    type Shell = Home;
    type Options = ProcessOptions;

    fn config(&self) -> &SandboxConfig<ProcessOptions> {
        &self.config
    }

    async fn prepare(&self) -> Result<Prepared<Home>, SandboxError> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let id = format!("{}-process-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        let dir = std::env::temp_dir().join(format!("waxell-sandbox-test-{id}"));
        std::fs::create_dir_all(&dir)?;
        let home = Home { id, dir };
        let kernel = self.start_kernel(&home).await?;
        Ok(Prepared { kernel, shell: home })
    }

    async fn start_kernel(&self, home: &Home) -> Result<KernelProcess, SandboxError> {
        let limits = &self.config.limits;
        let mut child = tokio::process::Command::new("python3")
            .args(["-I", "-c", KERNEL_BOOT, KERNEL_SOURCE])
            .env("SBX_OUTPUT_LIMIT", limits.output_chars.to_string())
            .env("SBX_RESULT_LIMIT", (limits.output_hard_bytes / 2).to_string())
            .env("SBX_PRELOAD", self.config.preload.join(","))
            .current_dir(&home.dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| SandboxError::Unavailable(format!("cannot start python3: {e}")))?;
        let (stdin, stdout) = (child.stdin.take().expect("piped"), child.stdout.take().expect("piped"));
        let mut stderr = child.stderr.take().expect("piped");
        let tail = StderrTail::default();
        let collected = tail.clone();
        tokio::spawn(async move {
            let mut chunk = [0u8; 4096];
            while let Ok(n @ 1..) = stderr.read(&mut chunk).await {
                append_tail(&collected, &chunk[..n]);
            }
        });
        let mut kernel = KernelProcess::from_parts(Box::new(Child(child)), Box::pin(stdin), Box::pin(stdout), tail);
        kernel.wait_ready(self.config.ready_timeout).await?;
        Ok(kernel)
    }

    fn sandbox_id(home: &Home) -> &str {
        &home.id
    }

    fn runtime<'a>(&'a self, _home: &'a Home) -> &'a str {
        "none"
    }

    /// Its kernels are its only processes; the core kills them right after this.
    async fn kill_all(&self, _home: &Home) {}

    async fn remove(&self, home: &Home) {
        let _ = std::fs::remove_dir_all(&home.dir);
    }

    async fn write_file(&self, home: &Home, path: &str, data: &[u8]) -> Result<EntryInfo, SandboxError> {
        let host = Self::host_path(home, path)?;
        if let Some(parent) = host.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&host, data)?;
        Self::entry(path, &host)
    }

    async fn read_file(&self, home: &Home, path: &str) -> Result<Vec<u8>, SandboxError> {
        std::fs::read(Self::host_path(home, path)?).map_err(|e| Self::io(path, e))
    }

    async fn list_files(&self, home: &Home, path: &str) -> Result<Vec<EntryInfo>, SandboxError> {
        let dir = Self::host_path(home, path)?;
        let mut entries = Vec::new();
        for entry in std::fs::read_dir(&dir).map_err(|e| Self::io(path, e))? {
            let name = entry?.file_name().to_string_lossy().into_owned();
            entries.push(Self::entry(&format!("{path}/{name}"), &dir.join(&name))?);
        }
        Ok(entries)
    }

    async fn make_dir(&self, home: &Home, path: &str) -> Result<bool, SandboxError> {
        let dir = Self::host_path(home, path)?;
        let existed = dir.is_dir();
        std::fs::create_dir_all(&dir)?;
        Ok(!existed)
    }

    async fn rename(&self, home: &Home, from: &str, to: &str) -> Result<EntryInfo, SandboxError> {
        let target = Self::host_path(home, to)?;
        std::fs::rename(Self::host_path(home, from)?, &target).map_err(|e| Self::io(from, e))?;
        Self::entry(to, &target)
    }

    async fn remove_path(&self, home: &Home, path: &str) -> Result<(), SandboxError> {
        let host = Self::host_path(home, path)?;
        let removed = if host.is_dir() {
            std::fs::remove_dir_all(&host)
        } else {
            std::fs::remove_file(&host)
        };
        removed.map_err(|e| Self::io(path, e))
    }
}

#[cfg(test)]
mod tests;
