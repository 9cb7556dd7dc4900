//! `ContainerBackend`: each sandbox is a container of a Docker-compatible engine (Docker Engine,
//! Docker Desktop, Podman's Docker API service), optionally under gVisor's `runsc` runtime, driven
//! through the Engine API over its unix socket.
//!
//! The container's pid 1 is a tiny reaper; every context is the *same* kernel (`kernel.py`, sent with
//! the exec so image and host never disagree) started as an attached exec whose stdin/stdout carry the
//! same JSON-lines protocol as the local backend's pipes (`kernel.rs`). Files move through
//! execs of a helper run as the sandbox user, so the host never resolves a path the code controls.
//!
//! Isolation per container: no network, read-only root, size-capped tmpfs `/home/user` and `/tmp`,
//! all capabilities dropped, no-new-privileges, uid 1000, memory (no swap), pids and CPU limits,
//! explicit `nofile`/`nproc` ulimits, the runtime's default seccomp profile. The container is
//! removed on kill, on drop, on lifetime expiry, and swept when its host process died.

mod engine;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bollard::models::{ContainerCreateBody, HostConfig, ResourcesUlimits};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, ListContainersOptionsBuilder, RemoveContainerOptionsBuilder,
};
use bollard::Docker;
use tokio::sync::Notify;
use tokio::time::Instant;
use waxell::sandbox::{
    CodeContext, EntryInfo, Execution, RunOptions, SandboxBackend, SandboxError, SandboxOptions,
    SandboxSession,
};

use crate::config::Limits;
use crate::kernel::{ExecLimits, KernelProcess, OomCounter};
use crate::launcher::HOME_DIR;
use crate::session::{self, watch_lifetime, Contexts, Expiring, Lifetime, SessionBackend};
use crate::naming;
use engine::{api_error, run_helper, Control, Endpoint};

/// The kernel, the same file the local backend runs.
const KERNEL_SOURCE: &str = include_str!("../kernel.py");
/// The in-container file helper.
const FILEOP_SOURCE: &str = include_str!("fileop.py");
/// Runs the kernel source passed as argv[1] under the file name its traceback filter expects.
/// It first leads its own process group, which pid 1 kills as a whole (see `init.py`).
const KERNEL_BOOT: &str = "import os,sys\ntry: os.setsid()\nexcept OSError: pass\nf='/opt/waxell/kernel.py';exec(compile(sys.argv.pop(1),f,'exec'),{'__name__':'__main__','__file__':f})";
/// pid 1: reaps orphans, and signals kernels for the host (commands on its attached stdin).
const INIT_SOURCE: &str = include_str!("init.py");
/// Label marking our containers; its value is the sandbox id (`<host pid>-...`).
const LABEL: &str = "io.waxell.sandbox";
/// Default image (built by `waxell-sandbox/container/Dockerfile` or scripts/setup-container.sh).
pub const DEFAULT_IMAGE: &str = "waxell-sandbox:latest";
/// The sandbox user inside the container.
const USER: &str = "1000:1000";

/// Configuration of a [`ContainerBackend`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ContainerConfig {
    /// Image with `python3` (plus whatever packages the code needs) and a user 1000.
    pub image: String,
    /// OCI runtime registered with the engine, e.g. `runsc` for gVisor; `None` = the engine's default.
    pub runtime: Option<String>,
    /// Engine socket (`unix:///path` or a path); `None` = `DOCKER_HOST`, then the usual sockets.
    pub docker_host: Option<String>,
    /// Memory, processes, CPUs, tmpfs sizes, open files and output caps (`cpu_seconds` and
    /// `address_space_bytes` do not apply: containers have no per-process rlimit set-up).
    pub limits: Limits,
    /// Ready containers kept warm (0 = none).
    pub pool_size: usize,
    /// Modules imported before a kernel reports ready.
    pub preload: Vec<String>,
    /// Default time limit of one `run_code` (then interrupt, then kill after `interrupt_grace`).
    pub run_timeout: Duration,
    /// How long a timed-out run may take to honour the interrupt before its kernel is killed.
    pub interrupt_grace: Duration,
    /// Default sandbox lifetime; the container is removed when it expires.
    pub lifetime: Duration,
    /// How long a kernel may take to report ready.
    pub ready_timeout: Duration,
}

impl Default for ContainerConfig {
    fn default() -> Self {
        Self {
            image: DEFAULT_IMAGE.to_owned(),
            runtime: None,
            docker_host: None,
            limits: Limits::default(),
            pool_size: 0,
            preload: Vec::new(),
            run_timeout: Duration::from_secs(60),
            interrupt_grace: Duration::from_secs(2),
            lifetime: Duration::from_secs(300),
            ready_timeout: Duration::from_secs(60),
        }
    }
}

impl ContainerConfig {
    /// The defaults (image `waxell-sandbox:latest`, the engine's default runtime).
    pub fn new() -> Self {
        Self::default()
    }
    /// Use this image.
    pub fn with_image(mut self, image: impl Into<String>) -> Self {
        self.image = image.into();
        self
    }
    /// Run under this OCI runtime (`runsc` for gVisor).
    pub fn with_runtime(mut self, runtime: impl Into<String>) -> Self {
        self.runtime = Some(runtime.into());
        self
    }
    /// Use this engine socket (`unix:///path` or a path) instead of `DOCKER_HOST`.
    pub fn with_docker_host(mut self, host: impl Into<String>) -> Self {
        self.docker_host = Some(host.into());
        self
    }
    /// Resource limits of each container.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }
    /// Keep this many ready containers warm.
    pub fn with_pool_size(mut self, size: usize) -> Self {
        self.pool_size = size;
        self
    }
    /// Modules each kernel imports before it reports ready.
    pub fn with_preload<I: IntoIterator<Item = S>, S: Into<String>>(mut self, modules: I) -> Self {
        self.preload = modules.into_iter().map(Into::into).collect();
        self
    }
    /// Default time limit of one `run_code`.
    pub fn with_run_timeout(mut self, timeout: Duration) -> Self {
        self.run_timeout = timeout;
        self
    }
    /// Grace period between the interrupt and the kill of a timed-out run.
    pub fn with_interrupt_grace(mut self, grace: Duration) -> Self {
        self.interrupt_grace = grace;
        self
    }
    /// Default sandbox lifetime.
    pub fn with_lifetime(mut self, lifetime: Duration) -> Self {
        self.lifetime = lifetime;
        self
    }
}

/// Creates sandboxes as containers. Cheap to clone; the warm pool is shared.
#[derive(Clone)]
pub struct ContainerBackend {
    inner: Arc<BackendInner>,
}

struct BackendInner {
    docker: Docker,
    config: ContainerConfig,
    /// The runtime that isolates the code, for spans (`runc`, `runsc`, ...).
    runtime_name: String,
    podman: bool,
    pool: Mutex<VecDeque<Prepared>>,
    refill: Arc<Notify>,
    refill_started: AtomicBool,
    refill_error: Mutex<Option<String>>,
}

impl Drop for BackendInner {
    fn drop(&mut self) {
        self.refill.notify_one();
    }
}

impl std::fmt::Debug for ContainerBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContainerBackend")
            .field("image", &self.inner.config.image)
            .field("runtime", &self.inner.runtime_name)
            .finish_non_exhaustive()
    }
}

/// A started container with a ready default kernel. Drop order: kernel, then the container.
struct Prepared {
    kernel: KernelProcess,
    container: ContainerGuard,
}

/// Removes its container (force: kills everything in it) when dropped.
struct ContainerGuard {
    docker: Docker,
    id: String,
    name: String,
    control: Control,
}

impl ContainerGuard {
    async fn remove(&self) {
        remove_container(&self.docker, &self.id).await;
    }
}

/// Removals started by drops and not finished yet (see [`removals_settled`]).
static PENDING_REMOVALS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Wait (at most `limit`) until the containers of dropped sandboxes and pools are removed. A
/// process about to exit calls it: removal tasks do not run once the runtime shuts down.
pub async fn removals_settled(limit: Duration) {
    let deadline = Instant::now() + limit;
    while PENDING_REMOVALS.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

impl Drop for ContainerGuard {
    fn drop(&mut self) {
        let (docker, id) = (self.docker.clone(), self.id.clone());
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                PENDING_REMOVALS.fetch_add(1, Ordering::SeqCst);
                handle.spawn(async move {
                    remove_container(&docker, &id).await;
                    PENDING_REMOVALS.fetch_sub(1, Ordering::SeqCst);
                });
            }
            Err(_) => {
                // Outside a runtime (e.g. dropped at exit): remove synchronously on a helper thread.
                let _ = std::thread::spawn(move || {
                    if let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() {
                        rt.block_on(remove_container(&docker, &id));
                    }
                })
                .join();
            }
        }
    }
}

async fn remove_container(docker: &Docker, id: &str) {
    let options = RemoveContainerOptionsBuilder::new().force(true).v(true).build();
    match docker.remove_container(id, Some(options)).await {
        Ok(()) => {}
        // 404: gone already; 409: the engine is already removing it (AutoRemove after pid 1 ended).
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404 | 409, ..
        }) => {}
        Err(e) => tracing::warn!(container = id, "could not remove sandbox container: {e}"),
    }
}

impl ContainerBackend {
    /// Connect to the engine, check the image (and the runtime, if one is set) exist, sweep
    /// containers left by dead host processes, and start the warm pool if configured. Errors name
    /// the missing piece: the socket, permission on it, the image (with how to build it), the runtime.
    pub async fn new(config: ContainerConfig) -> Result<Self, SandboxError> {
        config.limits.validate().map_err(SandboxError::InvalidArgument)?;
        let endpoint = Endpoint::resolve(config.docker_host.as_deref())?;
        let docker = endpoint.connect().await?;
        let podman = engine::is_podman(&docker).await;
        match docker.inspect_image(&config.image).await {
            Ok(_) => {}
            Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => {
                return Err(SandboxError::Unavailable(format!(
                    "container image {:?} not found in the engine at {}: build it with `docker build -t {} \
                     waxell-sandbox/container` (or `podman build`), or run scripts/setup-container.sh, which \
                     builds it from Debian packages without a registry",
                    config.image,
                    endpoint.socket.display(),
                    config.image
                )))
            }
            Err(e) => return Err(api_error("inspecting the sandbox image", e)),
        }
        let runtime_name = resolve_runtime(&docker, config.runtime.as_deref(), podman).await?;
        sweep_stale(&docker).await;
        let backend = Self {
            inner: Arc::new(BackendInner {
                docker,
                config,
                runtime_name,
                podman,
                pool: Mutex::new(VecDeque::new()),
                refill: Arc::new(Notify::new()),
                refill_started: AtomicBool::new(false),
                refill_error: Mutex::new(None),
            }),
        };
        backend.start_refill();
        Ok(backend)
    }

    /// The OCI runtime isolating the code (`runc`, `crun`, `runsc`, ...).
    pub fn runtime(&self) -> &str {
        &self.inner.runtime_name
    }

    /// The configuration this backend was made with.
    pub fn config(&self) -> &ContainerConfig {
        &self.inner.config
    }

    /// Whether the container of sandbox `sandbox_id` still exists in the engine (in any state).
    pub async fn container_exists(&self, sandbox_id: &str) -> Result<bool, SandboxError> {
        let name = format!("waxell-{sandbox_id}");
        match self.inner.docker.inspect_container(&name, None).await {
            Ok(_) => Ok(true),
            Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => Ok(false),
            Err(e) => Err(api_error("inspecting a sandbox container", e)),
        }
    }

    /// Ready containers waiting in the pool.
    pub fn pool_len(&self) -> usize {
        self.inner.pool.lock().map(|p| p.len()).unwrap_or(0)
    }

    /// Fill the warm pool to `pool_size` and wait until it is full.
    pub async fn warm_up(&self) -> Result<(), SandboxError> {
        let target = self.inner.config.pool_size;
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
        if self.inner.config.pool_size == 0 || self.inner.refill_started.swap(true, Ordering::SeqCst) {
            return;
        }
        let weak = Arc::downgrade(&self.inner);
        let notify = self.inner.refill.clone();
        tokio::spawn(async move {
            loop {
                let notified = notify.notified();
                let Some(inner) = weak.upgrade() else { return };
                let target = inner.config.pool_size;
                let len = inner.pool.lock().map(|p| p.len()).unwrap_or(target);
                if len < target {
                    match prepare(&inner).await {
                        Ok(prepared) => {
                            if let Ok(mut pool) = inner.pool.lock() {
                                pool.push_back(prepared);
                            }
                        }
                        Err(e) => {
                            tracing::warn!("container warm pool refill failed: {e}");
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
    pub async fn create_sandbox(&self, options: &SandboxOptions) -> Result<ContainerSandbox, SandboxError> {
        self.start_refill();
        let pooled = loop {
            let Some(mut prepared) = self.inner.pool.lock().ok().and_then(|mut p| p.pop_front()) else {
                break None;
            };
            self.inner.refill.notify_one();
            if !prepared.kernel.has_exited() {
                break Some(prepared);
            }
        };
        let prepared = match pooled {
            Some(prepared) => prepared,
            None => prepare(&self.inner).await?,
        };
        ContainerSandbox::start(self.inner.clone(), prepared, options).await
    }
}

/// Resolve which runtime will isolate the code, or say what is missing. Docker honours the
/// per-container `HostConfig.Runtime` for any runtime it lists in `/info`; Podman's Docker-compatible
/// service (4.x) lists its runtimes but ignores that field, so with Podman the requested runtime must
/// be the service's default (start it with `podman --runtime /usr/bin/runsc system service ...`).
async fn resolve_runtime(
    docker: &Docker,
    requested: Option<&str>,
    podman: bool,
) -> Result<String, SandboxError> {
    let info = docker
        .info()
        .await
        .map_err(|e| api_error("asking the engine for its runtimes (/info)", e))?;
    // Podman reports the default runtime as a path; the name is its file name.
    let default = info
        .default_runtime
        .as_deref()
        .map(|d| d.rsplit('/').next().unwrap_or(d).to_owned())
        .unwrap_or_else(|| "runc".to_owned());
    let Some(runtime) = requested else {
        return Ok(default);
    };
    if podman {
        if default == runtime {
            return Ok(default);
        }
        return Err(SandboxError::Unavailable(format!(
            "container runtime {runtime:?} requested, but this Podman service runs {default:?} and its Docker API \
             ignores per-container runtimes: start a Podman service with `podman --runtime /usr/bin/{runtime} \
             system service --time=0 unix:///PATH.sock` and point docker_host (or DOCKER_HOST) at it \
             (scripts/setup-container.sh starts one for runsc){}",
            if runtime == "runsc" && !std::path::Path::new("/usr/bin/runsc").exists() {
                "; runsc is not installed either: `apt-get install runsc`"
            } else {
                ""
            }
        )));
    }
    let known = info.runtimes.map(|r| r.contains_key(runtime)).unwrap_or(false);
    if !known {
        return Err(SandboxError::Unavailable(format!(
            "container runtime {runtime:?} is not available in the engine: install it (Debian: `apt-get install \
             runsc` for gVisor) and register it under \"runtimes\" in /etc/docker/daemon.json, then restart Docker"
        )));
    }
    Ok(runtime.to_owned())
}

/// Remove containers whose host process died (crash, SIGKILL) before it could remove them.
async fn sweep_stale(docker: &Docker) {
    let filters = HashMap::from([("label".to_owned(), vec![LABEL.to_owned()])]);
    let options = ListContainersOptionsBuilder::new()
        .all(true)
        .filters(&filters)
        .build();
    let Ok(containers) = docker.list_containers(Some(options)).await else {
        return;
    };
    for container in containers {
        let owner = container
            .labels
            .as_ref()
            .and_then(|l| l.get(LABEL))
            .cloned()
            .unwrap_or_default();
        if naming::owner_is_dead(&owner) {
            if let Some(id) = container.id {
                remove_container(docker, &id).await;
            }
        }
    }
}

fn container_spec(config: &ContainerConfig, id: &str, podman: bool, runtime: &str) -> ContainerCreateBody {
    let limits = &config.limits;
    // The scratch must belong to the container user, and the engines disagree on how to say so.
    // Podman copies the image directory's ownership onto a tmpfs unless told `U` (chown to the
    // container user) and rejects tmpfs's own `uid=`; Docker Engine mounts it root-owned 0755
    // whatever `mode` says (seen with 20.10) and takes `uid=`/`gid=`.
    let owner = if podman {
        ",U".to_owned()
    } else {
        let (uid, gid) = USER.split_once(':').unwrap_or((USER, USER));
        format!(",uid={uid},gid={gid}")
    };
    let tmpfs = HashMap::from([
        (
            "/tmp".to_owned(),
            format!("rw,nosuid,nodev,size={},mode=1777", limits.tmp_bytes),
        ),
        (
            HOME_DIR.to_owned(),
            format!("rw,nosuid,nodev,size={},mode=1777{owner}", limits.scratch_bytes),
        ),
    ]);
    let ulimit = |name: &str, value: u64| ResourcesUlimits {
        name: Some(name.to_owned()),
        soft: Some(value as i64),
        hard: Some(value as i64),
    };
    let memory = limits.memory_bytes as i64;
    // Under gVisor the host's pids cgroup also counts the sentry's own threads (a few dozen), and
    // hitting it kills the whole sandbox; gVisor enforces RLIMIT_NPROC per sandbox itself, so the
    // process cap goes there and the cgroup keeps headroom. Under runc, RLIMIT_NPROC counts per host
    // uid across containers (all run as 1000), so there the cgroup is the cap.
    let gvisor = runtime == "runsc";
    let (pids_limit, nproc) = if gvisor {
        (limits.max_processes.max(64) * 4 + 128, limits.max_processes)
    } else {
        (limits.max_processes, limits.max_processes.max(64) * 8)
    };
    ContainerCreateBody {
        image: Some(config.image.clone()),
        user: Some(USER.to_owned()),
        cmd: Some(vec![
            "python3".into(),
            "-I".into(),
            "-c".into(),
            INIT_SOURCE.into(),
        ]),
        entrypoint: Some(vec![]),
        // pid 1 reads signal requests from its stdin (see `Control`). Its stdin closes when our
        // attach stream does (`stdin_once`), which pid 1 takes as the host process being gone.
        open_stdin: Some(true),
        attach_stdin: Some(true),
        stdin_once: Some(true),
        working_dir: Some(HOME_DIR.to_owned()),
        hostname: Some("sandbox".to_owned()),
        env: Some(vec![
            "PATH=/usr/local/bin:/usr/bin:/bin".into(),
            format!("HOME={HOME_DIR}"),
            "USER=user".into(),
            "TMPDIR=/tmp".into(),
            "LANG=C.UTF-8".into(),
            "MPLBACKEND=Agg".into(),
            "MPLCONFIGDIR=/tmp/matplotlib".into(),
            "OPENBLAS_NUM_THREADS=1".into(),
            "OMP_NUM_THREADS=1".into(),
            "PYTHONUNBUFFERED=1".into(),
            "PYTHONDONTWRITEBYTECODE=1".into(),
        ]),
        network_disabled: Some(true),
        labels: Some(HashMap::from([(LABEL.to_owned(), id.to_owned())])),
        host_config: Some(HostConfig {
            network_mode: Some("none".into()),
            readonly_rootfs: Some(true),
            cap_drop: Some(vec!["ALL".into()]),
            security_opt: Some(vec!["no-new-privileges".into()]),
            memory: Some(memory),
            memory_swap: Some(memory),
            pids_limit: Some(pids_limit as i64),
            nano_cpus: Some((limits.cpus * 1e9) as i64),
            ulimits: Some(vec![
                ulimit("nofile", limits.open_files.max(64)),
                ulimit("nproc", nproc),
                ulimit("core", 0),
                ulimit("fsize", limits.max_file_bytes),
            ]),
            tmpfs: Some(tmpfs),
            shm_size: Some(16 << 20),
            ipc_mode: Some("private".into()),
            // Podman ignores it (see `resolve_runtime`); Docker needs it.
            runtime: if podman { None } else { config.runtime.clone() },
            init: Some(false),
            // A container whose host process died without removing it ends itself (see init.py)
            // and is then removed by the engine.
            auto_remove: Some(true),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Create and start a container and its default kernel (the cold path).
async fn prepare(inner: &BackendInner) -> Result<Prepared, SandboxError> {
    let began = Instant::now();
    let id = naming::new_sandbox_id();
    let name = format!("waxell-{id}");
    let options = CreateContainerOptionsBuilder::new().name(&name).build();
    let created = inner
        .docker
        .create_container(
            Some(options),
            container_spec(&inner.config, &id, inner.podman, &inner.runtime_name),
        )
        .await
        .map_err(|e| create_error(&inner.config, e))?;
    let created_at = began.elapsed();
    let control = Control::attach(&inner.docker, &created.id).await;
    let container = ContainerGuard {
        docker: inner.docker.clone(),
        id: created.id,
        name: id,
        control,
    };
    inner
        .docker
        .start_container(
            &container.id,
            None::<bollard::query_parameters::StartContainerOptions>,
        )
        .await
        .map_err(|e| create_error(&inner.config, e))?;
    let started_at = began.elapsed();
    let kernel = start_kernel(inner, &container, None, &BTreeMap::new()).await?;
    // Where a cold create goes (RUST_LOG=waxell_sandbox=debug), for docs/performance.md.
    tracing::debug!(
        create_ms = created_at.as_secs_f64() * 1e3,
        attach_start_ms = (started_at - created_at).as_secs_f64() * 1e3,
        kernel_ready_ms = (began.elapsed() - started_at).as_secs_f64() * 1e3,
        "container sandbox prepared"
    );
    Ok(Prepared { kernel, container })
}

fn create_error(config: &ContainerConfig, e: bollard::errors::Error) -> SandboxError {
    let text = e.to_string();
    let lower = text.to_ascii_lowercase();
    if let Some(runtime) = &config.runtime {
        if lower.contains("runtime")
            && (lower.contains("not found") || lower.contains("unknown") || lower.contains("no such"))
        {
            return SandboxError::Unavailable(format!(
                "container runtime {runtime:?} is not available in the engine ({text}): install it (Debian: \
                 `apt-get install runsc`) and register it with the engine (see scripts/setup-container.sh)"
            ));
        }
    }
    if lower.contains("no such image") || lower.contains("image not known") {
        return SandboxError::Unavailable(format!(
            "container image {:?} not found: build it with `docker build -t {} waxell-sandbox/container`",
            config.image, config.image
        ));
    }
    SandboxError::Unavailable(format!("cannot start the sandbox container: {text}"))
}

/// Start one kernel in the container and wait for its `ready`.
async fn start_kernel(
    inner: &BackendInner,
    container: &ContainerGuard,
    cwd: Option<&str>,
    env: &BTreeMap<String, String>,
) -> Result<KernelProcess, SandboxError> {
    let config = &inner.config;
    let cmd = vec![
        "python3".to_owned(),
        "-I".to_owned(),
        "-c".to_owned(),
        KERNEL_BOOT.to_owned(),
        KERNEL_SOURCE.to_owned(),
    ];
    let exec_env = vec![
        format!("SBX_OUTPUT_LIMIT={}", config.limits.output_chars),
        format!("SBX_RESULT_LIMIT={}", config.limits.output_hard_bytes / 2),
        format!("SBX_PRELOAD={}", config.preload.join(",")),
    ];
    let mut kernel =
        engine::start_kernel_exec(
            &inner.docker,
            &container.id,
            container.control.clone(),
            USER,
            cmd,
            exec_env,
            HOME_DIR,
        )
        .await?;
    let ready = kernel.wait_ready(config.ready_timeout).await?;
    if ready.uid == 0 || ready.gid == 0 {
        return Err(SandboxError::Other(format!(
            "sandbox identity check failed: the kernel runs as uid {} gid {}",
            ready.uid, ready.gid
        )));
    }
    if !env.is_empty() || cwd.is_some() {
        kernel.configure(env, cwd).await?;
    }
    Ok(kernel)
}

/// Containers report OOM kills through the kernel's exit (see `ContainerExec::exit_info`).
struct NoCgroup;

impl OomCounter for NoCgroup {
    fn oom_kills(&self) -> u64 {
        0
    }
}

#[async_trait]
impl SandboxBackend for ContainerBackend {
    fn name(&self) -> &'static str {
        "docker"
    }

    async fn create(&self, options: &SandboxOptions) -> Result<Box<dyn SandboxSession>, SandboxError> {
        Ok(Box::new(self.create_sandbox(options).await?))
    }
}

/// One live container sandbox. Dropping it (or [`SandboxSession::kill`]) removes the container.
pub struct ContainerSandbox {
    inner: Arc<SandboxInner>,
}

/// Field order = drop order: kernels, then the container.
struct SandboxInner {
    contexts: Contexts,
    container: ContainerGuard,
    backend: Arc<BackendInner>,
    env: BTreeMap<String, String>,
    lifetime: Lifetime,
}

impl ContainerSandbox {
    async fn start(
        backend: Arc<BackendInner>,
        prepared: Prepared,
        options: &SandboxOptions,
    ) -> Result<Self, SandboxError> {
        let Prepared {
            mut kernel,
            container,
        } = prepared;
        if !options.env_vars.is_empty() {
            kernel.configure(&options.env_vars, None).await?;
        }
        let lifetime = options.timeout.unwrap_or(backend.config.lifetime);
        let inner = Arc::new(SandboxInner {
            contexts: Contexts::new(kernel),
            container,
            backend,
            env: options.env_vars.clone(),
            lifetime: Lifetime::new(lifetime),
        });
        watch_lifetime(Arc::downgrade(&inner));
        Ok(Self { inner })
    }

    /// The engine's id of this sandbox's container.
    pub fn container_id(&self) -> &str {
        &self.inner.container.id
    }

    fn check_alive(&self) -> Result<(), SandboxError> {
        if self.inner.lifetime.has_ended() {
            Err(SandboxError::NotFound(format!(
                "sandbox {} was killed or its lifetime expired",
                self.inner.container.name
            )))
        } else {
            Ok(())
        }
    }

    async fn start_context_kernel(&self, cwd: Option<&str>) -> Result<KernelProcess, SandboxError> {
        let control = &self.inner.container.control;
        // Under gVisor an exec into a sandbox whose sentry died can wait forever (seen with Podman
        // 4.3 + runsc after a fork bomb): never start one in a stopped container, and stop waiting
        // when the container stops meanwhile or the ready timeout passes.
        let result = if control.has_stopped() {
            Err(SandboxError::Other("the sandbox's container has stopped".into()))
        } else {
            let start = start_kernel(&self.inner.backend, &self.inner.container, cwd, &self.inner.env);
            tokio::select! {
                started = tokio::time::timeout(self.inner.backend.config.ready_timeout, start) => {
                    started.unwrap_or_else(|_| Err(SandboxError::Timeout(format!(
                        "no interpreter started within {:?}",
                        self.inner.backend.config.ready_timeout
                    ))))
                }
                () = control.gone() => Err(SandboxError::Other("the sandbox's container stopped".into())),
            }
        };
        self.check_alive()?;
        let dead_container = match &result {
            Err(_) if control.has_stopped() => true,
            Err(e) => {
                let text = e.to_string();
                text.contains("state improper")
                    || text.contains("in state stopped")
                    || !self.container_running().await
            }
            Ok(_) => false,
        };
        if dead_container {
            // The whole container died (under gVisor a memory or fork bomb takes the sandbox down).
            self.inner.shutdown().await;
            return Err(SandboxError::NotFound(format!(
                "sandbox {}: its container exited (out of memory, process cap or killed from outside); create \
                 a new sandbox",
                self.inner.container.name
            )));
        }
        result
    }

    async fn container_running(&self) -> bool {
        let docker = &self.inner.backend.docker;
        match docker.inspect_container(&self.inner.container.id, None).await {
            Ok(inspect) => inspect.state.and_then(|s| s.running).unwrap_or(false),
            Err(_) => false,
        }
    }

    /// Run the file helper; its exit status 2 carries a refusal for `path`.
    async fn fileop(&self, args: &[&str], stdin: Option<&[u8]>, path: &str) -> Result<Vec<u8>, SandboxError> {
        self.check_alive()?;
        let mut cmd = vec![
            "python3".to_owned(),
            "-I".to_owned(),
            "-c".to_owned(),
            FILEOP_SOURCE.to_owned(),
        ];
        cmd.extend(args.iter().map(|a| (*a).to_owned()));
        let output = run_helper(
            &self.inner.backend.docker,
            &self.inner.container.id,
            USER,
            cmd,
            stdin,
        )
        .await?;
        match output.exit_code {
            0 => Ok(output.stdout),
            2 => {
                let reason = serde_json::from_slice::<serde_json::Value>(&output.stderr)
                    .ok()
                    .and_then(|v| v.get("reason").and_then(|r| r.as_str()).map(str::to_owned))
                    .unwrap_or_else(|| String::from_utf8_lossy(&output.stderr).into_owned());
                Err(SandboxError::InvalidPath {
                    path: path.to_owned(),
                    reason,
                })
            }
            code => Err(SandboxError::Other(format!(
                "file operation on {path} failed (exit {code}): {}",
                String::from_utf8_lossy(&output.stderr).trim()
            ))),
        }
    }
}

/// The absolute in-container path for a user path: relative paths are inside `/home/user`;
/// absolute ones must be below it; `..` is refused (as the local backend does).
fn sandbox_path(path: &str) -> Result<String, SandboxError> {
    let invalid = |reason: &str| SandboxError::InvalidPath {
        path: path.to_owned(),
        reason: reason.to_owned(),
    };
    let rel = if let Some(rest) = path.strip_prefix(HOME_DIR) {
        if !(rest.is_empty() || rest.starts_with('/')) {
            return Err(invalid("only paths inside /home/user are accessible"));
        }
        rest
    } else if path.starts_with('/') {
        return Err(invalid("only paths inside /home/user are accessible"));
    } else {
        path
    };
    let mut clean = String::from(HOME_DIR);
    for part in rel.split('/') {
        match part {
            "" | "." => {}
            ".." => return Err(invalid("`..` is not allowed")),
            part if part.contains('\0') => return Err(invalid("contains a NUL byte")),
            part => {
                clean.push('/');
                clean.push_str(part);
            }
        }
    }
    Ok(clean)
}

fn parse<T: serde::de::DeserializeOwned>(bytes: &[u8], what: &str) -> Result<T, SandboxError> {
    serde_json::from_slice(bytes).map_err(|e| SandboxError::Protocol {
        message: format!("{what}: {e}"),
        received: String::from_utf8_lossy(bytes).chars().take(200).collect(),
    })
}

impl SandboxInner {
    async fn shutdown(&self) {
        self.lifetime.end();
        // Removing the container kills every process in it; runs holding a context see EOF.
        self.container.remove().await;
        for context in self.contexts.take_all() {
            // Not `lock().await`: the caller may be a run that holds this very lock (a run that
            // finds its container dead shuts the sandbox down), and waiting would deadlock. A held
            // lock's kernel died with the container; the run holding it drops it.
            if let Ok(mut slot) = context.kernel.try_lock() {
                if let Some(mut kernel) = slot.take() {
                    kernel.kill();
                }
            }
        }
    }
}

#[async_trait]
impl Expiring for SandboxInner {
    fn lifetime(&self) -> &Lifetime {
        &self.lifetime
    }

    fn sandbox_id(&self) -> &str {
        &self.container.name
    }

    async fn shutdown(&self) {
        SandboxInner::shutdown(self).await;
    }
}

#[async_trait]
impl SessionBackend for ContainerSandbox {
    fn kind(&self) -> &'static str {
        "container sandbox"
    }

    fn contexts(&self) -> &Contexts {
        &self.inner.contexts
    }

    fn check_alive(&self) -> Result<(), SandboxError> {
        ContainerSandbox::check_alive(self)
    }

    async fn start_kernel(&self, cwd: Option<&str>) -> Result<KernelProcess, SandboxError> {
        self.start_context_kernel(cwd).await
    }

    fn exec_limits(&self, options: &RunOptions) -> ExecLimits {
        let config = &self.inner.backend.config;
        ExecLimits::for_run(options, config.run_timeout, config.interrupt_grace, &config.limits)
    }

    fn oom_counter(&self) -> &dyn OomCounter {
        &NoCgroup
    }
}

#[async_trait]
impl SandboxSession for ContainerSandbox {
    fn sandbox_id(&self) -> &str {
        &self.inner.container.name
    }

    fn runtime(&self) -> Option<&str> {
        Some(&self.inner.backend.runtime_name)
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
        let max = self.inner.backend.config.limits.max_file_bytes;
        if data.len() as u64 > max {
            return Err(SandboxError::InvalidPath {
                path: path.to_owned(),
                reason: format!("{} bytes is over the {max}-byte file limit", data.len()),
            });
        }
        let target = sandbox_path(path)?;
        let mut stdin = format!("{}\n", data.len()).into_bytes();
        stdin.extend_from_slice(data);
        let out = self.fileop(&["write", &target], Some(&stdin), path).await?;
        parse(&out, "file helper")
    }

    async fn read_file(&self, path: &str) -> Result<Vec<u8>, SandboxError> {
        let max = self.inner.backend.config.limits.max_file_bytes.to_string();
        let target = sandbox_path(path)?;
        self.fileop(&["read", &target, &max], None, path).await
    }

    async fn list_files(&self, path: &str) -> Result<Vec<EntryInfo>, SandboxError> {
        let target = sandbox_path(path)?;
        let out = self.fileop(&["list", &target], None, path).await?;
        parse(&out, "file helper")
    }

    async fn make_dir(&self, path: &str) -> Result<bool, SandboxError> {
        let target = sandbox_path(path)?;
        let out = self.fileop(&["mkdir", &target], None, path).await?;
        parse(&out, "file helper")
    }

    async fn rename(&self, from: &str, to: &str) -> Result<EntryInfo, SandboxError> {
        let (source, target) = (sandbox_path(from)?, sandbox_path(to)?);
        let out = self.fileop(&["rename", &source, &target], None, from).await?;
        parse(&out, "file helper")
    }

    async fn remove(&self, path: &str) -> Result<(), SandboxError> {
        let target = sandbox_path(path)?;
        self.fileop(&["remove", &target], None, path).await?;
        Ok(())
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

impl Drop for ContainerSandbox {
    fn drop(&mut self) {
        // The watchdog holds a weak reference: this releases the last strong one, and the guard's
        // Drop removes the container.
        self.inner.lifetime.end();
    }
}


#[cfg(test)]
mod tests {
    use super::sandbox_path;

    #[test]
    fn paths_stay_in_home() {
        assert_eq!(sandbox_path("a/b.txt").unwrap(), "/home/user/a/b.txt");
        assert_eq!(sandbox_path("/home/user/x").unwrap(), "/home/user/x");
        assert_eq!(sandbox_path("/home/user").unwrap(), "/home/user");
        assert!(sandbox_path("/etc/passwd").is_err());
        assert!(sandbox_path("/home/username").is_err());
        assert!(sandbox_path("../x").is_err());
    }
}
