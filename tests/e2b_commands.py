"""E2B's official Python SDK (`e2b`, from PyPI) driving commands and terminals in a sandbox of
`waxell-sandbox serve` (E2B_API_URL / E2B_SANDBOX_URL / E2B_API_KEY point at it). Run by
tests/tests/e2b_commands.rs; each check prints one line, the last line is "all checks passed".

Usage: e2b_commands.py [abuse]  (`abuse`: only the containment checks; the timings are
scripts/bench-e2b-inside.py's)
"""

import sys
import time

from e2b import CommandExitException, Sandbox, SandboxException, TimeoutException
from e2b.sandbox.commands.command_handle import PtySize


def check(name, condition, detail=""):
    if not condition:
        raise AssertionError(f"{name}: {detail}")
    print(f"ok {name}")


def expect_exit(run):
    """The CommandExitException `run()` raises."""
    try:
        result = run()
    except CommandExitException as e:
        return e
    raise AssertionError(f"expected CommandExitException, got {result!r}")


def foreground(sbx):
    result = sbx.commands.run("printf out; printf err >&2")
    check("foreground stdout/stderr/exit", (result.stdout, result.stderr, result.exit_code) == ("out", "err", 0), result)
    e = expect_exit(lambda: sbx.commands.run("echo partial; echo oops >&2; exit 7"))
    check(
        "nonzero exit raises CommandExitException",
        (e.exit_code, e.error, e.stdout, e.stderr) == (7, "exit status 7", "partial\n", "oops\n"),
        (e.exit_code, e.error, e.stdout, e.stderr),
    )
    result = sbx.commands.run('echo "$GREETING from $(pwd) as $(id -u)"', envs={"GREETING": "hello"}, cwd="/tmp")
    words = result.stdout.split()
    check("env and cwd reach the command", words[:3] == ["hello", "from", "/tmp"], result.stdout)
    check("not root", words[4] != "0", result.stdout)
    # The sandbox's syscall policy reaches commands too (under gVisor each exec installs it itself).
    result = sbx.commands.run("grep '^Seccomp:' /proc/self/status; unshare -U true 2>/dev/null && echo unshared || echo refused")
    check("commands run under the syscall policy", result.stdout.split() == ["Seccomp:", "2", "refused"], result.stdout)
    # No root: `sudo` runs the command as the sandbox user with a reset environment, and says so.
    result = sbx.commands.run('export FOO=bar; sudo sh -c \'echo "[$FOO]" $(id -un)\'')
    check("sudo runs as the sandbox user, environment reset, saying so",
          result.stdout == "[] user\n" and "no root" in result.stderr, result)
    check("`python` is Python 3", sbx.commands.run("python -c 'import sys; print(sys.version_info[0])'").stdout == "3\n")
    chunks = []
    sbx.commands.run("for i in 1 2 3; do echo line$i; done", on_stdout=chunks.append)
    check("on_stdout streams the output", "".join(chunks) == "line1\nline2\nline3\n", chunks)


def background(sbx):
    handle = sbx.commands.run("echo started; sleep 30", background=True)
    pids = [p.pid for p in sbx.commands.list()]
    check("a background command is listed", handle.pid in pids, pids)
    again = sbx.commands.connect(handle.pid)
    check("connect attaches to it by pid", again.pid == handle.pid)
    check("kill finds it", sbx.commands.kill(handle.pid) is True)
    e = expect_exit(again.wait)
    check("a killed command ends with signal: killed", (e.exit_code, e.error) == (-1, "signal: killed"), (e.exit_code, e.error))
    time.sleep(0.2)
    check("it is gone from the list", handle.pid not in [p.pid for p in sbx.commands.list()])
    check("kill of an unknown pid is False", sbx.commands.kill(handle.pid) is False)


def stdin(sbx):
    handle = sbx.commands.run("tr a-z A-Z", background=True, stdin=True)
    handle.send_stdin("shout ")
    sbx.commands.send_stdin(handle.pid, b"please")
    handle.close_stdin()
    result = handle.wait()
    check("stdin reaches the command and closing it ends it", result.stdout == "SHOUT PLEASE", result)


def stream_input(sbx):
    """`StreamInput` (a client stream) through the SDK's own generated Connect client: no public
    SDK call uses it yet, so this reaches into `commands._rpc` and skips if that moved."""
    try:
        from e2b.envd.process import process_pb
        from protobuf import Oneof

        rpc = sbx.commands._rpc
    except (ImportError, AttributeError) as e:
        print(f"skip StreamInput: the SDK's internals moved ({e})")
        return
    handle = sbx.commands.run("cat", background=True, stdin=True)
    selector = process_pb.ProcessSelector(selector=Oneof("pid", handle.pid))
    start = process_pb.StreamInputRequest.StartEvent(process=selector)
    messages = [process_pb.StreamInputRequest(event=Oneof("start", start))]
    for part in (b"one ", b"two ", b"three"):
        data = process_pb.StreamInputRequest.DataEvent(input=process_pb.ProcessInput(input=Oneof("stdin", part)))
        messages.append(process_pb.StreamInputRequest(event=Oneof("data", data)))
    rpc.stream_input(iter(messages))
    handle.close_stdin()
    result = handle.wait()
    check("StreamInput delivers its messages in order", result.stdout == "one two three", result)


def timeout(sbx):
    started = time.monotonic()
    try:
        sbx.commands.run("sleep 20", timeout=1)
        raise AssertionError("sleep 20 with timeout=1 returned")
    except TimeoutException:
        pass
    check("a command's timeout ends the wait", time.monotonic() - started < 10, time.monotonic() - started)


def terminal(sbx):
    output = bytearray()
    term = sbx.pty.create(PtySize(rows=24, cols=80), envs={"MARK": "m4rk"})
    sbx.pty.send_stdin(term.pid, b"test -t 0 && test -t 1 && echo IS_A_TTY; echo $TERM $MARK; stty size\n")
    # A program in the foreground that reports SIGWINCH: the resize must reach it.
    sbx.pty.send_stdin(
        term.pid,
        b"python3 -c \"import signal,sys,time,os; "
        b"signal.signal(signal.SIGWINCH, lambda *a: (print('WINCH', os.get_terminal_size(), flush=True), sys.exit(0))); "
        b"print('WAITING', flush=True); time.sleep(20)\"\n",
    )
    deadline = time.monotonic() + 20
    # Read the first stream until the program waits (Connect is live, not replayed: what the shell
    # wrote before a second stream attaches is on this one), then attach a second stream and
    # drop the first.
    for _, _, pty in term:
        if pty:
            output += pty
        if b"WAITING" in output.replace(b"'WAITING'", b""):
            break
        if time.monotonic() > deadline:
            raise AssertionError(f"the terminal program did not start: {bytes(output)!r}")
    handle = sbx.pty.connect(term.pid)
    term.disconnect()
    sbx.pty.resize(term.pid, PtySize(rows=30, cols=100))
    sbx.pty.send_stdin(term.pid, b"stty size; exit 0\n")
    result = handle.wait(on_pty=lambda data: output.extend(data))
    text = output.decode(errors="replace")
    check("the process sees a terminal", "IS_A_TTY" in text, text)
    check("TERM and the env reach the shell", "xterm-256color m4rk" in text, text)
    check("the terminal has the asked size", "24 80" in text, text)
    check("a resize reaches the foreground program as SIGWINCH", "WINCH os.terminal_size(columns=100, lines=30)" in text, text)
    check("the new size holds", "30 100" in text, text)
    check("exit ends the terminal", result.exit_code == 0, result)

    # A resize is in force when the call returns: a program started right after reads the new size
    # (Podman's own resize is applied later by conmon).
    term = sbx.pty.create(PtySize(rows=24, cols=80))
    sbx.pty.resize(term.pid, PtySize(rows=40, cols=120))
    sbx.pty.send_stdin(term.pid, b"stty size; exit 0\n")
    sized = bytearray()
    term.wait(on_pty=lambda data: sized.extend(data))
    check("a resize is in force when it returns", "40 120" in sized.decode(errors="replace"), bytes(sized))

    term = sbx.pty.create(PtySize(rows=24, cols=80))
    check("a terminal can be killed", sbx.pty.kill(term.pid) is True)
    e = expect_exit(term.wait)
    check("a killed terminal ends with signal: killed", e.exit_code == -1, e.exit_code)


def killed_under_a_command():
    """A sandbox killed under a running command: the wait fails as for a dead E2B sandbox (the
    connection breaks, the SDK checks the sandbox's health and says it is gone)."""
    sbx = Sandbox.create(timeout=60)
    handle = sbx.commands.run("sleep 60", background=True)
    sbx.kill()
    try:
        handle.wait()
        raise AssertionError("wait() returned after the sandbox was killed")
    except TimeoutException as e:
        check("a sandbox killed under a command ends the wait as killed", "killed" in str(e), str(e))


def abuse(sbx):
    # A fork bomb is held by the sandbox's process cap; killing its command ends all of it.
    bomb = sbx.commands.run("bomb() { bomb | bomb & }; bomb; sleep 30", background=True)
    time.sleep(4)
    sbx.commands.kill(bomb.pid)
    e = expect_exit(bomb.wait)
    check("the fork bomb hit the process cap", "fork" in e.stderr and "unavailable" in e.stderr, e.stderr[-500:])
    check("the sandbox runs commands after the fork bomb", sbx.commands.run("echo alive").stdout == "alive\n")

    e = expect_exit(
        lambda: sbx.commands.run("python3 -c 'a = []\nwhile True: a.append(bytearray(64 << 20))'", timeout=60)
    )
    check("a memory bomb is killed", e.exit_code != 0, (e.exit_code, e.error, e.stderr[-300:]))
    check("the sandbox runs commands after the memory bomb", sbx.commands.run("echo alive").stdout == "alive\n")

    e = expect_exit(lambda: sbx.commands.run("head -c 100G /dev/zero > /home/user/fill", timeout=60))
    check("a disk fill is stopped", e.exit_code != 0, (e.exit_code, e.error, e.stderr[-300:]))
    sbx.commands.run("rm -f /home/user/fill")

    # The same through terminals: a fork bomb and a memory bomb typed at a shell prompt are held by
    # the same caps, and a sandbox's terminals are capped (the host's pty pool is shared).
    term = sbx.pty.create(PtySize(rows=24, cols=80))
    sbx.pty.send_stdin(term.pid, b"bomb() { bomb | bomb & }; bomb\n")
    time.sleep(4)
    sbx.pty.kill(term.pid)
    check("the sandbox runs commands after a fork bomb in a terminal",
          sbx.commands.run("echo alive").stdout == "alive\n")
    term = sbx.pty.create(PtySize(rows=24, cols=80))
    sbx.pty.send_stdin(term.pid, b"exec python3 -c 'a = []\nwhile True: a.append(bytearray(64 << 20))'\n")
    try:
        term.wait()
        check("a memory bomb in a terminal is killed", False, "its shell exited 0")
    except CommandExitException as e:
        check("a memory bomb in a terminal is killed", e.exit_code != 0, (e.exit_code, e.error))
    check("the sandbox runs commands after a memory bomb in a terminal",
          sbx.commands.run("echo alive").stdout == "alive\n")
    terms = []
    try:
        for _ in range(12):
            terms.append(sbx.pty.create(PtySize(rows=24, cols=80)))
        check("a sandbox's terminals are capped", False, f"{len(terms)} terminals opened")
    except SandboxException as e:
        check("a sandbox's terminals are capped", 1 <= len(terms) <= 8, (len(terms), str(e)[:200]))
    for t in terms:
        sbx.pty.kill(t.pid)

    e = expect_exit(
        lambda: sbx.commands.run(
            "python3 -c 'import socket; socket.create_connection((\"1.1.1.1\", 53), timeout=3)'"
        )
    )
    check("a command has no network", "Network is unreachable" in e.stderr or "Errno" in e.stderr, e.stderr[-300:])
    result = sbx.commands.run("python3 -c 'print(6 * 7)'")
    check("the sandbox still works", result.stdout == "42\n", result)


def main():
    only_abuse = sys.argv[1:] == ["abuse"]
    sbx = Sandbox.create(timeout=300)
    try:
        if only_abuse:
            abuse(sbx)
        else:
            foreground(sbx)
            background(sbx)
            stdin(sbx)
            stream_input(sbx)
            timeout(sbx)
            terminal(sbx)
            killed_under_a_command()
    finally:
        sbx.kill()
    print("all checks passed")


if __name__ == "__main__":
    main()
