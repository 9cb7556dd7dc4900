//! `LocalBackend` (creates sandboxes, keeps the warm pool) and `LocalSandbox` (one live sandbox with
//! its contexts, files and lifetime).
//!
//! A sandbox = one cgroup set + one scratch directory + one uid, and one kernel per context. Each
//! context is its own bwrap instance (its own namespaces, its own interpreter) sharing the sandbox's
//! scratch directory, uid and cgroups, so the memory/process/CPU caps cover all contexts together.

use std::collections::{BTreeMap, VecDeque};
use std::fs;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::Notify;
use waxell::sandbox::{
    CodeContext, EntryInfo, Execution, RunOptions, SandboxBackend, SandboxError, SandboxOptions,
    SandboxSession,
};

use crate::capabilities::{HostReport, IsolationMode};
use crate::cgroup::{Cgroup, CgroupLimits, Limiter};
use crate::config::LocalConfig;
use crate::files::ScratchFiles;
use crate::host::{self, PythonRuntime};
use crate::kernel::{ExecLimits, KernelProcess, OomCounter};
use crate::launcher::{Launcher, Slot};
use crate::naming::{self, UidLease};
use crate::session::{self, watch_lifetime, Contexts, Expiring, Lifetime, SessionBackend};
pub use crate::session::DEFAULT_CONTEXT_ID;

/// Creates isolated local Python sandboxes (bubblewrap + seccomp + cgroups), optionally from a warm
/// pool of pre-started interpreters. Cheap to clone; the pool is shared.
#[derive(Clone)]
pub struct LocalBackend {
    inner: Arc<BackendInner>,
}

struct BackendInner {
    launcher: Arc<Launcher>,
    limiter: Limiter,
    report: HostReport,
    scratch_root: PathBuf,
    pool: Mutex<VecDeque<Prepared>>,
    /// Wakes the refill task; also notified when the backend is dropped so the task exits.
    refill: Arc<Notify>,
    refill_started: AtomicBool,
    /// The refill task's last failure, reported by `warm_up`.
    refill_error: Mutex<Option<String>>,
}

impl Drop for BackendInner {
    fn drop(&mut self) {
        self.refill.notify_one();
    }
}

impl std::fmt::Debug for LocalBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalBackend")
            .field("python", &self.inner.launcher.python.executable)
            .field("pool_size", &self.inner.launcher.config.pool_size)
            .finish_non_exhaustive()
    }
}

/// A sandbox shell with a ready default kernel: what the pool holds. Field order = drop order:
/// kernel first, then the cgroup (kills stragglers), then the scratch directory.
struct Prepared {
    id: String,
    uid: u32,
    kernel: KernelProcess,
    cgroup: Cgroup,
    mounts: SandboxMounts,
    /// Last: the uid is free again only once nothing of the sandbox is left (`None` rootless).
    lease: Option<UidLease>,
}

/// A per-sandbox tmpfs on the host: the scratch directory (host side of `/home/user`), `/tmp` and
/// `/dev/shm`. Size- and inode-capped (`size=`, `nr_inodes=`), so no sandbox can fill the host's
/// disk or pin unbounded kernel memory in inodes and dentries. Unmounted and removed on drop.
#[derive(Debug)]
struct TmpfsMount {
    path: PathBuf,
}

/// What one [`TmpfsMount`] is for.
struct TmpfsSpec<'a> {
    name: &'a str,
    size_bytes: u64,
    inodes: u64,
    /// `0700` owned by the sandbox uid (scratch) or `1777` owned by root (`/tmp`, `/dev/shm`).
    private_to: Option<u32>,
}

impl TmpfsMount {
    fn create(root: &Path, spec: TmpfsSpec<'_>) -> Result<Self, SandboxError> {
        let path = root.join(spec.name);
        fs::DirBuilder::new().mode(0o700).create(&path)?;
        let dir = TmpfsMount { path };
        let owner = match spec.private_to {
            Some(uid) => format!("mode=0700,uid={uid},gid={uid}"),
            None => "mode=1777,uid=0,gid=0".to_owned(),
        };
        // nosuid/nodev: nothing the sandbox writes there can gain privileges on the host.
        let options = std::ffi::CString::new(format!(
            "size={},nr_inodes={},{owner}",
            spec.size_bytes, spec.inodes
        ))
        .expect("mount options have no NUL");
        rustix::mount::mount(
            "waxell-sandbox",
            &dir.path,
            "tmpfs",
            rustix::mount::MountFlags::NOSUID | rustix::mount::MountFlags::NODEV,
            options.as_c_str(),
        )
        .map_err(|e| {
            SandboxError::Unavailable(format!(
                "cannot mount a sandbox tmpfs at {} ({e}): the sandbox needs CAP_SYS_ADMIN, as bubblewrap does",
                dir.path.display()
            ))
        })?;
        Ok(dir)
    }

    /// Rootless: a plain 0700 directory of this user (see rootless.rs for why no tmpfs).
    fn create_unmounted(root: &Path, id: &str) -> Result<Self, SandboxError> {
        let path = root.join(id);
        fs::DirBuilder::new().mode(0o700).create(&path)?;
        Ok(TmpfsMount { path })
    }

    fn remove(&self) {
        unmount_and_remove(&self.path);
    }
}

/// The host tmpfs mounts of one sandbox. Their names start with the sandbox id (host pid first), so
/// the start-up sweep finds leftovers. Nothing is mounted beneath the writable scratch mount.
#[derive(Debug)]
struct SandboxMounts {
    scratch: TmpfsMount,
    /// `None` when rootless: the host cannot mount, bwrap's own size-capped `--tmpfs` is used.
    tmp: Option<TmpfsMount>,
    shm: Option<TmpfsMount>,
}

impl SandboxMounts {
    fn create(
        root: &Path,
        id: &str,
        uid: u32,
        limits: &crate::config::Limits,
        rootless: bool,
    ) -> Result<Self, SandboxError> {
        if rootless {
            return Ok(Self {
                scratch: TmpfsMount::create_unmounted(root, id)?,
                tmp: None,
                shm: None,
            });
        }
        let inodes = limits.tmpfs_inodes;
        Ok(Self {
            scratch: TmpfsMount::create(
                root,
                TmpfsSpec {
                    name: id,
                    size_bytes: limits.scratch_bytes,
                    inodes,
                    private_to: Some(uid),
                },
            )?,
            tmp: Some(TmpfsMount::create(
                root,
                TmpfsSpec {
                    name: &format!("{id}.tmp"),
                    size_bytes: limits.tmp_bytes,
                    inodes,
                    private_to: None,
                },
            )?),
            shm: Some(TmpfsMount::create(
                root,
                TmpfsSpec {
                    name: &format!("{id}.shm"),
                    size_bytes: SHM_BYTES,
                    inodes,
                    private_to: None,
                },
            )?),
        })
    }

    fn slot<'a>(&'a self, uid: u32, cgroup: &'a Cgroup) -> Slot<'a> {
        Slot {
            uid,
            scratch: &self.scratch.path,
            tmp: self.tmp.as_ref().map(|m| m.path.as_path()),
            shm: self.shm.as_ref().map(|m| m.path.as_path()),
            cgroup,
        }
    }

    fn remove(&self) {
        self.scratch.remove();
        self.tmp.iter().chain(&self.shm).for_each(TmpfsMount::remove);
    }
}

/// Size of `/dev/shm` (POSIX shared memory and semaphores, e.g. `multiprocessing` locks).
pub(crate) const SHM_BYTES: u64 = 16 << 20;

/// Detach the scratch tmpfs (frees its pages) and remove the directory it sat on. Never follows
/// a symlink: `remove_dir_all` does not (CVE-2022-21658 was fixed in Rust 1.58.1).
fn unmount_and_remove(path: &Path) {
    // EINVAL: not a mount point (already unmounted); ENOENT: already gone.
    match rustix::mount::unmount(
        path,
        rustix::mount::UnmountFlags::DETACH | rustix::mount::UnmountFlags::NOFOLLOW,
    ) {
        // EPERM: rootless, nothing was mounted.
        Ok(()) | Err(rustix::io::Errno::INVAL) | Err(rustix::io::Errno::NOENT) | Err(rustix::io::Errno::PERM) => {}
        Err(e) => tracing::warn!(path = %path.display(), "could not unmount sandbox scratch: {e}"),
    }
    if let Err(e) = fs::remove_dir_all(path) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(path = %path.display(), "could not remove sandbox scratch dir: {e}");
        }
    }
}

impl Drop for TmpfsMount {
    fn drop(&mut self) {
        self.remove();
    }
}

impl LocalBackend {
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
        naming::check_uid_range(config.uid_base, config.uid_span).map_err(SandboxError::InvalidArgument)?;
        let tools = host::check_host()?;
        let python = match &config.python {
            Some(path) => PythonRuntime::probe(path)
                .map_err(|e| SandboxError::Unavailable(format!("python {}: {e}", path.display())))?,
            None => PythonRuntime::detect()?,
        };
        let scratch_root = if tools.rootless {
            crate::rootless::scratch_root(config.scratch_root.as_deref())?
        } else {
            prepare_scratch_root(config.scratch_root.as_deref())?
        };
        let limiter = Limiter::detect(tools.rootless);
        let report = host_report_for(&tools, &limiter, &config);
        limiter.sweep_stale();
        sweep_stale_scratch(&scratch_root);
        let launcher = Arc::new(Launcher::new(tools, python, config)?);
        let backend = Self {
            inner: Arc::new(BackendInner {
                launcher,
                limiter,
                report,
                scratch_root,
                pool: Mutex::new(VecDeque::new()),
                refill: Arc::new(Notify::new()),
                refill_started: AtomicBool::new(false),
                refill_error: Mutex::new(None),
            }),
        };
        if tokio::runtime::Handle::try_current().is_ok() {
            backend.start_refill();
        }
        Ok(backend)
    }

    /// Which isolation layers and limits are in force on this host, and why others are not.
    pub fn capabilities(&self) -> &HostReport {
        &self.inner.report
    }

    /// Probe the host as [`LocalBackend::new`] would, without making a backend: the report says
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
        host_report_for(&tools, &Limiter::detect(tools.rootless), config)
    }

    /// The interpreter sandboxes run.
    pub fn python(&self) -> &PythonRuntime {
        &self.inner.launcher.python
    }

    /// Ready interpreters waiting in the pool.
    pub fn pool_len(&self) -> usize {
        self.inner.pool.lock().map(|p| p.len()).unwrap_or(0)
    }

    /// Fill the warm pool to `pool_size` and wait until it is full (needs a tokio runtime).
    pub async fn warm_up(&self) -> Result<(), SandboxError> {
        let target = self.inner.launcher.config.pool_size;
        self.start_refill();
        self.inner.refill.notify_one();
        while self.pool_len() < target {
            if let Some(error) = self.inner.refill_error.lock().ok().and_then(|mut e| e.take()) {
                return Err(SandboxError::Unavailable(format!(
                    "warm pool refill failed: {error}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Ok(())
    }

    fn start_refill(&self) {
        if self.inner.launcher.config.pool_size == 0 || self.inner.refill_started.swap(true, Ordering::SeqCst)
        {
            return;
        }
        let weak = Arc::downgrade(&self.inner);
        let notify = self.inner.refill.clone();
        tokio::spawn(async move {
            loop {
                let notified = notify.notified();
                let Some(inner) = weak.upgrade() else { return };
                let target = inner.launcher.config.pool_size;
                let len = inner.pool.lock().map(|p| p.len()).unwrap_or(target);
                if len < target {
                    match prepare(&inner).await {
                        Ok(prepared) => {
                            if let Ok(mut pool) = inner.pool.lock() {
                                pool.push_back(prepared);
                            }
                        }
                        Err(e) => {
                            tracing::warn!("warm pool refill failed: {e}");
                            if let Ok(mut slot) = inner.refill_error.lock() {
                                *slot = Some(e.to_string());
                            }
                            drop(inner);
                            tokio::time::sleep(Duration::from_secs(1)).await;
                        }
                    }
                    continue;
                }
                drop(inner);
                notified.await;
            }
        });
    }

    /// Create a sandbox (the concrete type; [`SandboxBackend::create`] boxes it).
    pub async fn create_sandbox(&self, options: &SandboxOptions) -> Result<LocalSandbox, SandboxError> {
        // Idempotent; starts the refill if the backend was made outside a runtime.
        self.start_refill();
        let pooled = loop {
            let Some(mut prepared) = self.inner.pool.lock().ok().and_then(|mut p| p.pop_front()) else {
                break None;
            };
            self.inner.refill.notify_one();
            // An interpreter that died while waiting (killed from outside) is discarded.
            if !prepared.kernel.has_exited() {
                break Some(prepared);
            }
        };
        let prepared = match pooled {
            Some(prepared) => prepared,
            None => prepare(&self.inner).await?,
        };
        LocalSandbox::start(self.inner.launcher.clone(), prepared, options).await
    }
}

fn host_report_for(tools: &host::HostTools, limiter: &Limiter, config: &LocalConfig) -> HostReport {
    let (mode, uid) = if tools.rootless {
        (IsolationMode::Rootless, crate::rootless::sandbox_uid())
    } else {
        (IsolationMode::Rootful, 0)
    };
    HostReport::build(mode, uid, &limiter.enforcement(), &config.limits)
}

/// Make a sandbox shell and start its default kernel (the cold path, ~60 ms).
async fn prepare(inner: &BackendInner) -> Result<Prepared, SandboxError> {
    let launcher = &inner.launcher;
    let config = &launcher.config;
    let id = naming::new_sandbox_id();
    // Rootless, the sandbox runs as this user (rootless.rs); root, each gets a leased uid of its own.
    let lease = if launcher.tools.rootless {
        None
    } else {
        Some(UidLease::acquire(config.uid_base, config.uid_span).map_err(SandboxError::Unavailable)?)
    };
    let uid = match &lease {
        Some(lease) => lease.uid(),
        None => crate::rootless::sandbox_uid(),
    };
    // Guards exist before the spawn, so a failed spawn leaks nothing.
    let cgroup = Cgroup::create(
        &inner.limiter,
        &id,
        CgroupLimits {
            memory_bytes: config.limits.memory_bytes,
            max_processes: config.limits.max_processes,
            cpus: config.limits.cpus,
        },
    )
    .map_err(|e| SandboxError::Unavailable(format!("cannot create the sandbox's cgroups: {e}")))?;
    let mounts = SandboxMounts::create(
        &inner.scratch_root,
        &id,
        uid,
        &config.limits,
        launcher.tools.rootless,
    )?;
    let kernel = launcher.start_kernel(&mounts.slot(uid, &cgroup)).await?;
    Ok(Prepared {
        id,
        uid,
        kernel,
        cgroup,
        mounts,
        lease,
    })
}

/// The directory holding the scratch dirs: ours (`$TMPDIR/waxell-sandbox`, made root 0711 so
/// sandboxes' directories cannot be listed) or a configured one, which must already be a real
/// directory owned by root and not writable by others (the sweep deletes entries in it).
fn prepare_scratch_root(configured: Option<&Path>) -> Result<PathBuf, SandboxError> {
    let (root, ours) = match configured {
        Some(path) => (path.to_path_buf(), false),
        None => (std::env::temp_dir().join("waxell-sandbox"), true),
    };
    if ours {
        match fs::DirBuilder::new().mode(0o711).create(&root) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(SandboxError::Io(e)),
        }
    }
    let meta = fs::symlink_metadata(&root)
        .map_err(|e| SandboxError::InvalidArgument(format!("scratch_root {}: {e}", root.display())))?;
    let unsafe_reason = if !meta.is_dir() {
        Some("is not a directory (or is a symlink)")
    } else if std::os::unix::fs::MetadataExt::uid(&meta) != 0 {
        Some("is not owned by root")
    } else if !ours && meta.permissions().mode() & 0o022 != 0 {
        Some("is writable by group or others")
    } else {
        None
    };
    if let Some(reason) = unsafe_reason {
        return Err(SandboxError::InvalidArgument(format!(
            "scratch_root {} {reason}",
            root.display()
        )));
    }
    if ours {
        // Root-owned and not listable: sandboxes cannot find each other's directories.
        fs::set_permissions(&root, fs::Permissions::from_mode(0o711))?;
    }
    Ok(root)
}

fn sweep_stale_scratch(root: &Path) {
    let Ok(entries) = fs::read_dir(root) else { return };
    for entry in entries.flatten() {
        if naming::owner_is_dead(&entry.file_name().to_string_lossy()) {
            unmount_and_remove(&entry.path());
        }
    }
}

#[async_trait]
impl SandboxBackend for LocalBackend {
    fn name(&self) -> &'static str {
        "local"
    }

    async fn create(&self, options: &SandboxOptions) -> Result<Box<dyn SandboxSession>, SandboxError> {
        Ok(Box::new(self.create_sandbox(options).await?))
    }
}

/// One live local sandbox. Dropping it (or [`SandboxSession::kill`]) kills every process in it and
/// removes its cgroups and scratch directory.
pub struct LocalSandbox {
    inner: Arc<SandboxInner>,
}

/// Field order = drop order: kernels, then cgroups, then the scratch dir.
struct SandboxInner {
    contexts: Contexts,
    cgroup: Cgroup,
    mounts: SandboxMounts,
    id: String,
    uid: u32,
    launcher: Arc<Launcher>,
    env: BTreeMap<String, String>,
    lifetime: Lifetime,
    /// Dropped last (field order): the uid is released after every process and file of it is gone.
    _lease: Option<UidLease>,
}

impl LocalSandbox {
    async fn start(
        launcher: Arc<Launcher>,
        prepared: Prepared,
        options: &SandboxOptions,
    ) -> Result<Self, SandboxError> {
        let Prepared {
            id,
            uid,
            mut kernel,
            cgroup,
            mounts,
            lease,
        } = prepared;
        if !options.env_vars.is_empty() {
            kernel.configure(&options.env_vars, None).await?;
        }
        let lifetime = options.timeout.unwrap_or(launcher.config.lifetime);
        let inner = Arc::new(SandboxInner {
            contexts: Contexts::new(kernel),
            cgroup,
            mounts,
            id,
            uid,
            launcher,
            env: options.env_vars.clone(),
            lifetime: Lifetime::new(lifetime),
            _lease: lease,
        });
        watch_lifetime(Arc::downgrade(&inner));
        Ok(Self { inner })
    }

    /// Host path of the scratch directory (bound at `/home/user` inside). Read it only through the
    /// file API: the sandbox controls what is in it.
    pub fn scratch_dir(&self) -> &Path {
        &self.inner.mounts.scratch.path
    }

    /// The uid the sandboxed code runs as on the host.
    pub fn uid(&self) -> u32 {
        self.inner.uid
    }

    /// Host pids of every process in the sandbox (launchers included).
    pub fn host_pids(&self) -> Vec<u32> {
        self.inner.cgroup.pids()
    }

    /// Whether the process cap (`pids.max`) is currently reached.
    pub fn process_cap_reached(&self) -> bool {
        self.inner.cgroup.pids_max_reached()
    }

    fn files(&self) -> ScratchFiles {
        ScratchFiles {
            root: self.inner.mounts.scratch.path.clone(),
            uid: self.inner.uid,
            max_file_bytes: self.inner.launcher.limits().max_file_bytes,
        }
    }

    fn check_alive(&self) -> Result<(), SandboxError> {
        if self.inner.lifetime.has_ended() {
            Err(SandboxError::NotFound(format!(
                "sandbox {} was killed or its lifetime expired",
                self.inner.id
            )))
        } else {
            Ok(())
        }
    }

    async fn start_context_kernel(&self, cwd: Option<&str>) -> Result<KernelProcess, SandboxError> {
        let inner = &self.inner;
        let slot = inner.mounts.slot(inner.uid, &inner.cgroup);
        let mut kernel = inner.launcher.start_kernel(&slot).await?;
        if !inner.env.is_empty() || cwd.is_some() {
            kernel.configure(&inner.env, cwd).await?;
        }
        Ok(kernel)
    }

    async fn run_files<T: Send + 'static>(
        &self,
        op: impl FnOnce(ScratchFiles) -> Result<T, SandboxError> + Send + 'static,
    ) -> Result<T, SandboxError> {
        self.check_alive()?;
        let files = self.files();
        tokio::task::spawn_blocking(move || op(files))
            .await
            .map_err(|e| SandboxError::Other(format!("file operation panicked: {e}")))?
    }
}

impl SandboxInner {
    /// Kill everything and remove the cgroups and the scratch dir now (Drop repeats it harmlessly).
    async fn shutdown(&self) {
        self.lifetime.end();
        // Kill first so runs holding a context lock see EOF and release it.
        self.cgroup.kill_all();
        for context in self.contexts.take_all() {
            if let Some(mut kernel) = context.kernel.lock().await.take() {
                kernel.kill();
            }
        }
        self.cgroup.remove();
        self.mounts.remove();
    }
}

#[async_trait]
impl Expiring for SandboxInner {
    fn lifetime(&self) -> &Lifetime {
        &self.lifetime
    }

    fn sandbox_id(&self) -> &str {
        &self.id
    }

    async fn shutdown(&self) {
        SandboxInner::shutdown(self).await;
    }
}

#[async_trait]
impl SessionBackend for LocalSandbox {
    fn kind(&self) -> &'static str {
        "local sandbox"
    }

    fn contexts(&self) -> &Contexts {
        &self.inner.contexts
    }

    fn check_alive(&self) -> Result<(), SandboxError> {
        LocalSandbox::check_alive(self)
    }

    async fn start_kernel(&self, cwd: Option<&str>) -> Result<KernelProcess, SandboxError> {
        self.start_context_kernel(cwd).await
    }

    fn exec_limits(&self, options: &RunOptions) -> ExecLimits {
        let config = &self.inner.launcher.config;
        ExecLimits::for_run(options, config.run_timeout, config.interrupt_grace, &config.limits)
    }

    fn oom_counter(&self) -> &dyn OomCounter {
        &self.inner.cgroup
    }
}

#[async_trait]
impl SandboxSession for LocalSandbox {
    fn sandbox_id(&self) -> &str {
        &self.inner.id
    }

    fn runtime(&self) -> Option<&str> {
        Some("bubblewrap")
    }

    async fn run_code(&self, code: &str, options: &RunOptions) -> Result<Execution, SandboxError> {
        session::run_code(self, code, options).await
    }

    async fn create_context(
        &self,
        language: Option<&str>,
        cwd: Option<&str>,
    ) -> Result<CodeContext, SandboxError> {
        session::create_context(self, language, cwd).await
    }

    async fn list_contexts(&self) -> Result<Vec<CodeContext>, SandboxError> {
        session::list_contexts(self)
    }

    async fn restart_context(&self, context_id: &str) -> Result<(), SandboxError> {
        session::restart_context(self, context_id).await
    }

    async fn remove_context(&self, context_id: &str) -> Result<(), SandboxError> {
        session::remove_context(self, context_id).await
    }

    async fn write_file(&self, path: &str, data: &[u8]) -> Result<EntryInfo, SandboxError> {
        let (path, data) = (path.to_owned(), data.to_vec());
        self.run_files(move |files| files.write(&path, &data)).await
    }

    async fn read_file(&self, path: &str) -> Result<Vec<u8>, SandboxError> {
        let path = path.to_owned();
        self.run_files(move |files| files.read(&path)).await
    }

    async fn list_files(&self, path: &str) -> Result<Vec<EntryInfo>, SandboxError> {
        let path = path.to_owned();
        self.run_files(move |files| files.list(&path)).await
    }

    async fn make_dir(&self, path: &str) -> Result<bool, SandboxError> {
        let path = path.to_owned();
        self.run_files(move |files| files.make_dir(&path)).await
    }

    async fn rename(&self, from: &str, to: &str) -> Result<EntryInfo, SandboxError> {
        let (from, to) = (from.to_owned(), to.to_owned());
        self.run_files(move |files| files.rename(&from, &to)).await
    }

    async fn remove(&self, path: &str) -> Result<(), SandboxError> {
        let path = path.to_owned();
        self.run_files(move |files| files.remove(&path)).await
    }

    async fn set_timeout(&self, timeout: Duration) -> Result<(), SandboxError> {
        self.check_alive()?;
        self.inner.lifetime.extend(timeout);
        Ok(())
    }

    async fn kill(&self) -> Result<(), SandboxError> {
        self.inner.shutdown().await;
        Ok(())
    }
}

impl Drop for LocalSandbox {
    fn drop(&mut self) {
        // The watchdog holds only a weak reference: this drop releases the last strong one, whose
        // Drop removes kernels, cgroups and the scratch dir (in that order). Wake it so it exits.
        self.inner.lifetime.end();
    }
}

