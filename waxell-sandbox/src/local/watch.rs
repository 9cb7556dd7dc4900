//! Directory watches of the local backend: inotify on the scratch directory, seen from the host.
//!
//! The watched directory is opened beneath the scratch root without following a symlink (as every
//! file operation is, see files.rs), and inotify is pointed at that open directory through
//! `/proc/self/fd/N`, so no path the sandbox controls is ever resolved by the host. A recursive
//! watch opens each subdirectory the same way, also those created later. Events are read as they
//! arrive by a task of the watch (so a directory created now is watched before the next request),
//! mapped as envd maps fsnotify's, and queued for `take_events`.
//!
//! inotify instances are a per-user kernel pool of the host (`fs.inotify.max_user_instances`,
//! 128 by default): [`MAX_INSTANCES`] caps what all sandboxes together may hold, and each watch
//! follows at most [`MAX_DIRS`] directories and queues at most [`MAX_QUEUED`] events.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
use rustix::fs::{Mode, OFlags, ResolveFlags};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::sync::Notify;
use waxell::sandbox::{DirWatch, FsEvent, FsEventKind, LimitKind, SandboxError, WatchOptions};

use super::files::{entry_at, ScratchFiles};

/// inotify instances all sandboxes of this process may hold at once.
const MAX_INSTANCES: usize = 64;
/// Directories one recursive watch follows.
const MAX_DIRS: usize = 1024;
/// Events one watch queues until they are taken; past it the watch reports an overflow.
const MAX_QUEUED: usize = 10_000;

static INSTANCES: AtomicUsize = AtomicUsize::new(0);

const MASK: WatchFlags = WatchFlags::CREATE
    .union(WatchFlags::MOVED_TO)
    .union(WatchFlags::MOVED_FROM)
    .union(WatchFlags::MODIFY)
    .union(WatchFlags::ATTRIB)
    .union(WatchFlags::DELETE)
    .union(WatchFlags::DELETE_SELF)
    .union(WatchFlags::MOVE_SELF)
    .union(WatchFlags::ONLYDIR);

const RESOLVE: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS);

/// Start watching `path` of the sandbox whose scratch directory is `files`.
#[expect(unsafe_code, reason = "tokio's AsyncFd registration is unsafe; the fd it owns is valid")]
pub(crate) fn watch(files: &ScratchFiles, path: &str, options: WatchOptions) -> Result<Box<dyn DirWatch>, SandboxError> {
    let (root, root_path) = files.open_dir(path)?;
    let instance = Instance::take()?;
    let inotify = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK)
        .map_err(|e| SandboxError::Other(format!("watch {path}: inotify: {e}")))?;
    // SAFETY: the AsyncFd owns the OwnedFd, which stays open and the same until it is dropped.
    let inotify = unsafe { AsyncFd::register_with_interest(inotify, Interest::READABLE) }
        .map_err(|e| SandboxError::Other(format!("watch {path}: {}", e.into_parts().1)))?;
    let mut state = State {
        root,
        root_path,
        dirs: HashMap::new(),
        options,
        queued: Vec::new(),
        failure: None,
        buf: vec![MaybeUninit::uninit(); 16 << 10],
    };
    state
        .add_dir(inotify.get_ref(), PathBuf::new())
        .map_err(|e| SandboxError::Other(format!("watch {path}: {e}")))?;
    let shared = Arc::new(Shared {
        inotify,
        state: Mutex::new(state),
        arrived: Notify::new(),
    });
    let reader = tokio::spawn(read_events(shared.clone()));
    Ok(Box::new(InotifyWatch {
        shared,
        reader,
        _instance: instance,
    }))
}

/// One of the [`MAX_INSTANCES`], given back when dropped.
struct Instance;

impl Instance {
    fn take() -> Result<Self, SandboxError> {
        if INSTANCES.fetch_add(1, Ordering::AcqRel) >= MAX_INSTANCES {
            INSTANCES.fetch_sub(1, Ordering::AcqRel);
            return Err(SandboxError::LimitExceeded {
                limit: LimitKind::Watches,
                message: format!("the host's sandboxes already hold {MAX_INSTANCES} directory watches"),
            });
        }
        Ok(Self)
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        INSTANCES.fetch_sub(1, Ordering::AcqRel);
    }
}

struct Shared {
    inotify: AsyncFd<OwnedFd>,
    state: Mutex<State>,
    /// Woken when the reader task queued events.
    arrived: Notify,
}

impl Shared {
    fn take(&self) -> Result<Vec<FsEvent>, SandboxError> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.drain(self.inotify.get_ref());
        if let Some(failure) = state.failure.take() {
            return Err(SandboxError::LimitExceeded {
                limit: LimitKind::Watches,
                message: failure,
            });
        }
        Ok(std::mem::take(&mut state.queued))
    }
}

struct State {
    /// The watched directory (all later opens start from it) and its path in the sandbox.
    root: OwnedFd,
    root_path: String,
    /// Watch descriptor -> directory relative to the watched one.
    dirs: HashMap<i32, PathBuf>,
    options: WatchOptions,
    queued: Vec<FsEvent>,
    failure: Option<String>,
    buf: Vec<MaybeUninit<u8>>,
}

impl State {
    /// Watch `rel` (relative to the root), opened beneath it without following a symlink.
    fn add_dir(&mut self, inotify: &OwnedFd, rel: PathBuf) -> Result<(), String> {
        if self.dirs.len() >= MAX_DIRS {
            return Err(format!("a watch follows at most {MAX_DIRS} directories"));
        }
        let flags = OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::RDONLY;
        let dir = if rel.as_os_str().is_empty() {
            rustix::fs::openat2(&self.root, ".", flags, Mode::empty(), RESOLVE)
        } else {
            rustix::fs::openat2(&self.root, &rel, flags, Mode::empty(), RESOLVE)
        }
        .map_err(|e| format!("{}: {e}", rel.display()))?;
        // The magic link names exactly the directory just opened.
        let wd = inotify::add_watch(inotify, format!("/proc/self/fd/{}", dir.as_raw_fd()), MASK)
            .map_err(|e| format!("{}: {e}", rel.display()))?;
        if self.options.recursive {
            // Subdirectories that exist now (a new directory is followed when its CREATE arrives).
            if let Ok(mut reader) = rustix::fs::Dir::read_from(&dir) {
                let mut subdirs = Vec::new();
                while let Some(Ok(entry)) = reader.read() {
                    let name = entry.file_name().to_bytes();
                    if name != b"." && name != b".." && entry.file_type() == rustix::fs::FileType::Directory {
                        subdirs.push(rel.join(OsStr::from_bytes(name)));
                    }
                }
                self.dirs.insert(wd, rel);
                for subdir in subdirs {
                    self.add_dir(inotify, subdir)?;
                }
                return Ok(());
            }
        }
        self.dirs.insert(wd, rel);
        Ok(())
    }

    /// Read every event the kernel has queued, without waiting.
    fn drain(&mut self, inotify: &OwnedFd) {
        let mut raw = Vec::new();
        let mut reader = inotify::Reader::new(inotify, &mut self.buf);
        loop {
            match reader.next() {
                Ok(event) => raw.push((
                    event.wd(),
                    event.events(),
                    event.file_name().map(|n| OsStr::from_bytes(n.to_bytes()).to_owned()),
                )),
                Err(rustix::io::Errno::AGAIN) => break,
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => {
                    self.failure.get_or_insert_with(|| format!("reading inotify events: {e}"));
                    break;
                }
            }
        }
        for (wd, flags, name) in raw {
            self.record(inotify, wd, flags, name);
        }
    }

    /// Queue the events of one inotify record, as envd maps fsnotify's operations.
    fn record(&mut self, inotify: &OwnedFd, wd: i32, flags: ReadFlags, name: Option<std::ffi::OsString>) {
        if flags.contains(ReadFlags::QUEUE_OVERFLOW) {
            self.failure
                .get_or_insert_with(|| "the kernel dropped events: too many changes at once".into());
            return;
        }
        let Some(dir) = self.dirs.get(&wd).cloned() else {
            return;
        };
        if flags.contains(ReadFlags::IGNORED) {
            self.dirs.remove(&wd);
            return;
        }
        let rel = match &name {
            Some(name) => dir.join(name),
            // An event of the directory itself: only the watched root's are reported (a
            // subdirectory's removal already came as an event of its parent).
            None if dir.as_os_str().is_empty() => dir.clone(),
            None => return,
        };
        let kinds = [
            (ReadFlags::CREATE | ReadFlags::MOVED_TO, FsEventKind::Create),
            (ReadFlags::MOVED_FROM | ReadFlags::MOVE_SELF, FsEventKind::Rename),
            (ReadFlags::ATTRIB, FsEventKind::Chmod),
            (ReadFlags::MODIFY, FsEventKind::Write),
            (ReadFlags::DELETE | ReadFlags::DELETE_SELF, FsEventKind::Remove),
        ];
        if self.options.recursive && flags.contains(ReadFlags::ISDIR) && flags.intersects(ReadFlags::CREATE | ReadFlags::MOVED_TO) {
            if let Err(e) = self.add_dir(inotify, rel.clone()) {
                tracing::debug!("not following new directory: {e}");
            }
        }
        for (mask, kind) in kinds {
            if !flags.intersects(mask) {
                continue;
            }
            if self.queued.len() >= MAX_QUEUED {
                self.failure.get_or_insert_with(|| {
                    format!("more than {MAX_QUEUED} events were not taken: stop the watch and start a new one")
                });
                return;
            }
            let entry = (self.options.include_entry && matches!(kind, FsEventKind::Create | FsEventKind::Write | FsEventKind::Chmod))
                .then(|| self.entry(&rel))
                .flatten();
            self.queued.push(FsEvent {
                name: rel.to_string_lossy().into_owned(),
                kind,
                entry,
            });
        }
    }

    /// The entry at `rel` as it is now, if it still exists.
    fn entry(&self, rel: &Path) -> Option<waxell::sandbox::EntryInfo> {
        let (parent, name) = (rel.parent()?, rel.file_name()?);
        let parent = if parent.as_os_str().is_empty() {
            rustix::fs::openat2(&self.root, ".", OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::RDONLY, Mode::empty(), RESOLVE)
        } else {
            rustix::fs::openat2(&self.root, parent, OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::RDONLY, Mode::empty(), RESOLVE)
        }
        .ok()?;
        let path = format!("{}/{}", self.root_path.trim_end_matches('/'), rel.display());
        entry_at(&parent, name, path).ok()
    }
}

/// Reads events as they arrive, so a new directory is followed before the next request; aborted
/// when the watch is dropped.
async fn read_events(shared: Arc<Shared>) {
    loop {
        let Ok(mut ready) = shared.inotify.readable().await else {
            return;
        };
        {
            let mut state = shared.state.lock().unwrap_or_else(|p| p.into_inner());
            state.drain(shared.inotify.get_ref());
        }
        // Read to EAGAIN above; readiness that arrived since is kept (tokio compares ticks).
        ready.clear_ready();
        shared.arrived.notify_one();
    }
}

struct InotifyWatch {
    shared: Arc<Shared>,
    reader: tokio::task::JoinHandle<()>,
    _instance: Instance,
}

impl Drop for InotifyWatch {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

#[async_trait]
impl DirWatch for InotifyWatch {
    async fn take_events(&mut self) -> Result<Vec<FsEvent>, SandboxError> {
        self.shared.take()
    }

    async fn next_events(&mut self) -> Result<Vec<FsEvent>, SandboxError> {
        let shared = self.shared.clone();
        loop {
            let arrived = shared.arrived.notified();
            let events = shared.take()?;
            if !events.is_empty() {
                return Ok(events);
            }
            arrived.await;
        }
    }
}
