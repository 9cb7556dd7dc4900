//! The policy every backend shares (`crate::syscall_policy`) as seccomp BPF programs, raw bytes:
//! the local backend hands them to bwrap (`--add-seccomp-fd`); under gVisor each exec installs them
//! itself (`container/seccomp.rs`), since runsc applies the engine's profile to pid 1 only.
//!
//! seccompiler allows one match action per filter, so there are three programs:
//! * deny list -> EPERM: dangerous syscalls, non-`AF_UNIX` sockets, namespace-creating `clone` flags,
//!   `TIOCSTI`, pipes above 64 KiB and `SO_SNDBUF` (kernel buffers stay bounded for the watchdog);
//! * ENOSYS list: `clone3` (its flags live in user memory where seccomp cannot see them, so glibc
//!   falls back to `clone`, which the first program inspects) and the Linux AIO calls (`io_setup`
//!   draws on the host-wide `fs.aio-max-nr` pool; ENOSYS makes libraries fall back to plain I/O);
//! * x32 guard: seccompiler's programs match exact x86_64 numbers, and x32 numbers
//!   (`nr | 0x40000000`) would bypass the deny list on kernels with x32 enabled.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
};

use crate::syscall_policy::{DENIED, ENOSYS, MAX_PIPE_BYTES, NAMESPACE_CLONE_FLAGS, TIOCSTI};

/// The three programs, in the order they are passed to bwrap.
pub(crate) fn programs() -> Result<Vec<Vec<u8>>, String> {
    Ok(vec![
        to_bytes(&deny_list()?),
        to_bytes(&enosys_list()?),
        x32_guard(),
    ])
}

fn arch() -> Result<seccompiler::TargetArch, String> {
    std::env::consts::ARCH.try_into().map_err(|e| {
        format!(
            "seccomp: unsupported architecture {}: {e:?}",
            std::env::consts::ARCH
        )
    })
}

fn condition(arg: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompCondition, String> {
    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value)
        .map_err(|e| format!("seccomp condition: {e}"))
}

fn rule(conditions: Vec<SeccompCondition>) -> Result<SeccompRule, String> {
    SeccompRule::new(conditions).map_err(|e| format!("seccomp rule: {e}"))
}

fn deny_list() -> Result<BpfProgram, String> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
        DENIED.iter().map(|&(_, nr)| (nr, Vec::new())).collect();
    // Any namespace flag on clone(2): one rule per bit, the rules are OR-ed.
    let clone_rules = NAMESPACE_CLONE_FLAGS
        .iter()
        .map(|&flag| {
            rule(vec![condition(
                0,
                SeccompCmpOp::MaskedEq(flag as u64),
                flag as u64,
            )?])
        })
        .collect::<Result<Vec<_>, _>>()?;
    rules.insert(libc::SYS_clone, clone_rules);
    // Only local (AF_UNIX) sockets: no IP, netlink, packet, vsock, AF_ALG, ...
    rules.insert(
        libc::SYS_socket,
        vec![rule(vec![condition(0, SeccompCmpOp::Ne, libc::AF_UNIX as u64)?])?],
    );
    rules.insert(
        libc::SYS_socketpair,
        vec![rule(vec![condition(0, SeccompCmpOp::Ne, libc::AF_UNIX as u64)?])?],
    );
    // Kernel buffers a memory watchdog can bound (`kernel_buffers.rs`): pipes stay at most the
    // default 64 KiB (an unread pipe passed away over `SCM_RIGHTS` is seen by no one), and a
    // socket's send buffer stays `net.core.wmem_default` (a queue whose sender is gone is counted
    // at that bound). Lowering a pipe's size still works.
    rules.insert(
        libc::SYS_fcntl,
        vec![rule(vec![
            condition(1, SeccompCmpOp::Eq, libc::F_SETPIPE_SZ as u64)?,
            SeccompCondition::new(2, SeccompCmpArgLen::Qword, SeccompCmpOp::Gt, MAX_PIPE_BYTES)
                .map_err(|e| format!("seccomp condition: {e}"))?,
        ])?],
    );
    rules.insert(
        libc::SYS_setsockopt,
        [libc::SO_SNDBUF, libc::SO_SNDBUFFORCE]
            .iter()
            .map(|&option| {
                rule(vec![
                    condition(1, SeccompCmpOp::Eq, libc::SOL_SOCKET as u64)?,
                    condition(2, SeccompCmpOp::Eq, option as u64)?,
                ])
            })
            .collect::<Result<Vec<_>, _>>()?,
    );
    // Terminal input injection (CVE-2017-5226); --new-session already blocks it, this is depth.
    rules.insert(
        libc::SYS_ioctl,
        vec![rule(vec![condition(1, SeccompCmpOp::Eq, TIOCSTI)?])?],
    );
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch()?,
    )
    .map_err(|e| format!("seccomp deny list: {e}"))?;
    filter.try_into().map_err(|e| format!("seccomp deny list: {e}"))
}

fn enosys_list() -> Result<BpfProgram, String> {
    let rules = ENOSYS.iter().map(|&(_, nr)| (nr, Vec::new())).collect();
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch()?,
    )
    .map_err(|e| format!("seccomp ENOSYS filter: {e}"))?;
    filter
        .try_into()
        .map_err(|e| format!("seccomp ENOSYS filter: {e}"))
}

/// gVisor's `setpriority` ignores `RLIMIT_NICE`: a negative nice value (a raised priority, since a
/// sandbox starts at 0) gets EACCES, as the rlimit gives it on Linux. Only the gVisor shim needs it.
#[cfg_attr(not(feature = "container"), allow(dead_code, reason = "the container backend's gVisor shim uses it"))]
pub(crate) fn nice_guard() -> Result<Vec<u8>, String> {
    let rules = BTreeMap::from([(
        libc::SYS_setpriority,
        vec![rule(vec![condition(2, SeccompCmpOp::MaskedEq(0x8000_0000), 0x8000_0000)?])?],
    )]);
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EACCES as u32),
        arch()?,
    )
    .map_err(|e| format!("seccomp nice guard: {e}"))?;
    let program: BpfProgram = filter.try_into().map_err(|e| format!("seccomp nice guard: {e}"))?;
    Ok(to_bytes(&program))
}

/// Native-endian `struct sock_filter` entries, no header: the format bwrap reads.
fn to_bytes(program: &BpfProgram) -> Vec<u8> {
    program
        .iter()
        .flat_map(|ins| encode(ins.code, ins.jt, ins.jf, ins.k))
        .collect()
}

fn encode(code: u16, jt: u8, jf: u8, k: u32) -> [u8; 8] {
    let mut out = [0u8; 8];
    out[..2].copy_from_slice(&code.to_ne_bytes());
    out[2] = jt;
    out[3] = jf;
    out[4..].copy_from_slice(&k.to_ne_bytes());
    out
}

/// `nr >= 0x40000000` (the x32 bit) -> EPERM, everything else allowed. Written by hand because it is
/// four instructions; the arch check is in the other programs.
fn x32_guard() -> Vec<u8> {
    const BPF_LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
    const BPF_JGE_K: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
    const BPF_RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
    const SECCOMP_DATA_NR_OFFSET: u32 = 0;
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;
    [
        encode(BPF_LD_W_ABS, 0, 0, SECCOMP_DATA_NR_OFFSET),
        encode(BPF_JGE_K, 0, 1, X32_SYSCALL_BIT),
        encode(BPF_RET_K, 0, 0, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32),
        encode(BPF_RET_K, 0, 0, libc::SECCOMP_RET_ALLOW),
    ]
    .concat()
}
