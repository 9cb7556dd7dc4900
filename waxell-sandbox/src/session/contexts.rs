//! The contexts of one sandbox, each with its own kernel, listed as E2B lists them: the default
//! Python context first, then the default JavaScript one (when the sandbox runs JavaScript), then
//! the others in the order they were made. A language's default context (what a run with only a
//! `language` uses) starts its kernel on its first run.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use waxell::sandbox::{CodeContext, SandboxError};

use crate::kernel::{KernelProcess, Language, Languages};
use crate::paths::HOME_DIR;

/// Id of the context every sandbox starts with.
pub const DEFAULT_CONTEXT_ID: &str = "default";

/// One context: its description and its kernel (`None` until its first run, and after a kill
/// until the next run starts one).
pub(crate) struct Context {
    pub(crate) info: CodeContext,
    pub(crate) language: Language,
    pub(crate) kernel: tokio::sync::Mutex<Option<KernelProcess>>,
}

impl Context {
    /// The directory its kernels start in; `None` = the home directory.
    pub(crate) fn cwd(&self) -> Option<&str> {
        (self.info.cwd != HOME_DIR).then_some(self.info.cwd.as_str())
    }
}

pub(crate) struct Contexts {
    /// In listing order.
    list: Mutex<Vec<Arc<Context>>>,
    next_id: AtomicU64,
}

/// The id of `language`'s default context.
fn default_id(language: Language) -> String {
    match language {
        Language::Python => DEFAULT_CONTEXT_ID.to_owned(),
        other => format!("{DEFAULT_CONTEXT_ID}-{}", other.name()),
    }
}

fn context(id: String, language: Language, cwd: Option<&str>, kernel: Option<KernelProcess>) -> Arc<Context> {
    Arc::new(Context {
        info: CodeContext {
            id,
            language: language.name().into(),
            cwd: cwd.unwrap_or(HOME_DIR).into(),
        },
        language,
        kernel: tokio::sync::Mutex::new(kernel),
    })
}

impl Contexts {
    /// The default context, running `kernel` in the home directory, and the default JavaScript
    /// context (started on its first run) when the sandbox runs JavaScript.
    pub(crate) fn new(kernel: KernelProcess, languages: &Languages) -> Self {
        let mut list = vec![context(default_id(Language::Python), Language::Python, None, Some(kernel))];
        if languages.has(Language::JavaScript) {
            let language = Language::JavaScript;
            list.push(context(default_id(language), language, None, None));
        }
        Self {
            list: Mutex::new(list),
            next_id: AtomicU64::new(1),
        }
    }

    /// Contexts restored from a checkpoint, in its order (`(id, language, cwd, kernel)`).
    #[cfg_attr(not(all(feature = "server", feature = "container")), allow(dead_code, reason = "the server's memory pause, with the container backend"))]
    pub(crate) fn restored(saved: Vec<(String, Language, String, Option<KernelProcess>)>) -> Self {
        let next = saved
            .iter()
            .filter_map(|(id, ..)| id.strip_prefix("ctx-")?.parse::<u64>().ok())
            .max()
            .unwrap_or(0);
        let list = saved
            .into_iter()
            .map(|(id, language, cwd, kernel)| context(id, language, Some(&cwd), kernel))
            .collect();
        Self {
            list: Mutex::new(list),
            next_id: AtomicU64::new(next + 1),
        }
    }

    /// Every context, in listing order.
    #[cfg_attr(not(all(feature = "server", feature = "container")), allow(dead_code, reason = "the server's memory pause, with the container backend"))]
    pub(crate) fn all(&self) -> Vec<Arc<Context>> {
        self.list_guard().clone()
    }

    fn list_guard(&self) -> MutexGuard<'_, Vec<Arc<Context>>> {
        // Nothing panics while holding it; a poisoned list is still consistent.
        self.list.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn get(&self, id: &str) -> Result<Arc<Context>, SandboxError> {
        self.list_guard()
            .iter()
            .find(|c| c.info.id == id)
            .cloned()
            .ok_or_else(|| not_found(id))
    }

    /// `language`'s default context, made (without a kernel yet) on first use.
    pub(crate) fn default_for(&self, language: Language) -> Arc<Context> {
        let id = default_id(language);
        let mut list = self.list_guard();
        if let Some(found) = list.iter().find(|c| c.info.id == id) {
            return found.clone();
        }
        let made = context(id, language, None, None);
        list.push(made.clone());
        made
    }

    /// A new context running `kernel` in `cwd` (`None` = home).
    pub(crate) fn add(&self, kernel: KernelProcess, language: Language, cwd: Option<&str>) -> CodeContext {
        let id = format!("ctx-{}", self.next_id.fetch_add(1, Ordering::Relaxed));
        let made = context(id, language, cwd, Some(kernel));
        let info = made.info.clone();
        self.list_guard().push(made);
        info
    }

    pub(crate) fn list(&self) -> Vec<CodeContext> {
        self.list_guard().iter().map(|c| c.info.clone()).collect()
    }

    pub(crate) fn remove(&self, id: &str) -> Result<Arc<Context>, SandboxError> {
        let mut list = self.list_guard();
        let index = list.iter().position(|c| c.info.id == id).ok_or_else(|| not_found(id))?;
        Ok(list.remove(index))
    }

    /// Every context, removed from the sandbox (it is shutting down).
    pub(crate) fn take_all(&self) -> Vec<Arc<Context>> {
        std::mem::take(&mut *self.list_guard())
    }
}

/// E2B's exact message, which its SDKs show.
fn not_found(id: &str) -> SandboxError {
    SandboxError::ContextNotFound(format!("Context {id} not found"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Restored from a checkpoint: the contexts in their order, and new ones never reuse an id.
    #[test]
    fn restored_contexts_keep_their_order_and_ids() {
        let contexts = Contexts::restored(vec![
            ("default".into(), Language::Python, HOME_DIR.into(), None),
            ("ctx-7".into(), Language::Python, "/home/user/work".into(), None),
            ("ctx-3".into(), Language::JavaScript, HOME_DIR.into(), None),
        ]);
        let listed: Vec<(String, String, String)> =
            contexts.list().into_iter().map(|c| (c.id, c.language, c.cwd)).collect();
        assert_eq!(
            listed,
            [
                ("default".into(), "python".into(), HOME_DIR.into()),
                ("ctx-7".into(), "python".into(), "/home/user/work".into()),
                ("ctx-3".into(), "javascript".into(), HOME_DIR.into()),
            ]
        );
        assert_eq!(contexts.get("ctx-7").unwrap().cwd(), Some("/home/user/work"));
        assert_eq!(contexts.next_id.load(Ordering::Relaxed), 8);
    }
}
