"""A sandbox's life through E2B's official Python SDK against `waxell-sandbox serve`: pause and
resume (three cycles, files kept, kernels fresh), the state while a pause goes on, auto-pause on
timeout then connect, autoResume on traffic, fork, snapshots, metrics, paginated and filtered
lists, and the error shape of routes the server lacks.
Run by tests/tests/e2b_lifecycle.rs with E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY set.

    python e2b_lifecycle.py all                 # every check
    python e2b_lifecycle.py pause-for-restart   # create, write, pause; prints the sandbox id
    python e2b_lifecycle.py resume-after-restart ID
    python e2b_lifecycle.py memory OWNER        # pause, fork and snapshot with memory, commands and
                                                # terminals living on (gVisor on Docker Engine at
                                                # WAXELL_DOCKER_ENGINE_HOST; OWNER: the server's pid)
    python e2b_lifecycle.py memory-pause-for-restart
    python e2b_lifecycle.py memory-resume-after-restart ID
"""

import datetime
import os
import sys
import threading
import time
import uuid

import httpx
from e2b import CommandExitException, PtySize, SandboxQuery, SandboxState
from e2b.exceptions import SandboxException, SandboxNotFoundException
from e2b_code_interpreter import Sandbox

API = os.environ["E2B_API_URL"]
HEADERS = {"X-API-KEY": os.environ["E2B_API_KEY"]}
MARKER = "/home/user/notes/marker.txt"


def check(condition, what):
    if not condition:
        raise AssertionError(what)
    print(f"ok: {what}")


def wait_for(predicate, what, seconds=20.0):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def state_of(sandbox_id):
    return Sandbox.get_info(sandbox_id).state


def unknown_routes():
    r = httpx.put(f"{API}/sandboxes/abc/network", headers=HEADERS, json={})
    body = r.json()
    check(r.status_code == 501 and body["code"] == 501, f"E2B route this server lacks: 501 ({r.status_code})")
    check("PUT /sandboxes/abc/network" in body["message"], f"the message names method and route: {body['message']}")
    r = httpx.get(f"{API}/no/such/thing", headers=HEADERS)
    check(r.status_code == 404 and "GET /no/such/thing" in r.json()["message"], "other routes: 404 naming them")
    try:
        Sandbox.connect("doesnotexist000000000")
        raise AssertionError("connect to a missing sandbox succeeded")
    except SandboxNotFoundException:
        check(True, "a missing sandbox is still SandboxNotFoundException")


def pause_resume_cycles():
    sbx = Sandbox.create(timeout=120)
    try:
        sbx.files.write(MARKER, "kept")
        sbx.run_code("x = 41")
        # What the files API does not carry: an executable bit, a private directory, a link, a
        # modification time and user metadata.
        sbx.files.write("/home/user/bin/tool.sh", "#!/bin/sh\necho tool ran\n", metadata={"owner": "agent-7"})
        sbx.commands.run("chmod 755 /home/user/bin/tool.sh && mkdir -m 700 /home/user/private && "
                         "ln -s bin/tool.sh /home/user/tool-link && touch -m -d @1700000000 /home/user/notes")
        attributes_before = sbx.commands.run("stat -c '%n %a %Y' bin/tool.sh private notes; readlink -f tool-link",
                                             cwd="/home/user").stdout
        for cycle in range(1, 4):
            sbx.files.write(f"/home/user/cycle{cycle}.txt", str(cycle))
            check(sbx.pause(), f"cycle {cycle}: paused")
            check(not sbx.is_running(), f"cycle {cycle}: not running while paused")
            check(state_of(sbx.sandbox_id) == SandboxState.PAUSED, f"cycle {cycle}: info says paused")
            check(not sbx.pause(), f"cycle {cycle}: pausing again answers already paused")
            sbx.connect()
            check(sbx.is_running(), f"cycle {cycle}: running after connect")
            check(state_of(sbx.sandbox_id) == SandboxState.RUNNING, f"cycle {cycle}: info says running")
            check(sbx.files.read(MARKER) == "kept", f"cycle {cycle}: the first file survived")
            for earlier in range(1, cycle + 1):
                check(sbx.files.read(f"/home/user/cycle{earlier}.txt") == str(earlier),
                      f"cycle {cycle}: file of cycle {earlier} survived")
            attributes = sbx.commands.run("stat -c '%n %a %Y' bin/tool.sh private notes; readlink -f tool-link",
                                          cwd="/home/user").stdout
            check(attributes == attributes_before,
                  f"cycle {cycle}: modes, times and the link survived ({attributes!r} vs {attributes_before!r})")
            check(sbx.commands.run("/home/user/tool-link").stdout == "tool ran\n", f"cycle {cycle}: the script runs")
            (tool,) = [e for e in sbx.files.list("/home/user/bin") if e.name == "tool.sh"]
            check(tool.metadata == {"owner": "agent-7"}, f"cycle {cycle}: file metadata survived ({tool.metadata})")
        # Filesystem-only: the kernel is fresh, the code's variables are gone, and it runs.
        execution = sbx.run_code("x")
        check(execution.error is not None and execution.error.name == "NameError",
              "variables are not kept (files-only pause)")
        check("".join(sbx.run_code("print(open('/home/user/notes/marker.txt').read())").logs.stdout) == "kept\n",
              "the new kernel reads the kept file")
        # Asked for memory (E2B's default) the server pauses files only and says so.
        r = httpx.post(f"{API}/sandboxes/{sbx.sandbox_id}/pause", headers=HEADERS, json={"memory": True})
        check(r.status_code == 204 and r.headers.get("waxell-pause") == "filesystem", "pause answers which kind")
        check("memory not kept" in r.headers.get("warning", ""), "and warns that memory was not kept")
        r = httpx.post(f"{API}/sandboxes/{sbx.sandbox_id}/resume", headers=HEADERS, json={"timeout": 60})
        check(r.status_code == 201 and r.json()["sandboxID"] == sbx.sandbox_id, "the resume route resumes")
        check(sbx.files.read(MARKER) == "kept", "files kept through the resume route")
    finally:
        sbx.kill()
    check(Sandbox.kill(sbx.sandbox_id) is False, "a killed sandbox is gone")


def auto_pause_then_connect():
    sbx = Sandbox.create(timeout=2, lifecycle={"on_timeout": "pause"})
    try:
        sbx.files.write(MARKER, "auto")
        wait_for(lambda: state_of(sbx.sandbox_id) == SandboxState.PAUSED, "the auto-pause")
        check(not sbx.is_running(), "auto-paused at the end of its lifetime")
        info = Sandbox.get_info(sbx.sandbox_id)
        check(info.lifecycle and info.lifecycle["on_timeout"] == "pause", "info shows onTimeout: pause")
        sbx.connect(timeout=60)
        check(sbx.is_running() and sbx.files.read(MARKER) == "auto", "connect resumed it with its files")
        # As E2B: a timeout of 0 ends the lifetime now, and the lifecycle (pause) follows.
        sbx.set_timeout(0)
        wait_for(lambda: state_of(sbx.sandbox_id) == SandboxState.PAUSED, "the pause after set_timeout(0)", 10.0)
        sbx.connect(timeout=60)
        check(sbx.files.read(MARKER) == "auto", "set_timeout(0) auto-paused it, files kept")
    finally:
        sbx.kill()


def state_while_pausing():
    """From the moment a pause begins its data plane stops answering: info and the lists must say
    paused from then on, never running (E2B's SDKs poll the state to know when to connect)."""
    import threading
    sbx = Sandbox.create(timeout=120)
    try:
        # Enough files that saving them takes a while.
        sbx.commands.run("mkdir -p /home/user/bulk && for i in $(seq 40); do "
                         "head -c 2000000 /dev/urandom > /home/user/bulk/f$i; done")
        sbx.files.write(MARKER, "kept")
        done = threading.Event()
        answer = {}

        def pause():
            answer["r"] = httpx.post(f"{API}/sandboxes/{sbx.sandbox_id}/pause", headers=HEADERS,
                                     json={"memory": False}, timeout=120)
            done.set()

        threading.Thread(target=pause, daemon=True).start()
        seen = 0
        while not done.is_set():
            try:
                sbx.files.read(MARKER, request_timeout=5)
                continue
            except Exception:
                pass
            # Its data plane no longer answers: whatever the API says now must be paused.
            if done.is_set():
                break
            info = Sandbox.get_info(sbx.sandbox_id)
            check(info.state == SandboxState.PAUSED, f"envd has stopped answering, info says {info.state}")
            paused = Sandbox.list(query=SandboxQuery(state=[SandboxState.PAUSED])).next_items()
            running = Sandbox.list(query=SandboxQuery(state=[SandboxState.RUNNING])).next_items()
            check(any(s.sandbox_id == sbx.sandbox_id for s in paused)
                  and not any(s.sandbox_id == sbx.sandbox_id for s in running),
                  "the lists say paused too")
            seen += 1
        check(answer["r"].status_code == 204, f"the pause ended ({answer['r'].status_code})")
        check(seen > 0, f"the state was read while the pause went on ({seen} reads)")
        check(state_of(sbx.sandbox_id) == SandboxState.PAUSED, "and it is paused")
        sbx.connect(timeout=60)
        check(sbx.files.read(MARKER) == "kept", "resumed with its files")
    finally:
        sbx.kill()


def auto_resume_on_traffic():
    """autoResume: traffic resumes a paused sandbox, but never one paused with its files only
    (E2B's rule: that one is resumed by connect)."""
    r = httpx.post(f"{API}/sandboxes", headers=HEADERS, json={
        "templateID": "base", "autoPause": True, "autoPauseMemory": False, "autoResume": {"enabled": True}})
    check(r.status_code == 400 and "autoResume" in r.json()["message"],
          f"autoResume with a files-only auto-pause is refused ({r.status_code})")
    sbx = Sandbox.create(timeout=2, lifecycle={"on_timeout": "pause", "auto_resume": True})
    try:
        sbx.files.write(MARKER, "traffic")
        wait_for(lambda: state_of(sbx.sandbox_id) == SandboxState.PAUSED, "the auto-pause")
        check(sbx.files.read(MARKER, request_timeout=60) == "traffic", "a file read resumed it (autoResume)")
        check(state_of(sbx.sandbox_id) == SandboxState.RUNNING, "running again after the traffic")
        r = httpx.post(f"{API}/sandboxes/{sbx.sandbox_id}/pause", headers=HEADERS, json={"memory": False})
        check(r.status_code == 204, "paused with its files only")
        try:
            sbx.files.read(MARKER, request_timeout=10)
            raise AssertionError("traffic resumed a sandbox paused with memory: false")
        except AssertionError:
            raise
        except Exception:
            check(state_of(sbx.sandbox_id) == SandboxState.PAUSED, "traffic did not resume the files-only pause")
        sbx.connect(timeout=60)
        check(sbx.files.read(MARKER) == "traffic", "connect resumed it")
    finally:
        sbx.kill()


def fork_and_snapshots():
    sbx = Sandbox.create(timeout=120, metadata={"role": "origin"})
    try:
        sbx.files.write(MARKER, "before fork")
        r = httpx.post(f"{API}/sandboxes/{sbx.sandbox_id}/fork", headers=HEADERS, json={"count": 1})
        check(r.status_code == 201 and r.headers.get("waxell-fork") == "filesystem" and "warning" not in r.headers,
              f"this backend forks the files, and says so without a warning ({r.headers.get('waxell-fork')})")
        Sandbox.kill(r.json()[0]["sandbox"]["sandboxID"])
        forks = sbx.fork(count=2)
        check(len(forks) == 2 and all(f.sandbox_id != sbx.sandbox_id for f in forks), "two forks, new ids")
        for fork in forks:
            try:
                check(fork.files.read(MARKER) == "before fork", "the fork has the files")
            finally:
                pass
        forks[0].files.write(MARKER, "changed in fork")
        check(sbx.files.read(MARKER) == "before fork", "the original is independent of its fork")
        check(forks[1].files.read(MARKER) == "before fork", "forks are independent of each other")
        for fork in forks:
            fork.kill()

        name = f"snap-{uuid.uuid4().hex[:8]}"
        snapshot = sbx.create_snapshot(name=name)
        check(snapshot.snapshot_id and name in snapshot.names, f"snapshot {snapshot.snapshot_id} named {name}")
        sbx.files.write(MARKER, "after snapshot")
        listed = Sandbox.list_snapshots(sandbox_id=sbx.sandbox_id).next_items()
        check(any(s.snapshot_id == snapshot.snapshot_id for s in listed), "listed by its sandbox")
        check(Sandbox.list_snapshots(name=name).next_items()[0].snapshot_id == snapshot.snapshot_id, "by name")
        child = Sandbox.create(snapshot.snapshot_id)
        try:
            check(child.files.read(MARKER) == "before fork", "a sandbox from the snapshot has its files")
        finally:
            child.kill()
        # A paused sandbox forks and snapshots from its saved files.
        sbx.pause()
        (paused_fork,) = Sandbox.fork(sbx.sandbox_id)
        try:
            check(paused_fork.files.read(MARKER) == "after snapshot", "a paused sandbox forks with its files")
        finally:
            paused_fork.kill()
        of_paused = Sandbox.create_snapshot(sbx.sandbox_id)
        child = Sandbox.create(of_paused.snapshot_id)
        try:
            check(child.files.read(MARKER) == "after snapshot", "a paused sandbox's snapshot has its files")
        finally:
            child.kill()
        check(Sandbox.delete_snapshot(of_paused.snapshot_id), "that snapshot deleted")
        sbx.kill()
        child = Sandbox.create(name)
        try:
            check(child.files.read(MARKER) == "before fork", "the snapshot outlives its sandbox; found by name")
        finally:
            child.kill()
        check(Sandbox.delete_snapshot(snapshot.snapshot_id) is True, "deleted")
        check(Sandbox.delete_snapshot(snapshot.snapshot_id) is False, "deleted once only")
        try:
            Sandbox.create(snapshot.snapshot_id)
            raise AssertionError("a deleted snapshot still makes sandboxes")
        except SandboxException:
            check(True, "a deleted snapshot makes no sandbox")
    finally:
        sbx.kill()


def metrics():
    sbx = Sandbox.create(timeout=120)
    try:
        sbx.files.write("/home/user/blob.bin", b"\0" * (2 << 20))
        sbx.run_code("hold = bytearray(96 * 1024 * 1024)\nfor i in range(0, len(hold), 4096): hold[i] = 1")
        sbx.get_metrics()  # the first reading: CPU use is measured from one reading to the next
        # Half a second of CPU time (not of wall time: the host may be busy).
        sbx.run_code("import time\nend = time.process_time() + 0.5\nwhile time.process_time() < end: pass")
        m = sbx.get_metrics()
        check(len(m) == 1, f"one sample now: {m}")
        m = m[0]
        check(m.cpu_count >= 1 and 1 <= m.cpu_used_pct <= 100, f"cpu {m.cpu_count} x {m.cpu_used_pct}% after a busy loop")
        check(m.mem_used > 96 * 1024 * 1024 and m.mem_used < m.mem_total, f"memory {m.mem_used} of {m.mem_total}")
        check(m.disk_used >= 2 << 20 and m.disk_used < m.disk_total, f"disk {m.disk_used} of {m.disk_total}")
        hour_ago = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(hours=1)
        before = sbx.get_metrics(start=hour_ago - datetime.timedelta(minutes=5), end=hour_ago)
        check(before == [], "no samples before the sandbox existed")
        r = httpx.get(f"{API}/sandboxes/metrics", headers=HEADERS, params={"sandbox_ids": sbx.sandbox_id})
        check(r.status_code == 200 and sbx.sandbox_id in r.json()["sandboxes"], "metrics of many")
        sbx.pause()
        check(sbx.get_metrics() == [], "a paused sandbox uses nothing")
    finally:
        sbx.kill()


def sandbox_logs():
    """E2B's sandbox logs: what happened to the sandbox, across its pause, on both routes."""
    sbx = Sandbox.create(timeout=120)
    try:
        httpx.post(f"{API}/sandboxes/{sbx.sandbox_id}/pause", headers=HEADERS, json={"memory": False})
        r = httpx.get(f"{API}/v2/sandboxes/{sbx.sandbox_id}/logs", headers=HEADERS)
        messages = [e["message"] for e in r.json()["logs"]]
        check(r.status_code == 200 and messages == ["sandbox created", "sandbox paused, its files kept"],
              f"a paused sandbox's log: {messages}")
        sbx.connect(timeout=60)
        sbx.pause()  # E2B's default asks for memory, which this backend does not keep: a warning
        sbx.connect(timeout=60)
        entries = httpx.get(f"{API}/v2/sandboxes/{sbx.sandbox_id}/logs", headers=HEADERS).json()["logs"]
        check([e["message"] for e in entries][2:] == ["sandbox resumed", "sandbox paused, its files kept: memory not kept",
                                                      "sandbox resumed"], f"it goes on across pauses: {entries}")
        check(entries[2]["fields"]["from"] == "filesystem" and entries[0]["fields"]["template"], "with its fields")
        warned = httpx.get(f"{API}/v2/sandboxes/{sbx.sandbox_id}/logs", headers=HEADERS, params={"level": "warn"})
        (warning,) = warned.json()["logs"]
        check(warning["level"] == "warn" and warning["fields"]["reason"], f"level=warn: the pause that kept no memory")
        newest = httpx.get(f"{API}/v2/sandboxes/{sbx.sandbox_id}/logs", headers=HEADERS,
                           params={"direction": "backward", "limit": 1}).json()["logs"]
        check([e["message"] for e in newest] == ["sandbox resumed"], "backward, limit 1: the newest")
        found = httpx.get(f"{API}/v2/sandboxes/{sbx.sandbox_id}/logs", headers=HEADERS,
                          params={"search": "created"}).json()["logs"]
        check([e["message"] for e in found] == ["sandbox created"], "search")
        first = httpx.get(f"{API}/sandboxes/{sbx.sandbox_id}/logs", headers=HEADERS).json()
        check(len(first["logs"]) == len(first["logEntries"]) == 5 and first["logs"][0]["line"].startswith("[info] sandbox created"),
              f"the first route: lines and entries ({first['logs'][0]['line']})")
        bad = httpx.get(f"{API}/v2/sandboxes/{sbx.sandbox_id}/logs", headers=HEADERS, params={"level": "loud"})
        check(bad.status_code == 400 and "loud" in bad.json()["message"], "a bad level is named")
    finally:
        sbx.kill()
    gone = httpx.get(f"{API}/v2/sandboxes/{sbx.sandbox_id}/logs", headers=HEADERS)
    check(gone.status_code == 404, "a killed sandbox has no log")


def lists():
    run = uuid.uuid4().hex
    made = [Sandbox.create(timeout=120, metadata={"run": run, "n": str(i), "note": "a b&c=d"}) for i in range(3)]
    try:
        made[0].pause()
        query = SandboxQuery(metadata={"run": run, "note": "a b&c=d"})
        pager = Sandbox.list(query=query, limit=2)
        first = pager.next_items()
        check([s.sandbox_id for s in first] == [made[2].sandbox_id, made[1].sandbox_id], "page 1: newest first")
        check(pager.has_next and pager.next_token, "a next token after page 1")
        second = pager.next_items()
        check([s.sandbox_id for s in second] == [made[0].sandbox_id], "page 2: the rest")
        check(second[0].state == SandboxState.PAUSED and not pager.has_next, "paused listed; no page 3")
        paused = Sandbox.list(query=SandboxQuery(metadata={"run": run}, state=[SandboxState.PAUSED])).next_items()
        check([s.sandbox_id for s in paused] == [made[0].sandbox_id], "state filter: paused only")
        running = Sandbox.list(query=SandboxQuery(metadata={"run": run}, state=[SandboxState.RUNNING])).next_items()
        check(len(running) == 2, "state filter: running only")
        asc = Sandbox.list(query=SandboxQuery(metadata={"run": run}), order="asc").next_items()
        check([s.sandbox_id for s in asc] == [s.sandbox_id for s in made], "order=asc: oldest first")
        one = Sandbox.list(query=SandboxQuery(metadata={"run": run, "n": "1"})).next_items()
        check([s.sandbox_id for s in one] == [made[1].sandbox_id], "two metadata keys filter together")
        none = Sandbox.list(query=SandboxQuery(metadata={"run": "no-such-run"})).next_items()
        check(none == [], "no match: empty")
    finally:
        for sbx in made:
            sbx.kill()


COUNTER = """
import os, time
n = 0
while True:
    n += 1
    with open("/home/user/counter.txt.tmp", "w") as f:
        f.write("%d %d" % (os.getpid(), n))
    os.replace("/home/user/counter.txt.tmp", "/home/user/counter.txt")
    time.sleep(0.05)
"""


def engine_containers(owner):
    """The running containers of the server with pid `owner` in Docker Engine (their names)."""
    socket = os.environ["WAXELL_DOCKER_ENGINE_HOST"].removeprefix("unix://")
    with httpx.Client(transport=httpx.HTTPTransport(uds=socket)) as engine:
        listed = engine.get("http://engine/containers/json", params={"filters": '{"label":["io.waxell.sandbox"]}'})
    return [c["Names"][0] for c in listed.json() if c["Labels"]["io.waxell.sandbox"].startswith(f"{owner}-")]


def memory_cycles(owner):
    """Pause with memory (E2B's default) three times: a variable, a background process with its
    counter in memory, and the files come back each time; paused, the sandbox has no container."""
    sbx = Sandbox.create(timeout=180)
    try:
        check(len(engine_containers(owner)) == 1, "one container: the sandbox's")
        sbx.run_code("x = 41\nimport subprocess, sys\n"
                     f"worker = subprocess.Popen([sys.executable, '-c', {COUNTER!r}], start_new_session=True, "
                     "stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)")
        pid = int(sbx.run_code("worker.pid").text)
        boot_id = sbx.files.read("/proc/sys/kernel/random/boot_id")
        wait_for(lambda: sbx.files.exists("/home/user/counter.txt"), "the worker's first count")
        for cycle in range(1, 4):
            sbx.files.write(f"/home/user/cycle{cycle}.txt", str(cycle))
            before_pid, before = map(int, sbx.files.read("/home/user/counter.txt").split())
            check(before_pid == pid, f"cycle {cycle}: the worker {pid} counts ({before})")
            if cycle == 1:
                r = httpx.post(f"{API}/sandboxes/{sbx.sandbox_id}/pause", headers=HEADERS, json={})
                check(r.status_code == 204 and r.headers.get("waxell-pause") == "memory",
                      f"cycle 1: the pause kept memory ({r.status_code} {r.headers.get('waxell-pause')} "
                      f"{r.headers.get('warning')})")
            else:
                check(sbx.pause(), f"cycle {cycle}: paused")
            check(state_of(sbx.sandbox_id) == SandboxState.PAUSED, f"cycle {cycle}: info says paused")
            check(engine_containers(owner) == [], f"cycle {cycle}: paused, no container runs (no CPU, no memory)")
            if cycle == 1:
                r = httpx.post(f"{API}/sandboxes/{sbx.sandbox_id}/connect", headers=HEADERS, json={"timeout": 180})
                check(r.status_code == 201 and r.headers.get("waxell-resume") == "memory",
                      f"cycle 1: resumed from memory ({r.status_code} {r.headers.get('waxell-resume')})")
            else:
                sbx.connect(timeout=180)
            check(sbx.is_running(), f"cycle {cycle}: running after connect")
            check(sbx.files.read("/proc/sys/kernel/random/boot_id") == boot_id, f"cycle {cycle}: the same boot")
            x = sbx.run_code("x += 1\nx")
            check(x.error is None and x.text == str(41 + cycle), f"cycle {cycle}: the variable came back ({x.text})")
            check(sbx.run_code("worker.poll()").text in (None, "None"), f"cycle {cycle}: the worker runs")
            for earlier in range(1, cycle + 1):
                check(sbx.files.read(f"/home/user/cycle{earlier}.txt") == str(earlier),
                      f"cycle {cycle}: file of cycle {earlier} kept")
            # Its count goes on from where it was: the same process, its memory kept.
            wait_for(lambda: int(sbx.files.read("/home/user/counter.txt").split()[1]) > before,
                     f"cycle {cycle}: the worker counting on")
            after_pid, after = map(int, sbx.files.read("/home/user/counter.txt").split())
            check(after_pid == pid and before <= after < before + 200,
                  f"cycle {cycle}: same worker, count went on ({before} -> {after})")
        r = httpx.post(f"{API}/sandboxes/{sbx.sandbox_id}/pause", headers=HEADERS, json={"memory": False})
        check(r.headers.get("waxell-pause") == "filesystem" and "warning" not in r.headers,
              "memory: false still pauses the files only")
        sbx.connect(timeout=60)
        gone = sbx.run_code("x")
        check(gone.error is not None and gone.error.name == "NameError", "and then the kernel is fresh")
        check(sbx.files.read("/proc/sys/kernel/random/boot_id") != boot_id, "in a new boot")
        check(sbx.files.read("/home/user/cycle3.txt") == "3", "with the files")
    finally:
        sbx.kill()


def exit_of(handle):
    """A command handle's exit code and stdout (or terminal output), waiting for its end."""
    try:
        result = handle.wait()
        return result.exit_code, result.stdout
    except CommandExitException as e:
        return e.exit_code, e.stdout


def memory_commands(owner):
    """Commands and terminals live on across a pause with memory, a restore in place and a fork:
    the same pids in the list, a stream opened before the pause reads on after it, input and
    resizes reach them, exit codes arrive, and each fork has its own copy of them."""
    sbx = Sandbox.create(timeout=180)
    made = []
    try:
        ticker = sbx.commands.run("i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.2; done",
                                  background=True)
        cat = sbx.commands.run("cat", background=True, stdin=True)
        sbx.commands.send_stdin(cat.pid, "before\n")
        late = sbx.commands.run("while [ ! -e /home/user/go ]; do sleep 0.1; done; echo late; exit 7",
                                background=True)
        seen = []
        term = sbx.pty.create(PtySize(rows=20, cols=70), timeout=0)
        ended = {}
        threading.Thread(target=lambda: ended.update(code=exit_of_pty(term, seen)), daemon=True).start()
        sbx.pty.send_stdin(term.pid, b"export MARK=kept\n")
        wait_for(lambda: b"MARK=kept" in b"".join(seen), "the terminal's echo")
        pids = sorted(p.pid for p in sbx.commands.list())
        check(len(pids) == 4, f"four processes run: {pids}")
        sbx.files.make_dir("/home/user/watched")
        watcher = sbx.files.watch_dir("/home/user/watched")

        r = httpx.post(f"{API}/sandboxes/{sbx.sandbox_id}/pause", headers=HEADERS, json={})
        check(r.headers.get("waxell-pause") == "memory", "paused with memory")
        check(engine_containers(owner) == [], "paused, no container runs")
        sbx.connect(timeout=180)
        check(sorted(p.pid for p in sbx.commands.list()) == pids, "after the resume the same processes run")
        sbx.files.write("/home/user/watched/new.txt", "x")
        wait_for(lambda: any(e.name == "new.txt" for e in watcher.get_new_events()),
                 "the directory watcher, started again under its id, sees a new file")
        watcher.stop()
        sbx.commands.send_stdin(cat.pid, "after\n")
        sbx.files.write("/home/user/go", "")
        code, out = exit_of(late)
        check((code, out) == (7, "late\n"), f"a command's exit after the resume, through the handle of before: "
                                            f"{code} {out!r}")
        again = sbx.commands.connect(ticker.pid)
        time.sleep(0.6)
        sbx.commands.kill(ticker.pid)
        code, out = exit_of(again)
        ticks = [int(line.split()[1]) for line in out.splitlines() if line.startswith("tick ")]
        check(code != 0 and len(ticks) >= 2 and ticks[0] >= 5 and ticks == list(range(ticks[0], ticks[-1] + 1)),
              f"the ticker, connected to again, counts on from where it was ({out[-40:]!r})")
        sbx.commands.kill(cat.pid)
        code, out = exit_of(cat)
        check(out == "before\nafter\n", f"input before and after the pause reached the command: {out!r}")
        sbx.pty.resize(term.pid, PtySize(rows=30, cols=90))
        sbx.pty.send_stdin(term.pid, b"echo mark=$MARK; stty size\n")
        wait_for(lambda: b"30 90" in b"".join(seen), "the terminal's new size")
        check(b"mark=kept" in b"".join(seen), "the terminal's shell kept its variable")

        worker = sbx.commands.run("i=0; while true; do echo $i > /home/user/n.txt; i=$((i+1)); sleep 0.1; done",
                                  background=True)
        r = httpx.post(f"{API}/sandboxes/{sbx.sandbox_id}/fork", headers=HEADERS, json={"count": 1, "timeout": 120})
        check(r.headers.get("waxell-fork") == "memory", "forked with memory")
        fork = Sandbox.connect(r.json()[0]["sandbox"]["sandboxID"])
        made.append(fork)
        check(sorted(p.pid for p in fork.commands.list()) == sorted([term.pid, worker.pid]),
              "the fork has the terminal and the worker")
        count = lambda box: int(box.files.read("/home/user/n.txt").strip() or 0)
        first = count(fork)
        wait_for(lambda: count(fork) > first, "the fork's worker counting on")
        fork.commands.kill(worker.pid)
        time.sleep(0.3)
        stopped = count(fork)
        first = count(sbx)
        wait_for(lambda: count(sbx) > first, "the source's worker counting on, its own")
        check(count(fork) == stopped, "the fork's worker, killed, no longer counts")
        forked = []
        handle = fork.pty.connect(term.pid, timeout=0)
        threading.Thread(target=lambda: exit_of_pty(handle, forked), daemon=True).start()
        fork.pty.send_stdin(term.pid, b"echo in-fork=$MARK\n")
        wait_for(lambda: b"in-fork=kept" in b"".join(forked), "the fork's terminal, with the shell's variable")
        sbx.pty.send_stdin(term.pid, b"exit 3\n")
        wait_for(lambda: "code" in ended, "the source's terminal's end")
        check(ended["code"] == 3, f"the terminal's exit code, through the stream opened before the pause: {ended}")
        # Its kernel, restored in place for the fork, is pid 1's child now: its death is still told
        # as what it was.
        oom = sbx.run_code("b = b'x' * (900 << 20)")
        check(oom.error is not None and oom.error.name == "OutOfMemory",
              f"a restored kernel killed for its memory is reported so ({oom.error and oom.error.name})")
    finally:
        for other in made:
            other.kill()
        sbx.kill()


def exit_of_pty(handle, seen):
    try:
        return handle.wait(on_pty=seen.append).exit_code
    except CommandExitException as e:
        return e.exit_code
    except Exception as e:  # the stream ended without an exit
        return repr(e)


def start_worker(sbx):
    """A variable and a background process counting in memory; the worker's pid."""
    sbx.run_code("x = 7\nimport subprocess, sys\n"
                 f"worker = subprocess.Popen([sys.executable, '-c', {COUNTER!r}], start_new_session=True, "
                 "stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)")
    pid = int(sbx.run_code("worker.pid").text)
    wait_for(lambda: sbx.files.exists("/home/user/counter.txt"), "the worker's first count")
    return pid


def check_memory(sbx, pid, x, what):
    """`sbx` has `x` and the worker `pid`, counting on in it."""
    got = sbx.run_code("x")
    check(got.error is None and got.text == str(x), f"{what}: the variable is {x} ({got.text})")
    check(sbx.run_code("worker.poll()").text in (None, "None"), f"{what}: the worker runs")
    before = int(sbx.files.read("/home/user/counter.txt").split()[1])
    wait_for(lambda: int(sbx.files.read("/home/user/counter.txt").split()[1]) > before, f"{what}: counting on")
    check(int(sbx.files.read("/home/user/counter.txt").split()[0]) == pid, f"{what}: the same worker {pid}")


def memory_fork_and_snapshots(owner):
    """Fork and snapshots keep memory where pauses do: each fork, and each sandbox created from a
    snapshot, has the variables and the running worker; the source runs on, each on its own."""
    sbx = Sandbox.create(timeout=180)
    made = []
    try:
        pid = start_worker(sbx)
        r = httpx.post(f"{API}/sandboxes/{sbx.sandbox_id}/fork", headers=HEADERS, json={"count": 2, "timeout": 120})
        check(r.status_code == 201 and r.headers.get("waxell-fork") == "memory",
              f"forked with memory ({r.status_code} {r.headers.get('waxell-fork')} {r.headers.get('warning')})")
        forks = [Sandbox.connect(f["sandbox"]["sandboxID"]) for f in r.json()]
        made += forks
        check(len(engine_containers(owner)) == 3, "three containers: the source and two forks")
        for i, fork in enumerate(forks):
            check_memory(fork, pid, 7, f"fork {i}")
        forks[0].run_code("x = 100")
        check(forks[1].run_code("x").text == "7", "each fork's variables are its own")
        check_memory(sbx, pid, 7, "the source after the fork")
        log = httpx.get(f"{API}/v2/sandboxes/{sbx.sandbox_id}/logs", headers=HEADERS).json()["logs"]
        check(log[-1]["message"] == "sandbox forked" and log[-1]["fields"]["kept"] == "memory"
              and log[-2]["message"].startswith("checkpointed and restored in place"),
              f"the source's log says it was restored in place and forked: {[e['message'] for e in log]}")
        sbx.run_code("x = 8")

        sbx.pause()
        r = httpx.post(f"{API}/sandboxes/{sbx.sandbox_id}/fork", headers=HEADERS, json={"count": 1, "timeout": 120})
        check(r.headers.get("waxell-fork") == "memory", "a paused sandbox forks with memory")
        of_paused = Sandbox.connect(r.json()[0]["sandbox"]["sandboxID"])
        made.append(of_paused)
        check_memory(of_paused, pid, 8, "the paused sandbox's fork")
        check(state_of(sbx.sandbox_id) == SandboxState.PAUSED, "and the source stays paused")
        sbx.connect(timeout=180)

        r = httpx.post(f"{API}/sandboxes/{sbx.sandbox_id}/snapshots", headers=HEADERS, json={"name": "with-memory"})
        check(r.status_code == 201 and r.headers.get("waxell-snapshot") == "memory",
              f"a snapshot with memory ({r.headers.get('waxell-snapshot')} {r.headers.get('warning')})")
        snapshot_id = r.json()["snapshotID"]
        sbx.run_code("x = 9")
        for i in range(2):
            r = httpx.post(f"{API}/sandboxes", headers=HEADERS, json={"templateID": snapshot_id, "timeout": 120})
            check(r.status_code == 201 and r.headers.get("waxell-restore") == "memory",
                  f"sandbox {i} from the snapshot restored from memory ({r.headers.get('waxell-restore')})")
            child = Sandbox.connect(r.json()["sandboxID"])
            made.append(child)
            check_memory(child, pid, 8, f"sandbox {i} from the snapshot")
        check_memory(sbx, pid, 9, "the source, changed after the snapshot, keeps its own")
        check(Sandbox.delete_snapshot(snapshot_id), "the snapshot deleted")
    finally:
        for other in made:
            other.kill()
        sbx.kill()
    wait_for(lambda: engine_containers(owner) == [], "no container left over")


def memory_pause_for_restart():
    sbx = Sandbox.create(timeout=180)
    sbx.run_code("y = 'across restart'")
    sbx.files.write(MARKER, "memory across restart")
    waiting = sbx.commands.run("read line; echo got $line; exit 5", background=True, stdin=True)
    r = httpx.post(f"{API}/sandboxes/{sbx.sandbox_id}/pause", headers=HEADERS, json={})
    check(r.headers.get("waxell-pause") == "memory", "paused with memory")
    print(f"process {waiting.pid}")
    print(f"paused {sbx.sandbox_id}")


def memory_resume_after_restart(sandbox_id, pid):
    r = httpx.post(f"{API}/sandboxes/{sandbox_id}/connect", headers=HEADERS, json={"timeout": 120})
    check(r.status_code == 201 and r.headers.get("waxell-resume") == "memory",
          f"a new server resumed it from memory ({r.status_code} {r.headers.get('waxell-resume')})")
    sbx = Sandbox.connect(sandbox_id)
    try:
        y = sbx.run_code("y")
        check(y.text == "across restart", f"the variable came back after the restart ({y.text})")
        check(sbx.files.read(MARKER) == "memory across restart", "and the files")
        check([p.pid for p in sbx.commands.list()] == [pid], "and the command, waiting for its input")
        handle = sbx.commands.connect(pid)
        sbx.commands.send_stdin(pid, "hello\n")
        check(exit_of(handle) == (5, "got hello\n"), "which reads it and exits as it did before the restart")
    finally:
        sbx.kill()


def pause_for_restart():
    sbx = Sandbox.create(timeout=120, metadata={"purpose": "restart"})
    sbx.files.write(MARKER, "across restart")
    snapshot = sbx.create_snapshot(name="restart-snap")
    sbx.pause()
    print(f"paused {sbx.sandbox_id} {snapshot.snapshot_id}")


def resume_after_restart(sandbox_id, snapshot_id):
    info = Sandbox.get_info(sandbox_id)
    check(info.state == SandboxState.PAUSED and info.metadata.get("purpose") == "restart",
          "still paused after the restart, metadata kept")
    sbx = Sandbox.connect(sandbox_id)
    try:
        check(sbx.files.read(MARKER) == "across restart", "resumed with its files after the restart")
        check(sbx.run_code("1 + 1").text == "2", "and runs code")
    finally:
        sbx.kill()
    child = Sandbox.create(snapshot_id)
    try:
        check(child.files.read(MARKER) == "across restart", "the snapshot survived the restart")
    finally:
        child.kill()
    check(Sandbox.delete_snapshot(snapshot_id), "and can be deleted")


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "all"
    if mode == "all":
        for step in (unknown_routes, pause_resume_cycles, state_while_pausing, auto_pause_then_connect,
                     auto_resume_on_traffic, fork_and_snapshots, metrics, sandbox_logs, lists):
            step()
        print("all checks passed")
    elif mode == "pause-for-restart":
        pause_for_restart()
        print("all checks passed")
    elif mode == "memory":
        memory_cycles(sys.argv[2])
        memory_commands(sys.argv[2])
        memory_fork_and_snapshots(sys.argv[2])
        print("all checks passed")
    elif mode == "memory-pause-for-restart":
        memory_pause_for_restart()
        print("all checks passed")
    elif mode == "memory-resume-after-restart":
        memory_resume_after_restart(sys.argv[2], int(sys.argv[3]))
        print("all checks passed")
    elif mode == "resume-after-restart":
        resume_after_restart(sys.argv[2], sys.argv[3])
        print("all checks passed")
    else:
        sys.exit(f"unknown mode {mode}")
