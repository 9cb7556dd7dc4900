//! One live sandbox of any backend ([`Session`]): its contexts (each its own kernel), `run_code`'s
//! argument checks and the replacement of a dead kernel, the limits of each run, the file calls,
//! the lifetime, and the shutdown. What differs per backend comes from [`Backend`].

mod contexts;
mod lifetime;
mod outside_home;

use std::collections::BTreeMap;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Weak};
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;
use waxell::sandbox::{
    CodeContext, DirWatch, EntryInfo, Execution, ProcessSpec, PtySize, RunOptions, SandboxError, SandboxMetrics,
    SandboxOptions, SandboxProcess, SandboxSession, WatchOptions,
};

use crate::backend::{Backend, Checkpoint, Prepared, Restored, SavedContext, Usage};
use crate::kernel::{ExecLimits, KernelProcess, Language, OomCounter};
use crate::paths::check_context_cwd;
use crate::watch::{Counted, WatchSlots};
use contexts::Contexts;
pub use contexts::DEFAULT_CONTEXT_ID;
use lifetime::Lifetime;

/// One live sandbox. Dropping it (or [`SandboxSession::kill`]) kills every process in it and
/// removes what it holds.
pub struct Session<B: Backend> {
    inner: Arc<Inner<B>>,
}

/// Field order = drop order: kernels, then the sandbox's resources.
pub(crate) struct Inner<B: Backend> {
    contexts: Contexts,
    shell: B::Shell,
    backend: Arc<B>,
    env: BTreeMap<String, String>,
    lifetime: Lifetime,
    watches: WatchSlots,
    /// The previous CPU reading (when, CPU seconds), so metrics report use since then; `None`
    /// before the first.
    last_cpu: std::sync::Mutex<Option<(Instant, f64)>>,
    /// Terminals of its processes open now.
    open_ptys: Arc<AtomicUsize>,
}

impl<B: Backend> Session<B> {
    /// A sandbox from a prepared one: `options`' environment set, its lifetime watched.
    pub(crate) async fn start(
        backend: Arc<B>,
        prepared: Prepared<B::Shell>,
        options: &SandboxOptions,
    ) -> Result<Self, SandboxError> {
        let Prepared { mut kernel, shell } = prepared;
        if !options.env_vars.is_empty() {
            kernel.configure(&options.env_vars, None).await?;
        }
        let contexts = Contexts::new(kernel, backend.languages());
        Ok(Self::serve(backend, shell, contexts, options))
    }

    /// A sandbox restored from `checkpoint` (saved in `dir`): its contexts and their kernels as
    /// they were, `options`' environment (the sandbox's own, set in its kernels before).
    #[cfg_attr(not(all(feature = "server", feature = "container")), allow(dead_code, reason = "the server's memory pause, with the container backend"))]
    pub(crate) async fn restore(
        backend: Arc<B>,
        checkpoint: &Checkpoint,
        dir: &std::path::Path,
        options: &SandboxOptions,
    ) -> Result<Self, SandboxError> {
        let Restored { kernels, shell } = backend.restore(checkpoint, dir).await?;
        let mut saved = Vec::new();
        for (context, kernel) in checkpoint.kernels.iter().zip(kernels) {
            saved.push((context.id.clone(), Language::parse(&context.language)?, context.cwd.clone(), kernel));
        }
        Ok(Self::serve(backend, shell, Contexts::restored(saved), options))
    }

    /// Serve a sandbox with these contexts: its lifetime watched.
    fn serve(backend: Arc<B>, shell: B::Shell, contexts: Contexts, options: &SandboxOptions) -> Self {
        let lifetime = options.timeout.unwrap_or(backend.config().lifetime);
        let inner = Arc::new(Inner {
            contexts,
            shell,
            backend,
            env: options.env_vars.clone(),
            lifetime: Lifetime::new(lifetime),
            watches: WatchSlots::default(),
            last_cpu: std::sync::Mutex::new(None),
            open_ptys: Arc::default(),
        });
        watch_lifetime(Arc::downgrade(&inner));
        Self { inner }
    }

    /// Terminals of its processes open now.
    #[cfg(test)]
    pub(crate) fn inner_open_ptys(&self) -> usize {
        self.inner.open_ptys.load(std::sync::atomic::Ordering::Acquire)
    }

    /// What the backend holds for this sandbox.
    pub(crate) fn shell(&self) -> &B::Shell {
        &self.inner.shell
    }

    /// `NotFound` once the sandbox was killed or its lifetime expired.
    fn check_alive(&self) -> Result<(), SandboxError> {
        if self.inner.lifetime.has_ended() {
            Err(self.gone())
        } else {
            Ok(())
        }
    }

    /// The error of a call on a sandbox that has ended.
    fn gone(&self) -> SandboxError {
        SandboxError::NotFound(format!(
            "sandbox {} was killed or its lifetime expired",
            B::sandbox_id(&self.inner.shell)
        ))
    }

    /// The language named, if this sandbox runs it (else an error naming what is missing).
    fn language(&self, name: &str) -> Result<Language, SandboxError> {
        let checked = Language::parse(name).and_then(|l| self.inner.backend.languages().check(l).map(|()| l));
        checked.map_err(|e| match e {
            SandboxError::InvalidArgument(message) => {
                SandboxError::InvalidArgument(format!("{message} ({} backend)", B::NAME))
            }
            other => other,
        })
    }

    /// The limits of one run with these options.
    fn exec_limits(&self, options: &RunOptions) -> ExecLimits {
        let config = self.inner.backend.config();
        ExecLimits::for_run(options, config.run_timeout, config.interrupt_grace, &config.limits)
    }

    /// Start a kernel of `language` with the sandbox's environment in `cwd` (`None` = home). If
    /// the backend says the whole sandbox died meanwhile, shut it down and answer `NotFound`.
    async fn start_kernel(&self, cwd: Option<&str>, language: Language) -> Result<KernelProcess, SandboxError> {
        let inner = &self.inner;
        let started = match inner.backend.start_kernel(&inner.shell).await {
            Ok(mut kernel) => {
                let configured = if !inner.env.is_empty() || cwd.is_some() {
                    kernel.configure(&inner.env, cwd).await
                } else {
                    Ok(())
                };
                match configured {
                    Ok(()) => {
                        let runtime = inner.backend.languages().runtime(language);
                        kernel.set_language(language, runtime).await.map(|()| kernel)
                    }
                    Err(e) => Err(e),
                }
            }
            Err(e) => Err(e),
        };
        self.check_alive()?;
        if let Err(e) = &started {
            if inner.backend.has_died(&inner.shell, e).await {
                // Called by a run that holds a context's lock: do not wait for it.
                inner.shutdown(true).await;
                return Err(SandboxError::NotFound(format!(
                    "sandbox {}: it exited (out of memory, process cap or killed from outside); create a new \
                     sandbox",
                    B::sandbox_id(&inner.shell)
                )));
            }
        }
        started
    }

    /// Start a process: `spec` checked, the sandbox's environment under its own, one of the
    /// sandbox's terminals taken if it asks for one (at most [`MAX_PTYS`](crate::config::MAX_PTYS)).
    async fn start_process(&self, spec: &ProcessSpec) -> Result<SandboxProcess, SandboxError> {
        self.check_alive()?;
        let mut spec = spec.clone();
        check_process_spec(&mut spec)?;
        let mut env = self.inner.env.clone();
        env.append(&mut spec.env);
        spec.env = env;
        let pty = spec
            .pty
            .map(|size| crate::command::PtyPermit::take(size, &self.inner.open_ptys))
            .transpose()?;
        self.inner.backend.start_process(&self.inner.shell, &spec, pty).await
    }

    /// Attach to `saved`, a process that lived on in the checkpoint this sandbox was restored
    /// from, with one of the sandbox's terminals if it has one.
    #[cfg_attr(not(all(feature = "server", feature = "container")), allow(dead_code, reason = "the server's memory pause, with the container backend"))]
    pub(crate) async fn attach_process(&self, saved: &crate::backend::SavedProcess) -> Result<SandboxProcess, SandboxError> {
        self.check_alive()?;
        let pty = saved
            .terminal
            .map(|(rows, cols)| crate::command::PtyPermit::take(PtySize { rows, cols }, &self.inner.open_ptys))
            .transpose()?;
        self.inner.backend.attach_process(&self.inner.shell, saved, pty).await
    }

    /// Save the sandbox's whole state into `dir` ([`Backend::checkpoint`]) and end it here. Only
    /// while no cell runs (a run's caller could not get its answer), else `Busy`-like
    /// `InvalidArgument`; on failure the sandbox may be left without its kernels' links (the caller
    /// then kills it).
    #[cfg_attr(not(all(feature = "server", feature = "container")), allow(dead_code, reason = "the server's memory pause, with the container backend"))]
    pub(crate) async fn checkpoint(&self, dir: &std::path::Path) -> Result<Checkpoint, SandboxError> {
        self.check_alive()?;
        if !self.inner.backend.keeps_memory() {
            return Err(crate::backend::unsupported::<B>("checkpoint"));
        }
        let contexts = self.inner.contexts.all();
        let mut slots = Vec::with_capacity(contexts.len());
        for context in &contexts {
            let slot = context.kernel.try_lock().map_err(|_| {
                SandboxError::InvalidArgument(format!("context {} is running code", context.info.id))
            })?;
            slots.push(slot);
        }
        let grace = self.inner.backend.config().interrupt_grace;
        let mut kernels = Vec::with_capacity(contexts.len());
        for (context, slot) in contexts.iter().zip(slots.iter_mut()) {
            if let Some(kernel) = slot.as_mut() {
                kernel.settle_abandoned(grace).await;
            }
            kernels.push(SavedContext {
                id: context.info.id.clone(),
                language: context.language.name().to_owned(),
                cwd: context.info.cwd.clone(),
                kernel: slot.as_ref().and_then(KernelProcess::identity),
            });
        }
        let state = self.inner.backend.checkpoint(&self.inner.shell, dir).await?;
        // They live on in the checkpoint.
        for slot in &mut slots {
            if let Some(mut kernel) = slot.take() {
                kernel.forget();
            }
        }
        drop(slots);
        self.inner.shutdown(false).await;
        Ok(Checkpoint {
            backend: B::NAME.to_owned(),
            kernels,
            state,
            processes: Vec::new(),
        })
    }
}

impl<B: Backend> Inner<B> {
    /// Kill everything and remove what the sandbox holds now (Drop repeats it harmlessly).
    /// `from_run`: called by a run holding a context's lock, which must not be waited for (its
    /// kernel died with the sandbox and the run drops it).
    async fn shutdown(&self, from_run: bool) {
        self.lifetime.end();
        // Kill first so runs holding a context lock see EOF and release it.
        self.backend.kill_all(&self.shell).await;
        for context in self.contexts.take_all() {
            let slot = if from_run {
                context.kernel.try_lock().ok()
            } else {
                Some(context.kernel.lock().await)
            };
            if let Some(mut kernel) = slot.and_then(|mut slot| slot.take()) {
                kernel.kill();
            }
        }
        self.backend.remove(&self.shell).await;
    }
}

/// The interval of a sandbox's first CPU measurement.
const FIRST_CPU_INTERVAL: Duration = Duration::from_millis(200);
/// A process's program, arguments, environment and cwd: no NUL bytes (they cannot reach a
/// program), a name for every variable, an absolute cwd (a relative one is in the home directory;
/// any directory the sandbox can see may be a process's cwd, the read-only ones too).
fn check_process_spec(spec: &mut ProcessSpec) -> Result<(), SandboxError> {
    let invalid = |what: String| Err(SandboxError::InvalidArgument(what));
    if spec.cmd.is_empty() {
        return invalid("the process's command is empty".into());
    }
    let strings = std::iter::once(&spec.cmd)
        .chain(&spec.args)
        .chain(spec.env.iter().flat_map(|(k, v)| [k, v]))
        .chain(&spec.cwd);
    for value in strings {
        if value.contains('\0') {
            return invalid(format!("{value:?} contains a NUL byte"));
        }
    }
    if let Some(key) = spec.env.keys().find(|k| k.is_empty() || k.contains('=')) {
        return invalid(format!("environment variable name {key:?} is empty or contains '='"));
    }
    if let Some(cwd) = &spec.cwd {
        if cwd.is_empty() {
            spec.cwd = None;
        } else if cwd.split('/').any(|part| part == "..") {
            return invalid(format!("cwd {cwd:?}: `..` is not allowed"));
        } else if !cwd.starts_with('/') {
            spec.cwd = Some(format!("{}/{cwd}", crate::paths::HOME_DIR));
        }
    }
    Ok(())
}

/// Shut the sandbox down when its deadline passes. Holds only a weak reference while waiting, so
/// dropping the sandbox cleans up at once.
fn watch_lifetime<B: Backend>(weak: Weak<Inner<B>>) {
    tokio::spawn(async move {
        loop {
            let (deadline, changed) = {
                let Some(inner) = weak.upgrade() else { return };
                let lifetime = &inner.lifetime;
                if lifetime.has_ended() {
                    return;
                }
                let (deadline, changed) = lifetime.deadline();
                if Instant::now() >= deadline {
                    tracing::info!(sandbox = %B::sandbox_id(&inner.shell), "sandbox lifetime expired, shutting it down");
                    inner.shutdown(false).await;
                    return;
                }
                (deadline, changed)
            };
            tokio::select! {
                _ = changed.notified() => {}
                _ = tokio::time::sleep_until(deadline) => {}
            }
        }
    });
}

/// The OOM kills of one sandbox, as the kernel protocol counts them.
struct OomKills<'a, B: Backend>(&'a B::Shell);

impl<B: Backend> OomCounter for OomKills<'_, B> {
    fn oom_kills(&self) -> u64 {
        B::oom_kills(self.0)
    }
}

#[async_trait]
impl<B: Backend> SandboxSession for Session<B> {
    fn sandbox_id(&self) -> &str {
        B::sandbox_id(&self.inner.shell)
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    fn runtime(&self) -> Option<&str> {
        Some(self.inner.backend.runtime(&self.inner.shell))
    }

    fn check_language(&self, language: &str) -> Result<(), SandboxError> {
        self.language(language).map(|_| ())
    }

    async fn run_code(&self, code: &str, options: &RunOptions) -> Result<Execution, SandboxError> {
        self.check_alive()?;
        if options.language.is_some() && options.context_id.is_some() {
            return Err(SandboxError::InvalidArgument(
                "Only one of context_id or language can be provided".into(),
            ));
        }
        let context = match &options.language {
            Some(language) => self.inner.contexts.default_for(self.language(language)?),
            None => self
                .inner
                .contexts
                .get(options.context_id.as_deref().unwrap_or(DEFAULT_CONTEXT_ID))?,
        };
        let mut slot = context.kernel.lock().await;
        self.check_alive()?;
        let limits = self.exec_limits(options);
        if let Some(kernel) = slot.as_mut() {
            kernel.settle_abandoned(limits.grace).await;
        }
        // A kernel killed by a timeout, OOM or the output cap is replaced with a fresh one.
        if !slot.as_ref().is_some_and(KernelProcess::is_alive) {
            *slot = Some(self.start_kernel(context.cwd(), context.language).await?);
        }
        let kernel = slot.as_mut().expect("kernel just ensured");
        // Killed from outside (kill() or the lifetime) while running: report that, not a crash,
        // as soon as it happens, not when the backend's stream of the dead kernel closes.
        let ended = self.inner.lifetime.ended();
        let oom_kills = OomKills::<B>(&self.inner.shell);
        let outcome = tokio::select! {
            execution = kernel.execute(code, options, &limits, &oom_kills) => Some(execution),
            () = ended => None,
        };
        let Some(execution) = outcome else {
            kernel.kill();
            return Err(self.gone());
        };
        let execution = execution?;
        self.check_alive()?;
        Ok(execution)
    }

    async fn create_context(&self, language: Option<&str>, cwd: Option<&str>) -> Result<CodeContext, SandboxError> {
        self.check_alive()?;
        let language = match language {
            Some(name) => self.language(name)?,
            None => Language::Python,
        };
        if let Some(cwd) = cwd {
            check_context_cwd(cwd)?;
        }
        let kernel = self.start_kernel(cwd, language).await?;
        Ok(self.inner.contexts.add(kernel, language, cwd))
    }

    async fn list_contexts(&self) -> Result<Vec<CodeContext>, SandboxError> {
        self.check_alive()?;
        Ok(self.inner.contexts.list())
    }

    async fn restart_context(&self, context_id: &str) -> Result<(), SandboxError> {
        self.check_alive()?;
        let context = self.inner.contexts.get(context_id)?;
        let mut slot = context.kernel.lock().await;
        if let Some(mut old) = slot.take() {
            old.kill();
        }
        *slot = Some(self.start_kernel(context.cwd(), context.language).await?);
        Ok(())
    }

    async fn remove_context(&self, context_id: &str) -> Result<(), SandboxError> {
        self.check_alive()?;
        if context_id == DEFAULT_CONTEXT_ID {
            return Err(SandboxError::InvalidArgument(
                "the default context cannot be removed".into(),
            ));
        }
        let context = self.inner.contexts.remove(context_id)?;
        if let Some(mut kernel) = context.kernel.lock().await.take() {
            kernel.kill();
        }
        Ok(())
    }

    async fn write_file(&self, path: &str, data: &[u8]) -> Result<EntryInfo, SandboxError> {
        self.check_alive()?;
        self.inner.backend.write_file(&self.inner.shell, path, data).await
    }

    async fn read_file(&self, path: &str) -> Result<Vec<u8>, SandboxError> {
        self.check_alive()?;
        if let Some(outside) = crate::paths::outside_home(path)? {
            let max_bytes = self.inner.backend.config().limits.max_file_bytes;
            return outside_home::read(self, &outside, max_bytes).await;
        }
        self.inner.backend.read_file(&self.inner.shell, path).await
    }

    async fn list_files(&self, path: &str) -> Result<Vec<EntryInfo>, SandboxError> {
        self.check_alive()?;
        self.inner.backend.list_files(&self.inner.shell, path).await
    }

    async fn make_dir(&self, path: &str) -> Result<bool, SandboxError> {
        self.check_alive()?;
        self.inner.backend.make_dir(&self.inner.shell, path).await
    }

    async fn rename(&self, from: &str, to: &str) -> Result<EntryInfo, SandboxError> {
        self.check_alive()?;
        self.inner.backend.rename(&self.inner.shell, from, to).await
    }

    async fn remove(&self, path: &str) -> Result<(), SandboxError> {
        self.check_alive()?;
        self.inner.backend.remove_path(&self.inner.shell, path).await
    }

    async fn write_file_with_metadata(
        &self,
        path: &str,
        data: &[u8],
        metadata: &BTreeMap<String, String>,
    ) -> Result<EntryInfo, SandboxError> {
        self.check_alive()?;
        crate::metadata::check(metadata)?;
        let written = self.inner.backend.write_file(&self.inner.shell, path, data).await?;
        // As envd: the upload's metadata replaces what the file carried (none clears it).
        match self.inner.backend.set_metadata(&self.inner.shell, path, metadata).await {
            Err(SandboxError::Unsupported { .. }) if metadata.is_empty() => Ok(written),
            result => result,
        }
    }

    async fn watch_dir(&self, path: &str, options: WatchOptions) -> Result<Box<dyn DirWatch>, SandboxError> {
        self.check_alive()?;
        let slot = self.inner.watches.take()?;
        let watch = self.inner.backend.watch_dir(&self.inner.shell, path, options).await?;
        Ok(Box::new(Counted { watch, _slot: slot }))
    }

    async fn start_process(&self, spec: &ProcessSpec) -> Result<SandboxProcess, SandboxError> {
        Session::start_process(self, spec).await
    }

    async fn set_timeout(&self, timeout: Duration) -> Result<(), SandboxError> {
        self.check_alive()?;
        self.inner.lifetime.extend(timeout);
        Ok(())
    }

    async fn kill(&self) -> Result<(), SandboxError> {
        self.inner.shutdown(false).await;
        Ok(())
    }

    async fn metrics(&self) -> Result<SandboxMetrics, SandboxError> {
        self.check_alive()?;
        let inner = &self.inner;
        let first = inner.last_cpu.lock().unwrap_or_else(|e| e.into_inner()).is_none();
        if first {
            // No earlier reading: take one and measure over a short interval, so the first figure
            // is the use now, not the kernel's start-up (made ahead in the warm pool).
            let usage = inner.backend.usage(&inner.shell).await?;
            inner.metrics_from(usage);
            tokio::time::sleep(FIRST_CPU_INTERVAL).await;
        }
        let usage = inner.backend.usage(&inner.shell).await?;
        Ok(inner.metrics_from(usage))
    }
}

impl<B: Backend> Inner<B> {
    /// E2B's metrics from a usage reading, against the sandbox's limits. CPU use is the share of
    /// the sandbox's CPUs used since the previous reading.
    fn metrics_from(&self, usage: Usage) -> SandboxMetrics {
        let limits = &self.backend.config().limits;
        let cpu_count = (limits.cpus.ceil() as u32).max(1);
        let now = Instant::now();
        let mut last = self.last_cpu.lock().unwrap_or_else(|e| e.into_inner());
        let pct = match *last {
            Some((at, cpu_seconds)) if now > at => {
                let used = (usage.cpu_seconds - cpu_seconds).max(0.0);
                (used / now.duration_since(at).as_secs_f64() / f64::from(cpu_count) * 100.0).clamp(0.0, 100.0)
            }
            _ => 0.0,
        };
        *last = Some((now, usage.cpu_seconds));
        SandboxMetrics::new(
            cpu_count,
            pct,
            usage.memory_bytes,
            limits.memory_bytes,
            usage.disk_bytes,
            limits.scratch_bytes,
        )
    }
}

impl<B: Backend> std::fmt::Debug for Session<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("backend", &B::NAME)
            .field("id", &B::sandbox_id(&self.inner.shell))
            .finish_non_exhaustive()
    }
}

impl<B: Backend> Drop for Session<B> {
    fn drop(&mut self) {
        // The lifetime watchdog holds only a weak reference: this drop releases the last strong
        // one, whose Drop removes the kernels and then the shell. Wake it so it exits.
        self.inner.lifetime.end();
    }
}
