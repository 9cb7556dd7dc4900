//! The polled directory watchers of one sandbox (envd's `CreateWatcher`, `GetWatcherEvents`,
//! `RemoveWatcher`): each holds a live watch until it is removed or the sandbox goes away.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rand::distr::{Alphanumeric, SampleString};
use waxell::sandbox::{DirWatch, FsEvent};

use super::error::ApiError;

#[derive(Default)]
pub(crate) struct Watchers(Mutex<HashMap<String, Watcher>>);

type Watcher = Arc<tokio::sync::Mutex<Box<dyn DirWatch>>>;

impl Watchers {
    /// Keep `watch` under a new id.
    pub(crate) fn add(&self, watch: Box<dyn DirWatch>) -> String {
        let id = Alphanumeric.sample_string(&mut rand::rng(), 20);
        self.map()
            .insert(id.clone(), Arc::new(tokio::sync::Mutex::new(watch)));
        id
    }

    /// The events of watcher `id` since the last call.
    pub(crate) async fn take_events(&self, id: &str) -> Result<Vec<FsEvent>, ApiError> {
        let watch = self
            .map()
            .get(id)
            .cloned()
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
