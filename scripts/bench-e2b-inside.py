"""What a user of E2B's Python SDK waits for inside one `waxell-sandbox serve` sandbox: a cold
create (until it returns, and until the first `run_code` result), `run_code("1+1")`, `commands.run("echo hi")`, the first
byte of a new terminal, and a watch event (a file written through the SDK until its event arrives).
Medians and spread of N rounds each, every round through the SDK over 127.0.0.1.

Run it against one server per configuration and compare the lines (docs/e2b.md, "Performance"):

    E2B_API_URL=http://127.0.0.1:3000 E2B_SANDBOX_URL=http://127.0.0.1:3000 E2B_API_KEY=... \\
        python scripts/bench-e2b-inside.py [ROUNDS] [LABEL]
"""

import os
import sys
import threading
import time

from e2b import PtySize
from e2b_code_interpreter import Sandbox
from e2b_bench_timing import summary, timed

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 20
LABEL = sys.argv[2] if len(sys.argv) > 2 else os.environ.get("E2B_API_URL", "")


def cold_create():
    """Create (until `Sandbox.create` returns) and create to the first cell's result; the kill is
    not timed."""
    start = time.perf_counter()
    sbx = Sandbox.create(timeout=120)
    created = time.perf_counter() - start
    result = sbx.run_code("1+1")
    elapsed = time.perf_counter() - start
    assert result.text == "2", result
    sbx.kill()
    return created, elapsed


def first_pty_byte(sbx):
    """From the terminal's creation until its first byte (bash's prompt) arrives."""
    arrived = threading.Event()
    start = time.perf_counter()
    handle = sbx.pty.create(PtySize(rows=24, cols=80), timeout=0)

    def drain():
        try:
            handle.wait(on_pty=lambda _data: arrived.set())
        except Exception:  # noqa: BLE001 - the kill below ends it with an error
            pass

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    assert arrived.wait(30), "no terminal output within 30 s"
    elapsed = time.perf_counter() - start
    sbx.pty.kill(handle.pid)
    reader.join(10)
    return elapsed


def watch_latency(sbx, watched, rounds):
    """A file written through the SDK until its create event is seen on an open `watch_dir` (the
    sync SDK's watcher is polled: the time includes polls, each one request)."""
    samples = []
    handle = sbx.files.watch_dir(watched)
    try:
        for i in range(rounds):
            name = f"f{i}"
            start = time.perf_counter()
            sbx.files.write(f"{watched}/{name}", b"x")
            deadline = start + 10
            while not any(e.name == name for e in handle.get_new_events()):
                assert time.perf_counter() < deadline, f"no event for {name} within 10 s"
            samples.append(time.perf_counter() - start)
    finally:
        handle.stop()
    return samples


def main():
    # Warm-up: the first create also loads the SDK's own modules.
    cold_create()
    creates, first_results = zip(*[cold_create() for _ in range(max(3, ROUNDS // 2))])
    sbx = Sandbox.create(timeout=600)
    try:
        sbx.run_code("1+1")
        cells = [timed(lambda: sbx.run_code("1+1")) for _ in range(ROUNDS)]
        sbx.commands.run("echo hi")
        commands = [timed(lambda: sbx.commands.run("echo hi")) for _ in range(ROUNDS)]
        first_pty_byte(sbx)
        ptys = [first_pty_byte(sbx) for _ in range(ROUNDS)]
        sbx.files.make_dir("/home/user/watched")
        watch_latency(sbx, "/home/user/watched", 1)
        watches = watch_latency(sbx, "/home/user/watched", ROUNDS)
    finally:
        sbx.kill()
    print(f"[{LABEL}] cold create (Sandbox.create returns): {summary(creates)}")
    print(f"[{LABEL}] cold create to the first result: {summary(first_results)}")
    print(f"[{LABEL}] run_code('1+1'): {summary(cells)}")
    print(f"[{LABEL}] commands.run('echo hi'): {summary(commands)}")
    print(f"[{LABEL}] first terminal byte: {summary(ptys)}")
    print(f"[{LABEL}] watch event after a write: {summary(watches)}")


if __name__ == "__main__":
    main()
