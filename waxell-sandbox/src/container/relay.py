# A kernel's line to the host where the sandbox's memory is checkpointed (gVisor on Docker Engine).
# gVisor restores a process only if it holds no descriptor of the host's, and an exec's stdio are
# the host's: so the kernel talks over FIFOs in the sandbox's own memory (/dev/shm) and this relay,
# the exec, copies between them and its stdio. Before a checkpoint the host ends the relay (the
# kernel lives on, waiting); after a restore it starts a new one on the same FIFOs.
#   start <root> <command...>  start the kernel on FIFOs in <root>/<its pid> (its stdin, stdout and
#                              stderr, opened read-write so it never sees an end or EPIPE while no
#                              relay is there), then relay; exit as the kernel did.
#   attach <root>/<pid>        relay to the kernel already there (after a restore), and exit with
#                              the status pid 1 wrote as it reaped it.
# The relay ends when the kernel does, though what the kernel forked may still hold its FIFOs.
import ctypes, os, sys, threading, time


def write_all(fd, data):
    while data:
        data = data[os.write(fd, data):]


def pump(src, dst, lock=None):
    while True:
        try:
            data = os.read(src, 65536)
            if not data:
                return
            if lock is None:
                write_all(dst, data)
            else:
                with lock:
                    write_all(dst, data)
        except OSError:
            return


def alive(pid):
    # Not a child here (after a restore): gone, or a zombie pid 1 has not reaped yet.
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def fifos(where):
    return [os.path.join(where, name) for name in ("in", "out", "err")]


mode, where = sys.argv[1], sys.argv[2]
kernel = None
if mode == "start":
    os.makedirs(where, mode=0o700, exist_ok=True)
    opened_r, opened_w = os.pipe()  # not inherited: it closes when the kernel's exec succeeds
    kernel = os.fork()
    if kernel == 0:
        try:
            os.close(opened_r)
            mine = os.path.join(where, str(os.getpid()))
            os.mkdir(mine, 0o700)
            for fd, path in enumerate(fifos(mine)):
                os.mkfifo(path, 0o600)
                os.dup2(os.open(path, os.O_RDWR), fd)
            # pid 1 checks the kernel's main thread with ptrace (init.py); the shim allowed it for
            # this relay, and a child needs it anew.
            ctypes.CDLL(None).prctl(0x59616D61, 1, 0, 0, 0)  # PR_SET_PTRACER
            os.execvp(sys.argv[3], sys.argv[3:])
        except BaseException as e:
            os.write(2, b"the kernel could not start: %r\n" % (e,))
        os._exit(127)
    os.close(opened_w)
    os.read(opened_r, 1)
    os.close(opened_r)
    where = os.path.join(where, str(kernel))
# A reader (or writer) of a FIFO opened without waiting: the kernel holds the other ends, unless it
# has already ended, and then the relay ends too.
try:
    requests_path, out_path, err_path = fifos(where)
    out = os.open(out_path, os.O_RDONLY | os.O_NONBLOCK)
    err = os.open(err_path, os.O_RDONLY | os.O_NONBLOCK)
    requests = os.open(requests_path, os.O_WRONLY | os.O_NONBLOCK)
except OSError as e:
    sys.stderr.write("no kernel on %s: %s\n" % (where, e))
    sys.exit(1)
for fd in (out, err, requests):
    os.set_blocking(fd, True)
output = threading.Lock()
threading.Thread(target=pump, args=(0, requests), daemon=True).start()
threading.Thread(target=pump, args=(err, 2), daemon=True).start()
threading.Thread(target=pump, args=(out, 1, output), daemon=True).start()
if kernel is not None:
    status = os.waitpid(kernel, 0)[1]
    code = 128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
else:
    pid = int(os.path.basename(where))
    while alive(pid):
        time.sleep(0.05)
    # pid 1, its parent now, writes its status (init.py) as it reaps it.
    code = 1
    for _ in range(20):
        try:
            with open(os.path.join(where, "exit")) as f:
                code = int(f.read())
            break
        except (OSError, ValueError):
            time.sleep(0.01)
time.sleep(0.05)  # the pump takes what the kernel wrote last; then the rest, without waiting
with output:
    os.set_blocking(out, False)
    try:
        while True:
            data = os.read(out, 65536)
            if not data:
                break
            write_all(1, data)
    except OSError:
        pass
    for path in fifos(where) + [os.path.join(where, "exit")]:
        try:
            os.unlink(path)
        except OSError:
            pass
    try:
        os.rmdir(where)
    except OSError:
        pass
    os._exit(code)
