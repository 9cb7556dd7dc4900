//! The polled directory watchers of one sandbox (envd's `CreateWatcher`, `GetWatcherEvents`,
//! `RemoveWatcher`): each holds a live watch until it is removed or the sandbox goes away. A
//! sandbox restored from its own checkpoint (a resume, a restore in place) starts each again under
//! the same id ([`Watchers::specs`]): the watch itself held the host's descriptors and ended.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rand::distr::{Alphanumeric, SampleString};
use waxell::sandbox::{DirWatch, FsEvent, WatchOptions};

use super::error::ApiError;

#[derive(Default)]
pub(crate) struct Watchers(Mutex<HashMap<String, Watcher>>);

struct Watcher {
    /// What it watches, to start it again after a restore.
    spec: WatcherSpec,
    watch: Arc<tokio::sync::Mutex<Box<dyn DirWatch>>>,
}

/// A watcher's id, directory and options.
#[derive(Clone, Debug)]
pub(crate) struct WatcherSpec {
    pub(crate) id: String,
    pub(crate) path: String,
    pub(crate) options: WatchOptions,
}

impl Watchers {
    /// Keep `watch` of `path` under a new id.
    pub(crate) fn add(&self, path: &str, options: WatchOptions, watch: Box<dyn DirWatch>) -> String {
        let id = Alphanumeric.sample_string(&mut rand::rng(), 20);
        let spec = WatcherSpec {
            id: id.clone(),
            path: path.to_owned(),
            options,
        };
        self.add_as(spec, watch);
        id
    }

    /// Keep `watch` under `spec`'s id (a watcher started again after a restore).
    pub(crate) fn add_as(&self, spec: WatcherSpec, watch: Box<dyn DirWatch>) {
        let watch = Arc::new(tokio::sync::Mutex::new(watch));
        self.map().insert(spec.id.clone(), Watcher { spec, watch });
    }

    /// What every watcher watches.
    pub(crate) fn specs(&self) -> Vec<WatcherSpec> {
        self.map().values().map(|w| w.spec.clone()).collect()
    }

    /// The events of watcher `id` since the last call.
    pub(crate) async fn take_events(&self, id: &str) -> Result<Vec<FsEvent>, ApiError> {
        let watch = self
            .map()
            .get(id)
            .map(|w| w.watch.clone())
            .ok_or_else(|| ApiError::not_found(format!("no watcher {id:?} in this sandbox")))?;
        let mut watch = watch.lock().await;
        Ok(watch.take_events().await?)
    }

    /// Stop watcher `id` (unknown ids are ignored, as envd does).
    pub(crate) fn remove(&self, id: &str) {
        self.map().remove(id);
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Watcher>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}
