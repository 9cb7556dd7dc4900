//! The local backend's [`Backend`]: a sandbox = one cgroup set + one set of tmpfs mounts (scratch,
//! `/tmp`, `/dev/shm`) + one uid, and one kernel per context. Each context is its own bwrap
//! instance (its own namespaces, its own interpreter) sharing the sandbox's scratch directory, uid
//! and cgroups, so the memory/process/CPU caps cover all contexts together.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use waxell::sandbox::{DirWatch, EntryInfo, ProcessSpec, SandboxError, SandboxProcess, WatchOptions};

use crate::backend::{Backend, Prepared, Usage};
use crate::command::PtyPermit;
use crate::config::SandboxConfig;
use crate::kernel::{KernelProcess, Languages};
use crate::local::capabilities::{HostReport, IsolationMode};
use crate::local::cgroup::{Cgroup, CgroupLimits, Limiter};
use crate::local::config::{LocalConfig, LocalOptions};
use crate::local::files::ScratchFiles;
use crate::local::host::{self, PythonRuntime};
use crate::local::launcher::Launcher;
use crate::local::mounts::{prepare_scratch_root, sweep_stale_scratch, SandboxMounts};
use crate::local::root::SandboxRoot;
use crate::local::rootless;
use crate::local::uid_lease::{self, UidLease};
use crate::local::watch;
use crate::local::usage;
use crate::naming;
use crate::pool::Pooled;
use crate::session::Session;

/// What every local sandbox of one backend shares: the launcher (host tools, Python, seccomp
/// programs, configuration), the cgroup limiter and the host report.
pub struct Local {
    launcher: Launcher,
    limiter: Limiter,
    report: HostReport,
    scratch_root: PathBuf,
    /// The languages whose runtimes the host has (sandboxes see the host's `/usr`).
    languages: Languages,
}

/// What one local sandbox holds. Field order = drop order: the cgroup (kills stragglers), then
/// the mounts, then the uid lease (the uid is free again only once nothing of the sandbox is left).
pub struct LocalShell {
    cgroup: Cgroup,
    mounts: SandboxMounts,
    id: String,
    uid: u32,
    /// `None` rootless: the sandbox runs as this user.
    _lease: Option<UidLease>,
}

impl Pooled<Local> {
    /// Check the host (root, bubblewrap, setpriv, cgroups, Python), sweep leftovers of dead host
    /// processes, and start filling the warm pool if `config.pool_size > 0` and a tokio runtime is
    /// running. Fails with [`SandboxError::Unavailable`] naming what is missing and how to get it.
    pub fn new(config: LocalConfig) -> Result<Self, SandboxError> {
        config.limits.validate().map_err(SandboxError::InvalidArgument)?;
        if config.uid_base == 0
            || config.uid_span == 0
            || config.uid_base.checked_add(config.uid_span).is_none()
        {
            return Err(SandboxError::InvalidArgument(format!(
                "uid_base {} / uid_span {}: sandbox uids must be non-zero and in range",
                config.uid_base, config.uid_span
            )));
        }
        uid_lease::check_uid_range(config.uid_base, config.uid_span).map_err(SandboxError::InvalidArgument)?;
        let tools = host::check_host()?;
        let python = match &config.python {
            Some(path) => PythonRuntime::probe(path)
                .map_err(|e| SandboxError::Unavailable(format!("python {}: {e}", path.display())))?,
            None => PythonRuntime::detect()?,
        };
        let root = SandboxRoot::detect()?;
        let scratch_root = if tools.rootless {
            rootless::scratch_root(config.scratch_root.as_deref())?
        } else {
            prepare_scratch_root(config.scratch_root.as_deref())?
        };
        let limiter = Limiter::detect(tools.rootless);
        let report = host_report_for(&tools, &limiter, &config, &root);
        limiter.sweep_stale();
        sweep_stale_scratch(&scratch_root);
        let languages = Languages::detect(&root.resolved());
        let launcher = Launcher::new(tools, python, root, config)?;
        Ok(Pooled::with_backend(Local {
            launcher,
            limiter,
            report,
            scratch_root,
            languages,
        }))
    }

    /// Which isolation layers and limits are in force on this host, and why others are not.
    pub fn capabilities(&self) -> &HostReport {
        &self.backend().report
    }

    /// Probe the host as [`crate::LocalBackend::new`] would, without making a backend: the report says
    /// why the local sandbox is unavailable (with the fix) or what it would enforce.
    pub fn host_report(config: &LocalConfig) -> HostReport {
        let tools = match host::check_host() {
            Ok(tools) => tools,
            Err(e) => return HostReport::unavailable(e.to_string()),
        };
        if let Err(e) = match &config.python {
            Some(path) => PythonRuntime::probe(path).map(|_| ()).map_err(|e| format!("python {}: {e}", path.display())),
            None => PythonRuntime::detect().map(|_| ()).map_err(|e| e.to_string()),
        } {
            return HostReport::unavailable(e);
        }
        let root = match SandboxRoot::detect() {
            Ok(root) => root,
            Err(e) => return HostReport::unavailable(e.to_string()),
        };
        host_report_for(&tools, &Limiter::detect(tools.rootless), config, &root)
    }

    /// The interpreter sandboxes run.
    pub fn python(&self) -> &PythonRuntime {
        &self.backend().launcher.python
    }
}

fn host_report_for(tools: &host::HostTools, limiter: &Limiter, config: &LocalConfig, root: &SandboxRoot) -> HostReport {
    let (mode, uid) = if tools.rootless {
        (IsolationMode::Rootless, rootless::sandbox_uid())
    } else {
        (IsolationMode::Rootful, 0)
    };
    let languages = Languages::detect(&root.resolved());
    let available: Vec<&str> = languages.available().iter().map(|l| l.name()).collect();
    let missing: Vec<(&str, String)> = languages.missing().iter().map(|(l, why)| (l.name(), why.clone())).collect();
    HostReport::build(mode, uid, &limiter.enforcement(), &config.limits)
        .with_runtime_root(&root.describe(), root.staleness())
        .with_languages(&available, &missing)
}

impl Session<Local> {
    /// Host path of the scratch directory (bound at `/home/user` inside). Read it only through the
    /// file API: the sandbox controls what is in it.
    pub fn scratch_dir(&self) -> &Path {
        self.shell().mounts.scratch_dir()
    }

    /// The uid the sandboxed code runs as on the host.
    pub fn uid(&self) -> u32 {
        self.shell().uid
    }

    /// Host pids of every process in the sandbox (launchers included).
    pub fn host_pids(&self) -> Vec<u32> {
        self.shell().cgroup.pids()
    }

    /// Whether the process cap (`pids.max`) is currently reached.
    pub fn process_cap_reached(&self) -> bool {
        self.shell().cgroup.pids_max_reached()
    }
}

impl Local {
    /// Host-side file access to a sandbox's scratch directory, off the async threads.
    async fn files<T: Send + 'static>(
        &self,
        shell: &LocalShell,
        op: impl FnOnce(ScratchFiles) -> Result<T, SandboxError> + Send + 'static,
    ) -> Result<T, SandboxError> {
        let root = shell
            .mounts
            .scratch_root()
            .ok_or_else(|| SandboxError::NotFound(format!("sandbox {} was removed", shell.id)))?;
        let files = ScratchFiles {
            root,
            uid: shell.uid,
            max_file_bytes: self.launcher.limits().max_file_bytes,
        };
        tokio::task::spawn_blocking(move || op(files))
            .await
            .map_err(|e| SandboxError::Io(std::io::Error::other(format!("file operation panicked: {e}"))))?
    }
}

#[async_trait]
impl Backend for Local {
    type Options = LocalOptions;
    type Shell = LocalShell;
    const NAME: &'static str = "local";

    fn config(&self) -> &SandboxConfig<LocalOptions> {
        &self.launcher.config
    }

    fn languages(&self) -> &Languages {
        &self.languages
    }

    /// Make a sandbox shell and start its default kernel (the cold path, ~40 ms as root).
    async fn prepare(&self) -> Result<Prepared<LocalShell>, SandboxError> {
        let launcher = &self.launcher;
        let config = &launcher.config;
        let id = naming::new_sandbox_id();
        // Rootless, the sandbox runs as this user (rootless.rs); root, each gets a leased uid of its own.
        let lease = if launcher.tools.rootless {
            None
        } else {
            Some(UidLease::acquire(config.uid_base, config.uid_span)?)
        };
        let uid = match &lease {
            Some(lease) => lease.uid(),
            None => rootless::sandbox_uid(),
        };
        // Guards exist before the spawn, so a failed spawn leaks nothing.
        let cgroup = Cgroup::create(
            &self.limiter,
            &id,
            CgroupLimits {
                memory_bytes: config.limits.memory_bytes,
                max_processes: config.limits.max_processes,
                cpus: config.limits.cpus,
            },
        )
        .map_err(|e| SandboxError::Unavailable(format!("cannot create the sandbox's cgroups: {e}")))?;
        let mounts = SandboxMounts::create(&self.scratch_root, &id, uid, &config.limits, launcher.tools.rootless)?;
        let kernel = launcher.start_kernel(&mounts.slot(uid, &cgroup)).await?;
        Ok(Prepared {
            kernel,
            shell: LocalShell {
                cgroup,
                mounts,
                id,
                uid,
                _lease: lease,
            },
        })
    }

    async fn start_kernel(&self, shell: &LocalShell) -> Result<KernelProcess, SandboxError> {
        self.launcher
            .start_kernel(&shell.mounts.slot(shell.uid, &shell.cgroup))
            .await
    }

    async fn start_process(
        &self,
        shell: &LocalShell,
        spec: &ProcessSpec,
        pty: Option<PtyPermit>,
    ) -> Result<SandboxProcess, SandboxError> {
        let slot = shell.mounts.slot(shell.uid, &shell.cgroup);
        let pty = pty.map(crate::command::Pty::open).transpose()?;
        crate::command::attach(self.launcher.start_process(&slot, spec, pty).await?)
    }

    fn sandbox_id(shell: &LocalShell) -> &str {
        &shell.id
    }

    fn runtime<'a>(&'a self, _shell: &'a LocalShell) -> &'a str {
        "bubblewrap"
    }

    fn oom_kills(shell: &LocalShell) -> u64 {
        shell.cgroup.oom_kills()
    }

    async fn kill_all(&self, shell: &LocalShell) {
        shell.cgroup.kill_all();
    }

    async fn usage(&self, shell: &LocalShell) -> Result<Usage, SandboxError> {
        let pids = shell.cgroup.pids();
        let disk_bytes = self.files(shell, |files| files.disk_used()).await?;
        let (cpu_seconds, memory_bytes) = tokio::task::spawn_blocking(move || usage::process_usage(&pids))
            .await
            .map_err(|e| SandboxError::Io(std::io::Error::other(format!("usage reading panicked: {e}"))))?;
        Ok(Usage {
            cpu_seconds,
            memory_bytes,
            disk_bytes,
        })
    }

    async fn remove(&self, shell: &LocalShell) {
        shell.cgroup.remove();
        shell.mounts.remove();
    }

    async fn write_file(&self, shell: &LocalShell, path: &str, data: &[u8]) -> Result<EntryInfo, SandboxError> {
        let (path, data) = (path.to_owned(), data.to_vec());
        self.files(shell, move |files| files.write(&path, &data)).await
    }

    async fn read_file(&self, shell: &LocalShell, path: &str) -> Result<Vec<u8>, SandboxError> {
        let path = path.to_owned();
        self.files(shell, move |files| files.read(&path)).await
    }

    async fn list_files(&self, shell: &LocalShell, path: &str) -> Result<Vec<EntryInfo>, SandboxError> {
        let path = path.to_owned();
        self.files(shell, move |files| files.list(&path)).await
    }

    async fn make_dir(&self, shell: &LocalShell, path: &str) -> Result<bool, SandboxError> {
        let path = path.to_owned();
        self.files(shell, move |files| files.make_dir(&path)).await
    }

    async fn rename(&self, shell: &LocalShell, from: &str, to: &str) -> Result<EntryInfo, SandboxError> {
        let (from, to) = (from.to_owned(), to.to_owned());
        self.files(shell, move |files| files.rename(&from, &to)).await
    }

    async fn remove_path(&self, shell: &LocalShell, path: &str) -> Result<(), SandboxError> {
        let path = path.to_owned();
        self.files(shell, move |files| files.remove(&path)).await
    }

    async fn set_metadata(
        &self,
        shell: &LocalShell,
        path: &str,
        metadata: &BTreeMap<String, String>,
    ) -> Result<EntryInfo, SandboxError> {
        let (path, metadata) = (path.to_owned(), metadata.clone());
        self.files(shell, move |files| files.set_metadata(&path, &metadata)).await
    }

    async fn watch_dir(
        &self,
        shell: &LocalShell,
        path: &str,
        options: WatchOptions,
    ) -> Result<Box<dyn DirWatch>, SandboxError> {
        let path = path.to_owned();
        self.files(shell, move |files| watch::watch(&files, &path, options)).await
    }
}
