"""E2B conformance: the official `e2b-code-interpreter` SDK against `waxell-sandbox serve`.

Run with the peer venv's python (scripts/setup-e2b-peer.sh) and the SDK configured by environment,
all on one port P of the server:

    E2B_API_URL=http://127.0.0.1:P E2B_SANDBOX_URL=http://127.0.0.1:P E2B_API_KEY=e2b_<hex> \
        python tests/e2b_conformance.py

Prints one `ok` / `FAIL` line per check and exits 1 if any check failed (2 if the SDK is missing).
tests/tests/e2b_conformance.rs runs it against an in-process server.
"""

import base64
import datetime
import gc
import os
import re
import sys

try:
    from e2b_code_interpreter import Sandbox
except ImportError as e:  # pragma: no cover - setup problem, not a conformance failure
    print(f"e2b-code-interpreter is not installed ({e}): run scripts/setup-e2b-peer.sh", file=sys.stderr)
    sys.exit(2)

from e2b_checks import check, failures, finish, step  # noqa: E402 - tests/ is on the path


for var in ("E2B_API_URL", "E2B_SANDBOX_URL", "E2B_API_KEY"):
    if not os.environ.get(var):
        print(f"{var} is not set; see the docstring", file=sys.stderr)
        sys.exit(2)

# 1. create (POST /v2/sandboxes) with a lifetime, metadata and environment variables.
sbx = step(
    "create",
    lambda: Sandbox.create(timeout=120, metadata={"suite": "conformance"}, envs={"GREETING": "hello"}),
)
if sbx is None:
    sys.exit(1)
check("sandbox id is 20 characters of [a-z0-9]", re.fullmatch(r"[a-z0-9]{20}", sbx.sandbox_id), sbx.sandbox_id)
print(f"# sandbox {sbx.sandbox_id}")

# 2. stdout and stderr, through the callbacks and in the logs.
streamed = {"stdout": [], "stderr": []}
execution = step(
    "run_code stdout/stderr",
    lambda: sbx.run_code(
        "import sys\nprint('to stdout')\nprint('to stderr', file=sys.stderr)",
        on_stdout=lambda m: streamed["stdout"].append(m.line),
        on_stderr=lambda m: streamed["stderr"].append(m.line),
    ),
)
if execution is not None:
    check("stdout in logs", "".join(execution.logs.stdout) == "to stdout\n", execution.logs.stdout)
    check("stderr in logs", "".join(execution.logs.stderr) == "to stderr\n", execution.logs.stderr)
    check("on_stdout called", "".join(streamed["stdout"]) == "to stdout\n", streamed["stdout"])
    check("on_stderr called", "".join(streamed["stderr"]) == "to stderr\n", streamed["stderr"])
    check("no error", execution.error is None, execution.error)

# 3. the last expression as the main result, and the execution count.
first = step("run_code main result", lambda: sbx.run_code("x = 41\nx + 1"))
second = step("run_code state kept", lambda: sbx.run_code("x"))
if first is not None and second is not None:
    check("main result text", first.text == "42", first.text)
    check("state kept between runs", second.text == "41", second.text)
    check(
        "execution_count increments",
        isinstance(first.execution_count, int) and second.execution_count == first.execution_count + 1,
        (first.execution_count, second.execution_count),
    )

# 4. a matplotlib figure as a PNG result.
png_results = []
figure = step(
    "run_code matplotlib",
    lambda: sbx.run_code(
        "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
        "plt.plot([1, 2, 3], [1, 4, 9])\nplt.show()",
        on_result=lambda r: png_results.append(r),
    ),
)
if figure is not None:
    pngs = [r.png for r in figure.results if r.png]
    check("a PNG result", len(pngs) == 1, [r.formats() for r in figure.results])
    if pngs:
        check("PNG is base64 of a PNG file", base64.b64decode(pngs[0])[:8] == b"\x89PNG\r\n\x1a\n", pngs[0][:32])
    check("on_result called for the figure", any(r.png for r in png_results), len(png_results))
    check("figure is not the main result", all(not r.is_main_result for r in figure.results if r.png))

# 5. an error raised by the code.
errors = []
failed = step("run_code error", lambda: sbx.run_code("1 / 0", on_error=errors.append))
if failed is not None:
    check("error name", failed.error is not None and failed.error.name == "ZeroDivisionError", failed.error)
    check("error value", failed.error is not None and "division by zero" in failed.error.value, failed.error)
    check("error traceback", failed.error is not None and "ZeroDivisionError" in failed.error.traceback)
    check("on_error called", len(errors) == 1, errors)

# 5b. an execution timeout: the SDK drops the connection, the server interrupts the code and the
# state survives (the next run is not blocked behind the abandoned one).
step("run_code before the timeout", lambda: sbx.run_code("progress = 'started'"))
try:
    sbx.run_code("import time\nprogress = 'sleeping'\ntime.sleep(60)\nprogress = 'finished'", timeout=2)
    check("run_code(timeout=2) times out", False, "no exception")
except Exception as e:  # noqa: BLE001
    check("run_code(timeout=2) times out", "Timeout" in type(e).__name__, f"{type(e).__name__}: {e}")
# The SDK's HTTP stack (pyqwest) closes an abandoned response's socket only when the response object
# is collected; until then the server cannot see that the client left. Collect it now.
gc.collect()
started = datetime.datetime.now()
after = step("run after the timeout", lambda: sbx.run_code("progress", timeout=30))
waited = (datetime.datetime.now() - started).total_seconds()
if after is not None:
    check(
        "state kept after the timeout",
        after.text == "sleeping",
        f"text={after.text!r} error={after.error} logs={after.logs}",
    )
    check("abandoned code was interrupted, not awaited", waited < 20, waited)

# 6. environment variables: the sandbox's and a run's own.
envs = step(
    "run_code envs",
    lambda: sbx.run_code(
        "import os\nos.environ.get('GREETING', '') + '/' + os.environ.get('PER_RUN', '')",
        envs={"PER_RUN": "yes"},
    ),
)
if envs is not None:
    check("sandbox and run env vars visible", envs.text == "hello/yes", envs.text)

# 7. a second context: independent state, listed, restarted (state lost), removed.
ctx = step("create_code_context", lambda: sbx.create_code_context())
if ctx is not None:
    step("run in the second context", lambda: sbx.run_code("y = 5", context=ctx))
    in_ctx = step("read in the second context", lambda: sbx.run_code("y", context=ctx))
    in_default = step("read in the default context", lambda: sbx.run_code("'y' in globals()"))
    if in_ctx is not None and in_default is not None:
        check("second context has its state", in_ctx.text == "5", in_ctx.text)
        check("default context does not see it", in_default.text == "False", in_default.text)
    contexts = step("list_code_contexts", lambda: sbx.list_code_contexts())
    if contexts is not None:
        check("context listed", any(c.id == ctx.id for c in contexts), [c.id for c in contexts])
    step("restart_code_context", lambda: sbx.restart_code_context(ctx))
    after_restart = step("run after restart", lambda: sbx.run_code("y", context=ctx))
    if after_restart is not None:
        check(
            "restart loses the state",
            after_restart.error is not None and after_restart.error.name == "NameError",
            after_restart.error,
        )
    step("remove_code_context", lambda: sbx.remove_code_context(ctx))
    contexts = step("list after remove", lambda: sbx.list_code_contexts())
    if contexts is not None:
        check("removed context not listed", all(c.id != ctx.id for c in contexts), [c.id for c in contexts])

# 8. files: write, read, list, and the code sees them (and the other way round).
info = step("files.write", lambda: sbx.files.write("/home/user/hello.txt", "hello from e2b"))
if info is not None:
    check("write returns the path", info.path == "/home/user/hello.txt", info.path)
content = step("files.read", lambda: sbx.files.read("/home/user/hello.txt"))
check("read returns what was written", content == "hello from e2b", content)
seen = step("code reads the file", lambda: sbx.run_code("open('/home/user/hello.txt').read()"))
if seen is not None:
    check("code sees the written file", seen.text == "hello from e2b", seen.text)
step("code writes a file", lambda: sbx.run_code("open('/home/user/made.txt', 'w').write('made by code')"))
made = step("files.read a file the code wrote", lambda: sbx.files.read("made.txt"))
check("read a file the code wrote", made == "made by code", made)
entries = step("files.list", lambda: sbx.files.list("/home/user"))
if entries is not None:
    names = {e.name: e for e in entries}
    check("list has both files", {"hello.txt", "made.txt"} <= set(names), sorted(names))
    if "hello.txt" in names:
        check("list entry size", names["hello.txt"].size == len("hello from e2b"), names["hello.txt"].size)
        check("list entry type", str(names["hello.txt"].type).lower().endswith("file"), names["hello.txt"].type)
exists = step("files.exists", lambda: (sbx.files.exists("/home/user/hello.txt"), sbx.files.exists("nope.txt")))
check("exists true for a file, false for a missing one", exists == (True, False), exists)
made_dir = step("files.make_dir", lambda: (sbx.files.make_dir("/home/user/out/charts"), sbx.files.make_dir("out/charts")))
check("make_dir is True when created, False when it exists", made_dir == (True, False), made_dir)
step("files.write into the new directory", lambda: sbx.files.write("/home/user/out/charts/a.txt", "a"))
renamed = step("files.rename", lambda: sbx.files.rename("/home/user/out/charts/a.txt", "/home/user/out/b.txt"))
if renamed is not None:
    check("rename returns the new path", renamed.path == "/home/user/out/b.txt", renamed.path)
moved = step("files.read the renamed file", lambda: sbx.files.read("/home/user/out/b.txt"))
check("the renamed file has its content", moved == "a", moved)
step("files.remove a directory tree", lambda: sbx.files.remove("/home/user/out"))
removed = step("files.exists after remove", lambda: sbx.files.exists("/home/user/out"))
check("a removed directory no longer exists", removed is False, removed)
seen_removed = step("code sees the removal", lambda: sbx.run_code("import os; os.path.exists('/home/user/out')"))
if seen_removed is not None:
    check("code sees the removal", seen_removed.text == "False", seen_removed.text)
try:
    sbx.files.read("/home/user/missing.txt")
    check("reading a missing file fails", False, "no exception")
except Exception as e:  # noqa: BLE001
    check("reading a missing file fails with not-found", "NotFound" in type(e).__name__, type(e).__name__)

# 9. set_timeout: the control plane's end time moves.
step("set_timeout", lambda: sbx.set_timeout(600))
details = step("get_info", lambda: sbx.get_info())
if details is not None:
    left = (details.end_at - datetime.datetime.now(datetime.timezone.utc)).total_seconds()
    check("end time ~600 s away after set_timeout", 560 < left <= 601, left)
    check("metadata kept", details.metadata.get("suite") == "conformance", details.metadata)

# 10. kill: gone from the data plane too.
step("kill", lambda: sbx.kill())
running = step("is_running after kill", lambda: sbx.is_running())
check("not running after kill", running is False, running)
try:
    sbx.run_code("1")
    check("run after kill fails", False, "no exception")
except Exception as e:  # noqa: BLE001
    check("run after kill fails", True, type(e).__name__)

finish()
