//! Memory a sandbox holds in kernel buffers, measured from the host for the memory watchdog
//! (`watchdog.rs`): without a memory cgroup nothing else charges it, and a cell could queue
//! hundreds of MiB in socket or pipe buffers past its limit while its processes stay small.
//!
//! * Sockets: the sandbox can make `AF_UNIX` sockets only (seccomp), each in the network namespace
//!   of its context. `NETLINK_SOCK_DIAG` lists every socket of a namespace, also those no process
//!   holds (passed over `SCM_RIGHTS` and closed), with its send-buffer charge (`wmem_alloc`: the
//!   true size of every buffer it queued at a peer that has not read it yet) and its receive-queue
//!   length. A queue whose sender is gone is no longer charged to anyone listed: it is counted at
//!   its bound (below). The netlink socket is made once per namespace, inside it
//!   (`spawn::sock_diag_socket_in`).
//! * Pipes: every pipe a sandbox process holds open is reopened through `/proc/<pid>/fd` (once
//!   pinned with `O_PATH` and checked to be that pipe) and, when data is queued in it, counted at
//!   its full capacity (`F_GETPIPE_SZ`), which bounds the pages it can pin.
//!
//! What stays unseen is bounded (docs/sandbox.md gives the arithmetic): pipes in flight in a
//! socket queue with no process holding them (at most `RLIMIT_NOFILE` + 253 descriptors in flight
//! per host user, each pipe at most 64 KiB because the seccomp policy refuses larger pipe sizes).

use std::collections::{HashMap, HashSet};
use std::fs;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The kernel's default `net.unix.max_dgram_qlen` in every new network namespace; a sandbox
/// cannot change it (no capabilities, `/proc/sys` read-only).
const MAX_DGRAM_QLEN: u64 = 10;
/// `net.core.wmem_default` as the kernel sets it (`SK_WMEM_MAX`).
const KERNEL_WMEM_DEFAULT: u64 = 212_992;
/// How soon to try again to enter a namespace that could not be entered.
const RETRY: Duration = Duration::from_millis(20);
/// Bookkeeping (`struct sk_buff`, its shared info) beyond an skb's data, rounded up.
const SKB_OVERHEAD: u64 = 4096;

/// One sandbox's view: the `sock_diag` sockets of its network namespaces.
#[derive(Debug)]
pub(crate) struct KernelBuffers {
    diag: HashMap<u64, OwnedFd>,
    /// Namespaces whose socket could not be made, and when to try again (a process seen while
    /// bubblewrap still sets its namespaces up may not be enterable yet).
    failed: HashMap<u64, Instant>,
    host_net: Option<u64>,
    host_user: Option<u64>,
    true_bin: PathBuf,
    /// A sender's send buffer (`net.core.wmem_default`: the seccomp policy refuses `SO_SNDBUF`).
    sndbuf: u64,
}

/// What the sandbox's processes hold in kernel buffers.
#[derive(Debug, Default)]
pub(crate) struct Held {
    /// Each process's share: the buffers of the sockets and pipes it has open (shared ones in every
    /// holder), for choosing whom to kill.
    pub(crate) by_pid: HashMap<u32, u64>,
    /// Every buffer once, held by a process or not.
    pub(crate) total: u64,
}

#[derive(Debug, Clone, Copy)]
struct UnixSocket {
    ino: u32,
    stream: bool,
    listening: bool,
    peer: u32,
    queued: u32,
    wmem: u32,
}

impl KernelBuffers {
    pub(crate) fn new() -> Self {
        // The host's value, and never below the kernel's default, in case a new network namespace
        // starts from that instead.
        let sndbuf = fs::read_to_string("/proc/sys/net/core/wmem_default")
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .unwrap_or(0)
            .max(KERNEL_WMEM_DEFAULT);
        Self {
            diag: HashMap::new(),
            failed: HashMap::new(),
            host_net: ns_inode("self", "net"),
            host_user: ns_inode("self", "user"),
            true_bin: crate::local::host::find_in_path("true").unwrap_or_else(|| PathBuf::from("/usr/bin/true")),
            sndbuf,
        }
    }

    /// The socket and pipe buffers of `pids`.
    pub(crate) fn measure(&mut self, pids: &[u32]) -> Held {
        let mut held = Held::default();
        let mut namespaces: HashMap<u64, u32> = HashMap::new();
        let mut sockets_of: Vec<(u32, HashSet<u32>)> = Vec::new();
        let mut pipes: HashMap<u64, (u32, String)> = HashMap::new();
        let mut pipes_of: Vec<(u32, HashSet<u64>)> = Vec::new();
        for &pid in pids {
            match ns_inode(&pid.to_string(), "net") {
                Some(net) if Some(net) != self.host_net => {
                    namespaces.entry(net).or_insert(pid);
                }
                _ => continue,
            }
            // Each buffer once per process, however many descriptors it has for it.
            let (mut sockets, mut pipe_list) = (HashSet::new(), HashSet::new());
            for entry in fs::read_dir(format!("/proc/{pid}/fd")).into_iter().flatten().flatten() {
                let Ok(target) = fs::read_link(entry.path()) else { continue };
                let target = target.to_string_lossy();
                if let Some(ino) = bracketed(&target, "socket:[") {
                    sockets.insert(ino as u32);
                } else if let Some(ino) = bracketed(&target, "pipe:[") {
                    pipes
                        .entry(ino)
                        .or_insert_with(|| (pid, entry.file_name().to_string_lossy().into_owned()));
                    pipe_list.insert(ino);
                }
            }
            sockets_of.push((pid, sockets));
            pipes_of.push((pid, pipe_list));
        }
        self.diag.retain(|net, _| namespaces.contains_key(net));
        self.failed.retain(|net, _| namespaces.contains_key(net));

        let mut socket_bytes: HashMap<u32, u64> = HashMap::new();
        for (net, pid) in namespaces {
            for (ino, bytes) in self.socket_charges(net, pid) {
                held.total += bytes;
                socket_bytes.insert(ino, bytes);
            }
        }
        let mut pipe_bytes: HashMap<u64, u64> = HashMap::new();
        for (ino, (pid, fd)) in pipes {
            let bytes = pipe_charge(pid, &fd, ino);
            held.total += bytes;
            pipe_bytes.insert(ino, bytes);
        }
        for (pid, sockets) in sockets_of {
            let bytes: u64 = sockets.iter().filter_map(|ino| socket_bytes.get(ino)).sum();
            *held.by_pid.entry(pid).or_default() += bytes;
        }
        for (pid, pipe_list) in pipes_of {
            let bytes: u64 = pipe_list.iter().filter_map(|ino| pipe_bytes.get(ino)).sum();
            *held.by_pid.entry(pid).or_default() += bytes;
        }
        held
    }

    /// Each `AF_UNIX` socket of namespace `net` (entered through process `pid`) and the buffer
    /// memory charged to it.
    fn socket_charges(&mut self, net: u64, pid: u32) -> Vec<(u32, u64)> {
        if self.failed.get(&net).is_some_and(|retry| Instant::now() < *retry) {
            return Vec::new();
        }
        if !self.diag.contains_key(&net) {
            match self.open_diag(pid) {
                Ok(fd) => {
                    self.failed.remove(&net);
                    self.diag.insert(net, fd);
                }
                Err(e) => {
                    if self.failed.insert(net, Instant::now() + RETRY).is_some() {
                        tracing::warn!(pid, error = %e, "cannot list the sandbox's socket buffers yet; retrying");
                    }
                    return Vec::new();
                }
            }
        }
        let sockets = match self.diag.get(&net).map(dump_unix) {
            Some(Ok(sockets)) => sockets,
            Some(Err(e)) => {
                tracing::debug!(pid, error = %e, "sock_diag dump failed; retrying with a new socket");
                self.diag.remove(&net);
                return Vec::new();
            }
            None => return Vec::new(),
        };
        let listed: HashSet<u32> = sockets.iter().map(|s| s.ino).collect();
        sockets
            .iter()
            .map(|s| {
                let mut bytes = u64::from(s.wmem);
                // A queue whose sender is gone (closed, or never connected: any sender of an
                // unconnected datagram socket) is charged to no listed socket. Its size is bounded:
                // a stream sender stops at its send buffer plus one write of at most half of it; a
                // datagram queue holds at most `max_dgram_qlen` + 1 datagrams (a socket pair's
                // only sender, at most two send buffers), each below one send buffer.
                if !s.listening && s.queued > 0 && (s.peer == 0 || !listed.contains(&s.peer)) {
                    let bound = if s.stream {
                        2 * (self.sndbuf + SKB_OVERHEAD)
                    } else {
                        (MAX_DGRAM_QLEN + 1) * (self.sndbuf + SKB_OVERHEAD)
                    };
                    bytes += bound.max(u64::from(s.queued));
                }
                (s.ino, bytes)
            })
            .collect()
    }

    fn open_diag(&self, pid: u32) -> std::io::Result<OwnedFd> {
        let net = rustix::fs::open(
            format!("/proc/{pid}/ns/net"),
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )?;
        // Join the user namespace owning the sandbox's network namespace first, unless it is ours.
        let owner = crate::local::spawn::owning_user_namespace(&net)?;
        let owner_inode = rustix::fs::fstat(&owner)?.st_ino;
        let user = (Some(owner_inode) != self.host_user).then_some(owner);
        crate::local::spawn::sock_diag_socket_in(&self.true_bin, user.as_ref(), &net)
    }
}

/// The inode of `/proc/<pid>/ns/<kind>` (`net:[4026531840]`).
fn ns_inode(pid: &str, kind: &str) -> Option<u64> {
    let link = fs::read_link(format!("/proc/{pid}/ns/{kind}")).ok()?;
    bracketed(&link.to_string_lossy(), &format!("{kind}:["))
}

fn bracketed(text: &str, prefix: &str) -> Option<u64> {
    text.strip_prefix(prefix)?.strip_suffix(']')?.parse().ok()
}

/// A pipe's capacity when data is queued in it, else 0: reopened read-only (never blocking)
/// through `/proc/<pid>/fd/<fd>`, which leaves the sandbox's own descriptors untouched. The
/// sandbox may swap the descriptor meanwhile, so the file is first pinned with `O_PATH` (which
/// opens nothing) and reopened only if it is still the pipe `ino`: the host never opens a file
/// the sandbox chose.
fn pipe_charge(pid: u32, fd: &str, ino: u64) -> u64 {
    use rustix::fs::{open, FileType, Mode, OFlags};
    let Ok(pinned) = open(format!("/proc/{pid}/fd/{fd}"), OFlags::PATH | OFlags::CLOEXEC, Mode::empty()) else {
        return 0;
    };
    let is_it = rustix::fs::fstat(&pinned)
        .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Fifo && st.st_ino == ino);
    if !is_it {
        return 0;
    }
    let reopen = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&pinned));
    let Ok(pipe) = open(reopen, OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC, Mode::empty()) else {
        return 0;
    };
    match rustix::io::ioctl_fionread(&pipe) {
        Ok(0) | Err(_) => 0,
        Ok(queued) => rustix::pipe::fcntl_getpipe_size(&pipe).map_or(queued, |size| size as u64).max(queued),
    }
}

const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_DUMP: u16 = 0x300;
const UDIAG_SHOW_PEER: u32 = 4;
const UDIAG_SHOW_RQLEN: u32 = 16;
const UDIAG_SHOW_MEMINFO: u32 = 32;
const UNIX_DIAG_PEER: u16 = 2;
const UNIX_DIAG_RQLEN: u16 = 4;
const UNIX_DIAG_MEMINFO: u16 = 5;
const SK_MEMINFO_WMEM_ALLOC: usize = 2;
const TCP_LISTEN: u8 = 10;

/// Every `AF_UNIX` socket of the namespace `diag` was made in (`unix_diag`, linux/unix_diag.h).
fn dump_unix(diag: &OwnedFd) -> std::io::Result<Vec<UnixSocket>> {
    // struct nlmsghdr, then struct unix_diag_req.
    let mut request = Vec::with_capacity(40);
    request.extend_from_slice(&40u32.to_ne_bytes());
    request.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    request.extend_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    request.extend_from_slice(&1u32.to_ne_bytes()); // seq
    request.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel
    request.extend_from_slice(&[libc::AF_UNIX as u8, 0, 0, 0]); // family, protocol, pad
    request.extend_from_slice(&u32::MAX.to_ne_bytes()); // every state
    request.extend_from_slice(&0u32.to_ne_bytes()); // any inode
    request.extend_from_slice(&(UDIAG_SHOW_PEER | UDIAG_SHOW_RQLEN | UDIAG_SHOW_MEMINFO).to_ne_bytes());
    request.extend_from_slice(&[0u8; 8]); // cookie
    rustix::net::send(diag, &request, rustix::net::SendFlags::empty())?;
    let mut sockets = Vec::new();
    let mut buffer = vec![0u8; 64 << 10];
    loop {
        let (len, _) = rustix::net::recv(diag, &mut buffer[..], rustix::net::RecvFlags::empty())?;
        let mut data = &buffer[..len];
        if data.is_empty() {
            return Err(std::io::Error::other("sock_diag: empty reply"));
        }
        while data.len() >= 16 {
            let msg_len = u32_at(data, 0) as usize;
            let kind = u16::from_ne_bytes([data[4], data[5]]);
            if msg_len < 16 || msg_len > data.len() {
                return Err(std::io::Error::other("sock_diag: truncated message"));
            }
            match kind {
                NLMSG_DONE => return Ok(sockets),
                NLMSG_ERROR => {
                    let errno = data.get(16..20).map_or(0, |b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]));
                    return Err(std::io::Error::from_raw_os_error(-errno));
                }
                SOCK_DIAG_BY_FAMILY => sockets.extend(parse_unix(&data[16..msg_len])),
                _ => {}
            }
            data = &data[align4(msg_len).min(data.len())..];
        }
    }
}

/// One `struct unix_diag_msg` and its attributes.
fn parse_unix(body: &[u8]) -> Option<UnixSocket> {
    if body.len() < 16 {
        return None;
    }
    let mut socket = UnixSocket {
        ino: u32_at(body, 4),
        stream: body[1] != libc::SOCK_DGRAM as u8,
        listening: body[2] == TCP_LISTEN,
        peer: 0,
        queued: 0,
        wmem: 0,
    };
    let mut attrs = &body[16..];
    while attrs.len() >= 4 {
        let len = u16::from_ne_bytes([attrs[0], attrs[1]]) as usize;
        let kind = u16::from_ne_bytes([attrs[2], attrs[3]]);
        if len < 4 || len > attrs.len() {
            break;
        }
        let payload = &attrs[4..len];
        match kind {
            UNIX_DIAG_PEER if payload.len() >= 4 => socket.peer = u32_at(payload, 0),
            UNIX_DIAG_RQLEN if payload.len() >= 4 => socket.queued = u32_at(payload, 0),
            UNIX_DIAG_MEMINFO if payload.len() >= 4 * (SK_MEMINFO_WMEM_ALLOC + 1) => {
                socket.wmem = u32_at(payload, 4 * SK_MEMINFO_WMEM_ALLOC);
            }
            _ => {}
        }
        attrs = &attrs[align4(len).min(attrs.len())..];
    }
    Some(socket)
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Child, Command};

    /// `script` run by Python in a network namespace of its own (a user namespace too when not
    /// root, as bubblewrap makes them), and the first line it prints once its queues are full.
    fn in_own_namespace(script: &str) -> (Child, String) {
        let unshare = if rustix::process::geteuid().is_root() { "-n" } else { "-Urn" };
        let mut child = Command::new("unshare")
            .args([unshare, "python3", "-c", script])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line).unwrap();
        (child, line)
    }

    /// A process in a network namespace of its own (a user namespace too when not root, as
    /// bubblewrap makes them) queues data in socket pairs and a pipe without reading it: the
    /// measure sees it, charged to that process.
    #[test]
    fn socket_and_pipe_queues_in_a_namespace_of_their_own_are_counted() {
        let script = "import os, socket, sys, time\n\
            keep = []\n\
            for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):\n\
            \x20   for _ in range(8):\n\
            \x20       a, b = socket.socketpair(socket.AF_UNIX, kind)\n\
            \x20       a.setblocking(False)\n\
            \x20       try:\n\
            \x20           while True: a.send(b'x' * 4096)\n\
            \x20       except BlockingIOError: pass\n\
            \x20       keep.append((a, b))\n\
            # A stream whose sender is gone: charged to no listed socket.\n\
            a, b = socket.socketpair(); a.setblocking(False)\n\
            try:\n\
            \x20   while True: a.send(b'y' * 4096)\n\
            except BlockingIOError: pass\n\
            a.close(); keep.append(b)\n\
            r, w = os.pipe(); os.write(w, b'z' * 1000)\n\
            print('ready', flush=True)\n\
            time.sleep(30)\n";
        let (mut child, line) = in_own_namespace(script);
        assert_eq!(line, "ready\n");
        let pids = crate::local::watchdog::descendants(&[child.id()]);
        let mut buffers = KernelBuffers::new();
        let held = buffers.measure(&pids);
        let _ = child.kill();
        let _ = child.wait();
        // 16 pairs queued up to a send buffer each, one orphan queue, one pipe.
        let sndbuf = buffers.sndbuf;
        assert!(held.total >= 16 * sndbuf + 64 * 1024, "{held:?}");
        let python = *pids.last().unwrap();
        assert_eq!(held.by_pid.get(&python).copied().unwrap_or(0), held.total, "{held:?} {pids:?}");
    }

    /// The watchdog's cost with 50 live sandboxes (rootless: as root the memory cgroup does this
    /// work): per sandbox per poll, the process scan it always made (`descendants` and `statm`) next
    /// to the kernel-buffer measure added to it, and the CPU time all watchdog threads used over
    /// 10 s and how often they woke, written to `$TMPDIR/waxell-watchdog-cost.txt`. Run it by
    /// name: `cargo nextest run -p waxell-sandbox --lib --run-ignored only -E
    /// 'test(watchdog_cost)'` as an ordinary user.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "a measurement with 50 sandboxes: run it by name"]
    async fn watchdog_cost_with_50_sandboxes() {
        use crate::local::watchdog::{descendants, private_bytes};
        use waxell::sandbox::{RunOptions, SandboxBackend, SandboxOptions};
        let backend = crate::LocalBackend::new(crate::LocalConfig::default()).expect("a local backend");
        let mut sandboxes = Vec::new();
        for _ in 0..50 {
            let sandbox = backend.create(&SandboxOptions::default()).await.expect("create");
            sandbox.run_code("1", &RunOptions::default()).await.expect("run");
            sandboxes.push(sandbox);
        }
        let me = std::process::id();
        let roots: Vec<u32> = fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter(|pid| {
                let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                let ppid = stat.rsplit(')').next().and_then(|r| r.split_whitespace().nth(1));
                stat.contains("(bwrap)") && ppid == Some(me.to_string().as_str())
            })
            .collect();
        assert_eq!(roots.len(), 50, "one launcher per sandbox");
        let mut buffers: Vec<KernelBuffers> = roots.iter().map(|_| KernelBuffers::new()).collect();
        let (mut scan, mut measure) = (Duration::ZERO, Duration::ZERO);
        const ROUNDS: u32 = 100;
        for _ in 0..ROUNDS {
            for (root, buffers) in roots.iter().zip(&mut buffers) {
                let started = Instant::now();
                let pids = descendants(&[*root]);
                let private: u64 = pids.iter().map(|p| private_bytes(*p)).sum();
                scan += started.elapsed();
                let started = Instant::now();
                let held = buffers.measure(&pids);
                measure += started.elapsed();
                assert!(private > 0 && held.total < 1 << 20, "{held:?}");
            }
        }
        let polls = ROUNDS * roots.len() as u32;
        // CPU ticks and wake-ups (context switches) of the crate's threads: the watchdogs and
        // whatever helps them.
        let cpu = || -> (u64, u64) {
            fs::read_dir("/proc/self/task")
                .unwrap()
                .flatten()
                .filter(|t| fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.starts_with("waxell-sandbox")))
                .map(|t| {
                    let stat = fs::read_to_string(t.path().join("stat")).unwrap_or_default();
                    let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
                    let ticks = fields[11].parse::<u64>().unwrap_or(0) + fields[12].parse::<u64>().unwrap_or(0);
                    let status = fs::read_to_string(t.path().join("status")).unwrap_or_default();
                    let switches: u64 = status
                        .lines()
                        .filter(|l| l.contains("ctxt_switches:"))
                        .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                        .sum();
                    (ticks, switches)
                })
                .fold((0, 0), |(t, s), (a, b)| (t + a, s + b))
        };
        let before = cpu();
        tokio::time::sleep(Duration::from_secs(10)).await;
        let after = cpu();
        let (ticks, switches) = (after.0 - before.0, after.1 - before.1);
        let ticks_per_second = rustix::param::clock_ticks_per_second();
        // Library code prints only through waxell's console: the figures go to a file.
        let figures = format!(
            "per sandbox per poll: process scan {:.0} us, kernel buffers {:.0} us (x{:.2}); \
             50 watchdog threads over 10 s: {:.2} s CPU ({:.3}% of a core per sandbox), {:.0} wake-ups/s\n",
            scan.as_secs_f64() * 1e6 / f64::from(polls),
            measure.as_secs_f64() * 1e6 / f64::from(polls),
            measure.as_secs_f64() / scan.as_secs_f64(),
            ticks as f64 / ticks_per_second as f64,
            ticks as f64 / ticks_per_second as f64 / 10.0 / 50.0 * 100.0,
            switches as f64 / 10.0,
        );
        fs::write(std::env::temp_dir().join("waxell-watchdog-cost.txt"), figures).expect("the figures written");
        drop(sandboxes);
    }

    /// A pipe with data queued counts at its capacity (however little is queued), an empty one
    /// not at all; a pipe held twice by one process counts once.
    #[test]
    fn a_pipe_with_data_counts_at_its_capacity() {
        let script = "import os, time\n\
            full, empty = os.pipe(), os.pipe()\n\
            os.write(full[1], b'z')\n\
            again = os.dup(full[0])\n\
            print('ready', flush=True)\n\
            time.sleep(30)\n";
        let (mut child, line) = in_own_namespace(script);
        let held = KernelBuffers::new().measure(&[child.id()]);
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(line, "ready\n");
        assert_eq!(held.total, 64 << 10, "{held:?}");
        assert_eq!(held.by_pid.get(&child.id()).copied(), Some(64 << 10), "{held:?}");
    }

    #[test]
    fn a_process_in_the_hosts_namespace_is_not_measured() {
        let mut buffers = KernelBuffers::new();
        let held = buffers.measure(&[std::process::id()]);
        assert_eq!(held.total, 0);
        assert!(buffers.diag.is_empty());
    }
}
