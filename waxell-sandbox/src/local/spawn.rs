//! The only `unsafe` in the crate: starting the launcher with inherited fds, cgroup membership,
//! namespaces to join and rlimits applied between `fork` and `exec`, from one long-lived thread;
//! the short-lived child that makes a sandbox's mount namespace (rootless, with a user namespace)
//! and mounts its tmpfs file systems there ([`spawn_mount_holder`]); and the child that makes the memory
//! watchdog's `sock_diag` socket inside a sandbox's network namespace ([`sock_diag_socket_in`]).
//!
//! Why a dedicated thread: bwrap's `--die-with-parent` uses `PR_SET_PDEATHSIG`, whose "parent" is the
//! *thread* that forked. Spawning from a tokio blocking-pool thread would kill the sandbox when that
//! thread retires, so every spawn goes through one thread that lives as long as the process. That
//! thread has a descriptor table of its own (`unshare(CLONE_FILES)`), and each spawn's descriptors
//! reach it over a socket: a fork copies only those, not the process's several per live sandbox.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};

/// A resource limit applied to the launcher (and inherited by everything in the sandbox).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rlimit {
    pub(crate) resource: libc::__rlimit_resource_t,
    pub(crate) soft: u64,
    pub(crate) hard: u64,
}

/// What the child gets between `fork` and `exec`.
#[derive(Debug, Default)]
pub(crate) struct ChildSetup {
    /// `(fd in the parent, fd number in the child)`; the child copy is inheritable.
    pub(crate) inherit: Vec<(OwnedFd, RawFd)>,
    /// Pre-opened `cgroup.procs` files; the child writes "0" to each to join before exec.
    pub(crate) cgroup_procs: Vec<OwnedFd>,
    /// Namespaces to join, in order: the sandbox's mount namespace, where its tmpfs mounts are
    /// (rootless, its user namespace before it; see `mounts::MountNamespace`).
    pub(crate) join: Vec<OwnedFd>,
    pub(crate) rlimits: Vec<Rlimit>,
}

/// Child fd numbers must stay below this; inherited fds are first moved above it.
const TARGET_FD_CEILING: RawFd = 64;

impl ChildSetup {
    /// Runs in the forked child: async-signal-safe calls only, no allocation.
    fn apply(&self) -> io::Result<()> {
        // Join the cgroups first, while every parent fd still means what it meant: a `cgroup.procs`
        // fd can carry a target number (say 15), and after phase 2 that number is the kernel's
        // memfd, so a late write would land "0\n" in the kernel source instead of the cgroup.
        for fd in &self.cgroup_procs {
            // SAFETY: writes two bytes from a static buffer to an fd we own.
            if unsafe { libc::write(fd.as_raw_fd(), b"0\n".as_ptr().cast(), 2) } < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        for fd in &self.join {
            // SAFETY: setns on an fd we own; the forked child is single-threaded, as setns to a
            // user namespace requires.
            if unsafe { libc::setns(fd.as_raw_fd(), 0) } < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        // Phase 1: move every source fd above the targets so no dup2 clobbers a source not yet moved.
        let mut moved = [0 as RawFd; 16];
        if self.inherit.len() > moved.len() {
            return Err(io::Error::from_raw_os_error(libc::EMFILE));
        }
        for (slot, (fd, _)) in moved.iter_mut().zip(&self.inherit) {
            // SAFETY: fcntl on an fd we own; F_DUPFD_CLOEXEC only allocates a new descriptor.
            let copy = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, TARGET_FD_CEILING) };
            if copy < 0 {
                return Err(io::Error::last_os_error());
            }
            *slot = copy;
        }
        // Phase 2: place them; dup2's copy does not carry CLOEXEC, so it survives exec.
        for (copy, (_, target)) in moved.iter().zip(&self.inherit) {
            // SAFETY: both are valid descriptor numbers; target < TARGET_FD_CEILING <= copy.
            if unsafe { libc::dup2(*copy, *target) } < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        for limit in &self.rlimits {
            // Never above the launcher's own hard limit (raising needs CAP_SYS_RESOURCE, which a
            // rootless launcher, or a root one in a container, lacks); lowering always works.
            let mut current = libc::rlimit {
                rlim_cur: 0,
                rlim_max: libc::RLIM_INFINITY,
            };
            // SAFETY: getrlimit writes into a valid, initialised struct.
            if unsafe { libc::getrlimit(limit.resource, &mut current) } < 0 {
                current.rlim_max = libc::RLIM_INFINITY;
            }
            let hard = limit.hard.min(current.rlim_max);
            let value = libc::rlimit {
                rlim_cur: limit.soft.min(hard),
                rlim_max: hard,
            };
            // SAFETY: setrlimit reads a valid, initialised struct.
            if unsafe { libc::setrlimit(limit.resource, &value) } < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

/// One of a child's standard streams, as the spawner thread is to set it up.
#[derive(Debug)]
pub(crate) enum Stream {
    Null,
    Inherit,
    /// A pipe: the child gets one end, the caller the other (`Child::stdin` and so on).
    Piped,
    Fd(OwnedFd),
}

/// A child's stdin, stdout and stderr.
#[derive(Debug)]
pub(crate) struct Streams(pub(crate) [Stream; 3]);

/// What the child does between `fork` and `exec`.
enum PreExec {
    Child(ChildSetup),
    MountHolder(HolderSetup),
}

/// A spawn request as the spawner thread gets it: its descriptors arrive beside it over the
/// spawner's socket, in the order `with_fds` takes them back.
struct SpawnJob {
    command: Command,
    streams: [StreamKind; 3],
    pre_exec: PreExecShape,
    fds: usize,
    /// A std channel: a tokio waker would write to the runtime's eventfd by a number this
    /// thread's table does not have.
    reply: mpsc::Sender<io::Result<Child>>,
}

#[derive(Clone, Copy)]
enum StreamKind {
    Null,
    Inherit,
    Fd,
}

enum PreExecShape {
    Child {
        targets: Vec<RawFd>,
        procs: usize,
        join: usize,
        rlimits: Vec<Rlimit>,
    },
    MountHolder(HolderSetup),
}

/// The most descriptors one spawn passes: 16 inherited, the cgroup files, namespaces, 3 streams.
const MAX_SPAWN_FDS: usize = 32;

struct Spawner {
    jobs: mpsc::Sender<SpawnJob>,
    /// Our end of the socket the jobs' descriptors go through to the spawner thread's table.
    fds: OwnedFd,
}

/// The spawner thread. It forks every launcher from a descriptor table of its own, which holds
/// only its standard streams, its socket and the descriptors of the spawn at hand: a fork copies
/// the forking thread's table and `exec` closes it again, which from the process's shared table
/// (several descriptors per live sandbox) cost each spawn time in proportion to the sandboxes
/// alive, and held every spawn up behind it. No descriptor of the process reaches a launcher
/// unless it was passed for that spawn, whether or not it is close-on-exec.
fn spawner() -> io::Result<&'static Mutex<Spawner>> {
    static SPAWNER: OnceLock<Result<Mutex<Spawner>, String>> = OnceLock::new();
    SPAWNER
        .get_or_init(|| start_spawner().map(Mutex::new).map_err(|e| e.to_string()))
        .as_ref()
        .map_err(|e| io::Error::other(format!("cannot start the sandbox spawner thread: {e}")))
}

fn start_spawner() -> io::Result<Spawner> {
    use rustix::net::{socketpair, AddressFamily, SocketFlags, SocketType};
    let (ours, theirs) = socketpair(AddressFamily::UNIX, SocketType::SEQPACKET, SocketFlags::CLOEXEC, None)?;
    let (jobs, rx) = mpsc::channel::<SpawnJob>();
    let (started, unshared) = mpsc::channel::<io::Result<()>>();
    let socket = theirs.as_raw_fd();
    std::thread::Builder::new()
        .name("waxell-sandbox-spawner".into())
        .spawn(move || {
            if let Err(e) = own_descriptor_table(socket) {
                let _ = started.send(Err(e));
                return;
            }
            let _ = started.send(Ok(()));
            // SAFETY: the socket is open in this table (kept by `own_descriptor_table`) and
            // owned by this thread alone from here.
            let socket = unsafe { OwnedFd::from_raw_fd(socket) };
            for job in rx {
                let reply = match receive_fds(&socket, job.fds) {
                    Ok(fds) => run_job(job.command, job.streams, job.pre_exec, fds),
                    Err(e) => Err(e),
                };
                let _ = job.reply.send(reply);
            }
        })?;
    unshared
        .recv()
        .map_err(|_| io::Error::other("the spawner thread ended at once"))??;
    // The thread has its own copy now; the process's table no longer needs this end.
    drop(theirs);
    Ok(Spawner { jobs, fds: ours })
}

/// Gives the calling thread a descriptor table of its own (`unshare(CLONE_FILES)` affects this
/// thread only) and closes all of it but the standard streams and `keep`.
fn own_descriptor_table(keep: RawFd) -> io::Result<()> {
    // SAFETY: unshare and close_range change this thread's own table; the descriptors closed are
    // this table's copies, the process's table keeps its own.
    unsafe {
        if libc::unshare(libc::CLONE_FILES) < 0 {
            return Err(io::Error::last_os_error());
        }
        for (first, last) in [(3, keep - 1), (keep + 1, libc::c_int::MAX)] {
            if first <= last && libc::syscall(libc::SYS_close_range, first as libc::c_uint, last as libc::c_uint, 0) < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        // A closed standard stream would be the number the first received descriptor takes,
        // which the child's stream set-up would then overwrite.
        for fd in 0..3 {
            if libc::fcntl(fd, libc::F_GETFD) < 0 && libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) < 0 {
                return Err(io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

fn send_fds(socket: &OwnedFd, fds: &[OwnedFd]) -> io::Result<()> {
    use rustix::net::{sendmsg, SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    use std::os::fd::{AsFd, BorrowedFd};
    let borrowed: Vec<BorrowedFd<'_>> = fds.iter().map(AsFd::as_fd).collect();
    let mut space = vec![std::mem::MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(MAX_SPAWN_FDS))];
    let mut ancillary = SendAncillaryBuffer::new(&mut space);
    if !borrowed.is_empty() && !ancillary.push(SendAncillaryMessage::ScmRights(&borrowed)) {
        return Err(io::Error::other("too many descriptors for one spawn"));
    }
    sendmsg(socket, &[io::IoSlice::new(b"s")], &mut ancillary, SendFlags::empty())?;
    Ok(())
}

fn receive_fds(socket: &OwnedFd, expected: usize) -> io::Result<Vec<OwnedFd>> {
    use rustix::net::{recvmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags};
    let mut space = vec![std::mem::MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(MAX_SPAWN_FDS))];
    let mut ancillary = RecvAncillaryBuffer::new(&mut space);
    let mut byte = [0u8; 1];
    let msg = recvmsg(socket, &mut [io::IoSliceMut::new(&mut byte)], &mut ancillary, RecvFlags::CMSG_CLOEXEC)?;
    let mut fds = Vec::new();
    for message in ancillary.drain() {
        if let RecvAncillaryMessage::ScmRights(rights) = message {
            fds.extend(rights);
        }
    }
    if msg.flags.contains(ReturnFlags::CTRUNC) || fds.len() != expected {
        return Err(io::Error::other(format!(
            "got {} descriptors where {expected} were sent",
            fds.len()
        )));
    }
    Ok(fds)
}

/// In the spawner thread: the request's streams and set-up with the descriptors as this table
/// numbers them, then the spawn.
fn run_job(mut command: Command, streams: [StreamKind; 3], shape: PreExecShape, fds: Vec<OwnedFd>) -> io::Result<Child> {
    use std::process::Stdio;
    let mut fds = fds.into_iter();
    let mut next = || fds.next().ok_or_else(|| io::Error::other("a spawn's descriptors ran short"));
    let mut stdio = Vec::with_capacity(3);
    for kind in streams {
        stdio.push(match kind {
            StreamKind::Null => Stdio::null(),
            StreamKind::Inherit => Stdio::inherit(),
            StreamKind::Fd => Stdio::from(next()?),
        });
    }
    let [stdin, stdout, stderr]: [Stdio; 3] = stdio.try_into().map_err(|_| io::Error::other("three streams"))?;
    command.stdin(stdin).stdout(stdout).stderr(stderr);
    let pre_exec = match shape {
        PreExecShape::Child {
            targets,
            procs,
            join,
            rlimits,
        } => PreExec::Child(ChildSetup {
            inherit: targets.into_iter().map(|t| Ok((next()?, t))).collect::<io::Result<_>>()?,
            cgroup_procs: (0..procs).map(|_| next()).collect::<io::Result<_>>()?,
            join: (0..join).map(|_| next()).collect::<io::Result<_>>()?,
            rlimits,
        }),
        PreExecShape::MountHolder(setup) => PreExec::MountHolder(setup),
    };
    match pre_exec {
        // SAFETY: `ChildSetup::apply` only makes async-signal-safe syscalls (fcntl, dup2, write,
        // setrlimit) on data prepared before the fork and never allocates.
        PreExec::Child(setup) => unsafe {
            command.pre_exec(move || setup.apply());
        },
        // SAFETY: `HolderSetup::apply` only makes async-signal-safe syscalls (unshare, open, write,
        // close, mount) on data prepared before the fork and never allocates.
        PreExec::MountHolder(setup) => unsafe {
            command.pre_exec(move || setup.apply());
        },
    }
    command.spawn()
}

/// Hands a spawn to the spawner thread; returns the caller's ends of the piped streams.
fn submit(
    command: Command,
    streams: Streams,
    pre_exec: PreExec,
    reply: mpsc::Sender<io::Result<Child>>,
) -> io::Result<[Option<OwnedFd>; 3]> {
    let mut fds = Vec::new();
    let mut kinds = [StreamKind::Null; 3];
    let mut ours: [Option<OwnedFd>; 3] = [None, None, None];
    for (i, stream) in streams.0.into_iter().enumerate() {
        kinds[i] = match stream {
            Stream::Null => StreamKind::Null,
            Stream::Inherit => StreamKind::Inherit,
            Stream::Fd(fd) => {
                fds.push(fd);
                StreamKind::Fd
            }
            Stream::Piped => {
                let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
                let (theirs, kept) = if i == 0 { (read, write) } else { (write, read) };
                fds.push(theirs);
                ours[i] = Some(kept);
                StreamKind::Fd
            }
        };
    }
    let shape = match pre_exec {
        PreExec::Child(setup) => {
            let targets = setup.inherit.iter().map(|(_, target)| *target).collect();
            let (procs, join) = (setup.cgroup_procs.len(), setup.join.len());
            fds.extend(setup.inherit.into_iter().map(|(fd, _)| fd));
            fds.extend(setup.cgroup_procs);
            fds.extend(setup.join);
            PreExecShape::Child {
                targets,
                procs,
                join,
                rlimits: setup.rlimits,
            }
        }
        PreExec::MountHolder(setup) => PreExecShape::MountHolder(setup),
    };
    let spawner = spawner()?
        .lock()
        .map_err(|_| io::Error::other("sandbox spawner lock poisoned"))?;
    // Under the lock: each job's descriptors are the next message on the socket.
    send_fds(&spawner.fds, &fds)?;
    spawner
        .jobs
        .send(SpawnJob {
            command,
            streams: kinds,
            pre_exec: shape,
            fds: fds.len(),
            reply,
        })
        .map_err(|_| io::Error::other("sandbox spawner thread is gone"))?;
    Ok(ours)
}

/// Gives `child` the caller's ends of its piped streams.
fn with_pipes(mut child: Child, [stdin, stdout, stderr]: [Option<OwnedFd>; 3]) -> Child {
    child.stdin = stdin.map(std::process::ChildStdin::from);
    child.stdout = stdout.map(std::process::ChildStdout::from);
    child.stderr = stderr.map(std::process::ChildStderr::from);
    child
}

/// Spawn `command` from the long-lived spawner thread with `streams` and `setup` applied in the
/// child (any stdio set on `command` itself is replaced). The child gets its own process group so
/// the whole launcher can be signalled at once.
pub(crate) async fn spawn(mut command: Command, streams: Streams, setup: ChildSetup) -> io::Result<Child> {
    command.process_group(0);
    let (reply, result) = mpsc::channel();
    let pipes = submit(command, streams, PreExec::Child(setup), reply)?;
    let child = tokio::task::spawn_blocking(move || result.recv())
        .await
        .map_err(io::Error::other)?
        .map_err(|_| io::Error::other("sandbox spawner thread dropped the request"))??;
    Ok(with_pipes(child, pipes))
}

/// What the mount holder's child does before it execs: its own mount namespace (rootless, in its
/// own user namespace mapping only this user's ids), and the tmpfs mounts (all prepared before the
/// fork).
#[derive(Debug)]
pub(crate) struct HolderSetup {
    /// Rootless: the new user namespace's `uid_map` and `gid_map`.
    pub(crate) id_maps: Option<(Vec<u8>, Vec<u8>)>,
    /// `(target, mount options)`, NUL-terminated.
    pub(crate) mounts: Vec<(std::ffi::CString, std::ffi::CString)>,
}

/// Write `data` to the procfs file `path` (in the forked child: syscalls only).
fn write_proc(path: &std::ffi::CStr, data: &[u8]) -> io::Result<()> {
    // SAFETY: open/write/close on a NUL-terminated path and a buffer prepared before the fork.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let written = libc::write(fd, data.as_ptr().cast(), data.len());
        let error = io::Error::last_os_error();
        libc::close(fd);
        if written != data.len() as isize {
            return Err(error);
        }
    }
    Ok(())
}

impl HolderSetup {
    /// Runs in the forked child: the mounts are made here, before `exec` (rootless, the new user
    /// namespace's capabilities are dropped there: the ids are not 0 inside).
    fn apply(&self) -> io::Result<()> {
        let user = if self.id_maps.is_some() { libc::CLONE_NEWUSER } else { 0 };
        // SAFETY: unshare/mount with NUL-terminated strings prepared before the fork.
        unsafe {
            if libc::unshare(user | libc::CLONE_NEWNS) < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        if let Some((uid_map, gid_map)) = &self.id_maps {
            write_proc(c"/proc/self/setgroups", b"deny")?;
            write_proc(c"/proc/self/uid_map", uid_map)?;
            write_proc(c"/proc/self/gid_map", gid_map)?;
        }
        // SAFETY: as above.
        unsafe {
            // Nothing mounted here propagates back to the host's mount namespace.
            let none = std::ptr::null();
            if libc::mount(none, c"/".as_ptr(), none, libc::MS_REC | libc::MS_PRIVATE, std::ptr::null()) < 0 {
                return Err(io::Error::last_os_error());
            }
            for (target, options) in &self.mounts {
                let flags = libc::MS_NOSUID | libc::MS_NODEV;
                let data = options.as_ptr().cast();
                if libc::mount(c"waxell-sandbox".as_ptr(), target.as_ptr(), c"tmpfs".as_ptr(), flags, data) < 0 {
                    return Err(io::Error::last_os_error());
                }
            }
        }
        Ok(())
    }
}

/// Start `command` (a process that waits for its stdin to close) in the new namespaces set up by
/// `setup`. The caller opens the namespaces through `/proc/<pid>/ns` and then
/// lets it exit: open namespace fds keep them, and their mounts, alive.
pub(crate) fn spawn_mount_holder(command: Command, streams: Streams, setup: HolderSetup) -> io::Result<Child> {
    let (reply, result) = mpsc::channel();
    let pipes = submit(command, streams, PreExec::MountHolder(setup), reply)?;
    let child = result
        .recv()
        .map_err(|_| io::Error::other("sandbox spawner thread dropped the request"))??;
    Ok(with_pipes(child, pipes))
}

/// A `NETLINK_SOCK_DIAG` socket inside the network namespace `net`, for the memory watchdog to
/// list the sandbox's socket queues (`kernel_buffers.rs`). The socket's namespace is fixed when it
/// is made, so a short-lived child makes it: joining a network namespace owned by another user
/// namespace takes `CAP_SYS_ADMIN` in both, which an ordinary user has only after joining that
/// user namespace (`user`, one this user created), and a process can join a user namespace only
/// while single-threaded. The child sends the socket back over a socket pair and execs `true`.
pub(crate) fn sock_diag_socket_in(true_bin: &std::path::Path, user: Option<&OwnedFd>, net: &OwnedFd) -> io::Result<OwnedFd> {
    let mut pair = [0 as RawFd; 2];
    // SAFETY: socketpair writes two descriptors into a valid array.
    if unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0, pair.as_mut_ptr()) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just made and are owned by nothing else.
    let (ours, theirs) = unsafe { (OwnedFd::from_raw_fd(pair[0]), OwnedFd::from_raw_fd(pair[1])) };
    let (user, net, channel) = (user.map(|f| f.as_raw_fd()), net.as_raw_fd(), theirs.as_raw_fd());
    let mut command = Command::new(true_bin);
    command
        .env_clear()
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: `send_sock_diag_socket` makes only async-signal-safe syscalls (setns, socket,
    // sendmsg) on stack data and never allocates.
    unsafe {
        command.pre_exec(move || send_sock_diag_socket(user, net, channel));
    }
    let status = command.spawn()?.wait()?;
    drop(theirs);
    if !status.success() {
        return Err(io::Error::other(format!("the sock_diag helper exited with {status}")));
    }
    receive_fds(&ours, 1)
        .map_err(|e| io::Error::other(format!("the sock_diag helper's socket: {e}")))?
        .pop()
        .ok_or_else(|| io::Error::other("the sock_diag helper sent no descriptor"))
}

/// The user namespace owning the namespace `ns` (`NS_GET_USERNS`): the one to join before a
/// network namespace, which may be an ancestor of the user namespace of its processes (bubblewrap
/// nests one for `--disable-userns`).
pub(crate) fn owning_user_namespace(ns: &OwnedFd) -> io::Result<OwnedFd> {
    const NS_GET_USERNS: libc::Ioctl = 0xb701;
    // SAFETY: NS_GET_USERNS takes no argument and returns a new descriptor (or -1).
    let fd = unsafe { libc::ioctl(ns.as_raw_fd(), NS_GET_USERNS) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just made this descriptor for us (close-on-exec).
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// In the forked child: join the namespaces, make the socket and send it over `channel`.
fn send_sock_diag_socket(user: Option<RawFd>, net: RawFd, channel: RawFd) -> io::Result<()> {
    // SAFETY: setns/socket/sendmsg on descriptors inherited from the parent; the message and
    // its control buffer live on this stack frame and are fully initialised before the call.
    unsafe {
        if let Some(user) = user {
            if libc::setns(user, libc::CLONE_NEWUSER) < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        if libc::setns(net, libc::CLONE_NEWNET) < 0 {
            return Err(io::Error::last_os_error());
        }
        let socket = libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, libc::NETLINK_SOCK_DIAG);
        if socket < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut byte = 0u8;
        let mut iov = libc::iovec {
            iov_base: (&raw mut byte).cast(),
            iov_len: 1,
        };
        let mut control = [0u64; 4];
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &raw mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = libc::CMSG_SPACE(size_of::<libc::c_int>() as u32) as _;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(size_of::<libc::c_int>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::c_int>(), socket);
        if libc::sendmsg(channel, &msg, 0) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}


#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek, SeekFrom, Write};

    /// The spawner forks from a descriptor table of its own: a descriptor the process holds,
    /// even one without close-on-exec, never reaches a launcher unless passed for that spawn.
    #[tokio::test]
    async fn a_launcher_gets_only_the_descriptors_passed_for_its_spawn() {
        let null = rustix::fs::open("/dev/null", rustix::fs::OFlags::RDONLY, rustix::fs::Mode::empty()).unwrap();
        // SAFETY: F_DUPFD allocates a new descriptor (inheritable: no close-on-exec) owned below.
        let leaked = unsafe { libc::fcntl(null.as_raw_fd(), libc::F_DUPFD, 100) };
        assert!(leaked >= 100, "an inheritable descriptor of the process");
        // SAFETY: just allocated above and owned by nothing else.
        let _leaked = unsafe { OwnedFd::from_raw_fd(leaked) };
        let passed = rustix::fs::memfd_create("spawn-test", rustix::fs::MemfdFlags::CLOEXEC).unwrap();

        let mut command = Command::new("ls");
        command.args(["-1", "/proc/self/fd"]);
        let streams = Streams([Stream::Null, Stream::Piped, Stream::Inherit]);
        let setup = ChildSetup {
            inherit: vec![(passed, 7)],
            ..ChildSetup::default()
        };
        let output = spawn(command, streams, setup).await.unwrap().wait_with_output().unwrap();
        let listed: Vec<i32> = String::from_utf8_lossy(&output.stdout)
            .lines()
            .map(|l| l.parse().unwrap())
            .collect();
        assert!(listed.contains(&7), "the descriptor passed for the spawn is there: {listed:?}");
        assert!(
            listed.iter().all(|fd| [0, 1, 2, 3, 7].contains(fd)),
            "only the streams, the passed descriptor and ls's own directory: {listed:?} (the process's inheritable {leaked} must not be)"
        );
    }

    /// Regression: in CI the parent's `cgroup.procs` fd happened to be number 15, the kernel
    /// memfd's target. The child then wrote "0\n" into the memfd instead of the cgroup, and Python
    /// read the kernel source from byte 2 (a SyntaxError in every sandbox).
    #[tokio::test]
    async fn a_join_fd_numbered_like_a_target_neither_corrupts_the_data_nor_misses_the_join() {
        // It takes over a fixed descriptor number, so it runs alone in a child process of its own: under
        // `cargo test` the other tests of this binary run on parallel threads and open descriptors too.
        const CHILD: &str = "WAXELL_SPAWN_FD_TEST";
        if std::env::var_os(CHILD).is_none() {
            let module = module_path!().split_once("::").map_or("", |(_, rest)| rest);
            let test = format!("{module}::a_join_fd_numbered_like_a_target_neither_corrupts_the_data_nor_misses_the_join");
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args([test.as_str(), "--exact", "--nocapture", "--test-threads=1"])
                .env(CHILD, "1")
                .output()
                .unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && stdout.contains("1 passed"),
                "{test} in a child process: {stdout}{}",
                String::from_utf8_lossy(&out.stderr)
            );
            return;
        }
        const TARGET: RawFd = 40;
        // SAFETY: F_GETFD only queries the descriptor number; this test runs alone in its process (above),
        // and nothing else in this binary opens 40 descriptors.
        assert!(
            unsafe { libc::fcntl(TARGET, libc::F_GETFD) } < 0,
            "fd {TARGET} is already open"
        );

        let data = rustix::fs::memfd_create("spawn-test", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
        let mut data = std::fs::File::from(data);
        data.write_all(b"#!kernel source").unwrap();
        data.seek(SeekFrom::Start(0)).unwrap();

        // The stand-in for `cgroup.procs`: a pipe whose write end sits at exactly the target number.
        let (mut join_read, join_write) = std::io::pipe().unwrap();
        // SAFETY: dup2 onto a number checked free above; the result is owned by `join_fd` alone.
        let join_fd = unsafe {
            assert_eq!(libc::dup2(join_write.as_raw_fd(), TARGET), TARGET);
            <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(TARGET)
        };
        drop(join_write);

        let mut command = Command::new("bash");
        command.args(["-c", &format!("cat <&{TARGET}")]);
        let streams = Streams([Stream::Null, Stream::Piped, Stream::Inherit]);
        let setup = ChildSetup {
            inherit: vec![(data.into(), TARGET)],
            cgroup_procs: vec![join_fd],
            join: Vec::new(),
            rlimits: Vec::new(),
        };
        let child = spawn(command, streams, setup).await.unwrap();
        let output = child.wait_with_output().unwrap();
        assert_eq!(
            String::from_utf8_lossy(&output.stdout),
            "#!kernel source",
            "the child read the inherited data from its start"
        );

        let mut joined = String::new();
        join_read.read_to_string(&mut joined).unwrap();
        assert_eq!(joined, "0\n", "the join write reached the cgroup fd");
    }
}
