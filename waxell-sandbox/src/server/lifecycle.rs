//! A sandbox's life beyond running: pause and resume, snapshots, fork — E2B's semantics, for
//! every backend through its file calls.
//!
//! A pause with memory (E2B's default), where the backend keeps it (`pool::keeps_memory`: gVisor on
//! Docker Engine), checkpoints the sandbox into the store: its processes and memory, and its files
//! (`home/` as the filesystem-only pause saves it, so fork, snapshots and a fallback use them); the
//! sandbox stops, and only the checkpoint and the record stay on disk. Commands and terminals live
//! on in it (the backend runs them under keepers that hold no descriptor of the host's): their
//! entries in the process table are kept with the paused sandbox, and a resume attaches to them
//! again, so clients still attached read on. Directory watchers end. Resume restores it into a
//! new sandbox under the same id and tokens; if that fails the files are resumed as below, said in
//! the log and the answer.
//!
//! Elsewhere, or with `memory: false`, or when the checkpoint fails, a pause is E2B's
//! filesystem-only pause: `/home/user` is saved to the store (saved.rs, store.rs), the sandbox is
//! killed (its processes and kernels stop: no CPU, no memory) and only its record stays, with the
//! same id, tokens, metadata and environment. Resume makes a new sandbox with the backend, writes
//! the files back and serves it under the same id and tokens, with fresh kernels. Either way as
//! often as asked, since every pause saves anew. A pause asking for memory that it cannot keep is
//! answered with the files kept and says so (headers, log), or refused when the server is
//! configured to (`refuse_memory_pause`).
//! A snapshot is the same saved `home`, kept under its own id as a template new sandboxes start
//! from; a fork saves once and starts `count` sandboxes from it. Where the backend keeps memory, a
//! snapshot or fork of a running sandbox is its checkpoint instead: the sandbox is checkpointed and
//! restored in place (same id, tokens and remaining lifetime; its directory watchers end, as at a
//! memory pause), and each fork, or each sandbox created from the snapshot, is restored from that
//! checkpoint, its variables and processes with it, its commands and terminals too (each its own). A fork of a paused
//! sandbox restores from its pause's checkpoint and leaves it paused. If the source cannot be
//! restored in place it stays paused with the checkpoint (connect resumes it): nothing is lost.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::http::StatusCode;
use rand::distr::{Alphanumeric, SampleString};

use super::config::ServerConfig;
use super::error::ApiError;
use super::logs::Level;
use super::process::ProcessTable;
use super::registry::{new_sandbox_id, CreateRequest, Hold, Identity, Lifecycle, Registry, SandboxEntry};
use super::saved::{self, SaveLimits};
use super::store::{from_ms, to_ms, Kind, PausedRecord, SnapshotRecord, Store, HOME_COPY};
use super::watchers::WatcherSpec;
use crate::backend::Checkpoint;
use crate::pool::KeepsMemory;

/// How snapshot ids start (the rest is random), so a create naming a deleted one is told so.
const SNAPSHOT_ID_PREFIX: &str = "snapshot-";

/// Whether a template id is a snapshot's id (of this server, existing or not).
pub(crate) fn is_snapshot_id(template: &str) -> bool {
    template
        .strip_suffix(":default")
        .unwrap_or(template)
        .starts_with(SNAPSHOT_ID_PREFIX)
}

/// A paused sandbox or a snapshot, with the directory holding its files.
#[derive(Debug)]
pub(crate) struct Kept<R> {
    pub(crate) record: R,
    pub(crate) dir: PathBuf,
}

impl<R> Kept<R> {
    fn home(&self) -> PathBuf {
        self.dir.join(HOME_COPY)
    }
}

/// The paused sandboxes and snapshots of the server, and their store.
pub(crate) struct Saved {
    store: Store,
    paused: Mutex<HashMap<String, Arc<Kept<PausedRecord>>>>,
    snapshots: Mutex<HashMap<String, Arc<Kept<SnapshotRecord>>>>,
    /// What sandboxes paused with their memory by this server carry to their resume.
    carried: Mutex<HashMap<String, Carried>>,
    /// Serialises pause, resume, snapshot, fork and kill, so no two of them race on one sandbox
    /// (each is short: a copy of a capped `/home/user`).
    pub(crate) lock: tokio::sync::Mutex<()>,
}

/// What a sandbox checkpointed by this server carries to its restore as the same sandbox (a
/// resume, a restore in place): its process table, whose processes live on in the checkpoint (the
/// restore attaches them again, and the streams of clients still attached go on), and its polled
/// directory watchers (started again under the same ids).
pub(crate) struct Carried {
    processes: Arc<ProcessTable>,
    watchers: Vec<WatcherSpec>,
}

impl Carried {
    fn of(entry: &SandboxEntry) -> Self {
        Self {
            processes: entry.processes.clone(),
            watchers: entry.watchers.specs(),
        }
    }
}

/// What a pause, a snapshot or a fork kept of the sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum KeptState {
    /// Memory and files (a checkpoint).
    Memory,
    /// Files, as asked (`memory: false`) or all the backend keeps.
    Files,
    /// The backend keeps memory (or the client asked for it) but only the files were kept, for
    /// this reason.
    FilesNotMemory(String),
}

/// How a resume went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ResumeOutcome {
    /// It was running.
    Running,
    /// From its checkpoint: memory and files.
    Memory,
    /// From its files (paused without memory, or its checkpoint could not be restored).
    Files,
}

impl KeptState {
    /// What was kept, as the answers' headers and the sandbox's log say it.
    pub(crate) fn kind(&self) -> &'static str {
        if *self == Self::Memory {
            "memory"
        } else {
            "filesystem"
        }
    }
}

impl ResumeOutcome {
    /// What came back, as the answers' headers and the sandbox's log say it.
    pub(crate) fn kept(&self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Memory => "memory",
            Self::Files => "filesystem",
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn store_error(what: &str, e: std::io::Error) -> ApiError {
    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, format!("{what}: {e}"))
}

fn sandbox_not_found(id: &str) -> ApiError {
    ApiError::not_found(format!(
        "Sandbox \"{id}\" doesn't exist or you don't have access to it"
    ))
}

impl Saved {
    /// Open the store and take over what an earlier server left in it.
    pub(crate) fn open(config: &ServerConfig) -> std::io::Result<Self> {
        let store = Store::open(config)?;
        let paused: HashMap<_, _> = store
            .load::<PausedRecord>(Kind::Paused)
            .into_iter()
            .map(|(record, dir)| (record.id.clone(), Arc::new(Kept { record, dir })))
            .collect();
        let snapshots: HashMap<_, _> = store
            .load::<SnapshotRecord>(Kind::Snapshot)
            .into_iter()
            .map(|(record, dir)| (record.snapshot_id.clone(), Arc::new(Kept { record, dir })))
            .collect();
        if !paused.is_empty() || !snapshots.is_empty() {
            tracing::info!(
                paused = paused.len(),
                snapshots = snapshots.len(),
                "kept from an earlier run of the server"
            );
        }
        Ok(Self {
            store,
            paused: Mutex::new(paused),
            snapshots: Mutex::new(snapshots),
            carried: Mutex::default(),
            lock: tokio::sync::Mutex::new(()),
        })
    }

    /// The paused sandbox `id`.
    pub(crate) fn paused(&self, id: &str) -> Option<Arc<Kept<PausedRecord>>> {
        lock(&self.paused).get(id).cloned()
    }

    /// Every paused sandbox.
    pub(crate) fn all_paused(&self) -> Vec<Arc<Kept<PausedRecord>>> {
        lock(&self.paused).values().cloned().collect()
    }

    /// Remove the paused sandbox `id` and its files; false if there is none. The caller holds
    /// [`Saved::lock`].
    pub(crate) fn remove_paused(&self, id: &str) -> bool {
        if lock(&self.paused).remove(id).is_none() {
            return false;
        }
        let carried = lock(&self.carried).remove(id);
        if let Some(carried) = carried {
            tokio::spawn(async move { carried.processes.end_all("the paused sandbox was killed").await });
        }
        self.store.remove(Kind::Paused, id);
        tracing::info!(sandbox = %id, "paused sandbox removed");
        true
    }

    /// Whether traffic to `id` resumes it: paused with `autoResume`, by a pause that did not ask
    /// for the files only (E2B's rule).
    pub(crate) fn auto_resumes(&self, id: &str) -> bool {
        lock(&self.paused)
            .get(id)
            .is_some_and(|p| p.record.auto_resume && !p.record.refuses_auto_resume)
    }

    /// Every snapshot, newest first.
    pub(crate) fn all_snapshots(&self) -> Vec<Arc<Kept<SnapshotRecord>>> {
        let mut all: Vec<_> = lock(&self.snapshots).values().cloned().collect();
        all.sort_by(|a, b| {
            (b.record.created_at_ms, &b.record.snapshot_id)
                .cmp(&(a.record.created_at_ms, &a.record.snapshot_id))
        });
        all
    }

    /// The snapshot a create's `templateID` names: its id or one of its names, with or without
    /// the `:default` tag; for a name used twice, the newest.
    pub(crate) fn snapshot_for(&self, template: &str) -> Option<Arc<Kept<SnapshotRecord>>> {
        let bare = template.strip_suffix(":default").unwrap_or(template);
        self.all_snapshots().into_iter().find(|s| {
            s.record.snapshot_id == bare || s.record.names.iter().any(|n| n == template || n == bare)
        })
    }

    fn limits(config: &ServerConfig) -> SaveLimits {
        SaveLimits {
            max_bytes: config.max_saved_bytes,
            max_entries: config.max_list_entries,
        }
    }
}

impl Registry {
    /// Pause the live sandbox `id`: save its files, kill it, keep its record. `memory`: what the
    /// client asked (`None`: E2B's default, memory).
    pub(crate) async fn pause(&self, id: &str, memory: Option<bool>) -> Result<KeptState, ApiError> {
        let wants_memory = memory.unwrap_or(true);
        let keeper = self.keeps_memory();
        if wants_memory && keeper.is_none() && self.config.refuse_memory_pause {
            return Err(ApiError::from_sandbox(
                waxell::sandbox::SandboxError::Unsupported {
                    backend: self.backend_name(),
                    operation: "pause with memory (this server keeps files only: pause with memory: false)",
                },
            ));
        }
        let saved = &self.saved;
        let _guard = saved.lock.lock().await;
        if saved.paused(id).is_some() {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                format!("sandbox {id} is already paused"),
            ));
        }
        if lock(&saved.paused).len() >= self.config.max_paused {
            return Err(ApiError::new(
                StatusCode::INSUFFICIENT_STORAGE,
                format!(
                    "{} sandboxes are paused, the most this server keeps: kill one first",
                    self.config.max_paused
                ),
            ));
        }
        let entry = self.get(id).ok_or_else(|| sandbox_not_found(id))?;
        // Paused from here on, as info and the lists say: requests stop reaching it while it is
        // saved; info and kill still find it.
        entry.set_hold(if wants_memory {
            Hold::Pausing
        } else {
            Hold::PausingFilesOnly
        });
        let mut not_kept =
            "this backend pauses files only; processes and kernels restart on resume".to_owned();
        if let Some(keeper) = keeper.filter(|_| wants_memory) {
            match self.checkpoint(&entry, keeper).await {
                Ok(()) => return Ok(KeptState::Memory),
                Err(reason) => {
                    tracing::warn!(sandbox = %id, "pause with memory failed, keeping the files only: {reason}");
                    not_kept = format!("the checkpoint failed ({reason}); kernels restart on resume");
                }
            }
        }
        let (staging, files) = match self.save_live_files(&entry).await {
            Ok(saved) => saved,
            Err(e) => {
                entry.set_hold(Hold::Free);
                return Err(e);
            }
        };
        if let Err(e) = entry.session.kill().await {
            tracing::warn!(sandbox = %id, error = %e, "killing the paused sandbox failed");
        }
        if wants_memory {
            entry.log.add(
                Level::Warn,
                "sandbox paused, its files kept: memory not kept",
                [("kept", "filesystem".to_owned()), ("reason", not_kept.clone())],
            );
        } else {
            entry.log.add(
                Level::Info,
                "sandbox paused, its files kept",
                [("kept", "filesystem".to_owned())],
            );
        }
        let mut record = self.paused_record(&entry, files.bytes);
        record.refuses_auto_resume = !wants_memory;
        // Killed: kept now, or gone.
        self.keep_paused(&staging, record)
            .map_err(|e| store_error("cannot keep the paused sandbox", e))?;
        tracing::info!(sandbox = %id, bytes = files.bytes, files = files.files, "sandbox paused (files kept)");
        Ok(if wants_memory {
            tracing::warn!(
                sandbox = %id,
                backend = self.backend_name(),
                "pause asked to keep memory; memory not kept: {not_kept}"
            );
            KeptState::FilesNotMemory(not_kept)
        } else {
            KeptState::Files
        })
    }

    /// Pause the live `entry` with its memory (the caller holds [`Saved::lock`] and has marked it
    /// pausing): checkpointed into the store, the sandbox ended. On failure, why (the sandbox is
    /// then still live, though its commands and terminals may have ended).
    async fn checkpoint(&self, entry: &SandboxEntry, keeper: &dyn KeepsMemory) -> Result<(), String> {
        let id = &entry.id;
        let began = std::time::Instant::now();
        let (staging, checkpoint) = self.checkpoint_into_staging(entry, keeper).await?;
        // Stopped now: from here on it is kept or gone.
        let bytes = saved::tree_bytes(&staging).await;
        let files = saved::tree_bytes(&staging.join(HOME_COPY)).await;
        let over_cap = bytes > self.config.max_saved_bytes;
        if over_cap {
            tracing::warn!(
                sandbox = %id,
                bytes,
                "the checkpoint is larger than this server keeps (max_saved_bytes): files only"
            );
            saved::keep_only(&staging, HOME_COPY).await;
            entry.log.add(
                Level::Warn,
                "sandbox paused, its files kept: memory not kept",
                [
                    ("kept", "filesystem".to_owned()),
                    (
                        "reason",
                        format!("the checkpoint ({bytes} bytes) is larger than --max-saved-mib"),
                    ),
                ],
            );
        } else {
            entry.log.add(
                Level::Info,
                "sandbox paused with its memory",
                [("kept", "memory".to_owned()), ("bytes", bytes.to_string())],
            );
        }
        let mut record = self.paused_record(entry, files);
        if !over_cap {
            record.memory = Some(checkpoint);
        }
        let kept_memory = record.memory.is_some();
        if let Err(e) = self.keep_paused(&staging, record) {
            tracing::warn!(sandbox = %id, "cannot keep the paused sandbox, it is gone: {e}");
            return Ok(());
        }
        if kept_memory {
            lock(&self.saved.carried).insert(id.clone(), Carried::of(entry));
        }
        tracing::info!(
            sandbox = %id,
            bytes,
            memory = kept_memory,
            ms = began.elapsed().as_millis() as u64,
            "sandbox paused (checkpoint)"
        );
        Ok(())
    }

    /// Checkpoint the live `entry` into a new staging directory (the sandbox stops). On failure,
    /// why; nothing is left behind and the sandbox still runs.
    async fn checkpoint_into_staging(
        &self,
        entry: &SandboxEntry,
        keeper: &dyn KeepsMemory,
    ) -> Result<(PathBuf, Checkpoint), String> {
        let store = &self.saved.store;
        let staging = store
            .staging()
            .map_err(|e| format!("cannot make a staging directory: {e}"))?;
        entry.processes.begin_checkpoint();
        match keeper.checkpoint(&*entry.session, &staging).await {
            Ok(mut checkpoint) => {
                checkpoint.processes = entry.processes.saved();
                Ok((staging, checkpoint))
            }
            Err(e) => {
                store.discard(&staging);
                entry.processes.checkpoint_failed().await;
                Err(e.to_string())
            }
        }
    }

    /// Keep `record` (its files, and checkpoint if any, in `staging`) as a paused sandbox, and take
    /// the live one of that id out of the live map. The caller holds [`Saved::lock`]. On failure
    /// the staging directory is removed and the sandbox, ended already, is forgotten: it is gone.
    fn keep_paused(&self, staging: &std::path::Path, record: PausedRecord) -> std::io::Result<()> {
        let saved = &self.saved;
        let id = record.id.clone();
        match saved.store.commit(staging, Kind::Paused, &id, &record) {
            Ok(dir) => {
                // Paused before it leaves the live map, so info never finds neither.
                lock(&saved.paused).insert(id.clone(), Arc::new(Kept { record, dir }));
                self.map().remove(&id);
                Ok(())
            }
            Err(e) => {
                saved.store.discard(staging);
                self.map().remove(&id);
                Err(e)
            }
        }
    }

    /// The record of `entry` paused now, its files `bytes` large.
    fn paused_record(&self, entry: &SandboxEntry, bytes: u64) -> PausedRecord {
        PausedRecord {
            id: entry.id.clone(),
            template_id: entry.template_id.clone(),
            metadata: entry.metadata.clone(),
            env_vars: entry.env_vars.clone(),
            envd_token: entry.envd_token.clone(),
            traffic_token: entry.traffic_token.clone(),
            started_at_ms: to_ms(entry.started_at),
            paused_at_ms: to_ms(SystemTime::now()),
            auto_pause: entry.lifecycle.auto_pause,
            auto_pause_memory: entry.lifecycle.auto_pause_memory,
            auto_resume: entry.lifecycle.auto_resume,
            bytes,
            memory: None,
            refuses_auto_resume: false,
            logs: entry.log.entries(),
        }
    }

    /// Checkpoint the live `entry` for a fork or a snapshot and bring it back in place (same id,
    /// tokens and remaining lifetime) from the checkpoint, which stays in the returned staging
    /// directory. If it cannot be brought back it is kept paused with a copy of the checkpoint
    /// (connect resumes it). On failure to checkpoint, why: the sandbox still runs.
    async fn checkpoint_in_place(
        &self,
        entry: &SandboxEntry,
        keeper: &dyn KeepsMemory,
    ) -> Result<(PathBuf, Checkpoint), String> {
        let id = &entry.id;
        let began = std::time::Instant::now();
        entry.set_hold(Hold::Copying);
        let (staging, checkpoint) = match self.checkpoint_into_staging(entry, keeper).await {
            Ok(taken) => taken,
            Err(reason) => {
                entry.set_hold(Hold::Free);
                return Err(reason);
            }
        };
        let identity = Identity {
            id: id.clone(),
            envd_token: entry.envd_token.clone(),
            traffic_token: entry.traffic_token.clone(),
            started_at: entry.started_at,
        };
        let remaining = entry
            .end_at()
            .duration_since(SystemTime::now())
            .unwrap_or_default();
        let request = CreateRequest {
            template_id: entry.template_id.clone(),
            timeout: remaining.max(Duration::from_secs(1)),
            metadata: entry.metadata.clone(),
            env_vars: entry.env_vars.clone(),
            lifecycle: entry.lifecycle,
            files: None,
            history: entry.log.entries(),
        };
        match self
            .restore(
                identity,
                &request,
                keeper,
                &checkpoint,
                &staging,
                Some(&Carried::of(entry)),
            )
            .await
        {
            Ok(restored) => {
                let ms = began.elapsed().as_millis() as u64;
                tracing::info!(sandbox = %id, ms, "checkpointed and restored in place");
                restored.log.add(
                    Level::Info,
                    "checkpointed and restored in place",
                    [("ms", ms.to_string())],
                );
            }
            Err(e) => {
                tracing::warn!(sandbox = %id, "restoring in place failed, keeping it paused: {}", e.message());
                entry.log.add(
                    Level::Error,
                    "restoring in place failed: paused with its checkpoint (connect resumes it)",
                    [("reason", e.message().to_owned())],
                );
                let kept = async {
                    let copy = self.saved.store.staging()?;
                    saved::link_tree(&staging, &copy).await?;
                    let files = saved::tree_bytes(&copy.join(HOME_COPY)).await;
                    let mut record = self.paused_record(entry, files);
                    record.memory = Some(checkpoint.clone());
                    self.keep_paused(&copy, record)?;
                    lock(&self.saved.carried).insert(id.clone(), Carried::of(entry));
                    Ok::<(), std::io::Error>(())
                };
                if let Err(e) = kept.await {
                    tracing::warn!(sandbox = %id, "cannot keep it paused either, it is gone: {e}");
                    self.map().remove(id);
                }
            }
        }
        Ok((staging, checkpoint))
    }

    /// Resume the paused sandbox `id` with a lifetime of `timeout`: restored from its checkpoint
    /// if it has one and it restores, else a new sandbox of the backend with its files; under the
    /// same id and tokens. A live `id` is returned as it is.
    pub(crate) async fn resume(&self, id: &str, timeout: Duration) -> Result<Arc<SandboxEntry>, ApiError> {
        Ok(self.resume_telling(id, timeout).await?.0)
    }

    /// [`Registry::resume`], and how it went.
    pub(crate) async fn resume_telling(
        &self,
        id: &str,
        timeout: Duration,
    ) -> Result<(Arc<SandboxEntry>, ResumeOutcome), ApiError> {
        let saved = &self.saved;
        let _guard = saved.lock.lock().await;
        if let Some(entry) = self.get(id) {
            return Ok((entry, ResumeOutcome::Running));
        }
        let paused = saved.paused(id).ok_or_else(|| sandbox_not_found(id))?;
        let record = &paused.record;
        let identity = || Identity {
            id: record.id.clone(),
            envd_token: record.envd_token.clone(),
            traffic_token: record.traffic_token.clone(),
            started_at: from_ms(record.started_at_ms),
        };
        let request = CreateRequest {
            template_id: record.template_id.clone(),
            timeout,
            metadata: record.metadata.clone(),
            env_vars: record.env_vars.clone(),
            lifecycle: Lifecycle {
                auto_pause: record.auto_pause,
                auto_pause_memory: record.auto_pause_memory,
                auto_resume: record.auto_resume,
            },
            files: Some(paused.home()),
            history: record.logs.clone(),
        };
        // Kept paused until the new sandbox runs: a failed resume loses nothing.
        let previous = lock(&saved.carried).remove(id);
        let (entry, outcome) = self
            .restore_or_create(
                identity,
                request,
                record.memory.as_ref(),
                &paused.dir,
                previous.as_ref(),
            )
            .await;
        let entry = match entry {
            Ok(entry) => entry,
            Err(e) => {
                // Still paused: it carries the same again to its next resume.
                if let Some(previous) = previous {
                    lock(&saved.carried).insert(id.to_owned(), previous);
                }
                return Err(e);
            }
        };
        if let Some(previous) = previous.filter(|_| outcome != ResumeOutcome::Memory) {
            previous
                .processes
                .end_all("the sandbox resumed from its files: its processes did not come back")
                .await;
        }
        entry.log.add(
            Level::Info,
            "sandbox resumed",
            [("from", outcome.kept().to_owned())],
        );
        lock(&saved.paused).remove(id);
        saved.store.remove(Kind::Paused, id);
        tracing::info!(sandbox = %id, "sandbox resumed");
        Ok((entry, outcome))
    }

    /// The sandbox `identity` restored from `checkpoint` (in `dir`) where there is one and it
    /// restores, else made by the backend with `request.files`; registered. What it got back.
    /// `previous`: what the sandbox checkpointed carries, when this is the same sandbox (see
    /// [`Registry::restore`]).
    async fn restore_or_create(
        &self,
        identity: impl Fn() -> Identity,
        request: CreateRequest,
        checkpoint: Option<&Checkpoint>,
        dir: &std::path::Path,
        previous: Option<&Carried>,
    ) -> (Result<Arc<SandboxEntry>, ApiError>, ResumeOutcome) {
        if let Some(checkpoint) = checkpoint {
            match self.keeps_memory() {
                Some(keeper) => {
                    let began = std::time::Instant::now();
                    match self
                        .restore(identity(), &request, keeper, checkpoint, dir, previous)
                        .await
                    {
                        Ok(entry) => {
                            tracing::info!(sandbox = %entry.id, ms = began.elapsed().as_millis() as u64, "restored from a checkpoint");
                            return (Ok(entry), ResumeOutcome::Memory);
                        }
                        Err(e) => tracing::warn!(
                            sandbox = %identity().id,
                            "restoring the checkpoint failed, starting from the files: {}",
                            e.message()
                        ),
                    }
                }
                None => tracing::warn!(
                    sandbox = %identity().id,
                    "kept with memory, but this server's backend cannot restore it: starting from the files"
                ),
            }
        }
        (self.create_as(identity(), request).await, ResumeOutcome::Files)
    }

    /// The sandbox `identity` restored from `checkpoint` (in `dir`), registered, with the
    /// processes that lived on in it attached to again. `previous`: what the sandbox checkpointed
    /// carries, when this is the same sandbox (a resume, a restore in place): the streams attached
    /// to its processes go on, and its watchers start again.
    async fn restore(
        &self,
        identity: Identity,
        request: &CreateRequest,
        keeper: &dyn KeepsMemory,
        checkpoint: &Checkpoint,
        dir: &std::path::Path,
        previous: Option<&Carried>,
    ) -> Result<Arc<SandboxEntry>, ApiError> {
        let request = CreateRequest {
            files: None,
            ..request.clone()
        };
        let entry = self
            .register(identity, request, |options| async move {
                keeper.restore(checkpoint, dir, &options).await
            })
            .await?;
        // At once: each is an exec, about 0.2 s under gVisor.
        let attached = futures_util::future::join_all(
            checkpoint
                .processes
                .iter()
                .map(|saved| keeper.attach_process(&*entry.session, saved)),
        )
        .await;
        for (saved, process) in checkpoint.processes.iter().zip(attached) {
            let process = process.map_err(|e| e.to_string());
            entry
                .processes
                .adopt(saved, process, previous.map(|p| &*p.processes))
                .await;
        }
        for spec in previous.map_or(&[][..], |p| &p.watchers[..]) {
            match entry.session.watch_dir(&spec.path, spec.options).await {
                Ok(watch) => entry.watchers.add_as(spec.clone(), watch),
                Err(e) => tracing::warn!(
                    sandbox = %entry.id,
                    path = %spec.path,
                    "starting a directory watcher again after the restore failed: {e}"
                ),
            }
        }
        Ok(entry)
    }

    /// Save a live sandbox's files into a new staging directory's `home`.
    async fn save_live_files(&self, entry: &SandboxEntry) -> Result<(PathBuf, saved::SaveReport), ApiError> {
        let staging = self
            .saved
            .store
            .staging()
            .map_err(|e| store_error("cannot make a staging directory", e))?;
        match saved::save_home(
            &*entry.session,
            &staging.join(HOME_COPY),
            Saved::limits(&self.config),
        )
        .await
        {
            Ok(files) => Ok((staging, files)),
            Err(e) => {
                self.saved.store.discard(&staging);
                Err(e)
            }
        }
    }

    /// Save the files of sandbox `id` (live or paused) into a new staging directory's `home`.
    /// Returns the staging directory, the sandbox's template and the bytes saved.
    async fn save_files_of(&self, id: &str) -> Result<(PathBuf, String, u64), ApiError> {
        if let Some(entry) = self.get(id) {
            let (staging, files) = self.save_live_files(&entry).await?;
            return Ok((staging, entry.template_id.clone(), files.bytes));
        }
        let paused = self.saved.paused(id).ok_or_else(|| sandbox_not_found(id))?;
        let staging = self
            .saved
            .store
            .staging()
            .map_err(|e| store_error("cannot make a staging directory", e))?;
        if let Err(e) = saved::copy_saved(&paused.home(), &staging.join(HOME_COPY)).await {
            self.saved.store.discard(&staging);
            return Err(e);
        }
        Ok((staging, paused.record.template_id.clone(), paused.record.bytes))
    }

    /// The checkpoint of sandbox `id` for a snapshot, in a new staging directory, where the
    /// backend keeps memory: a running sandbox is checkpointed in place; a paused one lends a
    /// copy of its pause's checkpoint. `Err`: why it is files only (`None`: the backend keeps no
    /// memory, which needs no word).
    async fn checkpoint_for_copy(&self, id: &str) -> Result<(PathBuf, Checkpoint, String), Option<String>> {
        let keeper = self.keeps_memory().ok_or(None)?;
        if let Some(entry) = self.get(id) {
            let (staging, checkpoint) = self.checkpoint_in_place(&entry, keeper).await.map_err(Some)?;
            return Ok((staging, checkpoint, entry.template_id.clone()));
        }
        let paused = self.saved.paused(id).ok_or(None)?;
        let checkpoint = paused
            .record
            .memory
            .clone()
            .ok_or_else(|| Some("the sandbox is paused with its files only".to_owned()))?;
        let linked = async {
            let staging = self.saved.store.staging()?;
            if let Err(e) = saved::link_tree(&paused.dir, &staging).await {
                self.saved.store.discard(&staging);
                return Err(e);
            }
            Ok(staging)
        };
        let staging = linked
            .await
            .map_err(|e: std::io::Error| Some(format!("cannot copy its pause's checkpoint: {e}")))?;
        Ok((staging, checkpoint, paused.record.template_id.clone()))
    }

    /// A snapshot of sandbox `id`, named `name` if given: its checkpoint where the backend keeps
    /// memory, else its files.
    pub(crate) async fn snapshot(
        &self,
        id: &str,
        name: Option<String>,
    ) -> Result<(SnapshotRecord, KeptState), ApiError> {
        let saved = &self.saved;
        let _guard = saved.lock.lock().await;
        if self.get(id).is_none() && saved.paused(id).is_none() {
            return Err(sandbox_not_found(id));
        }
        if lock(&saved.snapshots).len() >= self.config.max_snapshots {
            return Err(ApiError::new(
                StatusCode::INSUFFICIENT_STORAGE,
                format!(
                    "{} snapshots exist, the most this server keeps: delete one first",
                    self.config.max_snapshots
                ),
            ));
        }
        if let Some(name) = &name {
            if name.trim().is_empty() || name.len() > 128 {
                return Err(ApiError::bad_request(format!(
                    "snapshot name {name:?}: must be 1 to 128 characters"
                )));
            }
        }
        let (staging, template_id, memory, kept) = match self.checkpoint_for_copy(id).await {
            Ok((staging, checkpoint, template_id)) => {
                let bytes = saved::tree_bytes(&staging).await;
                if bytes > self.config.max_saved_bytes {
                    saved::keep_only(&staging, HOME_COPY).await;
                    let why = format!(
                        "its checkpoint ({bytes} bytes) is larger than this server keeps (--max-saved-mib)"
                    );
                    (staging, template_id, None, KeptState::FilesNotMemory(why))
                } else {
                    (staging, template_id, Some(checkpoint), KeptState::Memory)
                }
            }
            Err(why) => {
                let (staging, template_id, _) = self.save_files_of(id).await?;
                let kept = why.map_or(KeptState::Files, KeptState::FilesNotMemory);
                (staging, template_id, None, kept)
            }
        };
        let bytes = saved::tree_bytes(&staging.join(HOME_COPY)).await;
        let record = SnapshotRecord {
            snapshot_id: format!(
                "{SNAPSHOT_ID_PREFIX}{}",
                Alphanumeric.sample_string(&mut rand::rng(), 16).to_lowercase()
            ),
            names: name.into_iter().collect(),
            sandbox_id: id.to_owned(),
            template_id,
            created_at_ms: to_ms(SystemTime::now()),
            bytes,
            memory,
        };
        let dir = match saved
            .store
            .commit(&staging, Kind::Snapshot, &record.snapshot_id, &record)
        {
            Ok(dir) => dir,
            Err(e) => {
                saved.store.discard(&staging);
                return Err(store_error("cannot keep the snapshot", e));
            }
        };
        lock(&saved.snapshots).insert(
            record.snapshot_id.clone(),
            Arc::new(Kept {
                record: record.clone(),
                dir,
            }),
        );
        tracing::info!(sandbox = %id, snapshot = %record.snapshot_id, bytes, memory = record.memory.is_some(), "snapshot taken");
        self.log_on(
            id,
            &kept,
            "snapshot taken",
            [("snapshot", record.snapshot_id.clone())],
        );
        Ok((record, kept))
    }

    /// Delete the snapshot `id` (or the one a name names) and its files; false if there is none.
    pub(crate) async fn delete_snapshot(&self, id: &str) -> bool {
        let _guard = self.saved.lock.lock().await;
        let Some(snapshot) = self.saved.snapshot_for(id) else {
            return false;
        };
        let snapshot_id = snapshot.record.snapshot_id.clone();
        lock(&self.saved.snapshots).remove(&snapshot_id);
        self.saved.store.remove(Kind::Snapshot, &snapshot_id);
        tracing::info!(snapshot = %snapshot_id, "snapshot deleted");
        true
    }

    /// A create from a snapshot: `request` restored from the snapshot's checkpoint where it has
    /// one, else with its files; made while the snapshot cannot be deleted.
    pub(crate) async fn create_from_snapshot(
        &self,
        snapshot: &Kept<SnapshotRecord>,
        mut request: CreateRequest,
    ) -> Result<(Arc<SandboxEntry>, ResumeOutcome), ApiError> {
        let _guard = self.saved.lock.lock().await;
        if lock(&self.saved.snapshots)
            .get(&snapshot.record.snapshot_id)
            .is_none()
        {
            return Err(ApiError::not_found(format!(
                "snapshot {} was deleted",
                snapshot.record.snapshot_id
            )));
        }
        request.files = Some(snapshot.home());
        request.template_id = snapshot.record.snapshot_id.clone();
        let id = new_sandbox_id();
        let (entry, outcome) = self
            .restore_or_create(
                || Identity::new(id.clone()),
                request,
                snapshot.record.memory.as_ref(),
                &snapshot.dir,
                None,
            )
            .await;
        let entry = entry?;
        entry.log.add(
            Level::Info,
            "sandbox created from a snapshot",
            [
                ("snapshot", snapshot.record.snapshot_id.clone()),
                ("from", outcome.kept().to_owned()),
            ],
        );
        Ok((entry, outcome))
    }

    /// `count` new sandboxes with the files of sandbox `id` (live or paused), and its memory where
    /// the backend keeps it; its template, metadata and environment, each living `timeout`. One
    /// result per fork, and what they kept.
    pub(crate) async fn fork(
        &self,
        id: &str,
        count: usize,
        timeout: Duration,
    ) -> Result<(Vec<Result<Arc<SandboxEntry>, ApiError>>, KeptState), ApiError> {
        let saved = &self.saved;
        let _guard = saved.lock.lock().await;
        let (metadata, env_vars) = if let Some(entry) = self.get(id) {
            (entry.metadata.clone(), entry.env_vars.clone())
        } else if let Some(paused) = saved.paused(id) {
            (paused.record.metadata.clone(), paused.record.env_vars.clone())
        } else {
            return Err(sandbox_not_found(id));
        };
        let (staging, template_id, checkpoint, mut kept) = match self.checkpoint_for_copy(id).await {
            Ok((staging, checkpoint, template_id)) => {
                (staging, template_id, Some(checkpoint), KeptState::Memory)
            }
            Err(why) => {
                let (staging, template_id, _) = self.save_files_of(id).await?;
                (
                    staging,
                    template_id,
                    None,
                    why.map_or(KeptState::Files, KeptState::FilesNotMemory),
                )
            }
        };
        let mut forks = Vec::with_capacity(count);
        let mut from_files = 0;
        for _ in 0..count {
            let request = CreateRequest {
                template_id: template_id.clone(),
                timeout,
                metadata: metadata.clone(),
                env_vars: env_vars.clone(),
                lifecycle: Lifecycle::default(),
                files: Some(staging.join(HOME_COPY)),
                history: Vec::new(),
            };
            let fork_id = new_sandbox_id();
            let (fork, outcome) = self
                .restore_or_create(
                    || Identity::new(fork_id.clone()),
                    request,
                    checkpoint.as_ref(),
                    &staging,
                    None,
                )
                .await;
            if let Ok(fork) = &fork {
                fork.log.add(
                    Level::Info,
                    "sandbox created as a fork",
                    [("source", id.to_owned()), ("from", outcome.kept().to_owned())],
                );
                if checkpoint.is_some() && outcome == ResumeOutcome::Files {
                    from_files += 1;
                }
            }
            forks.push(fork);
        }
        saved.store.discard(&staging);
        if from_files > 0 {
            kept = KeptState::FilesNotMemory(format!(
                "{from_files} of {count} forks could not be restored from the checkpoint and started from the files"
            ));
        }
        tracing::info!(sandbox = %id, count, memory = checkpoint.is_some(), "sandbox forked");
        let ids: Vec<&str> = forks.iter().flatten().map(|f| f.id.as_str()).collect();
        self.log_on(id, &kept, "sandbox forked", [("forks", ids.join(","))]);
        Ok((forks, kept))
    }

    /// Log on sandbox `id` (live or paused) that `what` happened, keeping `kept`.
    fn log_on<const N: usize>(&self, id: &str, kept: &KeptState, what: &str, fields: [(&str, String); N]) {
        let Some(entry) = self.get(id) else {
            // Paused: its log is in its record until it resumes; a snapshot or fork of it
            // changes nothing about it.
            return;
        };
        let mut all: Vec<(&str, String)> = fields.into();
        all.push(("kept", kept.kind().to_owned()));
        let level = match kept {
            KeptState::FilesNotMemory(reason) => {
                all.push(("reason", reason.clone()));
                Level::Warn
            }
            _ => Level::Info,
        };
        entry.log.add_all(level, what, all);
    }
}
