"""Density: how many live sandboxes one machine holds and what each one costs, per backend, measured
through E2B's official Python SDK against `waxell-sandbox serve` (which this script starts itself, on
127.0.0.1 and a free port, and stops with SIGTERM at the end, which removes every sandbox).

For each backend it creates N sandboxes, 8 creates in flight, each `Sandbox.create(timeout=3600)` then
`run_code(f"x = {i}")` (a cell whose state stays), keeps them all alive and idle, and measures:
  - host memory per live idle sandbox: MemTotal - MemAvailable (/proc/meminfo) once all N are up and
    idle, minus the same before serve started, less this script's own growth, divided by N; beside it
    the sandboxes' processes' own anonymous memory (PSS) and serve's growth;
  - create + first cell, the median of the first 16 creates against the last 16 (about N live; the 7
    started after those, which finish as the queue drains with fewer beside them, are left out);
  - creates per second over the whole run;
  - serve's own CPU while all N idle (rootless, mostly the memory watchdogs);
  - what bounds N: tasks (threads) and processes per sandbox on the host (/proc/loadavg, /proc), serve's
    open fds per sandbox (client connections not counted), and the room each leaves;
then checks that every sandbox still answers `run_code("x")` with its own i. A sandbox that failed to be
created or answered wrongly, or anything left behind after serve stopped, fails the run (exit 1, no rows).

Backends: `local` (bwrap; run as root it measures the root mode, `density.local.*`, and as an ordinary user
the rootless mode, user namespaces and the watchdog's limits, `density.local-rootless.*`) and
`docker-engine` (`--backend docker` on the engine at
WAXELL_DOCKER_ENGINE_HOST, e.g. unix:///run/waxell/docker.sock, with the image waxell-sandbox:latest);
a backend that cannot run here is skipped with the reason. N: 400 local, 100 docker-engine; --quick
40 and 20; `--local N` / `--docker-engine N` set either (0 skips it). serve runs with `--pool-size 0`
(every create cold, nothing pre-started counted in the memory) and `--max-sandboxes N+1` (its default cap
is 16; one untimed sandbox is made and killed first, so first-use costs are not in the first creates).

    ~/.local/share/waxell/e2b-peer-venv/bin/python scripts/bench-density.py [--quick] [--local N] [--docker-engine N]

The serve binary: WAXELL_SANDBOX_BIN, else $CARGO_TARGET_DIR/release/waxell-sandbox, else
target/release/waxell-sandbox (`cargo build --release -p waxell-sandbox --features server,container`).
Rows (density.*) go to docs/performance.md's table through scripts/bench_rows.py; scripts/bench-all.sh
runs this as [D].
"""

import argparse
import collections
import concurrent.futures
import ctypes
import gc
import http.client
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_rows  # noqa: E402 - scripts/ is put on the path just above

try:
    from e2b_code_interpreter import Sandbox
except ImportError as e:  # pragma: no cover - a set-up problem, not a bench result
    print(f"e2b-code-interpreter is not installed ({e}): run it with the E2B peer venv's python "
          "(~/.local/share/waxell/e2b-peer-venv/bin/python; scripts/setup-e2b-peer.sh makes it)", file=sys.stderr)
    sys.exit(2)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = "cargo build --release -p waxell-sandbox --features server,container"
FULL = {"local": 400, "local-rootless": 400, "docker-engine": 100}
QUICK = {"local": 40, "local-rootless": 40, "docker-engine": 20}
IN_FLIGHT = 8
HEAD = 16  # creates compared at the start and at the end of the run
SETTLE_S = 3
LOCAL_TARGET_MIB = 6
LABEL = "io.waxell.sandbox"  # the container backend's label on its containers and volumes
ENGINE_COMMS = ("dockerd", "containerd")  # their growth is the containers' cost, not another process's
Proc = collections.namedtuple("Proc", "ppid comm state threads start")


def serve_binary():
    if os.environ.get("WAXELL_SANDBOX_BIN"):
        path = os.environ["WAXELL_SANDBOX_BIN"]
    else:
        target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(REPO, "target")
        path = os.path.join(target, "release", "waxell-sandbox")
    if not os.access(path, os.X_OK):
        sys.exit(f"bench-density: no waxell-sandbox binary at {path}: build it with `{BUILD}` "
                 "(or point WAXELL_SANDBOX_BIN at one built with the server and container features)")
    return path


# --- what the host holds ---------------------------------------------------------------------------------------


def meminfo():
    """/proc/meminfo in KiB."""
    out = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, value = line.split(":", 1)
            out[key] = int(value.split()[0])
    return out


def host_used_kib():
    m = meminfo()
    return m["MemTotal"] - m["MemAvailable"]


def own_rss_kib():
    """This script's resident memory: it is on the host too (the SDK's objects, its connections)."""
    gc.collect()
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def tasks_total():
    """Every task (thread) on the host: /proc/loadavg's fourth field is running/total."""
    with open("/proc/loadavg") as f:
        return int(f.read().split()[3].split("/")[1])


def processes():
    """pid -> Proc of every process on the host (start time tells a reused pid apart)."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue  # gone meanwhile
        # The name is in parentheses and may hold spaces; the fields after it are space-separated.
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        out[int(name)] = Proc(int(fields[1]), comm, fields[0], int(fields[17]), int(fields[19]))
    return out


def sandbox_processes(procs, serve_pid, container_pids=()):
    """The sandboxes' own processes: serve's descendants (the local backend's bwrap and kernels), and for
    containers (their pid 1s, from the engine) each one's containerd shim with all under it (pid 1 and the
    kernel, which the engine execs)."""
    children = collections.defaultdict(list)
    for pid, p in procs.items():
        children[p.ppid].append(pid)
    roots = [serve_pid]
    for pid in container_pids:
        if pid in procs:
            parent = procs[pid].ppid
            shim = procs.get(parent, Proc(0, "", "", 0, 0)).comm.startswith("containerd-shim")
            roots.append(parent if shim else pid)
    found = set(roots[1:])
    stack = list(roots)
    while stack:
        for child in children[stack.pop()]:
            if child not in found:
                found.add(child)
                stack.append(child)
    found.discard(serve_pid)
    return {pid: procs[pid] for pid in found if pid in procs}


def anon_pss_kib(pid):
    """A process's anonymous memory, shared pages split among their sharers (smaps_rollup); file pages
    are left out as MemAvailable leaves out the page cache."""
    rollup = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                key, _, value = line.partition(":")
                rollup[key] = value
    except OSError:
        return 0
    value = rollup.get("Pss_Anon") or rollup.get("Pss") or "0 kB"  # Pss_Anon: Linux 5.8 and later
    return int(value.split()[0])


def others_anon_kib(procs, exclude):
    """The anonymous memory of every process not in `exclude`: what a build running beside the bench adds to
    or frees from the host's figure meanwhile."""
    return sum(anon_pss_kib(pid) for pid in procs if pid not in exclude)


def cpu_seconds(pid):
    """User + system CPU time of process `pid`, all its threads (the watchdogs are serve's threads)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def client_connection_inodes(port):
    """Sockets of the connections accepted on `port` (serve's clients: this script's SDK pools)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "01" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # 01: established
                inodes.add(fields[9])
    return inodes


def open_fds(pid, port=None):
    """(open fds, of which connections accepted on `port`)."""
    clients = client_connection_inodes(port) if port else set()
    total = connections = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        total += 1
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:[") and link[8:-1] in clients:
            connections += 1
    return total, connections


def nofile_limit(pid):
    with open(f"/proc/{pid}/limits") as f:
        for line in f:
            if line.startswith("Max open files"):
                soft = line.split()[3]
                return int(soft) if soft.isdigit() else None
    return None


def read_int(path):
    try:
        with open(path) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError):
        return None


def bare_python_anchor():
    """The anonymous memory of one idle interpreter on the host, no sandbox: the local backend's Python
    (WAXELL_SANDBOX_PYTHON, else the set-up script's venv, else python3) with IPython imported, as a
    sandbox's kernel has it. (text for the rows, MiB) or (None, None)."""
    python = os.environ.get("WAXELL_SANDBOX_PYTHON")
    venv = os.path.expanduser("~/.local/share/waxell/sandbox-venv/bin/python3")
    python = python or (venv if os.access(venv, os.X_OK) else shutil.which("python3"))
    if not python:
        return None, None
    for imports, what in (("import IPython", "with IPython imported"),
                          ("pass", "without IPython (not installed in it)")):
        child = subprocess.Popen([python, "-c", f"{imports}\nimport sys\nprint('ready', flush=True)\nsys.stdin.read()"],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            if child.stdout.readline().strip() == "ready":
                time.sleep(0.5)
                mib = anon_pss_kib(child.pid) / 1024
                return f"a bare idle `python3` {what}, on the host without a sandbox (anonymous PSS)", mib
        finally:
            child.kill()
            child.wait()
    return None, None


# --- the Docker Engine's API, for the runtime's name and the check that nothing is left -----------------------


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost", timeout=30)
        self._path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self._path)


def engine(host, method, path):
    """One request to the engine at `host` (unix:// only: the set-up script's engines); its JSON."""
    if not host.startswith("unix://"):
        raise RuntimeError(f"{host}: only unix:// engine sockets are supported here")
    conn = _UnixConnection(host[len("unix://"):])
    try:
        conn.request(method, path)
        response = conn.getresponse()
        body = response.read()
        if response.status >= 300 and response.status != 404:
            raise RuntimeError(f"{method} {path}: {response.status} {body[:200]!r}")
        return json.loads(body) if body.strip() else None
    finally:
        conn.close()


def _ours(serve_pid):
    """Whether an engine object's labels say it is one of this serve's (the backend's ids start with its pid)."""
    return lambda labels: (labels or {}).get(LABEL, "").startswith(f"{serve_pid}-")


def engine_leftovers(host, serve_pid):
    """Containers and volumes of this serve still in the engine."""
    query = urllib.parse.quote(json.dumps({"label": [LABEL]}))
    ours = _ours(serve_pid)
    containers = [c["Id"] for c in engine(host, "GET", f"/containers/json?all=1&filters={query}") or []
                  if ours(c.get("Labels"))]
    volumes = [v["Name"] for v in (engine(host, "GET", f"/volumes?filters={query}") or {}).get("Volumes") or []
               if ours(v.get("Labels"))]
    return containers, volumes


def container_pids(host, serve_pid):
    """The host pids of this serve's running containers' pid 1s."""
    query = urllib.parse.quote(json.dumps({"label": [LABEL]}))
    ours = _ours(serve_pid)
    pids = []
    for c in engine(host, "GET", f"/containers/json?filters={query}") or []:
        if ours(c.get("Labels")):
            state = (engine(host, "GET", f"/containers/{c['Id']}/json") or {}).get("State") or {}
            if state.get("Pid"):
                pids.append(state["Pid"])
    return pids


# --- serve ------------------------------------------------------------------------------------------------------


# Resolved here, not in the forked child: the SDK's HTTP threads may hold the allocator's lock at the fork.
_prctl = ctypes.CDLL(None, use_errno=True).prctl


def _die_with_parent():
    # serve gets SIGTERM (and cleans up) even if this script is killed outright.
    _prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG


class Serve:
    def __init__(self, name, binary, backend_args, env, n, logdir):
        self.log = os.path.join(logdir, f"serve-{name}.log")
        self.out = os.path.join(logdir, f"serve-{name}.out")
        # The cap on live sandboxes (default 16) lifted to the run's N, plus the warm-up's slot.
        args = [binary, "serve", "--listen", "127.0.0.1:0", "--max-sandboxes", str(n + 1), "--pool-size", "0",
                *backend_args]
        with open(self.out, "w") as out, open(self.log, "w") as log:
            # Its own session: a Ctrl-C reaches this script alone, whose clean-up then stops serve.
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out, stderr=log, env=env,
                                         start_new_session=True, preexec_fn=_die_with_parent)
        self.pid = self.proc.pid
        try:
            self.url, self.key = self._banner()
        except BaseException:
            self.stop(timeout=60)
            raise
        self.port = int(self.url.rsplit(":", 1)[1])

    def _banner(self):
        """E2B_API_URL and E2B_API_KEY from serve's `export ...` lines (printed once it listens)."""
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            with open(self.out) as f:
                exports = dict(line.strip()[len("export "):].split("=", 1)
                               for line in f if line.strip().startswith("export ") and "=" in line)
            if {"E2B_API_URL", "E2B_SANDBOX_URL", "E2B_API_KEY"} <= exports.keys():
                return exports["E2B_API_URL"], exports["E2B_API_KEY"]
            if self.proc.poll() is not None:
                raise RuntimeError(f"waxell-sandbox serve exited ({self.proc.returncode}) before listening:\n"
                                   + self.tail())
            time.sleep(0.1)
        raise RuntimeError("waxell-sandbox serve printed no address within 180 s:\n" + self.tail())

    def tail(self, lines=30):
        with open(self.log, errors="replace") as f:
            return "".join(f.readlines()[-lines:])

    def stop(self, timeout):
        """SIGTERM, then wait for it to remove its sandboxes; SIGKILL past `timeout`. Seconds taken, or None
        when it had to be killed."""
        start = time.perf_counter()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
            return time.perf_counter() - start
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None


# --- one backend ------------------------------------------------------------------------------------------------


def create(i, sandboxes):
    """Create sandbox i and run its first cell; (start, seconds) of the two together."""
    start = time.perf_counter()
    sbx = Sandbox.create(timeout=3600)
    sandboxes[i] = sbx
    execution = sbx.run_code(f"x = {i}")
    took = time.perf_counter() - start
    if execution.error is not None:
        raise RuntimeError(f"first cell: {execution.error.name}: {execution.error.value}")
    return start, took


def answer(i, sbx):
    """Seconds `run_code("x")` took; raises unless it answered str(i)."""
    start = time.perf_counter()
    execution = sbx.run_code("x")
    took = time.perf_counter() - start
    if execution.error is not None or execution.text != str(i):
        raise RuntimeError(f"run_code('x') gave text={execution.text!r} error={execution.error}")
    return took


def settle():
    gc.collect()
    time.sleep(SETTLE_S)


def measure(name, label, n, binary, backend_args, engine_host, logdir):
    """Run one backend; (figures, failures)."""
    failures = []
    env = dict(os.environ, NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost")
    env.pop("WAXELL_SANDBOX_API_KEY", None)  # serve makes one up and prints it
    if engine_host:
        env["DOCKER_HOST"] = engine_host
    print(f"== {label}: {n} sandboxes through E2B's Python SDK, {IN_FLIGHT} creates in flight, "
          f"waxell-sandbox serve {' '.join(backend_args)} --pool-size 0 --max-sandboxes {n + 1}")
    settle()
    used_before, own_before = host_used_kib(), own_rss_kib()
    procs_before = processes()
    engines = {pid for pid, p in procs_before.items() if p.comm in ENGINE_COMMS}
    others_before = others_anon_kib(procs_before, engines | {os.getpid()})
    serve = Serve(name, binary, backend_args, env, n, logdir)
    sandboxes, timings, fig = {}, {}, {"n": n, "label": label}
    pool = concurrent.futures.ThreadPoolExecutor(IN_FLIGHT)
    try:
        # The SDK reads these when each Sandbox is made.
        os.environ.update(E2B_API_URL=serve.url, E2B_SANDBOX_URL=serve.url, E2B_API_KEY=serve.key,
                          NO_PROXY=env["NO_PROXY"], no_proxy=env["no_proxy"])
        os.environ.pop("E2B_DEBUG", None)
        # One untimed sandbox first: the SDK's and serve's first-use costs are not the first creates' figure.
        warm = Sandbox.create(timeout=120)
        warm.run_code("1")
        warm.kill()
        time.sleep(1)  # serve idle: its own threads and fds are the baseline for the per-sandbox counts
        tasks_before, procs_count_before = tasks_total(), len(processes())
        fds_before, clients_before = open_fds(serve.pid, serve.port)
        serve_rss_before = rss_kib(serve.pid)
        dockerds = [pid for pid, p in procs_before.items() if p.comm == "dockerd"] if engine_host else []
        engine_pid = dockerds[0] if len(dockerds) == 1 else None  # which engine is ours is clear only then
        try:
            engine_fds_before = open_fds(engine_pid)[0] if engine_pid else None
        except OSError:  # not root: the engine's fds are not ours to read
            engine_pid = None

        start = time.perf_counter()
        futures = {pool.submit(create, i, sandboxes): i for i in range(n)}
        every = max(1, n // 10)
        for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
            i = futures[future]
            try:
                timings[i] = future.result()
            except Exception as e:  # noqa: BLE001 - every SDK error is a failure of the run
                failures.append(f"{name}: sandbox {i}: create + first cell: {type(e).__name__}: {e}")
            if done % every == 0 or done == n:
                print(f"  {done}/{n} created ({done / (time.perf_counter() - start):.2f}/s)", flush=True)
        wall = time.perf_counter() - start
        live = len(sandboxes)
        if not timings:
            raise RuntimeError(f"{label}: no sandbox was created and ran its first cell")

        # serve's own CPU while every sandbox idles (rootless, mostly the memory watchdogs).
        cpu_start, cpu_clock = cpu_seconds(serve.pid), time.perf_counter()
        settle()
        idle_cpu = (cpu_seconds(serve.pid) - cpu_start) / (time.perf_counter() - cpu_clock)
        used_after, own_after = host_used_kib(), own_rss_kib()
        mem_available = meminfo()["MemAvailable"]
        tasks_after = tasks_total()
        after = processes()
        fds_after, clients_after = open_fds(serve.pid, serve.port)
        tree = sandbox_processes(after, serve.pid, container_pids(engine_host, serve.pid) if engine_host else ())
        others = others_anon_kib(after, engines | set(tree) | {os.getpid(), serve.pid}
                                 | {pid for pid, p in after.items() if p.comm in ENGINE_COMMS}) - others_before
        total_kib = used_after - used_before - (own_after - own_before)
        fig.update(
            live=live,
            wall=wall,
            per_s=len(timings) / wall,
            idle_cpu=idle_cpu,
            mem_mib=total_kib / live / 1024,
            total_mib=total_kib / 1024,
            others_mib=others / 1024,
            mem_less_others_mib=(total_kib - others) / live / 1024,
            own_mib=(own_after - own_before) / 1024,
            anon_mib=sum(anon_pss_kib(pid) for pid in tree) / live / 1024,
            serve_mib=(rss_kib(serve.pid) - serve_rss_before) / live / 1024,
            tasks=(tasks_after - tasks_before) / live,
            procs=(len(after) - procs_count_before) / live,
            own_procs=len(tree) / live,
            own_threads=sum(p.threads for p in tree.values()) / live,
            fds=((fds_after - clients_after) - (fds_before - clients_before)) / live,
            clients=clients_after,
            room_mem=mem_available,
            tasks_now=tasks_after,
            fds_now=fds_after,
            nofile=nofile_limit(serve.pid),
            pid_max=read_int("/proc/sys/kernel/pid_max"),
            threads_max=read_int("/proc/sys/kernel/threads-max"),
        )
        if engine_pid:
            fig["engine_fds"] = (open_fds(engine_pid)[0] - engine_fds_before) / live
            fig["engine_nofile"] = nofile_limit(engine_pid)
            fig["engine_fds_now"] = open_fds(engine_pid)[0]
        # By start. The last IN_FLIGHT - 1 creates finish while the queue drains, with fewer beside them
        # than every other create had: they are left out of "the last", which then compares like with like.
        ordered = sorted(timings.values())
        tail = IN_FLIGHT - 1
        k = min(HEAD, (len(ordered) - tail) // 2)
        if k < 1:  # too few for that: the plain last ones
            tail, k = 0, max(1, len(ordered) // 2)
        fig.update(k=k, tail=tail, first=statistics.median(t for _, t in ordered[:k]),
                   last=statistics.median(t for _, t in ordered[len(ordered) - tail - k:len(ordered) - tail]))

        # Every sandbox still holds its own state after all the others were made.
        checks = {pool.submit(answer, i, sbx): i for i, sbx in sandboxes.items()}
        answers = []
        for future in concurrent.futures.as_completed(checks):
            try:
                answers.append(future.result())
            except Exception as e:  # noqa: BLE001
                failures.append(f"{name}: sandbox {checks[future]}: {type(e).__name__}: {e}")
        fig.update(answered=len(answers), answer_ms=statistics.median(answers) * 1000 if answers else None)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        # Nothing of ours may outlive serve: its processes (local) and its containers and volumes.
        ours = sandbox_processes(processes(), serve.pid)
        took = serve.stop(timeout=120 + 2 * n)
        fig["teardown"] = took
        if took is None:
            failures.append(f"{name}: serve did not exit within {120 + 2 * n} s of SIGTERM; killed")
        elif serve.proc.returncode not in (0, -signal.SIGTERM):
            failures.append(f"{name}: serve exited with {serve.proc.returncode}:\n{serve.tail()}")
        # A process killed as serve exits may take a moment to go; a zombie is already dead (its new
        # parent, pid 1, reaps it in its own time).
        deadline = time.monotonic() + 10
        while True:
            now = processes()
            left = [pid for pid, p in ours.items()
                    if pid in now and now[pid].start == p.start and now[pid].state not in "ZX"]
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if left:
            failures.append(f"{name}: {len(left)} sandbox process(es) still ran 10 s after serve exited (killed): "
                            f"{left[:10]}")
        if engine_host:
            try:
                containers, volumes = engine_leftovers(engine_host, serve.pid)
                for cid in containers:
                    engine(engine_host, "DELETE", f"/containers/{cid}?force=1&v=1")
                for volume in volumes:
                    engine(engine_host, "DELETE", f"/volumes/{volume}?force=1")
                if containers or volumes:
                    failures.append(f"{name}: {len(containers)} container(s) and {len(volumes)} volume(s) "
                                    "outlived serve (removed)")
            except (OSError, RuntimeError) as e:
                failures.append(f"{name}: could not check the engine for containers left behind: {e}")
    return fig, failures


def noisy(fig):
    """Whether other processes' memory moved by more than a tenth of what the sandboxes took."""
    return abs(fig["others_mib"]) > 0.1 * abs(fig["total_mib"])


def report(fig):
    """The readable summary of one backend."""
    n, live = fig["n"], fig["live"]
    print(f"-- {fig['label']}: {live} live of {n}")
    print(f"  creates: {fig['per_s']:.2f}/s ({live} in {fig['wall']:.1f} s, {IN_FLIGHT} in flight, "
          f"{os.cpu_count()} cores)")
    drained = f"; the {fig['tail']} started after them left out" if fig["tail"] else ""
    print(f"  create + first cell: first {fig['k']} median {fig['first'] * 1000:.0f} ms, last {fig['k']} "
          f"(~{live} live{drained}) {fig['last'] * 1000:.0f} ms: {fig['last'] / fig['first']:.2f}x")
    print(f"  serve's CPU with all {live} idle: {fig['idle_cpu'] * 100:.1f}% of a core")
    print(f"  memory per live idle sandbox: {fig['mem_mib']:.1f} MiB (host MemTotal - MemAvailable +"
          f"{fig['total_mib']:.0f} MiB for {live}, this script's own +{fig['own_mib']:.0f} MiB left out); "
          f"its processes' anonymous PSS {fig['anon_mib']:.1f} MiB; serve's RSS +{fig['serve_mib']:.2f} MiB")
    print(f"  other processes' anonymous memory moved by {fig['others_mib']:+.0f} MiB meanwhile; less that, "
          f"{fig['mem_less_others_mib']:.1f} MiB per sandbox")
    if noisy(fig):
        print("  NOTE: other processes moved the host's memory by more than a tenth of the sandboxes' total: "
              "the memory figure is not reliable at this load (rerun on a quieter machine)")
    print(f"  tasks per sandbox: {fig['tasks']:.1f} on the host (/proc/loadavg), {fig['own_threads']:.1f} in its own "
          f"{fig['own_procs']:.1f} processes; processes on the host +{fig['procs']:.1f}")
    engine_fds = (f"; dockerd's fds {fig['engine_fds']:.1f} per sandbox (limit {fig['engine_nofile']})"
                  if "engine_fds" in fig else "")
    print(f"  serve's open fds per sandbox: {fig['fds']:.1f} ({fig['clients']} client connections open, "
          f"not counted; limit {fig['nofile']}){engine_fds}")
    rooms = []
    if fig["mem_mib"] > 0:
        rooms.append((fig["room_mem"] / 1024 / fig["mem_mib"],
                      f"memory ({fig['room_mem'] / 1048576:.1f} GiB available)"))
    if fig["tasks"] > 0:
        cap = min(x for x in (fig["pid_max"], fig["threads_max"]) if x)
        rooms.append(((cap - fig["tasks_now"]) / fig["tasks"], f"tasks (pid_max {fig['pid_max']}, threads-max "
                      f"{fig['threads_max']}; {fig['tasks_now']} now)"))
    if fig["fds"] > 0 and fig["nofile"]:
        rooms.append(((fig["nofile"] - fig["fds_now"]) / fig["fds"], f"serve's open files (limit {fig['nofile']})"))
    if fig.get("engine_fds", 0) > 0 and fig.get("engine_nofile"):
        rooms.append(((fig["engine_nofile"] - fig["engine_fds_now"]) / fig["engine_fds"],
                      f"dockerd's open files (limit {fig['engine_nofile']})"))
    for room, what in sorted(rooms):
        print(f"  room for about {room:,.0f} more by {what}")
    answered = f"; run_code('x') median {fig['answer_ms']:.1f} ms at {live} live" if fig.get("answer_ms") else ""
    print(f"  every sandbox answers: {fig['answered']}/{live}{answered}")
    teardown = f"{fig['teardown']:.1f} s" if fig.get("teardown") is not None else "killed after the timeout"
    print(f"  serve stopped (SIGTERM, every sandbox removed) in {teardown}")


def rows_for(name, fig, other, bare):
    """The density.<backend>.* rows; `other` is the other backend's figures when both ran."""
    live, cores = fig["live"], os.cpu_count()
    how = (f"{live} sandboxes made through E2B's Python SDK against `waxell-sandbox serve` ({fig['label']}, "
           f"`--pool-size 0`), {IN_FLIGHT} creates in flight")
    rows = []
    if other:
        anchor, ratio = f"{other['label']}, same run: {other['mem_mib']:.1f} MiB", fig["mem_mib"] / other["mem_mib"]
    elif bare[0]:
        anchor, ratio = f"{bare[0]}: {bare[1]:.1f} MiB", fig["mem_mib"] / bare[1]
    else:
        anchor, ratio = "none", None
    local = name.startswith("local")
    target = f"<= {LOCAL_TARGET_MIB} MiB" if local else "none"
    rows.append(dict(
        id=f"density.{name}.memory",
        what=f"host memory per live idle sandbox: {how}, each holding one cell's state (MemTotal - MemAvailable "
             f"once all are up and idle {SETTLE_S} s, minus before serve started, less the bench's own growth)",
        measured=f"**{fig['mem_mib']:.1f} MiB** (its own processes: {fig['anon_mib']:.1f} MiB anonymous, "
                 f"{fig['own_threads']:.1f} tasks; {fig['fds']:.1f} of serve's fds)"
                 + (f"; other processes moved by {fig['others_mib']:+.0f} MiB meanwhile, "
                    f"{fig['mem_less_others_mib']:.1f} MiB without them" if noisy(fig) else ""),
        anchor=anchor,
        ratio=f"**{ratio:.2f}x**" if ratio is not None else "none",
        target=target,
        verdict=("met" if fig["mem_mib"] <= LOCAL_TARGET_MIB else "missed") if local else "none",
    ))
    rows.append(dict(
        id=f"density.{name}.create-at-n",
        what=f"create + first cell (`Sandbox.create` + `run_code(\"x = i\")`, cold) with about {live} live: {how}, "
             f"median of the last {fig['k']}"
             + (f" (the {fig['tail']} after them, which finish as the queue drains, left out)" if fig["tail"] else ""),
        measured=f"**{fig['last'] * 1000:.0f} ms**",
        anchor=f"the first {fig['k']} creates, same run: {fig['first'] * 1000:.0f} ms",
        ratio=f"**{fig['last'] / fig['first']:.2f}x**",
        target="<= 1.0x",
        verdict="met" if round(fig["last"] / fig["first"], 2) <= 1.0 else "missed",
    ))
    rows.append(dict(
        id=f"density.{name}.creates-per-s",
        what=f"creates per second, create + first cell, {how}, {cores} cores, over the whole run",
        measured=f"**{fig['per_s']:.2f} creates/s** ({live} in {fig['wall']:.1f} s)",
        anchor=f"{other['label']}, same run: {other['per_s']:.2f} creates/s" if other else "none",
        ratio=f"**{fig['per_s'] / other['per_s']:.2f}x**" if other else "none",
        target="none",
        verdict="none",
    ))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="40 local and 20 docker-engine sandboxes")
    parser.add_argument("--local", type=int, metavar="N", help="local sandboxes (0: skip the backend)")
    parser.add_argument("--docker-engine", type=int, metavar="N", help="docker-engine sandboxes (0: skip)")
    args = parser.parse_args()
    sizes = dict(QUICK if args.quick else FULL)
    if args.local is not None:
        sizes["local"] = sizes["local-rootless"] = args.local
    if args.docker_engine is not None:
        sizes["docker-engine"] = args.docker_engine

    load_start = bench_rows.load_1min()
    binary = serve_binary()
    engine_host = os.environ.get("WAXELL_DOCKER_ENGINE_HOST")
    plan = []
    if not sizes["local"]:
        print("bench-density: local skipped (--local 0)")
    elif not shutil.which("bwrap"):
        print("bench-density: local skipped: bwrap is not installed (scripts/setup-sandbox.sh)")
    elif os.geteuid() != 0:
        # serve as an ordinary user runs the local backend rootless.
        plan.append(("local-rootless", "local backend, rootless", ["--backend", "local"], None))
    else:
        plan.append(("local", "local backend", ["--backend", "local"], None))
    if not sizes["docker-engine"]:
        print("bench-density: docker-engine skipped (--docker-engine 0)")
    elif not engine_host:
        print("bench-density: docker-engine skipped: WAXELL_DOCKER_ENGINE_HOST is not set "
              "(eval \"$(bash scripts/setup-container.sh)\")")
    else:
        try:
            runtime = (engine(engine_host, "GET", "/info") or {}).get("DefaultRuntime") or "its default runtime"
        except (OSError, RuntimeError) as e:
            sys.exit(f"bench-density: the Docker Engine at {engine_host} does not answer: {e}")
        plan.append(("docker-engine", f"Docker Engine, {runtime}", ["--backend", "docker"],
                     engine_host))
    if not plan:
        print("bench-density: no backend can run here; nothing measured", file=sys.stderr)
        return 2
    # A run with fewer sandboxes than the full one is marked quick in the table.
    quick = args.quick or any(sizes[name] < FULL[name] for name, *_ in plan)

    # SIGTERM ends the run through the finally blocks (serve stopped, nothing left behind).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    logdir = tempfile.mkdtemp(prefix="bench-density-")
    figures, failures = {}, []
    for name, label, backend_args, host in plan:
        try:
            fig, failed = measure(name, label, sizes[name], binary, backend_args, host, logdir)
        except Exception as e:  # noqa: BLE001 - the run failed (serve was stopped); the next backend still runs
            fig, failed = None, [f"{name}: {type(e).__name__}: {e}"]
        except BaseException:  # Ctrl-C or SIGTERM: serve is stopped already
            print(f"bench-density: interrupted; serve's logs: {logdir}", file=sys.stderr)
            raise
        failures += failed
        if fig and "live" in fig:
            figures[name] = fig
            report(fig)
    bare = bare_python_anchor()
    if bare[0]:
        print(f"-- anchor: {bare[0]}: {bare[1]:.1f} MiB")

    if failures:
        print(f"bench-density: {len(failures)} failure(s), no rows written (serve's logs: {logdir}):")
        for failure in failures:
            print(f"  {failure}")
        return 1
    shutil.rmtree(logdir, ignore_errors=True)
    rows = []
    for name, fig in figures.items():
        other = next((f for o, f in figures.items() if o != name), None)
        rows += rows_for(name, fig, other, bare)
    bench_rows.emit(rows, "[D]", load_start, quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
