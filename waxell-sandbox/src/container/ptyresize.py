# Resizes the terminal of a program a keeper made it (keeper.py), from inside the container:
# `python3 -I -c SOURCE resize <pid> <rows> <cols>` sets the size on the program's terminal (its
# stdin, else stdout or stderr) and sends the keeper, its parent, SIGUSR1, on which the keeper sends
# SIGWINCH to the process groups of the terminal's session: gVisor neither sends it on a resize nor
# tells which group is in the foreground, so the background jobs get it too (by default they ignore
# it). Also run after Podman's own resize of an engine's terminal, which conmon applies only later,
# so the size is in force once it returns.
import fcntl, os, signal, struct, sys, termios


def winsize(rows, cols):
    return struct.pack("HHHH", int(rows), int(cols), 0, 0)


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
        # A kept program's parent is its keeper, which passes SIGWINCH on. An engine's terminal's
        # program has none here (its parent, outside the sandbox's pid namespace, reads as 0).
        with open(f"/proc/{pid}/stat") as f:
            keeper = int(f.read().rsplit(")", 1)[1].split()[1])
        if keeper > 0:
            with open(f"/proc/{keeper}/cmdline", "rb") as f:
                if b"\0relay\0" in f.read():  # keeper.py's mode
                    os.kill(keeper, signal.SIGUSR1)
        return
    sys.exit(f"process {pid} has no terminal to resize")


resize(sys.argv[2], sys.argv[3], sys.argv[4])
