"""The code interpreter's kernel as E2B's SDK sees it: IPython behaviour, rich results, the other
languages, contexts and a kill mid-run, through the official `e2b-code-interpreter` SDK against
`waxell-sandbox serve` (configured by environment as in tests/e2b_conformance.py).

    E2B_API_URL=http://127.0.0.1:P E2B_SANDBOX_URL=http://127.0.0.1:P E2B_API_KEY=e2b_<hex> \
        python tests/e2b_kernel.py

Prints one `ok` / `FAIL` line per check and exits 1 if any check failed (2 if the SDK is missing).
tests/tests/e2b_kernel.rs runs it against an in-process server.
"""

import os
import sys
import threading
import time

try:
    from e2b import SandboxException, TimeoutException
    from e2b_code_interpreter import Sandbox
except ImportError as e:  # pragma: no cover - setup problem
    print(f"e2b-code-interpreter is not installed ({e}): run scripts/setup-e2b-peer.sh", file=sys.stderr)
    sys.exit(2)

from e2b_checks import check, failures, finish, step  # noqa: E402 - tests/ is on the path


for var in ("E2B_API_URL", "E2B_SANDBOX_URL", "E2B_API_KEY"):
    if not os.environ.get(var):
        print(f"{var} is not set; see the docstring", file=sys.stderr)
        sys.exit(2)

sbx = Sandbox.create(timeout=300, envs={"SANDBOX_VAR": "from-create"})


def ipython():
    seen = []
    run = sbx.run_code("print('hello')", on_stdout=seen.append)
    check("a print is one stdout message", run.logs.stdout == ["hello\n"] and len(seen) == 1, run.logs)
    run = sbx.run_code("\n    x = 20\n    x + 1\n    ")
    check("an indented cell is dedented", run.error is None and run.text == "21", run)
    run = sbx.run_code("!echo from-shell; pwd")
    # A child's output comes as the pipe delivers it: one message or two.
    check("!cmd runs in a shell", "".join(run.logs.stdout) == "from-shell\n/home/user\n" and run.error is None, run)
    run = sbx.run_code("%pwd")
    check("%magics work", run.text == "/home/user", run)
    run = sbx.run_code("import IPython\nfrom IPython.display import display, HTML\ndisplay(HTML('<b>x</b>'))\n7")
    shown = [r for r in run.results if not r.is_main_result]
    check(
        "display() is a result before the cell's value",
        len(run.results) == 2 and shown and shown[0].html == "<b>x</b>" and run.text == "7",
        run.results,
    )
    run = sbx.run_code("def f():\n    return 1 / 0\nf()")
    tb = run.error.traceback if run.error is not None else ""
    check(
        "an error names the exception and the cell's line, in Python's layout",
        run.error is not None
        and run.error.name == "ZeroDivisionError"
        and tb.startswith("Traceback (most recent call last):")
        and "line 2" in tb
        and "    return 1 / 0\n" in tb
        and "---->" not in tb,
        run.error,
    )
    run = sbx.run_code("%xmode Context\nf()")
    check(
        "%xmode Context brings back IPython's layout",
        run.error is not None and "----> 2     return 1 / 0" in run.error.traceback,
        run.error,
    )
    sbx.run_code("%xmode Plain")
    run = sbx.run_code("exit(3)")
    check("exit() ends the cell with SystemExit", run.error is not None and run.error.name == "SystemExit", run)
    check("the state survives exit()", sbx.run_code("x").text == "20")


def rich_results():
    run = sbx.run_code("import pandas as pd\npd.DataFrame({'a': [1, 2, None], 'b': ['x', 'y', 'z']})")
    data = run.results[0].data if run.results else None
    check(
        "a DataFrame carries its columns as data",
        data == {"a": [1.0, 2.0, None], "b": ["x", "y", "z"]} and run.results[0].html,
        data,
    )
    run = sbx.run_code(
        "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [3, 1, 2])\nplt.title('T')\nplt.show()\nprint('after')"
    )
    chart = run.results[0].chart if run.results else None
    check(
        "plt.show() displays the figure with its chart",
        chart is not None and chart.type.value == "line" and chart.title == "T" and run.results[0].png,
        run.results,
    )
    check("the figure is closed once shown", sbx.run_code("plt.get_fignums()").text == "[]")
    run = sbx.run_code("fig, ax = plt.subplots()\nax.bar(['a', 'b'], [1, 2])\n5")
    kinds = [(r.is_main_result, r.chart.type.value if r.chart else None) for r in run.results]
    check("a figure left open is shown after the cell's value", kinds == [(True, None), (False, "bar")], kinds)
    run = sbx.run_code(
        "from PIL import Image\nimage = Image.new('RGB', (4, 4))\nimage.show()\nimage.save('saved.png')"
    )
    check("Image.show() and save(path) display the image", [bool(r.png) for r in run.results] == [True, True], run)
    check("save(path) also saved it", sbx.files.exists("/home/user/saved.png"))


def javascript():
    seen = []
    run = sbx.run_code("console.log('hi from node')", language="js", on_stdout=seen.append)
    check("console.log is one stdout message", run.logs.stdout == ["hi from node\n"] and len(seen) == 1, run)
    sbx.run_code("const base = 40; let counter = 1", language="javascript")
    run = sbx.run_code("counter += 1; base + counter", language="js")
    check("JavaScript state persists across cells", run.text == "42", run)
    run = sbx.run_code("import { join } from 'path'\nawait Promise.resolve(join('a', 'b'))", language="js")
    check("static imports and top-level await", run.text == "a/b", run)
    run = sbx.run_code("[process.env.SANDBOX_VAR, process.env.RUN_VAR, process.cwd()].join(' ')",
                       language="js", envs={"RUN_VAR": "per-run"})
    check("the sandbox's and the run's env vars, the home as cwd", run.text == "from-create per-run /home/user", run)
    run = sbx.run_code("process.env.RUN_VAR || 'unset'", language="js")
    check("a run's env vars end with the run", run.text == "unset", run)
    run = sbx.run_code("null.x", language="js")
    check("a JavaScript error names its type", run.error is not None and run.error.name == "TypeError", run.error)
    run = sbx.run_code("const n: number = 2\nfunction twice(v: number): number { return v * 2 }\ntwice(n)", language="ts")
    check("TypeScript has its types stripped", run.text == "4" and run.error is None, run)


def bash():
    sbx.run_code("cd /tmp && export KEPT=yes && mkdir -p work", language="bash")
    run = sbx.run_code("pwd; echo $KEPT $SANDBOX_VAR", language="bash")
    check("bash keeps its cwd and exports", run.logs.stdout == ["/tmp\n", "yes from-create\n"] or
          "".join(run.logs.stdout) == "/tmp\nyes from-create\n", run.logs)
    run = sbx.run_code("echo ${ONCE:-none}", language="bash", envs={"ONCE": "set"})
    later = sbx.run_code("echo ${ONCE:-none}", language="bash")
    check("a bash run's env vars end with the run", run.logs.stdout == ["set\n"] and later.logs.stdout == ["none\n"],
          (run.logs, later.logs))
    run = sbx.run_code("false", language="bash")
    check("a failing command is an error", run.error is not None and run.error.value == "exit status 1", run.error)


def java_and_r():
    for language, code, expected in (("java", 'System.getProperty("user.dir")', "/home/user"),
                                     ("r", "getwd()", '[1] "/home/user"')):
        try:
            run = sbx.run_code(code, language=language)
        except SandboxException as e:
            # The SDK turns E2B's 400 into a SandboxException carrying the server's message.
            check(f"{language} is refused with the reason when its runtime is missing",
                  str(e).startswith("400") and "not available" in str(e) and "install" in str(e), e)
            continue
        check(f"{language} runs", run.text == expected and run.error is None, run)


def contexts():
    listed = [(c.id, c.language) for c in sbx.list_code_contexts()]
    check("the default context is listed first, JavaScript's with it",
          listed[0] == ("default", "python") and ("default-javascript", "javascript") in listed, listed)
    made = sbx.create_code_context(language="python", cwd="/root")
    check("a new context is listed last", sbx.list_code_contexts()[-1].id == made.id)
    run = sbx.run_code("import os; os.getcwd()", context=made)
    check("a context may work in /root", run.text == "/root", run)
    made = sbx.create_code_context(language="bash", cwd="/tmp/made/here")
    run = sbx.run_code("pwd", context=made)
    check("a missing directory in a writable place is made", run.logs.stdout == ["/tmp/made/here\n"], run)
    try:
        sbx.create_code_context(cwd="/usr/not-here")
        check("a directory that cannot be made is refused", False, "created")
    except SandboxException as e:
        check("a directory that cannot be made is refused", str(e).startswith("400") and "/usr/not-here" in str(e), e)


def killed_mid_run():
    victim = Sandbox.create(timeout=60)
    timer = threading.Timer(1.0, victim.kill)
    timer.start()
    started = time.time()
    try:
        victim.run_code("import time; time.sleep(60)", timeout=90)
        check("a kill mid-run is an error", False, "the run ended normally")
    except TimeoutException as e:
        check("a kill mid-run is an error", "killed" in str(e) and time.time() - started < 30, e)
    finally:
        timer.cancel()


for name, fn in (("ipython", ipython), ("rich results", rich_results), ("javascript", javascript),
                 ("bash", bash), ("java and r", java_and_r), ("contexts", contexts),
                 ("killed mid-run", killed_mid_run)):
    step(name, fn)
sbx.kill()

finish()
