# A terminal made inside the container, for an engine that cannot give an exec one (Podman asks
# runsc for a terminal exec runsc refuses). Run as `python3 -I -c SOURCE relay <rows> <cols>
# program args...` in a plain exec: it opens a pseudo-terminal of that size, starts the program on
# it (its own session, the terminal its controlling one, the signals Python ignores restored),
# prints the program's pid as its first line, then relays its stdin to the terminal and the
# terminal to its stdout until the program exits (and the output it left is read), and exits as
# the program did (128 + the signal that killed it). `SOURCE resize <pid> <rows> <cols>` resizes the
# terminal of that program (its stdin, else stdout or stderr): after Podman's own resize of an
# engine's terminal, which conmon applies only later, so the size is in force once it returns; and
# for a relayed program, whose relay it then sends SIGUSR1, on which
# the relay sends SIGWINCH to the process groups of the terminal's session: gVisor neither sends it
# on a resize nor tells which group is in the foreground, so the background jobs get it too (by
# default they ignore it).
import fcntl, os, select, signal, struct, sys, termios, time


def winsize(rows, cols):
    return struct.pack("HHHH", int(rows), int(cols), 0, 0)


def relay(rows, cols, argv):
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, winsize(rows, cols))
    pid = os.fork()
    if pid == 0:
        try:
            os.close(master)
            os.setsid()
            fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
            for fd in (0, 1, 2):
                os.dup2(slave, fd)
            if slave > 2:
                os.close(slave)
            for s in (signal.SIGPIPE, signal.SIGXFSZ):
                signal.signal(s, signal.SIG_DFL)
            os.execvp(argv[0], argv)
        except OSError as e:
            os.write(2, f"{argv[0]}: {e.strerror}\r\n".encode())
            os._exit(127 if isinstance(e, FileNotFoundError) else 126)
    os.close(slave)

    def resized(*_):
        groups = set()
        for entry in os.listdir("/proc"):
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if fields[3] == str(pid):
                groups.add(int(fields[2]))
        for group in groups:
            try:
                os.killpg(group, signal.SIGWINCH)
            except OSError:
                pass

    signal.signal(signal.SIGUSR1, resized)
    os.write(1, b"%d\n" % pid)
    status, deadline, stdin_open = None, None, True
    while True:
        if status is None:
            done, st = os.waitpid(pid, os.WNOHANG)
            if done:
                status, deadline = st, time.monotonic() + 0.5
        if deadline is not None and time.monotonic() > deadline:
            break
        readable, _, _ = select.select([master] + ([0] if stdin_open else []), [], [], 0.05)
        if master in readable:
            try:
                data = os.read(master, 32768)
            except OSError:
                data = b""
            if not data:
                if status is None:
                    _, status = os.waitpid(pid, 0)
                break
            os.write(1, data)
        if 0 in readable:
            data = os.read(0, 32768)
            if not data:
                stdin_open = False
            else:
                view = memoryview(data)
                while view:
                    view = view[os.write(master, view):]
    if os.WIFSIGNALED(status):
        os._exit(128 + os.WTERMSIG(status))
    os._exit(os.WEXITSTATUS(status))


def resize(pid, rows, cols):
    for fd in (0, 1, 2):
        try:
            tty = os.open(f"/proc/{pid}/fd/{fd}", os.O_RDWR | os.O_NOCTTY)
        except OSError:
            continue
        try:
            if not os.isatty(tty):
                continue
            fcntl.ioctl(tty, termios.TIOCSWINSZ, winsize(rows, cols))
        finally:
            os.close(tty)
        # A relayed program's parent is its relay, which copies the new size to its own terminal.
        # An engine's terminal has none (the parent, outside the sandbox's pid namespace, reads as 0).
        with open(f"/proc/{pid}/stat") as f:
            relay_pid = int(f.read().rsplit(")", 1)[1].split()[1])
        if relay_pid > 0:
            with open(f"/proc/{relay_pid}/cmdline", "rb") as f:
                if b"\0relay\0" in f.read():
                    os.kill(relay_pid, signal.SIGUSR1)
        return
    sys.exit(f"process {pid} has no terminal to resize")


if sys.argv[1] == "relay":
    relay(sys.argv[2], sys.argv[3], sys.argv[4:])
else:
    resize(sys.argv[2], sys.argv[3], sys.argv[4])
