# pid 1 of a sandbox container: reaps orphans, exits on SIGTERM/SIGINT or when the host lets go of
# its stdin, and signals kernels on the host's behalf. Commands arrive on stdin (the container's attached stdin) as "<signal> <pid>\n".
# Signalling from here needs no new process, so it works when the code exhausted the pids limit
# (an exec could not even start then). SIGKILL takes the kernel's process group and descendants,
# repeated until none is left: a fork bomb's orphans are reparented here but keep their group.
import os, select, signal


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


wake_r, wake_w = os.pipe()
os.set_blocking(wake_w, False)
signal.set_wakeup_fd(wake_w)
signal.signal(signal.SIGCHLD, lambda *_: None)
for sig in (signal.SIGTERM, signal.SIGINT):
    signal.signal(sig, lambda *_: os._exit(0))
pending = b""
while True:
    ready = select.select([wake_r, 0], [], [])[0]
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
        if pid <= 1:
            continue
        if sig == signal.SIGKILL:
            kill_tree(pid)
        else:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
