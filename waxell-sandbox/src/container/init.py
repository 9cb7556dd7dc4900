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
import os, select, signal, sys, time

LIMIT = int(sys.argv[1]) if len(sys.argv) > 1 else 0
POLL_NEAR, POLL_FAR = 0.01, 0.05
# After a kill, how long its memory may take to come back before another process is chosen, and
# how far above the limit the guest may go meanwhile (half the headroom the host leaves, spec.rs).
SETTLE = 0.5
URGENT = 64 << 20


def reap():
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
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
        try:
            sig, pid = (int(x) for x in line.split())
        except ValueError:
            continue
        if pid > 1 and sig == signal.SIGKILL:
            kill_tree(pid)
            # Its memory comes back a little later: no other process is chosen for it meanwhile.
            killed_at = time.monotonic()
        elif pid > 1:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        # One line per request carried out: the host waits for it before the next cell.
        os.write(1, b"\n")
