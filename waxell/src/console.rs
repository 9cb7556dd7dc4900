//! The console: the one place the library writes text for a person to read. The embedded default's trace
//! tree and every message (the exit report, a failed endpoint discovery, a bad variable read without
//! `init()`) go through it, to standard error unless `Builder::with_console_writer` names another writer.
//! Nothing else in the library prints.

use std::fmt;
use std::io::Write;
use std::sync::{Arc, Mutex, RwLock};

/// Where console text goes. Cheap to clone: clones share the writer.
#[derive(Clone, Default)]
pub(crate) enum Console {
    /// The process's standard error (locked per write, so lines of concurrent writers do not interleave).
    #[default]
    Stderr,
    /// A writer the user gave `init()`.
    Writer(Arc<Mutex<Box<dyn Write + Send>>>),
}

impl fmt::Debug for Console {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Stderr => "Console::Stderr",
            Self::Writer(_) => "Console::Writer",
        })
    }
}

impl Console {
    pub(crate) fn writer(writer: impl Write + Send + 'static) -> Self {
        Self::Writer(Arc::new(Mutex::new(Box::new(writer))))
    }

    /// Write `text` as it is and flush. A failing writer loses the text: reporting must never fail the
    /// program (as `eprint!` would panic).
    pub(crate) fn print(&self, text: &str) {
        match self {
            Self::Stderr => {
                let mut stderr = std::io::stderr().lock();
                let _ = stderr.write_all(text.as_bytes());
                let _ = stderr.flush();
            }
            Self::Writer(writer) => {
                let mut writer = writer.lock().unwrap_or_else(|p| p.into_inner());
                let _ = writer.write_all(text.as_bytes());
                let _ = writer.flush();
            }
        }
    }

    /// One message line, prefixed `waxell: `.
    pub(crate) fn message(&self, line: impl fmt::Display) {
        self.print(&format!("waxell: {line}\n"));
    }
}

/// The console `init()` set up last (standard error before any `init()`).
static CURRENT: RwLock<Option<Console>> = RwLock::new(None);

/// The console messages go to now.
pub(crate) fn current() -> Console {
    CURRENT
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
        .unwrap_or_default()
}

/// Make `console` the one messages go to (called by `init()`).
pub(crate) fn set_current(console: Console) {
    *CURRENT.write().unwrap_or_else(|p| p.into_inner()) = Some(console);
}
