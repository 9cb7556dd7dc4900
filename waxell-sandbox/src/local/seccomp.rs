//! The seccomp programs handed to bwrap (`--add-seccomp-fd`), as raw BPF bytes.
//!
//! seccompiler allows one match action per filter, so there are three programs:
//! * deny list -> EPERM: dangerous syscalls, non-`AF_UNIX` sockets, namespace-creating `clone` flags,
//!   `TIOCSTI`;
//! * ENOSYS list: `clone3` (its flags live in user memory where seccomp cannot see them, so glibc
//!   falls back to `clone`, which the first program inspects) and the Linux AIO calls (`io_setup`
//!   draws on the host-wide `fs.aio-max-nr` pool; ENOSYS makes libraries fall back to plain I/O);
//! * x32 guard: seccompiler's programs match exact x86_64 numbers, and x32 numbers
//!   (`nr | 0x40000000`) would bypass the deny list on kernels with x32 enabled.
//!
//! A default-allow deny list fails open on syscalls added later; namespaces, the non-root uid and
//! cgroups remain the outer walls.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
};

const DENIED_SYSCALLS: &[libc::c_long] = &[
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_perf_event_open,
    libc::SYS_bpf,
    libc::SYS_userfaultfd,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_mount_setattr,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_open_by_handle_at,
    libc::SYS_name_to_handle_at,
    libc::SYS_syslog,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_reboot,
    libc::SYS_acct,
    libc::SYS_settimeofday,
    libc::SYS_clock_settime,
    libc::SYS_clock_adjtime,
    libc::SYS_adjtimex,
    libc::SYS_iopl,
    libc::SYS_ioperm,
    libc::SYS_lookup_dcookie,
    libc::SYS_quotactl,
    libc::SYS_vhangup,
    libc::SYS_fanotify_init,
    // POSIX message queues: kernel memory outside the memory cgroup's view; RLIMIT_MSGQUEUE is 0 too.
    libc::SYS_mq_open,
    libc::SYS_mq_unlink,
];

/// `io_pgetevents`, missing from the libc crate: x86_64's number, else the generic table's.
const SYS_IO_PGETEVENTS: libc::c_long = if cfg!(target_arch = "x86_64") { 333 } else { 292 };

/// Answered with ENOSYS ("not implemented"), so callers take their fallback path.
const ENOSYS_SYSCALLS: &[libc::c_long] = &[
    libc::SYS_clone3,
    // Host-wide AIO contexts (`fs.aio-nr` / `fs.aio-max-nr`): one sandbox could drain the pool and
    // make the host's databases fail with EAGAIN.
    libc::SYS_io_setup,
    libc::SYS_io_destroy,
    libc::SYS_io_submit,
    libc::SYS_io_cancel,
    libc::SYS_io_getevents,
    SYS_IO_PGETEVENTS,
];

const NAMESPACE_CLONE_FLAGS: &[libc::c_int] = &[
    libc::CLONE_NEWUSER,
    libc::CLONE_NEWNS,
    libc::CLONE_NEWNET,
    libc::CLONE_NEWPID,
    libc::CLONE_NEWIPC,
    libc::CLONE_NEWUTS,
    libc::CLONE_NEWCGROUP,
];

/// `TIOCSTI` from <asm-generic/ioctls.h> (libc's constant type differs between targets).
const TIOCSTI: u64 = 0x5412;

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
        DENIED_SYSCALLS.iter().map(|&nr| (nr, Vec::new())).collect();
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
    let rules = ENOSYS_SYSCALLS.iter().map(|&nr| (nr, Vec::new())).collect();
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
