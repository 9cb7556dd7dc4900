# pid 1 of a sandbox container: reaps orphans, exits on SIGTERM/SIGINT or when the host lets go of
# its stdin, and signals kernels on the host's behalf. Commands arrive on stdin (the container's attached stdin) as "<signal> <pid>\n";
# each one carried out is answered with a newline on stdout.
# Signalling from here needs no new process, so it works when the code exhausted the pids limit
# (an exec could not even start then). SIGKILL takes the kernel's process group and descendants,
# repeated until none is left: a fork bomb's orphans are reparented here but keep their group.
# With an argument (under gVisor), it is also the sandbox's OOM killer: gVisor's sentry holds all of
# the guest's memory, so the host's OOM killer would end the whole sandbox. Every 10 ms it
# reads gVisor's own accounting (/proc/meminfo: memory the guest's processes and its page cache use,
# not the scratch volumes, which the host's tmpfs holds) and, above the limit in bytes, SIGKILLs the
# process with the largest resident set, as the kernel's OOM killer would; the container's own cap
# is set above the limit by the host (headroom for the sentry and for the time between polls).
# Polling costs about 1.5% of a core at 10 ms, so below half the limit it polls every 50 ms.
# "check <pid> <fd> <nonce>" asks whether that kernel's main thread is blocked reading its request
# fd (where it waits between cells), answered "<idle|busy> <nonce> <tag>": under gVisor no host
# process can see the interpreter's system calls, so pid 1 looks, by stopping it for a moment with
# ptrace (PTRACE_SEIZE, PTRACE_INTERRUPT, its registers, PTRACE_DETACH). Only pid 1 may trace: the
# shim each exec runs under gVisor names it the tracer (PR_SET_PTRACER) and denies ptrace to the
# code. gVisor lets the code open /proc/1/fd/0 and 1, so the answers are signed: the host's first
# line, "key <hex>", written before the container starts, is an HMAC-SHA-256 key, and <tag> is the
# HMAC of "<idle|busy> <nonce>". pid 1 is non-dumpable, so its memory, where the key lives, is out
# of the code's reach.
# "sever" (before a checkpoint of the sandbox's memory, where the host keeps it: gVisor on Docker
# Engine) kills every process holding a descriptor of the host's, which gVisor could not restore:
# the execs (the relays of kernels, commands and terminals, watchers, file helpers) and what they
# started and did not detach; the kernels, and the keepers of commands and terminals with their
# programs, hold none (relay.py, keeper.py).
import ctypes, hmac, os, platform, select, signal, sys, time

LIMIT = int(sys.argv[1]) if len(sys.argv) > 1 else 0
POLL_NEAR, POLL_FAR = 0.01, 0.05
# After a kill, how long its memory may take to come back before another process is chosen, and
# how far above the limit the guest may go meanwhile (half the headroom the host leaves, spec.rs).
SETTLE = 0.5
URGENT = 64 << 20


# Where the kernels' FIFOs are (relay.py): a kernel restored from a checkpoint is this process's
# child, and its status is written beside its FIFOs for the relay that reports it.
KERNELS = "/dev/shm/waxell-kernels"


def reap():
    try:
        while True:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if not pid:
                return
            record_kernel_exit(pid, status)
    except ChildProcessError:
        pass


def record_kernel_exit(pid, status):
    where = "%s/%d" % (KERNELS, pid)
    if not os.path.isdir(where):
        return
    code = 128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    try:
        with open(where + "/exit.new", "w") as f:
            f.write(str(code))
        os.rename(where + "/exit.new", where + "/exit")
    except OSError:
        pass


def members(root):
    children, found = {}, set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fields = open("/proc/%s/stat" % name).read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        pid = int(name)
        if fields[0] == "Z" or pid == 1:
            continue
        children.setdefault(int(fields[1]), []).append(pid)
        if int(fields[2]) == root or int(fields[3]) == root:
            found.add(pid)
    todo = [root, *found]
    while todo:
        pid = todo.pop()
        todo.extend(c for c in children.get(pid, ()) if c not in found)
        found.add(pid)
    return found


def kill_tree(root):
    for _ in range(200):
        try:
            os.killpg(root, signal.SIGKILL)
        except OSError:
            pass
        alive = [p for p in members(root) if os.path.exists("/proc/%d" % p)]
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        reap()
        if not alive:
            return


def holds_host_fd(pid):
    # gVisor names a descriptor donated by the host "host:[N]".
    try:
        for fd in os.listdir("/proc/%d/fd" % pid):
            if os.readlink("/proc/%d/fd/%s" % (pid, fd)).startswith("host:["):
                return True
    except OSError:
        pass
    return False


def sever():
    for _ in range(200):
        holders = [int(p) for p in os.listdir("/proc") if p.isdigit() and p != "1" and holds_host_fd(int(p))]
        if not holders:
            return
        for pid in holders:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        reap()
        time.sleep(0.005)


def guest_used():
    total = free = None
    with open("/proc/meminfo", "rb") as f:
        for line in f:
            if line.startswith(b"MemTotal:"):
                total = int(line.split()[1])
            elif line.startswith(b"MemFree:"):
                free = int(line.split()[1])
            if total is not None and free is not None:
                return (total - free) * 1024
    return 0


def largest():
    best, most = None, -1
    for name in os.listdir("/proc"):
        if not name.isdigit() or name == "1":
            continue
        try:
            with open("/proc/%s/statm" % name, "rb") as f:
                resident = int(f.read().split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if resident > most:
            best, most = int(name), resident
    return best


killed_at = None


def enforce_limit():
    """Kill the largest process if the guest is over the limit; the time to the next poll."""
    global killed_at
    used = guest_used()
    if used <= LIMIT:
        return POLL_NEAR if used > LIMIT // 2 else POLL_FAR
    # The sentry releases a killed process's memory a little later (longer under load): within
    # SETTLE of a kill another process is chosen only past half the container's headroom.
    now = time.monotonic()
    if killed_at is not None and now - killed_at < SETTLE and used <= LIMIT + URGENT:
        return POLL_NEAR
    pid = largest()
    if pid is not None:
        try:
            os.kill(pid, signal.SIGKILL)
            killed_at = now
        except OSError:
            pass
    return POLL_NEAR


LIBC = ctypes.CDLL(None, use_errno=True)
LIBC.ptrace.restype = ctypes.c_long
LIBC.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
PTRACE_GETREGS, PTRACE_DETACH, PTRACE_SEIZE, PTRACE_INTERRUPT = 12, 17, 0x4206, 0x4207
WALL = 0x40000000
# Where each kernel's request fd pointed at its first check (at `ready`, before any cell ran), by
# (pid, start time): a cell that puts another pipe there does not pass for idle.
request_targets = {}


def start_time(pid):
    return open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()[19]


def forget_ended_kernels():
    for pid, started in list(request_targets):
        try:
            alive = start_time(pid) == started
        except OSError:
            alive = False
        if not alive:
            del request_targets[(pid, started)]


def main_thread_idle(pid, fd):
    # True or False: in read(2) on its request fd or not; None: could not tell (the thread did not
    # stop in time, as on a loaded host), and the host asks again.
    if platform.machine() != "x86_64":
        return True  # registers read as x86-64's user_regs_struct only: believe `done`
    try:
        target = os.readlink("/proc/%d/fd/%d" % (pid, fd))
        kernel = (pid, start_time(pid))
        if kernel not in request_targets:
            forget_ended_kernels()  # a new kernel: drop the entries of those that are gone
        if request_targets.setdefault(kernel, target) != target:
            return False
    except OSError:
        return False
    if LIBC.ptrace(PTRACE_SEIZE, pid, None, None) != 0:
        return None
    # A signal the thread was about to take when it stopped (a stop for it comes instead of ours):
    # handed back on detach, which would otherwise discard it.
    pending = 0
    try:
        if LIBC.ptrace(PTRACE_INTERRUPT, pid, None, None) != 0:
            return None
        # The stop comes within microseconds; a sleep would cost more than the whole check.
        deadline = time.monotonic() + 0.1
        while True:
            stopped, status = os.waitpid(pid, os.WNOHANG | WALL)
            if stopped:
                break
            if time.monotonic() > deadline:
                return None
            os.sched_yield()
        if os.WIFSTOPPED(status) and status >> 16 == 0:
            pending = os.WSTOPSIG(status)
        regs = (ctypes.c_ulonglong * 27)()
        if LIBC.ptrace(PTRACE_GETREGS, pid, None, ctypes.byref(regs)) != 0:
            return None
        # user_regs_struct: orig_rax (the call a stopped thread is in) is the 16th, rdi the 15th.
        return regs[15] == 0 and regs[14] == fd  # read(2) on the request fd
    except ChildProcessError:
        return False
    finally:
        LIBC.ptrace(PTRACE_DETACH, pid, None, pending)


def interrupt_main_thread(pid):
    # SIGINT is how a run's timeout becomes KeyboardInterrupt, which Python raises promptly only in
    # the main thread. Sent to the process, gVisor hands it to the first thread not stopped or just
    # woken, and a check (above) has often just stopped the main thread: then another thread takes
    # it and the main thread sleeps on. Sent to the main thread itself (tgkill), it waits there.
    tgkill = getattr(LIBC, "tgkill", None)  # glibc 2.30 and later
    if tgkill is None or tgkill(pid, pid, signal.SIGINT) != 0:
        os.kill(pid, signal.SIGINT)


key = None
LIBC.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0
wake_r, wake_w = os.pipe()
os.set_blocking(wake_w, False)
signal.set_wakeup_fd(wake_w)
signal.signal(signal.SIGCHLD, lambda *_: None)
for sig in (signal.SIGTERM, signal.SIGINT):
    signal.signal(sig, lambda *_: os._exit(0))
pending = b""
poll = POLL_NEAR if LIMIT else None
while True:
    ready = select.select([wake_r, 0], [], [], poll)[0]
    if LIMIT:
        poll = enforce_limit()
    if wake_r in ready:
        os.read(wake_r, 512)
    reap()
    if 0 not in ready:
        continue
    data = os.read(0, 4096)
    if not data:
        # The host's attach stream is gone, so is the process that would remove this container
        # (it exited without cleaning up, or crashed). End the container with it; the engine
        # removes it (AutoRemove), and the pid namespace takes every process here along.
        os._exit(0)
    pending += data
    while b"\n" in pending:
        line, pending = pending.split(b"\n", 1)
        if line.startswith(b"key "):
            if key is None:
                key = bytes.fromhex(line[4:].decode())
            os.write(1, b"\n")
            continue
        if line == b"sever":
            sever()
            os.write(1, b"\n")
            continue
        if line.startswith(b"check "):
            try:
                pid, fd, nonce = (int(x) for x in line.split()[1:])
            except ValueError:
                os.write(1, b"\n")
                continue
            try:
                idle = key is not None and main_thread_idle(pid, fd)
            except OSError:
                idle = None
            verdict = b"unknown" if idle is None else b"idle" if idle else b"busy"
            answer = b"%s %d" % (verdict, nonce)
            tag = hmac.new(key or b"", answer, "sha256").hexdigest().encode()
            os.write(1, answer + b" " + tag + b"\n")
            continue
        try:
            sig, pid = (int(x) for x in line.split())
        except ValueError:
            os.write(1, b"\n")
            continue
        if pid > 1 and sig == signal.SIGKILL:
            kill_tree(pid)
            # Its memory comes back a little later: no other process is chosen for it meanwhile.
            killed_at = time.monotonic()
        elif pid > 1:
            try:
                if sig == signal.SIGINT:
                    interrupt_main_thread(pid)
                else:
                    os.kill(pid, sig)
            except OSError:
                pass
        # One line per request carried out: the host waits for it before the next cell.
        os.write(1, b"\n")
