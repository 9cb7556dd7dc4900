//! The syscall policy every backend applies (the local one as BPF programs handed to bwrap, the
//! container ones as an OCI seccomp profile passed to the engine), defined once so the backends
//! cannot drift apart. Each syscall is named (for OCI profiles, which libseccomp resolves for
//! every architecture listed, including the 32-bit `int 0x80` entry) and numbered (for BPF).
//!
//! A default-allow deny list fails open on syscalls added later; namespaces, the non-root uid,
//! dropped capabilities and cgroups remain the outer walls.

/// Answered with EPERM: escapes, kernel-wide state, host-wide pools.
pub(crate) const DENIED: &[(&str, libc::c_long)] = &[
    ("ptrace", libc::SYS_ptrace),
    ("process_vm_readv", libc::SYS_process_vm_readv),
    ("process_vm_writev", libc::SYS_process_vm_writev),
    ("perf_event_open", libc::SYS_perf_event_open),
    ("bpf", libc::SYS_bpf),
    ("userfaultfd", libc::SYS_userfaultfd),
    ("keyctl", libc::SYS_keyctl),
    ("add_key", libc::SYS_add_key),
    ("request_key", libc::SYS_request_key),
    ("mount", libc::SYS_mount),
    ("umount2", libc::SYS_umount2),
    ("pivot_root", libc::SYS_pivot_root),
    ("chroot", libc::SYS_chroot),
    ("mount_setattr", libc::SYS_mount_setattr),
    ("move_mount", libc::SYS_move_mount),
    ("open_tree", libc::SYS_open_tree),
    ("fsopen", libc::SYS_fsopen),
    ("fsconfig", libc::SYS_fsconfig),
    ("fsmount", libc::SYS_fsmount),
    ("fspick", libc::SYS_fspick),
    ("unshare", libc::SYS_unshare),
    ("setns", libc::SYS_setns),
    ("io_uring_setup", libc::SYS_io_uring_setup),
    ("io_uring_enter", libc::SYS_io_uring_enter),
    ("io_uring_register", libc::SYS_io_uring_register),
    ("init_module", libc::SYS_init_module),
    ("finit_module", libc::SYS_finit_module),
    ("delete_module", libc::SYS_delete_module),
    ("kexec_load", libc::SYS_kexec_load),
    ("kexec_file_load", libc::SYS_kexec_file_load),
    ("open_by_handle_at", libc::SYS_open_by_handle_at),
    ("name_to_handle_at", libc::SYS_name_to_handle_at),
    ("syslog", libc::SYS_syslog),
    ("swapon", libc::SYS_swapon),
    ("swapoff", libc::SYS_swapoff),
    ("reboot", libc::SYS_reboot),
    ("acct", libc::SYS_acct),
    ("settimeofday", libc::SYS_settimeofday),
    ("clock_settime", libc::SYS_clock_settime),
    ("clock_adjtime", libc::SYS_clock_adjtime),
    ("adjtimex", libc::SYS_adjtimex),
    ("iopl", libc::SYS_iopl),
    ("ioperm", libc::SYS_ioperm),
    ("lookup_dcookie", libc::SYS_lookup_dcookie),
    ("quotactl", libc::SYS_quotactl),
    ("vhangup", libc::SYS_vhangup),
    ("fanotify_init", libc::SYS_fanotify_init),
    // POSIX message queues: kernel memory outside the memory cgroup's view; RLIMIT_MSGQUEUE is 0 too.
    ("mq_open", libc::SYS_mq_open),
    ("mq_unlink", libc::SYS_mq_unlink),
];

/// `io_pgetevents`, missing from the libc crate: x86_64's number, else the generic table's.
const SYS_IO_PGETEVENTS: libc::c_long = if cfg!(target_arch = "x86_64") { 333 } else { 292 };

/// Answered with ENOSYS ("not implemented"), so callers take their fallback path.
pub(crate) const ENOSYS: &[(&str, libc::c_long)] = &[
    // Its flags live in user memory where seccomp cannot see them: glibc then falls back to
    // `clone`, whose namespace flags are denied.
    ("clone3", libc::SYS_clone3),
    // Host-wide AIO contexts (`fs.aio-nr` / `fs.aio-max-nr`): one sandbox could drain the pool and
    // make the host's databases fail with EAGAIN.
    ("io_setup", libc::SYS_io_setup),
    ("io_destroy", libc::SYS_io_destroy),
    ("io_submit", libc::SYS_io_submit),
    ("io_cancel", libc::SYS_io_cancel),
    ("io_getevents", libc::SYS_io_getevents),
    ("io_pgetevents", SYS_IO_PGETEVENTS),
];

/// `clone` with any of these flags is denied (no new namespaces, user namespaces above all).
pub(crate) const NAMESPACE_CLONE_FLAGS: &[libc::c_int] = &[
    libc::CLONE_NEWUSER,
    libc::CLONE_NEWNS,
    libc::CLONE_NEWNET,
    libc::CLONE_NEWPID,
    libc::CLONE_NEWIPC,
    libc::CLONE_NEWUTS,
    libc::CLONE_NEWCGROUP,
];

/// The largest pipe a sandbox may ask for (`F_SETPIPE_SZ`, refused above it by `seccomp_bpf.rs`):
/// the kernel's default size, so a memory watchdog can bound pipes it cannot see.
pub(crate) const MAX_PIPE_BYTES: u64 = 64 << 10;

/// `TIOCSTI` from <asm-generic/ioctls.h>: terminal input injection (CVE-2017-5226).
pub(crate) const TIOCSTI: u64 = 0x5412;
