//! A sandbox's container: removed (force, which kills everything in it) with its scratch volumes when
//! its guard drops, and what a process about to exit waits for so no container outlives it.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bollard::query_parameters::{RemoveContainerOptionsBuilder, RemoveVolumeOptionsBuilder};
use bollard::Docker;
use tokio::time::Instant;

use super::engine::Control;
use super::host_mounts::HostMounts;

/// Removes its container (force: kills everything in it), then its scratch volumes, when dropped.
pub struct ContainerGuard {
    pub(super) docker: Docker,
    /// The engine's id of the container.
    pub(super) id: String,
    /// The sandbox id (the container is named `waxell-<id>`).
    pub(super) name: String,
    pub(super) control: Control,
    /// The volumes mounted in it (`spec::sandbox_volumes`).
    pub(super) volumes: Vec<String>,
    /// What the host made for it (`host_mounts`).
    pub(super) host: Arc<HostMounts>,
}

impl ContainerGuard {
    pub(super) async fn remove(&self) {
        remove_sandbox(&self.docker, Some(&self.id), &self.volumes, &self.host).await;
    }
}

/// Removals started by drops and not finished yet (see [`removals_settled`]).
static PENDING_REMOVALS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Wait until the containers of dropped sandboxes and pools are removed, for as long as removals
/// progress: the wait gives up once none has finished for `stall` (500 containers take far longer
/// than any fixed limit a few would need), and says how many are left. A process about to exit
/// calls it: removal tasks do not run once the runtime shuts down. A pool's refill that is
/// starting a container holds the pool until it is up, so that one is waited for too.
pub async fn removals_settled(stall: Duration) {
    let pending = || PENDING_REMOVALS.load(Ordering::SeqCst);
    let busy = || pending() > 0 || crate::pool::refills_holding_a_pool();
    let mut left = pending();
    let mut deadline = Instant::now() + stall;
    while busy() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
        if pending() < left {
            left = pending();
            deadline = Instant::now() + stall;
        }
    }
    if busy() {
        tracing::warn!(
            left = pending(),
            "containers still being removed after {stall:?} without progress: they may be left behind"
        );
    }
}

impl Drop for ContainerGuard {
    fn drop(&mut self) {
        let (docker, id, volumes) = (self.docker.clone(), self.id.clone(), self.volumes.clone());
        let host = self.host.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                PENDING_REMOVALS.fetch_add(1, Ordering::SeqCst);
                handle.spawn(async move {
                    remove_sandbox(&docker, Some(&id), &volumes, &host).await;
                    PENDING_REMOVALS.fetch_sub(1, Ordering::SeqCst);
                });
            }
            Err(_) => {
                // Outside a runtime (e.g. dropped at exit): remove synchronously on a helper thread.
                let _ = std::thread::spawn(move || {
                    if let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() {
                        rt.block_on(remove_sandbox(&docker, Some(&id), &volumes, &host));
                    }
                })
                .join();
            }
        }
    }
}

/// The container `id` (if it was made), then the volumes and what the host made for it.
pub(super) async fn remove_sandbox(docker: &Docker, id: Option<&str>, volumes: &[String], host: &HostMounts) {
    if let Some(id) = id {
        remove_container(docker, id).await;
    }
    for volume in volumes {
        remove_volume(docker, volume).await;
    }
    host.remove();
}

/// Remove a scratch volume. An engine still removing the container that used it (AutoRemove after
/// pid 1 ended) answers 409 for a moment: retried for up to 2 s, after which `sweep_stale` takes it.
pub(super) async fn remove_volume(docker: &Docker, name: &str) {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let options = RemoveVolumeOptionsBuilder::new().force(true).build();
        match docker.remove_volume(name, Some(options)).await {
            Ok(()) | Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => return,
            Err(bollard::errors::Error::DockerResponseServerError { status_code: 409, .. })
                if Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => return tracing::warn!(volume = name, "could not remove a sandbox's scratch volume: {e}"),
        }
    }
}

pub(super) async fn remove_container(docker: &Docker, id: &str) {
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

