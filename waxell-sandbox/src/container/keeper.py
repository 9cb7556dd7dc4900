# A command or terminal that outlives its exec, where the sandbox's memory is checkpointed (gVisor
# on Docker Engine). gVisor restores a process only if it holds no descriptor of the host's, and an
# exec's stdio are the host's. So the exec (this script, the relay) forks a keeper that lets go of
# them: the keeper starts the program on FIFOs in the sandbox's own memory (/dev/shm), or on a
# terminal it makes, waits for it and writes its exit status beside the FIFOs. The relay copies
# between its stdio and the FIFOs. Before a checkpoint pid 1 ends the relay (init.py's `sever`);
# the keeper and the program live on in the checkpoint, and after a restore a new relay attaches.
#   relay <root> <stdin 0|1> <rows> <cols> program...  start the program under a keeper in
#        <root>/<its pid>, on a terminal of rows x cols unless rows is 0; print its pid, then relay
#        until it ends; exit as it did (128 + the signal that ended it).
#   attach <root>/<pid>                                 print the pid, relay to that program.
# The directory: `in` (the relay writes the program's input; the keeper copies it on), `out`, `err`
# (the program's output, read by the relay; a terminal's is all on `out`), `ctl` (the relay writes
# "eof" when its input ends: the keeper closes the program's stdin, a terminal ignores it; and
# "ack" once it has taken the output of a program that ended: the keeper may go), `done` (the keeper
# writes a byte there when the program has ended), `exit` (its status, "exit N" or "signal N").
# The keeper holds a reader of every FIFO until the ack: a FIFO's unread data is lost when its last
# reader closes, and a relay may come only later (after a restore).
# A terminal's size is set from outside (ptyresize.py, which sends this keeper, its parent,
# SIGUSR1: it passes SIGWINCH on).
import fcntl, os, select, signal, struct, sys, termios, time

NAMES = ("in", "out", "err", "ctl", "done")


def write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def keep(where, stdin, rows, cols, argv, started_w):
    """The keeper (its own session, no descriptor of the host's): start the program, copy its
    input (and terminal), record its exit."""
    null = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    os.closerange(3, started_w)
    os.closerange(started_w + 1, 1 << 16)
    # Woken at once when the program ends.
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    # Made under a name of its own, renamed after the program's pid once it runs.
    mine = os.path.join(where, "new-%d" % os.getpid())
    os.mkdir(mine, 0o700)
    for name in NAMES:
        os.mkfifo(os.path.join(mine, name), 0o600)
    # Read-write, so neither end is ever missing while no relay is there: the program never sees
    # EPIPE, the keeper never an end of its input.
    requests = os.open(os.path.join(mine, "in"), os.O_RDWR)
    ctl = os.open(os.path.join(mine, "ctl"), os.O_RDWR)
    done = os.open(os.path.join(mine, "done"), os.O_RDWR)
    terminal = rows > 0
    out = os.open(os.path.join(mine, "out"), os.O_RDWR if terminal else os.O_RDONLY | os.O_NONBLOCK)
    err = os.open(os.path.join(mine, "err"), os.O_RDONLY | os.O_NONBLOCK)
    master = feed_w = None
    try:
        if terminal:
            master, slave = os.openpty()
            fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
            program = start_on_terminal(slave, argv)
            os.close(slave)
        else:
            # posix_spawn: no copy of this interpreter (a fork costs about 10 ms under gVisor).
            actions = [
                (os.POSIX_SPAWN_OPEN, 1, os.path.join(mine, "out"), os.O_WRONLY, 0),
                (os.POSIX_SPAWN_OPEN, 2, os.path.join(mine, "err"), os.O_WRONLY, 0),
            ]
            if stdin:
                feed_r, feed_w = os.pipe()
                actions.append((os.POSIX_SPAWN_DUP2, feed_r, 0))
            else:
                actions.append((os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0))
            try:
                program = os.posix_spawnp(argv[0], argv, os.environ, file_actions=actions,
                                          setsigdef=(signal.SIGPIPE, signal.SIGXFSZ), setsigmask=())
            finally:
                if stdin:
                    os.close(feed_r)
    except OSError as e:
        # As a shell says it; the status as the command helper gives it (command/mod.rs).
        said = os.open(os.path.join(mine, "err"), os.O_WRONLY | os.O_NONBLOCK)
        write_all(said, ("%s: %s\n" % (argv[0], e.strerror)).encode())
        os.close(said)
        program, status = None, (127 if isinstance(e, FileNotFoundError) else 126) << 8
    named = os.path.join(where, str(program or os.getpid()))
    try:
        os.rename(mine, named)
    except OSError:
        # Left by a keeper that was killed, of a process whose pid this one has now.
        for name in os.listdir(named):
            os.unlink(os.path.join(named, name))
        os.rename(mine, named)
    mine = named
    os.write(started_w, b"%d\n" % (program or os.getpid()))
    os.close(started_w)
    if terminal:
        signal.signal(signal.SIGUSR1, lambda *_: resized(program))
    if program is not None:
        status = None
    sources = [requests, ctl] + ([master] if master is not None else [])
    while status is None:
        readable = select.select(sources + [wake_r], [], [], 1.0)[0]
        for fd in readable:
            if fd == wake_r:
                os.read(wake_r, 512)
                continue
            try:
                data = os.read(fd, 65536)
            except OSError:
                data = b""
            if fd == master:
                if not data:
                    sources.remove(master)  # the terminal closed: only the exit is left
                else:
                    write_all(out, data)
            elif fd == ctl:
                if b"eof" in data and feed_w is not None:
                    os.close(feed_w)
                    feed_w = None
            elif master is not None:
                write_all(master, data)
            elif feed_w is not None:
                try:
                    write_all(feed_w, data)
                except OSError:
                    pass  # it closed its stdin
        done_now, st = os.waitpid(program, os.WNOHANG)
        if done_now:
            status = st
    if master is not None:
        # What it wrote last is on the terminal still: taken while it is there.
        deadline = time.monotonic() + 0.5
        while master in sources and time.monotonic() < deadline:
            if not select.select([master], [], [], 0.05)[0]:
                break
            try:
                data = os.read(master, 65536)
            except OSError:
                break
            if not data:
                break
            write_all(out, data)
    said = "signal %d" % os.WTERMSIG(status) if os.WIFSIGNALED(status) else "exit %d" % os.WEXITSTATUS(status)
    with open(os.path.join(mine, "exit.new"), "w") as f:
        f.write(said)
    os.rename(os.path.join(mine, "exit.new"), os.path.join(mine, "exit"))
    os.write(done, b"x")
    # Until a relay has taken the output (this relay, or one after a restore).
    while b"ack" not in os.read(ctl, 4096):
        pass
    os._exit(0)


def start_on_terminal(slave, argv):
    """Fork the program on the terminal `slave`, its controlling one in a session of its own."""
    program = os.fork()
    if program == 0:
        try:
            os.setsid()
            fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
            for fd in (0, 1, 2):
                os.dup2(slave, fd)
            # The signals Python ignores or handles here, as the program expects them.
            for s in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGCHLD):
                signal.signal(s, signal.SIG_DFL)
            signal.set_wakeup_fd(-1)
            os.execvp(argv[0], argv)
        except OSError as e:
            os.write(2, ("%s: %s\r\n" % (argv[0], e.strerror)).encode())
            os._exit(127 if isinstance(e, FileNotFoundError) else 126)
        os._exit(127)
    return program


def resized(program):
    # gVisor neither sends SIGWINCH on a resize nor tells which group is in the foreground: every
    # group of the terminal's session gets it (by default they ignore it).
    groups = set()
    for entry in os.listdir("/proc"):
        try:
            with open("/proc/%s/stat" % entry) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[3] == str(program):
            groups.add(int(fields[2]))
    for group in groups:
        try:
            os.killpg(group, signal.SIGWINCH)
        except OSError:
            pass


def start(root, stdin, rows, cols, argv):
    """Fork the keeper (detached from this exec), and the directory of the program it started."""
    os.makedirs(root, mode=0o700, exist_ok=True)
    started_r, started_w = os.pipe()
    if os.fork() == 0:
        try:
            os.close(started_r)
            os.setsid()  # the exec's end (pid 1 ends it before a checkpoint) does not reach it
            keep(root, stdin, rows, cols, argv, started_w)
        except BaseException as e:
            os.write(2, b"the keeper could not start: %r\n" % (e,))
        os._exit(127)
    os.close(started_w)
    line = b""
    while not line.endswith(b"\n"):
        chunk = os.read(started_r, 64)
        if not chunk:
            sys.exit(127)
        line += chunk
    os.close(started_r)
    return os.path.join(root, line.decode().strip())


def tell(fd, data):
    """Write to the keeper, if it is there to read."""
    if fd is not None:
        try:
            write_all(fd, data)
        except OSError:
            pass


def relay(where):
    fds = {}
    try:
        for name in ("out", "err", "done"):
            fds[name] = os.open(os.path.join(where, name), os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        # Gone: it ended and a relay took its output, or it never ran here.
        sys.stderr.write("no process at %s: %s\n" % (where, e))
        os._exit(126)
    ended = os.path.exists(os.path.join(where, "exit"))  # while no relay was there
    for name in ("in", "ctl"):
        try:
            fds[name] = os.open(os.path.join(where, name), os.O_WRONLY | os.O_NONBLOCK)
            os.set_blocking(fds[name], True)
        except OSError:
            fds[name] = None  # no keeper reads it: the keeper is gone (killed)
            ended = True
    write_all(1, b"%s\n" % os.path.basename(where).encode())
    sinks = {fds["out"]: 1, fds["err"]: 2}
    watched = [fds["out"], fds["err"], fds["done"]]
    try:
        os.fstat(0)
        watched.append(0)
    except OSError:
        pass  # the exec has no stdin
    deadline = None
    while True:
        if ended and deadline is None:
            # Its output is in the FIFOs: taken until they end (what it started may hold them),
            # or until they stay empty a moment past a grace period.
            deadline = time.monotonic() + 0.5
            watched = [fd for fd in watched if fd in sinks]
        if deadline is not None and (not watched or time.monotonic() > deadline):
            break
        readable = select.select(watched, [], [], 0.05)[0]
        if deadline is not None and not readable:
            break  # after the end, nothing more came for a moment
        for fd in readable:
            if fd == fds["done"]:
                os.read(fd, 64)
                ended = True
                continue
            try:
                data = os.read(fd, 65536)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if fd == 0:
                if data:
                    tell(fds["in"], data)
                else:
                    watched.remove(0)
                    tell(fds["ctl"], b"eof\n")
            elif data:
                write_all(sinks[fd], data)
            else:
                watched.remove(fd)
    for fd in sinks:
        while True:
            try:
                data = os.read(fd, 65536)
            except OSError:
                break
            if not data:
                break
            write_all(sinks[fd], data)
    try:
        with open(os.path.join(where, "exit")) as f:
            kind, number = f.read().split()
        code = 128 + int(number) if kind == "signal" else int(number)
    except (OSError, ValueError):
        code = 255
    tell(fds["ctl"], b"ack\n")
    for name in NAMES + ("exit",):
        try:
            os.unlink(os.path.join(where, name))
        except OSError:
            pass
    try:
        os.rmdir(where)
    except OSError:
        pass
    os._exit(code)


if sys.argv[1] == "relay":
    root, stdin, rows, cols = sys.argv[2], sys.argv[3] == "1", int(sys.argv[4]), int(sys.argv[5])
    relay(start(root, stdin, rows, cols, sys.argv[6:]))
else:
    relay(sys.argv[2])
