//! `ContainerBackend`: each sandbox is a container of a Docker-compatible engine (Docker Engine,
//! Docker Desktop, Podman's Docker API service), optionally under gVisor's `runsc` runtime, driven
//! through the Engine API over its unix socket.
//!
//! The container's pid 1 is a tiny reaper (and, under gVisor, the OOM killer); every context is the *same* kernel (`kernel.py`, sent with
//! the exec so image and host never disagree) started as an attached exec whose stdin/stdout carry the
//! same JSON-lines protocol as the local backend's pipes (`kernel/`). Files move through
//! execs of a helper run as the sandbox user, so the host never resolves a path the code controls
//! (`files.rs`).
//!
//! Isolation per container (`spec.rs`): no network, read-only root, size-capped tmpfs `/home/user`
//! and `/tmp`, all capabilities dropped, no-new-privileges, uid 1000, memory (no swap), pids and CPU
//! limits, explicit ulimits, our own seccomp profile (`seccomp.rs`; under gVisor each exec
//! installs it itself). The container
//! is removed on kill, on drop, on lifetime expiry, and swept when its host process died
//! (`guard.rs`).

mod config;
mod engine;
mod files;
mod guard;
mod host_mounts;
mod memory;
mod probe;
mod private_dir;
mod report;
mod seccomp;
mod process;
mod spec;
mod watch;

use async_trait::async_trait;
use bollard::query_parameters::CreateContainerOptionsBuilder;
use bollard::Docker;
use tokio::time::Instant;
use waxell::sandbox::{EntryInfo, ProcessSpec, SandboxError, SandboxProcess};

use crate::backend::{Backend, Prepared, Usage};
use crate::command::PtyPermit;
use crate::kernel::{KernelProcess, Languages, KERNEL_BOOT, KERNEL_SOURCE};
use crate::naming;
use crate::pool::Pooled;
use crate::session::Session;
pub use config::{ContainerConfig, ContainerOptions, DEFAULT_IMAGE};
use engine::{api_error, Control, Endpoint};
use guard::{remove_sandbox, ContainerGuard};
pub use crate::{ContainerBackend, ContainerSandbox};
pub use guard::removals_settled;
pub use report::ContainerReport;
use files::Files;
use spec::{container_spec, create_error, resolve_runtime, sandbox_volumes, sweep_stale, USER};


/// What every container sandbox of one backend shares: the engine client and the configuration.
pub struct Container {
    docker: Docker,
    config: ContainerConfig,
    /// The runtime that isolates the code, for spans (`runc`, `runsc`, ...).
    runtime_name: String,
    podman: bool,
    /// Our syscall policy, as this engine takes it.
    seccomp: seccomp::SeccompOption,
    /// Where each sandbox's host-made mounts are made (under gVisor or with Podman; see
    /// `host_mounts`).
    host_dir: Option<private_dir::PrivateDir>,
    /// With Podman and runc: each sandbox gets a capped devpts instance of its own (this process
    /// can mount it).
    own_pts: bool,
    /// The languages the image has runtimes for (probed once per image, `probe.rs`).
    languages: Languages,
    /// The kernel as `KERNEL_BOOT` takes it, compiled by the image's Python (`probe.rs`).
    kernel: std::sync::Arc<str>,
    /// When leftovers of dead host processes were last swept (see `create_started`).
    last_sweep: std::sync::Mutex<Instant>,
    /// The engine that checkpoints its sandboxes' memory (`memory.rs`), or why it cannot.
    memory: Result<memory::MemoryEngine, String>,
}

/// How often a running backend sweeps what dead host processes left: their containers end
/// themselves, but their scratch volumes stay until a sweep.
const SWEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

impl Pooled<Container> {
    /// Connect to the engine, check the image (and the runtime, if one is set) exist, sweep
    /// containers left by dead host processes, and start the warm pool if configured. Errors name
    /// the missing piece: the socket, permission on it, the image (with how to build it), the runtime.
    pub async fn new(config: ContainerConfig) -> Result<Self, SandboxError> {
        config.limits.validate().map_err(SandboxError::InvalidArgument)?;
        let endpoint = Endpoint::resolve(config.docker_host.as_deref())?;
        let docker = endpoint.connect().await?;
        let podman = engine::is_podman(&docker).await?;
        let image_id = match docker.inspect_image(&config.image).await {
            Ok(image) => image.id.unwrap_or_else(|| config.image.clone()),
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
        };
        let runtime_name = resolve_runtime(&docker, config.runtime.as_deref(), podman).await?;
        sweep_stale(&docker).await;
        let gvisor = spec::is_gvisor(&runtime_name);
        let seccomp = seccomp::SeccompOption::for_engine(podman, gvisor)?;
        let host_dir = (gvisor || podman)
            .then(|| private_dir::PrivateDir::new("sandboxes"))
            .transpose()
            .map_err(|e| SandboxError::Unavailable(format!("making a directory for the sandboxes' host files: {e}")))?;
        let own_pts = podman && !gvisor && host_dir.as_ref().is_some_and(host_mounts::can_mount_devpts);
        let can_mount = host_dir.is_some() && rustix::process::geteuid().is_root();
        let memory = memory::detect(&docker, &endpoint.socket, podman, gvisor, can_mount).await;
        let mut container = Container {
            docker,
            config,
            runtime_name,
            podman,
            seccomp,
            host_dir,
            own_pts,
            languages: Languages::python_only(),
            kernel: KERNEL_SOURCE.into(),
            last_sweep: std::sync::Mutex::new(Instant::now()),
            memory,
        };
        let image = probe::image(&container, &image_id).await?;
        (container.languages, container.kernel) = (image.languages, image.kernel);
        Ok(Pooled::with_backend(container))
    }

    /// The languages this backend's sandboxes run (what the image has runtimes for), why not the
    /// others, and what Python lacks if the image has no IPython or chart extractor.
    pub fn languages(&self) -> &Languages {
        &self.backend().languages
    }

    /// Which isolation layers and limits this backend has in force, and which only in part (per
    /// engine and runtime): what `waxell-sandbox doctor --backend docker` prints.
    pub fn report(&self) -> ContainerReport {
        let backend = self.backend();
        ContainerReport::build(
            backend.podman,
            &backend.runtime_name,
            backend.own_pts,
            &backend.config.limits,
            &backend.languages,
            backend.memory.as_ref().map(drop).map_err(String::as_str),
        )
    }

    /// The OCI runtime isolating the code (`runc`, `crun`, `runsc`, ...).
    pub fn runtime(&self) -> &str {
        &self.backend().runtime_name
    }

    /// The configuration this backend was made with.
    pub fn config(&self) -> &ContainerConfig {
        &self.backend().config
    }

    /// Whether anything of sandbox `sandbox_id` is still in the engine: its container (in any state)
    /// or one of its scratch volumes.
    pub async fn container_exists(&self, sandbox_id: &str) -> Result<bool, SandboxError> {
        let docker = &self.backend().docker;
        let name = format!("waxell-{sandbox_id}");
        match docker.inspect_container(&name, None).await {
            Ok(_) => return Ok(true),
            Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => {}
            Err(e) => return Err(api_error("inspecting a sandbox container", e)),
        }
        let backend = self.backend();
        let host_scratch = backend.memory.is_ok();
        for volume in sandbox_volumes(&backend.config, sandbox_id, backend.gvisor(), backend.podman, host_scratch) {
            match docker.inspect_volume(&volume.name).await {
                Ok(_) => return Ok(true),
                Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => {}
                Err(e) => return Err(api_error("inspecting a sandbox's scratch volume", e)),
            }
        }
        Ok(false)
    }
}

impl Session<Container> {
    /// The engine's id of this sandbox's container.
    pub fn container_id(&self) -> &str {
        &self.shell().id
    }
}

impl Container {
    /// Whether gVisor isolates the code.
    fn gvisor(&self) -> bool {
        spec::is_gvisor(&self.runtime_name)
    }

    /// File operations in `container`.
    fn files<'a>(&'a self, container: &'a ContainerGuard) -> Files<'a> {
        Files {
            docker: &self.docker,
            container,
            max_file_bytes: self.config.limits.max_file_bytes,
        }
    }

    /// Create and start a sandbox container (no kernel yet); how long creating and starting took.
    /// `restore`: from the checkpoint in that directory, with that state (`memory::state`).
    async fn create_started(
        &self,
        restore: Option<(&std::path::Path, &std::collections::BTreeMap<String, String>)>,
    ) -> Result<(ContainerGuard, std::time::Duration, std::time::Duration), SandboxError> {
        let inner = self;
        let began = Instant::now();
        let sweep_due = {
            let mut last = inner.last_sweep.lock().unwrap_or_else(|p| p.into_inner());
            let due = last.elapsed() >= SWEEP_EVERY;
            if due {
                *last = began;
            }
            due
        };
        if sweep_due {
            let docker = inner.docker.clone();
            tokio::spawn(async move { sweep_stale(&docker).await });
        }
        let id = naming::new_sandbox_id();
        let name = format!("waxell-{id}");
        let scratch = match &inner.memory {
            Ok(_) => spec::scratch_filesystems(&inner.config, inner.gvisor()),
            Err(_) => Vec::new(),
        };
        let host = std::sync::Arc::new(host_mounts::HostMounts::make(
            inner.host_dir.as_ref(),
            &id,
            inner.gvisor(),
            inner.own_pts,
            &scratch,
        )?);
        if let Some((dir, state)) = restore {
            // The same boot as before the pause, as the code sees it.
            if let (Some(file), Some(boot_id)) = (&host.boot_id, state.get(memory::BOOT_ID_STATE)) {
                if let Err(e) = std::fs::write(file, format!("{boot_id}\n")) {
                    host.remove();
                    return Err(SandboxError::Unavailable(format!("writing the sandbox's boot id: {e}")));
                }
            }
            for (suffix, _, at) in &host.scratch {
                let saved = dir.join(suffix);
                if saved.is_dir() {
                    if let Err(e) = host_mounts::copy_tree(&saved, at).await {
                        host.remove();
                        return Err(e);
                    }
                }
            }
        }
        let volumes = sandbox_volumes(&inner.config, &id, inner.gvisor(), inner.podman, host.has_scratch());
        let names: Vec<String> = volumes.iter().map(|v| v.name.clone()).collect();
        let made = futures_util::future::join_all(volumes.into_iter().map(|v| inner.docker.create_volume(v.request))).await;
        if let Some(Err(e)) = made.into_iter().find(Result::is_err) {
            remove_sandbox(&inner.docker, None, &names, &host).await;
            return Err(api_error("creating the sandbox's scratch volume", e));
        }
        let options = CreateContainerOptionsBuilder::new().name(&name).build();
        let created = match inner
            .docker
            .create_container(
                Some(options),
                container_spec(
                    &inner.config,
                    &id,
                    inner.podman,
                    &inner.runtime_name,
                    inner.seccomp.as_str(),
                    &host,
                ),
            )
            .await
        {
            Ok(created) => created,
            Err(e) => {
                remove_sandbox(&inner.docker, None, &names, &host).await;
                return Err(create_error(&inner.config, e));
            }
        };
        let created_at = began.elapsed();
        let key = restore.and_then(|(_, state)| state.get(memory::KEY_STATE)).map(String::as_str);
        let control = Control::attach(&inner.docker, &created.id, key).await;
        let container = ContainerGuard {
            docker: inner.docker.clone(),
            id: created.id,
            name: id,
            control,
            volumes: names,
            host,
        };
        match (restore, &inner.memory) {
            (Some((dir, _)), Ok(engine)) => engine.start_from(&container.id, dir).await?,
            (Some(_), Err(why)) => return Err(SandboxError::Unavailable(format!("no restore from a checkpoint: {why}"))),
            (None, _) => inner
                .docker
                .start_container(
                    &container.id,
                    None::<bollard::query_parameters::StartContainerOptions>,
                )
                .await
                .map_err(|e| create_error(&inner.config, e))?,
        }
        let started_at = began.elapsed();
        Ok((container, created_at, started_at))
    }

    async fn container_running(&self, container: &ContainerGuard) -> bool {
        match self.docker.inspect_container(&container.id, None).await {
            Ok(inspect) => inspect.state.and_then(|s| s.running).unwrap_or(false),
            Err(_) => false,
        }
    }
}

#[async_trait]
impl Backend for Container {
    type Options = ContainerOptions;
    type Shell = ContainerGuard;
    const NAME: &'static str = "docker";

    fn config(&self) -> &ContainerConfig {
        &self.config
    }

    fn languages(&self) -> &Languages {
        &self.languages
    }

    /// Create and start a container and its default kernel (the cold path).
    async fn prepare(&self) -> Result<Prepared<ContainerGuard>, SandboxError> {
        let began = Instant::now();
        let (container, created_at, started_at) = self.create_started(None).await?;
        let kernel = self.start_bare_kernel(&container).await?;
        // Where a cold create goes (RUST_LOG=waxell_sandbox=debug), for docs/performance.md.
        tracing::debug!(
            create_ms = created_at.as_secs_f64() * 1e3,
            attach_start_ms = (started_at - created_at).as_secs_f64() * 1e3,
            kernel_ready_ms = (began.elapsed() - started_at).as_secs_f64() * 1e3,
            "container sandbox prepared"
        );
        Ok(Prepared {
            kernel,
            shell: container,
        })
    }

    async fn start_kernel(&self, container: &ContainerGuard) -> Result<KernelProcess, SandboxError> {
        let control = &container.control;
        // Under gVisor an exec into a sandbox whose sentry died can wait forever (seen with Podman
        // 4.3 + runsc after a fork bomb): never start one in a stopped container, and stop waiting
        // when the container stops meanwhile or the ready timeout passes.
        if control.has_stopped() {
            return Err(SandboxError::NotFound("the sandbox's container has stopped".into()));
        }
        let ready_timeout = self.config.ready_timeout;
        // The kernel this one replaces (killed by a timeout or the output cap) is taken down by pid 1,
        // which may still be at it on a loaded host: started before that ends, the new kernel would
        // find the pids cap still held by what the old one left (a fork bomb) and fail to start.
        control.delivered(ready_timeout).await;
        tokio::select! {
            started = tokio::time::timeout(ready_timeout, self.start_bare_kernel(container)) => {
                started.unwrap_or_else(|_| Err(SandboxError::Timeout(format!(
                    "no interpreter started within {ready_timeout:?}"
                ))))
            }
            () = control.gone() => Err(SandboxError::NotFound("the sandbox's container stopped".into())),
        }
    }

    /// The whole container died (under gVisor a memory or fork bomb takes the sandbox down).
    async fn has_died(&self, container: &ContainerGuard, error: &SandboxError) -> bool {
        if container.control.has_stopped() {
            return true;
        }
        let text = error.to_string();
        text.contains("state improper") || text.contains("in state stopped") || !self.container_running(container).await
    }

    async fn start_process(
        &self,
        container: &ContainerGuard,
        spec: &ProcessSpec,
        pty: Option<PtyPermit>,
    ) -> Result<SandboxProcess, SandboxError> {
        if container.control.has_stopped() {
            return Err(SandboxError::NotFound("the sandbox's container has stopped".into()));
        }
        // runsc refuses the terminal exec Podman asks of it (the exec exits 125 with runsc's usage):
        // there a relay in the sandbox makes the terminal. Docker Engine with runsc has terminals.
        // Where the sandbox's memory is checkpointed every process runs under a keeper, so it
        // lives on (keeper.py).
        let terminals = match (self.podman, self.gvisor()) {
            _ if self.memory.is_ok() => process::Terminals::Keeper,
            (true, true) => process::Terminals::Relay,
            (true, false) => process::Terminals::EngineResizedLater,
            (false, _) => process::Terminals::Engine,
        };
        process::start(
            &self.docker,
            &container.id,
            container.control.clone(),
            USER,
            spec,
            pty,
            terminals,
            &self.seccomp,
        )
        .await
    }

    async fn attach_process(
        &self,
        container: &ContainerGuard,
        saved: &crate::backend::SavedProcess,
        pty: Option<PtyPermit>,
    ) -> Result<SandboxProcess, SandboxError> {
        process::attach(
            &self.docker,
            &container.id,
            container.control.clone(),
            USER,
            saved,
            pty,
            &self.seccomp,
        )
        .await
    }

    fn sandbox_id(container: &ContainerGuard) -> &str {
        &container.name
    }

    fn runtime<'a>(&'a self, _container: &'a ContainerGuard) -> &'a str {
        &self.runtime_name
    }

    /// Removing the container kills every process in it; runs holding a context see EOF.
    async fn kill_all(&self, container: &ContainerGuard) {
        container.remove().await;
    }

    /// The engine's one-shot stats: CPU time and memory as `docker stats` counts them (usage
    /// less the inactive page cache); the home tmpfs's use from the file helper.
    async fn usage(&self, container: &ContainerGuard) -> Result<Usage, SandboxError> {
        use futures_util::StreamExt;
        let options = bollard::query_parameters::StatsOptionsBuilder::new()
            .stream(false)
            .one_shot(true)
            .build();
        let stats = self
            .docker
            .stats(&container.id, Some(options))
            .next()
            .await
            .ok_or_else(|| SandboxError::NotFound(format!("container {} has no stats", container.name)))?
            .map_err(|e| api_error(&format!("stats of container {}", container.name), e))?;
        let cpu_ns = stats
            .cpu_stats
            .and_then(|c| c.cpu_usage)
            .and_then(|u| u.total_usage)
            .unwrap_or(0);
        let memory = stats.memory_stats.map_or(0, |m| {
            let inactive = m
                .stats
                .as_ref()
                .and_then(|s| s.get("inactive_file").or_else(|| s.get("total_inactive_file")).copied())
                .unwrap_or(0);
            m.usage.unwrap_or(0).saturating_sub(inactive)
        });
        Ok(Usage {
            cpu_seconds: cpu_ns as f64 / 1e9,
            memory_bytes: memory,
            disk_bytes: self.files(container).disk_used().await?,
        })
    }

    fn keeps_memory(&self) -> bool {
        self.memory.is_ok()
    }

    /// See `memory.rs`. The files are copied after the engine stopped the container, so they are
    /// as its processes left them.
    async fn checkpoint(
        &self,
        container: &ContainerGuard,
        dir: &std::path::Path,
    ) -> Result<std::collections::BTreeMap<String, String>, SandboxError> {
        let engine = self.memory.as_ref().map_err(|why| SandboxError::Unavailable(why.clone()))?;
        let began = Instant::now();
        // An exec the engine was still starting when pid 1 looked (a relay started by the resume
        // just before) comes up later holding host descriptors, and a restore of an image with
        // it fails: so pid 1 ends them again until the engine has seen every exec end.
        let deadline = Instant::now() + memory::SEVER_LIMIT;
        loop {
            if !container.control.sever(memory::SEVER_LIMIT).await {
                container.control.unsever();
                return Err(SandboxError::Unavailable(
                    "the sandbox's pid 1 did not end the execs holding the host's descriptors in time".into(),
                ));
            }
            let settle = std::time::Duration::from_millis(100);
            match memory::execs_ended(&self.docker, &container.id, settle).await {
                Ok(()) => break,
                Err(_) if Instant::now() < deadline => continue,
                Err(running) => {
                    container.control.unsever();
                    return Err(SandboxError::Unavailable(format!(
                        "execs of the sandbox still ran after pid 1 ended them: {}",
                        running.join("; ")
                    )))
                }
            }
        }
        let severed_at = began.elapsed();
        if let Err(e) = engine.checkpoint(&self.docker, &container.id, dir).await {
            container.control.unsever();
            return Err(e);
        }
        let checkpointed = began.elapsed();
        for (suffix, _, at) in &container.host.scratch {
            let to = dir.join(suffix);
            tokio::fs::create_dir(&to)
                .await
                .map_err(|e| SandboxError::Unavailable(format!("making {}: {e}", to.display())))?;
            host_mounts::copy_tree(at, &to).await?;
        }
        // Where a pause goes (RUST_LOG=waxell_sandbox=debug), for docs/sandbox-performance.md.
        tracing::debug!(
            sever_ms = severed_at.as_secs_f64() * 1e3,
            checkpoint_ms = (checkpointed - severed_at).as_secs_f64() * 1e3,
            copy_files_ms = (began.elapsed() - checkpointed).as_secs_f64() * 1e3,
            "container sandbox checkpointed"
        );
        let boot_id = match &container.host.boot_id {
            Some(file) => std::fs::read_to_string(file).ok().map(|id| id.trim().to_owned()),
            None => None,
        };
        Ok(memory::state(container.control.key_hex(), boot_id))
    }

    async fn restore(
        &self,
        checkpoint: &crate::backend::Checkpoint,
        dir: &std::path::Path,
    ) -> Result<crate::backend::Restored<ContainerGuard>, SandboxError> {
        if !checkpoint.state.contains_key(memory::KEY_STATE) {
            return Err(SandboxError::InvalidArgument("the checkpoint has no key for pid 1".into()));
        }
        let began = Instant::now();
        let (container, created_at, started_at) = self.create_started(Some((dir, &checkpoint.state))).await?;
        let mut kernels = Vec::with_capacity(checkpoint.kernels.len());
        for saved in &checkpoint.kernels {
            kernels.push(match saved.kernel {
                Some(identity) => Some(self.relay_to_kernel(&container, identity).await?),
                None => None,
            });
        }
        tracing::debug!(
            files_create_ms = created_at.as_secs_f64() * 1e3,
            restore_ms = (started_at - created_at).as_secs_f64() * 1e3,
            relays_ms = (began.elapsed() - started_at).as_secs_f64() * 1e3,
            "container sandbox restored"
        );
        Ok(crate::backend::Restored {
            kernels,
            shell: container,
        })
    }

    async fn write_file(&self, container: &ContainerGuard, path: &str, data: &[u8]) -> Result<EntryInfo, SandboxError> {
        self.files(container).write(path, data).await
    }

    async fn read_file(&self, container: &ContainerGuard, path: &str) -> Result<Vec<u8>, SandboxError> {
        self.files(container).read(path).await
    }

    async fn list_files(&self, container: &ContainerGuard, path: &str) -> Result<Vec<EntryInfo>, SandboxError> {
        self.files(container).list(path).await
    }

    async fn make_dir(&self, container: &ContainerGuard, path: &str) -> Result<bool, SandboxError> {
        self.files(container).mkdir(path).await
    }

    async fn rename(&self, container: &ContainerGuard, from: &str, to: &str) -> Result<EntryInfo, SandboxError> {
        self.files(container).rename(from, to).await
    }

    async fn remove_path(&self, container: &ContainerGuard, path: &str) -> Result<(), SandboxError> {
        self.files(container).remove(path).await
    }

    async fn set_metadata(
        &self,
        container: &ContainerGuard,
        path: &str,
        metadata: &std::collections::BTreeMap<String, String>,
    ) -> Result<EntryInfo, SandboxError> {
        self.files(container).set_metadata(path, metadata).await
    }

    async fn watch_dir(
        &self,
        container: &ContainerGuard,
        path: &str,
        options: waxell::sandbox::WatchOptions,
    ) -> Result<Box<dyn waxell::sandbox::DirWatch>, SandboxError> {
        watch::watch(&self.docker, container, path, options).await
    }
}

impl Container {
    /// A relay to the kernel `identity` (pid, request fd) of a restored sandbox.
    async fn relay_to_kernel(&self, container: &ContainerGuard, identity: (u32, i32)) -> Result<KernelProcess, SandboxError> {
        let cmd = vec![
            "python3".to_owned(),
            "-I".to_owned(),
            "-c".to_owned(),
            memory::RELAY_SOURCE.to_owned(),
            "attach".to_owned(),
            format!("{}/{}", memory::KERNELS_DIR, identity.0),
        ];
        engine::start_kernel_exec(
            &self.docker,
            &container.id,
            container.control.clone(),
            USER,
            self.seccomp.wrap(cmd),
            Vec::new(),
            Some(identity),
        )
        .await
    }

    /// Start one kernel in the container and wait for its `ready`.
    async fn start_bare_kernel(&self, container: &ContainerGuard) -> Result<KernelProcess, SandboxError> {
    let inner = self;
    let config = &inner.config;
    let cmd = vec![
        "python3".to_owned(),
        "-I".to_owned(),
        "-c".to_owned(),
        KERNEL_BOOT.to_owned(),
        inner.kernel.to_string(),
    ];
    let exec_env = vec![
        format!("SBX_OUTPUT_LIMIT={}", config.limits.output_chars),
        format!("SBX_RESULT_LIMIT={}", config.limits.output_hard_bytes / 2),
        format!("SBX_PRELOAD={}", config.preload.join(",")),
    ];
    // Where memory is checkpointed the kernel holds no host descriptor: a relay talks for it.
    let cmd = match &inner.memory {
        Ok(_) => ["python3", "-I", "-c", memory::RELAY_SOURCE, "start", memory::KERNELS_DIR]
            .into_iter()
            .map(str::to_owned)
            .chain(cmd)
            .collect(),
        Err(_) => cmd,
    };
    let mut kernel =
        engine::start_kernel_exec(
            &inner.docker,
            &container.id,
            container.control.clone(),
            USER,
            inner.seccomp.wrap(cmd),
            exec_env,
            None,
        )
        .await?;
    let ready = kernel.wait_ready(config.ready_timeout).await?;
    if ready.uid == 0 || ready.gid == 0 {
        return Err(SandboxError::IsolationCheck(format!(
            "the kernel runs as uid {} gid {}",
            ready.uid, ready.gid
        )));
    }
    kernel.locate_on_host().await;
    Ok(kernel)
}
}

