//! Kernels forked from a zygote: one interpreter per backend that has imported the kernel's modules
//! and made its IPython shell (`zygote_serve` in kernel.py). A kernel forked from it shares those
//! pages with every other kernel until it writes them, so it takes a few MiB of its own instead of
//! the whole interpreter's, and is ready in milliseconds instead of the import's hundreds.
//!
//! The sandbox itself is made as for any process: bubblewrap with the same namespaces, mounts,
//! seccomp filters, uid and cgroup, running a holder (`sleep infinity`) instead of the interpreter.
//! The forked process joins the holder's namespaces (with the rlimits and cgroup first, from
//! outside), then, as its own process in the sandbox's pid namespace, drops to the sandbox's ids
//! and every capability, sets no-new-privs and installs the same seccomp filters before any cell
//! runs. What reaches the zygote are ids, limits and descriptors, never a sandbox's environment or
//! code, so no kernel finds another sandbox's data in the memory it inherits.

use std::io::{self, BufRead, BufReader, IoSlice};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustix::net::{
    sendmsg, socketpair, AddressFamily, SendAncillaryBuffer, SendAncillaryMessage, SendFlags, SocketFlags,
    SocketType,
};
use serde::Serialize;

use crate::local::spawn::{self, ChildSetup, Rlimit, Stream, Streams};

/// The zygote's fd numbers for the kernel's byte code and its control socket.
const FD_CODE: i32 = 3;
const FD_CONTROL: i32 = 4;

/// Runs kernel.py's code (from its byte code on fd 3) without its `main`, then serves fd 4. IPython
/// makes its profile while the shell is made, matplotlib its cache when imported: in the zygote's
/// own directory (its working directory), never the host's home or /tmp. Set here rather than in
/// the environment it starts with, which every kernel would show in `/proc/self/environ`; a kernel
/// then uses the sandbox's (`use_profile_dir` in kernel.py).
const BOOTSTRAP: &str = "import marshal, os\n\
for name, sub in (('IPYTHONDIR', 'ipython'), ('MPLCONFIGDIR', 'matplotlib'), ('HOME', '')):\n    \
os.environ[name] = os.path.join(os.getcwd(), sub)\n\
with open(3, 'rb') as f:\n    code = marshal.loads(f.read()[16:])\n\
g = {'__name__': 'waxell_zygote', '__builtins__': __builtins__}\n\
exec(code, g)\n\
g['zygote_serve'](4)\n";

/// The namespaces a kernel joins, in order. Rootless, the user namespace that owns them comes first:
/// joining a mount namespace takes `CAP_SYS_ADMIN` and `CAP_SYS_CHROOT` in the joiner's own user
/// namespace, which an ordinary user has only once inside. That is the one bubblewrap made first;
/// the holder's own, nested in it (`--disable-userns`), comes last.
const NAMESPACES: [&str; 6] = ["ipc", "uts", "net", "cgroup", "pid", "mnt"];

/// What one kernel start asks of the zygote (kernel.py, `enter_sandbox`).
#[derive(Serialize)]
struct Request<'a> {
    /// The ids to drop to (root); `None` rootless, where the user namespace maps this user's own.
    uid: Option<u32>,
    rlimits: Vec<(i64, u64, u64)>,
    namespaces: Vec<&'a str>,
    procs: usize,
    seccomp: usize,
    cwd: &'a str,
    argv0: &'a str,
}

/// One started kernel, as the zygote reported it.
pub(crate) struct Forked {
    /// The kernel's pid on the host.
    pub(crate) pid: u32,
    /// The zygote writes `exit <wait status>` here when the kernel ends.
    pub(crate) exit: BufReader<UnixStream>,
}

/// What a kernel is started with, besides the holder's namespaces.
pub(crate) struct KernelFds<'a> {
    /// A pidfd of the holder's bwrap, which the zygote kills when the kernel ends: bwrap ends a
    /// sandbox when its program exits, and with it everything the program started (which may hold
    /// the kernel's pipes open, so the host would never see the end), but a forked kernel is not
    /// bwrap's program. Its init, and so the pid namespace, goes with it (`--die-with-parent`).
    pub(crate) holder: BorrowedFd<'a>,
    /// The kernel's stdin (read end), stdout and stderr (write ends).
    pub(crate) stdio: [BorrowedFd<'a>; 3],
    pub(crate) cgroup_procs: &'a [OwnedFd],
    pub(crate) seccomp: &'a [OwnedFd],
}

/// A running zygote and the socket it takes requests on.
struct Running {
    control: OwnedFd,
    child: Mutex<Child>,
    /// Where IPython and matplotlib may write while the zygote prepares (never the host's home).
    _scratch: ScratchDir,
}

/// The backend's zygote, started on first use and again if it ends.
#[derive(Default)]
pub(crate) struct Zygote {
    running: tokio::sync::Mutex<Option<Arc<Running>>>,
}

impl std::fmt::Debug for Zygote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Zygote")
    }
}

impl Zygote {
    /// Fork a kernel into the sandbox whose holder process is `holder` (a host pid). `uid`: the ids
    /// to drop to as root; `None` rootless, where the holder's user namespace maps this user's own.
    pub(crate) async fn fork_kernel(
        &self,
        start: &ZygoteStart<'_>,
        holder: u32,
        uid: Option<u32>,
        rlimits: &[Rlimit],
        fds: KernelFds<'_>,
        timeout: Duration,
    ) -> io::Result<Forked> {
        let running = self.running(start, timeout).await?;
        let mut names: Vec<&str> = Vec::new();
        let mut namespaces = Vec::new();
        for name in NAMESPACES {
            namespaces.push(OwnedFd::from(std::fs::File::open(format!("/proc/{holder}/ns/{name}"))?));
            names.push(name);
        }
        if uid.is_none() {
            let mount = namespaces.last().expect("the mount namespace");
            namespaces.insert(0, crate::local::spawn::owning_user_namespace(mount)?);
            names.insert(0, "user");
            // Then the holder's own, nested in it: there the sandbox's uid is this user's (in the
            // outer one it is 0, for bubblewrap's set-up).
            namespaces.push(OwnedFd::from(std::fs::File::open(format!("/proc/{holder}/ns/user"))?));
            names.push("user");
        }
        let request = Request {
            uid,
            rlimits: rlimits.iter().map(|r| (r.resource as i64, r.soft, r.hard)).collect(),
            namespaces: names,
            procs: fds.cgroup_procs.len(),
            seccomp: fds.seccomp.len(),
            cwd: crate::paths::HOME_DIR,
            argv0: super::launcher::KERNEL_PYC_PATH,
        };
        let json = serde_json::to_vec(&request).map_err(io::Error::other)?;
        let (ours, theirs) = UnixStream::pair()?;
        let mut all: Vec<BorrowedFd<'_>> = vec![theirs.as_fd(), fds.holder];
        all.extend(fds.stdio);
        all.extend(fds.cgroup_procs.iter().map(AsFd::as_fd));
        all.extend(namespaces.iter().map(AsFd::as_fd));
        all.extend(fds.seccomp.iter().map(AsFd::as_fd));
        let mut space = vec![MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(all.len()))];
        let mut ancillary = SendAncillaryBuffer::new(&mut space);
        if !ancillary.push(SendAncillaryMessage::ScmRights(&all)) {
            return Err(io::Error::other("too many descriptors for one request"));
        }
        sendmsg(&running.control, &[IoSlice::new(&json)], &mut ancillary, SendFlags::empty())?;
        drop(theirs);
        drop(namespaces);
        tokio::task::spawn_blocking(move || {
            ours.set_read_timeout(Some(timeout))?;
            let mut exit = BufReader::new(ours);
            let mut line = String::new();
            exit.read_line(&mut line)?;
            match line.trim_end().split_once(' ') {
                Some(("pid", pid)) => Ok(Forked {
                    pid: pid.parse().map_err(io::Error::other)?,
                    exit,
                }),
                Some(("error", why)) => Err(io::Error::other(format!("the forked kernel failed: {why}"))),
                _ => Err(io::Error::other(format!("the zygote answered {line:?}"))),
            }
        })
        .await
        .map_err(io::Error::other)?
    }

    async fn running(&self, start: &ZygoteStart<'_>, timeout: Duration) -> io::Result<Arc<Running>> {
        let mut running = self.running.lock().await;
        if let Some(zygote) = running.as_ref() {
            let alive = matches!(zygote.child.lock().map(|mut c| c.try_wait()), Ok(Ok(None)));
            if alive {
                return Ok(zygote.clone());
            }
            tracing::warn!("the kernel zygote ended; starting another");
        }
        let zygote = Arc::new(start.spawn(timeout).await?);
        *running = Some(zygote.clone());
        Ok(zygote)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(child) = self.child.get_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// How to start the zygote: the sandbox's interpreter, its kernel's byte code and environment.
pub(crate) struct ZygoteStart<'a> {
    pub(crate) python: &'a Path,
    pub(crate) kernel_pyc: &'a [u8],
    pub(crate) env: &'a [(&'a str, &'a str)],
}

impl ZygoteStart<'_> {
    async fn spawn(&self, timeout: Duration) -> io::Result<Running> {
        let scratch = ScratchDir::new()?;
        let (control, theirs) =
            socketpair(AddressFamily::UNIX, SocketType::SEQPACKET, SocketFlags::CLOEXEC, None)?;
        let code = {
            use std::io::{Seek, Write};
            let fd = rustix::fs::memfd_create("waxell-kernel", rustix::fs::MemfdFlags::CLOEXEC)?;
            let mut file = std::fs::File::from(fd);
            file.write_all(self.kernel_pyc)?;
            file.seek(io::SeekFrom::Start(0))?;
            OwnedFd::from(file)
        };
        let kernel_env: serde_json::Map<String, serde_json::Value> = self
            .env
            .iter()
            .filter(|(key, _)| !key.starts_with("SBX_"))
            .map(|(key, value)| ((*key).to_owned(), serde_json::Value::from(*value)))
            .collect();
        let mut command = Command::new(self.python);
        command
            // The kernel's path in the sandbox as its argument: what the code on fd 3 is.
            .args(["-I", "-c", BOOTSTRAP, super::launcher::KERNEL_PYC_PATH])
            .env_clear()
            .envs(self.env.iter().copied())
            .env("SBX_KERNEL_ENV", serde_json::Value::Object(kernel_env).to_string())
            .current_dir(scratch.path());
        let setup = ChildSetup {
            inherit: vec![(code, FD_CODE), (theirs, FD_CONTROL)],
            // It holds one socket per live kernel: as many open files as this process may have.
            rlimits: vec![Rlimit {
                resource: libc::RLIMIT_NOFILE,
                soft: u64::MAX,
                hard: u64::MAX,
            }],
            ..ChildSetup::default()
        };
        let streams = Streams([Stream::Null, Stream::Null, Stream::Inherit]);
        let child = spawn::spawn(command, streams, setup).await?;
        let running = Running {
            control,
            child: Mutex::new(child),
            _scratch: scratch,
        };
        rustix::net::sockopt::set_socket_timeout(&running.control, rustix::net::sockopt::Timeout::Recv, Some(timeout))?;
        let mut ready = [0u8; 16];
        let n = rustix::net::recv(&running.control, &mut ready, rustix::net::RecvFlags::empty())
            .map_err(|e| io::Error::other(format!("the kernel zygote did not start: {e}")))?
            .0;
        rustix::net::sockopt::set_socket_timeout(&running.control, rustix::net::sockopt::Timeout::Recv, None)?;
        if &ready[..n] != b"ready" {
            return Err(io::Error::other("the kernel zygote did not start (see the server's log)"));
        }
        Ok(running)
    }
}

/// The holder's host pid: the child of bubblewrap's init (the child of `launcher`), once it runs
/// the holder program (before that, bubblewrap is still setting the sandbox up).
pub(crate) async fn holder_pid(launcher: &mut Child, program: &str, timeout: Duration) -> io::Result<u32> {
    let deadline = tokio::time::Instant::now() + timeout;
    let expected = format!("{program}\0");
    loop {
        if let Some(status) = launcher.try_wait()? {
            return Err(io::Error::other(format!("bwrap exited with {status}")));
        }
        let holder = only_child(launcher.id()).and_then(only_child);
        if let Some(pid) = holder {
            let started = std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|cmdline| cmdline.starts_with(expected.as_bytes()))
                .unwrap_or(false);
            if started {
                return Ok(pid);
            }
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(io::Error::other("the sandbox's holder did not start in time"));
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// The only child of host process `pid` (bwrap's init, of the launcher; the holder, of the init).
pub(crate) fn only_child(pid: u32) -> Option<u32> {
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok()?;
    children.split_whitespace().next()?.parse().ok()
}

/// The zygote's own 0700 directory, removed with it.
struct ScratchDir(std::path::PathBuf);

impl ScratchDir {
    fn new() -> io::Result<Self> {
        use std::os::unix::fs::DirBuilderExt;
        let mut bytes = [0u8; 8];
        rustix::rand::getrandom(&mut bytes, rustix::rand::GetRandomFlags::empty())?;
        let unique = u64::from_ne_bytes(bytes);
        let path = std::env::temp_dir().join(format!("waxell-zygote-{}-{unique:016x}", std::process::id()));
        std::fs::DirBuilder::new().mode(0o700).create(&path)?;
        Ok(Self(path))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
