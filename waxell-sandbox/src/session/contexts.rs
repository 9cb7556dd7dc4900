//! The contexts of one sandbox, each with its own kernel, starting with the default one.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use waxell::sandbox::{CodeContext, SandboxError};

use crate::kernel::KernelProcess;
use crate::paths::HOME_DIR;

/// Id of the context every sandbox starts with.
pub const DEFAULT_CONTEXT_ID: &str = "default";

/// One context: its description and its kernel (`None` after a kill, until the next run starts one).
pub(crate) struct Context {
    pub(crate) info: CodeContext,
    pub(crate) kernel: tokio::sync::Mutex<Option<KernelProcess>>,
}

impl Context {
    /// The directory its kernels start in; `None` = the home directory.
    pub(crate) fn cwd(&self) -> Option<&str> {
        (self.info.cwd != HOME_DIR).then_some(self.info.cwd.as_str())
    }
}

pub(crate) struct Contexts {
    map: Mutex<BTreeMap<String, Arc<Context>>>,
    next_id: AtomicU64,
}

impl Contexts {
    /// The default context, running `kernel` in the home directory.
    pub(crate) fn new(kernel: KernelProcess) -> Self {
        let default = Arc::new(Context {
            info: CodeContext {
                id: DEFAULT_CONTEXT_ID.into(),
                language: "python".into(),
                cwd: HOME_DIR.into(),
            },
            kernel: tokio::sync::Mutex::new(Some(kernel)),
        });
        Self {
            map: Mutex::new(BTreeMap::from([(DEFAULT_CONTEXT_ID.to_owned(), default)])),
            next_id: AtomicU64::new(1),
        }
    }

    fn map(&self) -> MutexGuard<'_, BTreeMap<String, Arc<Context>>> {
        // Nothing panics while holding it; a poisoned map is still consistent.
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn get(&self, id: &str) -> Result<Arc<Context>, SandboxError> {
        self.map().get(id).cloned().ok_or_else(|| not_found(id))
    }

    /// A new context running `kernel` in `cwd` (`None` = home).
    pub(crate) fn add(&self, kernel: KernelProcess, cwd: Option<&str>) -> CodeContext {
        let id = format!("ctx-{}", self.next_id.fetch_add(1, Ordering::Relaxed));
        let info = CodeContext {
            id: id.clone(),
            language: "python".into(),
            cwd: cwd.unwrap_or(HOME_DIR).into(),
        };
        let context = Arc::new(Context {
            info: info.clone(),
            kernel: tokio::sync::Mutex::new(Some(kernel)),
        });
        self.map().insert(id, context);
        info
    }

    pub(crate) fn list(&self) -> Vec<CodeContext> {
        self.map().values().map(|c| c.info.clone()).collect()
    }

    pub(crate) fn remove(&self, id: &str) -> Result<Arc<Context>, SandboxError> {
        self.map().remove(id).ok_or_else(|| not_found(id))
    }

    /// Every context, removed from the sandbox (it is shutting down).
    pub(crate) fn take_all(&self) -> Vec<Arc<Context>> {
        std::mem::take(&mut *self.map()).into_values().collect()
    }
}

/// E2B's exact message, which its SDKs show.
fn not_found(id: &str) -> SandboxError {
    SandboxError::ContextNotFound(format!("Context {id} not found"))
}
