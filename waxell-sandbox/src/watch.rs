//! Directory watches, the part every backend shares: a per-sandbox cap on live watches (each holds
//! kernel resources of the host, such as an inotify instance), released when the watch is dropped.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use waxell::sandbox::{DirWatch, FsEvent, LimitKind, SandboxError};

/// Live watches one sandbox may hold (E2B's SDKs open one per `watch_dir` call).
pub(crate) const MAX_WATCHES_PER_SANDBOX: usize = 8;

/// The live watches of one sandbox.
#[derive(Default)]
pub(crate) struct WatchSlots(Arc<AtomicUsize>);

impl WatchSlots {
    /// A place for one more watch, or `LimitExceeded` when the sandbox holds the most it may.
    pub(crate) fn take(&self) -> Result<Slot, SandboxError> {
        let slot = Slot(self.0.clone());
        if self.0.fetch_add(1, Ordering::AcqRel) >= MAX_WATCHES_PER_SANDBOX {
            return Err(SandboxError::LimitExceeded {
                limit: LimitKind::Watches,
                message: format!(
                    "this sandbox already has {MAX_WATCHES_PER_SANDBOX} directory watches: stop one first"
                ),
            });
        }
        Ok(slot)
    }
}

/// One taken place among a sandbox's watches.
pub(crate) struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A backend's watch holding its slot.
pub(crate) struct Counted {
    pub(crate) watch: Box<dyn DirWatch>,
    pub(crate) _slot: Slot,
}

#[async_trait]
impl DirWatch for Counted {
    async fn take_events(&mut self) -> Result<Vec<FsEvent>, SandboxError> {
        self.watch.take_events().await
    }

    async fn next_events(&mut self) -> Result<Vec<FsEvent>, SandboxError> {
        self.watch.next_events().await
    }
}
