//! What every handler shares.

use std::sync::Arc;

use super::config::ServerConfig;
use super::registry::Registry;

/// Shared state of every handler.
pub(crate) struct AppState {
    pub(crate) config: ServerConfig,
    pub(crate) registry: Arc<Registry>,
}
