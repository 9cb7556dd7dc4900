"""waxell sandbox kernel: one stateful interpreter speaking JSON lines.

Host -> kernel (fd 0 at start):  execute {id, code, env}, setenv {env, cwd}, language {language};
                                  interrupts are SIGINT from the host
Kernel -> host (fd 1 at start):   ready, configured {error}, started {id}, stream {id, name, text},
                                  result {id, is_main, data}, error {id, name, value, traceback},
                                  done {id, execution_count, truncated}
The original fds 0/1 are moved to private protocol fds; fd 0 becomes /dev/null and fds 1/2 become
pipes drained by pump threads, so C-level and subprocess output is captured too.

Python cells run in IPython (as E2B's kernel does: magics, `!cmd`, dedent, display(), rich
formatters), imported by a thread after `ready` so a cold start does not wait for it. Other languages
(`language` message) run in a runtime child of this process (Node.js for JavaScript and TypeScript,
bash) that writes its output to the same fds 1/2 and answers on a private pipe; this process stays
the protocol end, so the host's checks hold for every language.

The host treats everything here as untrusted: user code can write to the protocol fd. It accepts
`done` only while it sees this process's main thread blocked reading the request pipe (the fd
`ready` names), which a frame written by cell code cannot fake; see docs/sandbox.md.
"""

import _json
import _signal
import _thread
import builtins
import codecs
import io
import os
import sys
import types

# Needed only once the host talks to the kernel or code runs: imported by a thread after `ready`, so
# start-up does not wait for them (`json` alone pulls in `re` and `enum`, half the kernel's start).
# A module import in the main thread waits for the thread's import to finish, never duplicates it.
# `threading` (7 ms with `functools` and `collections`) is imported right after `ready` too: until
# then the kernel uses `_thread`, its C part.
DEFERRED_IMPORTS = ("json", "math", "signal", "warnings", "ast", "linecache", "traceback", "base64", "subprocess")

# The name this code was compiled under (the host may run it from bytecode, where `__file__` is the
# bytecode's path): frames of the kernel itself are left out of cell tracebacks by it.
KERNEL_FILE = (lambda: None).__code__.co_filename
OUTPUT_LIMIT = int(os.environ.pop("SBX_OUTPUT_LIMIT", str(1 << 20)))
RESULT_LIMIT = int(os.environ.pop("SBX_RESULT_LIMIT", str(4 << 20)))
PRELOAD = [m for m in os.environ.pop("SBX_PRELOAD", "").split(",") if m]
# Written to fds 1/2 after a cell; the pumps pass everything before it on, then signal the marker.
SYNC_MARKER = b"\x00\x1bwaxell-sync\x1b\x00"
# A write without a newline is held this long for the rest of its line (one message per line, as
# IPython's kernel frames a `print`).
STREAM_FLUSH_DELAY = 0.05
STREAM_HOLD_LIMIT = 64 << 10
# Where the language runtimes are (the sandbox root's /usr inside the local sandbox, the image's otherwise).
NODE = "/usr/bin/node"
TYPESCRIPT = "/usr/share/nodejs/typescript"
BASH = "/bin/bash"


class Kernel:
    def __init__(self, shell=None, main=None):
        """`shell` and `main`: made before the fork by a zygote (`zygote_serve`), else here and later."""
        KernelRef.target = self
        # Read by the main thread only: between cells it blocks here, which the host checks.
        self.proto_in = os.fdopen(os.dup(0), "rb")
        self.proto_out = os.dup(1)
        os.set_inheritable(self.proto_out, False)
        devnull = os.open("/dev/null", os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        self.send_lock = _thread.allocate_lock()
        self.state_lock = _thread.allocate_lock()
        self.current_id = None
        self.executing = False
        self.output_chars = 0
        self.truncated = False
        self.stream_truncated = False
        self.execution_count = 0
        self.pid = os.getpid()
        # Made after `ready` (`serve`): a pump needs them only once a cell has ended.
        self.synced = None
        for fd, name in ((1, "stdout"), (2, "stderr")):
            r, w = os.pipe()
            os.dup2(w, fd)
            os.close(w)
            _thread.start_new_thread(self.pump, (r, fd, name))
        sys.stdout = StreamWriter(self, "stdout", 1)
        sys.stderr = StreamWriter(self, "stderr", 2)
        self.main = main or new_main_module()
        sys.modules["__main__"] = self.main
        self.shell = shell
        self.imports = None
        self.runner = None
        self.cell_error = None

    # ---- protocol -------------------------------------------------------------------------------
    def send(self, msg):
        import json

        self.write_frame(json.dumps(msg, ensure_ascii=False).encode("utf-8", "replace") + b"\n")

    def write_frame(self, data):
        with self.send_lock:
            view = memoryview(data)
            while view:
                n = os.write(self.proto_out, view)
                view = view[n:]

    def emit_stream(self, name, text):
        if not text:
            return
        cut = False
        with self.state_lock:
            exec_id = self.current_id
            if self.stream_truncated:
                return
            room = OUTPUT_LIMIT - self.output_chars
            if len(text) > room:
                text, cut = text[:room], True
                self.stream_truncated = self.truncated = True
            self.output_chars += len(text)
        if text:
            self.send({"type": "stream", "id": exec_id, "name": name, "text": text})
        if cut:
            notice = "\n[output truncated: more than %d characters]\n" % OUTPUT_LIMIT
            self.send({"type": "stream", "id": exec_id, "name": "stderr", "text": notice})

    def pump(self, fd_read, fd, name):
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        pending = b""
        while True:
            try:
                data = os.read(fd_read, 65536)
            except InterruptedError:
                continue
            if not data:
                return
            pending += data
            while True:
                i = pending.find(SYNC_MARKER)
                if i < 0:
                    break
                self.emit_stream(name, decoder.decode(pending[:i]))
                pending = pending[i + len(SYNC_MARKER):]
                self.synced[fd].set()
            keep = 0
            for k in range(min(len(SYNC_MARKER) - 1, len(pending)), 0, -1):
                if SYNC_MARKER.startswith(pending[-k:]):
                    keep = k
                    break
            out, pending = pending[: len(pending) - keep], pending[len(pending) - keep:]
            if out:
                self.emit_stream(name, decoder.decode(out))

    def sync_fd_output(self):
        """Wait until fd-level output written so far has been forwarded (so it arrives before done)."""
        for fd in (1, 2):
            self.synced[fd].clear()
            try:
                os.write(fd, SYNC_MARKER)
            except OSError:
                continue
            self.synced[fd].wait(1.0)

    def next_request(self):
        while True:
            line = self.proto_in.readline()
            if not line:
                os._exit(0)
            import json

            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if isinstance(msg, dict):
                return msg

    # ---- execution ------------------------------------------------------------------------------
    def on_interrupt(self, signum, frame):
        """SIGINT: a KeyboardInterrupt in the running cell only. The host interrupts a cell after its
        `started`; one arriving after the cell ended came late (the cell finished meanwhile, or the
        signal went to another thread and waited for the main one), and raised outside the cell it
        could land between reading the next request and starting it, and drop that request."""
        if self.executing:
            raise KeyboardInterrupt

    def serve(self):
        if PRELOAD:
            seed_matplotlib_cache()
        for name in PRELOAD:
            try:
                __import__(name)
            except Exception:
                pass
        # Written without the `json` module, which is imported after this (`_json` is its C part).
        text = _json.encode_basestring_ascii
        self.write_frame(
            (
                '{"type": "ready", "pid": %d, "uid": %d, "gid": %d, "prefix": %s, "base_prefix": %s, '
                '"version": %s, "request_fd": %d}\n'
                % (
                    os.getpid(),
                    os.getuid(),
                    os.getgid(),
                    text(sys.prefix),
                    text(sys.base_prefix),
                    text(sys.version.split()[0]),
                    self.proto_in.fileno(),
                )
            ).encode("ascii")
        )
        import threading

        self.synced = {1: threading.Event(), 2: threading.Event()}
        # Started after `ready`: a second thread wanting the GIL would delay it by up to a switch
        # interval.
        self.imports = threading.Thread(target=self.prepare_python, daemon=True)
        self.imports.start()
        pending_id = None
        while True:
            try:
                msg = self.next_request()
                kind = msg.get("type")
                if kind == "setenv":
                    self.configure(dict(msg.get("env") or {}), msg.get("cwd"))
                elif kind == "language":
                    self.set_language(str(msg.get("language") or "python"), msg.get("runtime"))
                elif kind == "execute":
                    pending_id = msg.get("id")
                    self.execute(pending_id, str(msg.get("code", "")), dict(msg.get("env") or {}))
                    pending_id = None
            except KeyboardInterrupt:
                # An interrupt that landed outside user code: finish the execution it was meant for.
                if pending_id is not None:
                    self.finish(pending_id, None)
                    pending_id = None

    def configure(self, env, cwd):
        """Before any cell: the sandbox's environment and the context's directory (made if missing
        and the sandbox user may make it)."""
        for k, v in env.items():
            os.environ[str(k)] = str(v)
        error = None
        if cwd:
            try:
                os.makedirs(str(cwd), exist_ok=True)
                os.chdir(str(cwd))
            except OSError as e:
                error = "cannot use %s as the working directory: %s" % (cwd, e.strerror or e)
        self.send({"type": "configured", "error": error})

    def set_language(self, language, runtime):
        runner = RUNNERS.get(language)
        error = None
        if runner is not None:
            self.runner = runner(self, runtime)
            try:
                self.runner.start()
            except OSError as e:
                error = "cannot start the %s runtime: %s" % (language, e.strerror or e)
        self.send({"type": "configured", "error": error})

    def execute(self, exec_id, code, env):
        self.execution_count += 1
        with self.state_lock:
            self.current_id = exec_id
            self.output_chars = 0
            self.truncated = False
            self.stream_truncated = False
        self.cell_error = None
        saved_env = {k: os.environ.get(k) for k in env}
        os.environ.update({str(k): str(v) for k, v in env.items()})
        error = None
        if self.runner is None:
            # IPython's modules import each other in cycles: importing them from two threads at
            # once can fail (KeyError 'IPython'), so the first cell waits for the thread preparing
            # them. Before `started`: the host's timeout counts from there.
            self.imports.join()
        try:
            with self.state_lock:
                self.executing = True
            # From here a KeyboardInterrupt ends this cell with a `done`. The host interrupts only
            # after this frame: earlier, between reading the request and starting it, the interrupt
            # would drop the request and no `done` would ever come.
            self.send({"type": "started", "id": exec_id})
            try:
                if self.runner is not None:
                    self.runner.run(code, env)
                else:
                    self.run_cell(code)
            finally:
                if os.getpid() != self.pid:
                    # A process forked by the cell ran off its end into the kernel: it must not
                    # answer for the kernel (its `done` would end the execution early).
                    os._exit(0)
                with self.state_lock:
                    self.executing = False
        except BaseException as e:  # noqa: B902 - exit() and KeyboardInterrupt end only the cell
            if self.runner is not None and isinstance(e, KeyboardInterrupt):
                self.runner.interrupt()
            error = self.error_message(exec_id, e)
        finally:
            for k, v in saved_env.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        if error is None and self.cell_error is not None:
            error = dict(self.cell_error, type="error", id=exec_id)
        if self.runner is None:
            self.emit_figures()
        self.finish(exec_id, error)

    def finish(self, exec_id, error):
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:
            pass
        self.sync_fd_output()
        if error is not None:
            self.send(error)
        self.send(
            {"type": "done", "id": exec_id, "execution_count": self.execution_count, "truncated": self.truncated}
        )
        with self.state_lock:
            self.current_id = None

    def prepare_python(self):
        """The deferred imports, then the IPython shell (unless the kernel runs another language):
        a warm-pool kernel has both ready before its first cell."""
        for name in DEFERRED_IMPORTS:
            try:
                __import__(name)
            except Exception:
                pass
        if not PRELOAD:
            seed_matplotlib_cache()
        quiet_warnings()
        # A kernel told to run another language by now (the host says so right after `ready`)
        # needs no IPython.
        if self.shell is not None:
            use_profile_dir(self.shell)
        elif self.runner is None:
            try:
                self.shell = new_shell(self)
            except Exception:
                pass  # made again by the first cell, which then reports why it failed

    def run_cell(self, code):
        if self.shell is None:
            self.shell = new_shell(self)
        self.shell.run_cell(code, store_history=True)

    def error_message(self, exec_id, exc):
        import traceback

        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename == KERNEL_FILE:
            tb = tb.tb_next
        lines = traceback.format_exception(type(exc), exc, tb)
        return {
            "type": "error",
            "id": exec_id,
            "name": type(exc).__name__,
            "value": safe_str(exc),
            "traceback": "".join(lines),
        }

    # ---- rich results ---------------------------------------------------------------------------
    def send_result(self, data, is_main):
        """One MIME bundle (IPython's display hook, display() or a runtime's value)."""
        import base64

        bundle = {}
        for mime, value in data.items():
            if isinstance(value, (bytes, bytearray)):
                value = base64.b64encode(bytes(value)).decode("ascii")
            bundle[str(mime)] = json_safe(value)
        size = sum(len(v) if isinstance(v, str) else 0 for v in bundle.values())
        if size > RESULT_LIMIT:
            bundle = {"text/plain": "[result dropped: %d characters exceed the limit]" % size}
            with self.state_lock:
                self.truncated = True
        with self.state_lock:
            exec_id = self.current_id
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:
            pass
        try:
            self.send({"type": "result", "id": exec_id, "is_main": is_main, "data": bundle})
        except (TypeError, ValueError):
            plain = {"text/plain": str(bundle.get("text/plain", ""))}
            self.send({"type": "result", "id": exec_id, "is_main": is_main, "data": plain})

    def display_figures(self):
        """Every open matplotlib figure as a display (with its chart), then closed: IPython's inline
        backend does this for `plt.show()` and at the end of a cell."""
        plt = sys.modules.get("matplotlib.pyplot")
        if plt is None or self.shell is None:
            return
        try:
            for num in plt.get_fignums():
                self.shell.show(plt.figure(num))
        except Exception as e:
            self.emit_stream("stderr", "[figure export failed: %s]\n" % safe_str(e))
        finally:
            try:
                plt.close("all")
            except Exception:
                pass

    emit_figures = display_figures




# ---- IPython ------------------------------------------------------------------------------------
def new_shell(kernel):
    """IPython's shell, or the plain one when the sandbox's Python has no IPython."""
    try:
        import IPython  # noqa: F401
    except ImportError:
        return PlainShell(kernel)
    return make_shell(kernel, kernel.main)


def make_shell(kernel, main):
    """An IPython shell whose results, displays and errors become protocol frames."""
    import subprocess

    from IPython.core.displayhook import DisplayHook
    from IPython.core.displaypub import DisplayPublisher
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets import Type
    from traitlets.config import Config

    class ResultHook(DisplayHook):
        """The cell's value (`Out[n]`) as the main result."""

        def start_displayhook(self):
            pass

        def write_output_prompt(self):
            pass

        def write_format_data(self, format_dict, md_dict=None):
            kernel.send_result(format_dict, True)

        def finish_displayhook(self):
            pass

    class Publisher(DisplayPublisher):
        """display() and figures: results that are not the cell's value."""

        def publish(self, data, metadata=None, source=None, *, transient=None, update=False, **kwargs):
            kernel.send_result(data, False)

        def clear_output(self, wait=False):
            pass

    class Shell(InteractiveShell):
        displayhook_class = Type(ResultHook)
        display_pub_class = Type(Publisher)

        def _showtraceback(self, etype, evalue, stb):
            kernel.cell_error = {
                "name": getattr(etype, "__name__", str(etype)),
                "value": safe_str(evalue),
                # Joined as IPython's terminal joins them (the separator depends on the xmode).
                "traceback": self.InteractiveTB.stb2text(stb),
            }

        def system_piped(self, cmd):
            """`!cmd`: a shell on the kernel's fds 1/2 (IPython's own needs a terminal)."""
            sys.stdout.flush()
            sys.stderr.flush()
            code = subprocess.call(self.var_expand(cmd, depth=1), shell=True, executable=BASH, stdin=subprocess.DEVNULL)
            self.user_ns["_exit_code"] = code

        system = system_piped

        def show(self, obj):
            """Display `obj` as display() does."""
            self.display_pub.publish(self.display_formatter.format(obj)[0])

        def getoutput(self, cmd, split=True, depth=0):
            from IPython.utils.text import SList

            out = subprocess.run(
                self.var_expand(cmd, depth=depth + 1), shell=True, executable=BASH, stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            ).stdout.decode("utf-8", "replace")
            return SList(out.splitlines()) if split else out

    config = Config()
    config.InteractiveShell.colors = "NoColor"
    # Tracebacks in Python's own layout. IPython's default ("Context") parses the source of every library
    # file it shows (stack_data, executing): the first error out of pandas costs 0.5-1 s. `%xmode Context`
    # in a cell brings it back.
    config.InteractiveShell.xmode = "Plain"
    config.InteractiveShell.autocall = 0
    config.HistoryManager.enabled = False
    config.PlainTextFormatter.max_seq_length = 0
    if InteractiveShell.initialized():
        # Made before by a call that failed after it (interrupted): IPython allows one shell.
        shell = InteractiveShell.instance()
    else:
        shell = Shell.instance(config=config, user_module=main)
    # A cell's exit() ends the cell with SystemExit (IPython's would ask the shell to quit).
    shell.user_ns["exit"] = shell.user_ns["quit"] = raise_exit
    add_formatters(shell)
    watch_imports(kernel)
    return shell


class PlainShell:
    """Cells without IPython (an interpreter without it, e.g. a custom image): the code is exec'd
    and its last expression is the result, with the MIME bundle of its `_repr_*_` methods."""

    def __init__(self, kernel):
        self.kernel = kernel

    def run_cell(self, code, store_history=True):
        import ast
        import linecache
        import textwrap

        kernel = self.kernel
        # Indented cells run, as IPython's do.
        code = textwrap.dedent(code)
        filename = "<cell-%d>" % kernel.execution_count
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        namespace = kernel.main.__dict__
        try:
            tree = ast.parse(code, filename, "exec")
            last = None
            if tree.body and isinstance(tree.body[-1], ast.Expr):
                last = ast.Expression(tree.body.pop().value)
            exec(compile(tree, filename, "exec"), namespace)
            value = eval(compile(last, filename, "eval"), namespace) if last is not None else None
        except BaseException as e:  # noqa: B902 - exit() and KeyboardInterrupt end only the cell
            error = kernel.error_message(None, e)
            kernel.cell_error = {k: error[k] for k in ("name", "value", "traceback")}
            return
        if value is not None:
            namespace["_"] = value
            kernel.send_result(mime_bundle(value), True)

    def show(self, obj):
        self.kernel.send_result(mime_bundle(obj), False)


MIME_METHODS = [
    ("text/html", "_repr_html_"),
    ("text/markdown", "_repr_markdown_"),
    ("image/svg+xml", "_repr_svg_"),
    ("image/png", "_repr_png_"),
    ("image/jpeg", "_repr_jpeg_"),
    ("application/pdf", "_repr_pdf_"),
    ("text/latex", "_repr_latex_"),
    ("application/json", "_repr_json_"),
    ("application/javascript", "_repr_javascript_"),
]


def mime_bundle(obj):
    """The plain shell's result: repr and the object's `_repr_*_` methods (a figure as PNG)."""
    try:
        data = {"text/plain": repr(obj)}
    except Exception as e:
        data = {"text/plain": "<repr failed: %s>" % safe_str(e)}
    if is_figure(obj):
        data["image/png"] = figure_png(obj)
        return data
    for mime, method in MIME_METHODS:
        fn = getattr(type(obj), method, None)
        if not callable(fn):
            continue
        try:
            value = fn(obj)
        except Exception:
            continue
        if isinstance(value, tuple):
            value = value[0]
        if value is not None:
            data[mime] = value
    return data


def seed_matplotlib_cache():
    """matplotlib lists the fonts it can use on its first import into a fresh MPLCONFIGDIR (about
    100 ms, every sandbox): start from the list the set-up made for this Python instead (the fonts
    the sandbox sees, and only those), if it made one. A font missing from it is found again."""
    target = os.environ.get("MPLCONFIGDIR")
    source = os.path.join(sys.prefix, "share", "waxell", "matplotlib")
    try:
        names = [n for n in os.listdir(source) if n.startswith("fontlist-") and n.endswith(".json")]
    except OSError:
        return
    if not target:
        return
    try:
        os.makedirs(target, exist_ok=True)
        for name in names:
            # Plain reads and writes: `shutil` would import `fnmatch`, `re` and compression modules.
            with open(os.path.join(source, name), "rb") as src:
                data = src.read()
            try:
                with open(os.path.join(target, name), "xb") as dst:
                    dst.write(data)
            except FileExistsError:
                pass
    except OSError:
        pass


def raise_exit(code=None):
    raise SystemExit(code)


def add_formatters(shell):
    """E2B's extra result fields: `e2b/data` (a DataFrame's columns), `e2b/chart` (a matplotlib
    figure's chart, by E2B's own extractor `e2b_charts`), and PNG for figures."""
    from IPython.core.formatters import BaseFormatter
    from traitlets import ObjectName, Unicode

    class DataFormatter(BaseFormatter):
        format_type = Unicode("e2b/data")
        print_method = ObjectName("_repr_e2b_data_")
        _return_type = (dict, str)

        def __call__(self, obj):
            pandas = sys.modules.get("pandas")
            if pandas is not None and isinstance(obj, pandas.DataFrame):
                try:
                    columns = obj.to_dict(orient="list")
                    return {str(k): [iso_or_value(v) for v in vs] for k, vs in columns.items()}
                except Exception:
                    return None
            return super().__call__(obj)

    class ChartFormatter(BaseFormatter):
        format_type = Unicode("e2b/chart")
        print_method = ObjectName("_repr_e2b_chart_")
        _return_type = (dict, str)

        def __call__(self, obj):
            if is_figure(obj):
                try:
                    from e2b_charts import chart_figure_to_dict
                except ImportError:
                    return None  # no extractor in this sandbox: the figure comes without a chart
                try:
                    return chart_figure_to_dict(obj)
                except Exception:
                    return {}  # as E2B's: a figure the extractor cannot read has an empty chart
            return super().__call__(obj)

    formatter = shell.display_formatter
    formatter.formatters["e2b/data"] = DataFormatter(parent=formatter)
    formatter.formatters["e2b/chart"] = ChartFormatter(parent=formatter)
    formatter.formatters["image/png"].for_type_by_name("matplotlib.figure", "Figure", figure_png)


def is_figure(obj):
    cls = type(obj)
    return cls.__module__ == "matplotlib.figure" and cls.__name__ == "Figure"


def figure_png(figure):
    buf = io.BytesIO()
    figure.savefig(buf, format="png", bbox_inches="tight")
    return buf.getvalue()


def iso_or_value(value):
    return value.isoformat() if hasattr(value, "isoformat") else value


def watch_imports(kernel):
    """Patch modules when cell code imports them: `plt.show()` displays the figures (IPython's
    inline backend), a PIL image's show() and save(path) display it (as E2B's images do)."""
    import importlib.abc
    import importlib.util

    def patch_pyplot(plt):
        def show(*args, **kwargs):
            kernel.display_figures()

        plt.show = show

    def patch_pil(image_module):
        from IPython.display import display

        original_save = image_module.Image.save

        def show(self, *args, **kwargs):
            display(self)

        def save(self, fp, format=None, **params):
            if isinstance(fp, (str, os.PathLike)):
                display(self)
            return original_save(self, fp, format, **params)

        image_module.Image.show = show
        image_module.Image.save = save

    patches = {"matplotlib.pyplot": patch_pyplot, "PIL.Image": patch_pil}
    if any(type(finder).__name__ == "WaxellPatches" for finder in sys.meta_path):
        return

    class WaxellPatches(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path, target=None):
            patch = patches.get(fullname)
            if patch is None:
                return None
            sys.meta_path.remove(self)
            try:
                spec = importlib.util.find_spec(fullname)
            finally:
                sys.meta_path.insert(0, self)
            if spec is None or spec.loader is None:
                return spec
            exec_module = spec.loader.exec_module

            def exec_and_patch(module):
                exec_module(module)
                try:
                    patch(module)
                except Exception:
                    pass

            spec.loader.exec_module = exec_and_patch
            return spec

    for name, patch in patches.items():
        if name in sys.modules:
            patch(sys.modules[name])
    sys.meta_path.insert(0, WaxellPatches())


# ---- other languages: a runtime child answering on a private pipe --------------------------------
class Runner:
    """A long-lived runtime process reading requests on one pipe (fd `fds[0]` in it) and writing
    output to the kernel's fds 1/2 and, after each cell, one JSON line on its answer pipe
    (`fds[1]`). Interrupted, it is killed and restarted (its state is lost)."""

    name = ""
    default_runtime = ""

    def __init__(self, kernel, runtime=None):
        self.kernel = kernel
        # The runtime's executable as the host found it (a path that needs no /etc/alternatives).
        self.runtime = str(runtime or self.default_runtime)
        self.process = None
        self.requests = None
        self.answers = None

    def argv(self):
        raise NotImplementedError

    def start(self):
        import subprocess

        req_r, req_w = os.pipe()
        ans_r, ans_w = os.pipe()
        self.fds = (req_r, ans_w)
        try:
            self.process = subprocess.Popen(
                self.argv(),
                stdin=subprocess.DEVNULL,
                pass_fds=self.fds,
                start_new_session=True,
                env=self.env(),
            )
        finally:
            os.close(req_r)
            os.close(ans_w)
        self.requests = os.fdopen(req_w, "wb")
        self.answers = os.fdopen(ans_r, "rb")

    def env(self):
        return dict(os.environ)

    def alive(self):
        return self.process is not None and self.process.poll() is None

    def run(self, code, env):
        if not self.alive():
            self.stop()
            self.start()
        nonce = os.urandom(8).hex()
        try:
            self.requests.write(self.request(code, env, nonce))
            self.requests.flush()
        except OSError:
            pass
        while True:
            line = self.answers.readline()
            if not line:
                status = self.process.wait()
                self.stop()
                self.kernel.cell_error = {
                    "name": "KernelDied",
                    "value": "the %s runtime exited (status %s); its state is lost and it restarts on the next run"
                    % (self.name, status),
                    "traceback": "",
                }
                return
            import json

            try:
                answer = json.loads(line)
            except ValueError:
                continue
            if not isinstance(answer, dict) or answer.get("nonce") != nonce:
                continue
            if "stream" in answer:
                self.kernel.emit_stream("stderr" if answer["stream"] == "stderr" else "stdout", str(answer.get("text", "")))
                continue
            if answer.get("result") is not None:
                self.kernel.send_result(answer["result"], True)
            if answer.get("status"):
                self.kernel.cell_error = {
                    "name": "ExitCode",
                    "value": "exit status %s" % answer["status"],
                    "traceback": "",
                }
            if answer.get("error"):
                error = answer["error"]
                self.kernel.cell_error = {
                    "name": str(error.get("name", "Error")),
                    "value": str(error.get("value", "")),
                    "traceback": str(error.get("traceback", "")),
                }
            return

    def request(self, code, env, nonce):
        raise NotImplementedError

    def interrupt(self):
        self.stop()

    def stop(self):
        if self.process is not None:
            try:
                os.killpg(self.process.pid, _signal.SIGKILL)
            except OSError:
                pass
            try:
                self.process.wait()
            except Exception:
                pass
        for f in (self.requests, self.answers):
            try:
                f and f.close()
            except OSError:
                pass
        self.process = self.requests = self.answers = None


class NodeRunner(Runner):
    name = "javascript"
    default_runtime = NODE
    typescript = False

    def argv(self):
        return [self.runtime, "-e", NODE_DRIVER, str(self.fds[0]), str(self.fds[1])]

    def env(self):
        env = dict(os.environ)
        if self.typescript:
            env["WAXELL_TYPESCRIPT"] = TYPESCRIPT
        return env

    def request(self, code, env, nonce):
        import json

        return json.dumps({"code": code, "env": env, "nonce": nonce}).encode() + b"\n"


class TypeScriptRunner(NodeRunner):
    name = "typescript"
    typescript = True


class BashRunner(Runner):
    """bash reading commands from its request pipe: each cell is sourced from a file (so `cd`, `export` and
    functions persist), with the cell's own env vars set around it, then its status is answered."""

    name = "bash"
    default_runtime = BASH

    def argv(self):
        return [self.runtime, "--noprofile", "--norc", "/dev/fd/%d" % self.fds[0]]

    def start(self):
        import tempfile

        self.cells = tempfile.mkdtemp(prefix=".waxell-bash-")
        super().start()

    def request(self, code, env, nonce):
        path = os.path.join(self.cells, "cell.sh")
        with open(path, "w") as f:
            f.write(code)
            if not code.endswith("\n"):
                f.write("\n")
        lines = ["__waxell_restore=''"]
        for key, value in env.items():
            if not is_shell_name(key):
                continue
            lines.append(
                '__waxell_restore+="$(if [ -n "${%s+x}" ]; then printf "export %s=%%q;" "$%s"; else printf "unset %s;"; fi)"'
                % (key, key, key, key)
            )
            lines.append("export %s=%s" % (key, shell_quote(str(value))))
        lines.append("source %s </dev/null" % shell_quote(path))
        lines.append("__waxell_status=$?")
        lines.append('eval "$__waxell_restore"')
        lines.append('printf \'{"nonce":"%s","status":%%d}\\n\' "$__waxell_status" >&%d' % (nonce, self.fds[1]))
        return ("\n".join(lines) + "\n").encode()



class JavaRunner(Runner):
    """JShell's API in one JVM per context (`JAVA_DRIVER`); its System.out and System.err answer
    as stream frames, one per write."""

    name = "java"

    def start(self):
        import tempfile

        self.source = os.path.join(tempfile.mkdtemp(prefix=".waxell-java-"), "WaxellJava.java")
        with open(self.source, "w") as f:
            f.write(JAVA_DRIVER)
        super().start()

    def argv(self):
        # The serial collector and the client compiler: fewer threads and a faster start.
        flags = ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto"]
        return [self.runtime] + flags + [self.source, str(self.fds[0]), str(self.fds[1])]

    def request(self, code, env, nonce):
        import base64

        b64 = lambda text: base64.b64encode(str(text).encode("utf-8")).decode("ascii")
        fields = [nonce, b64(code)] + ["%s:%s" % (b64(k), b64(v)) for k, v in env.items()]
        return ("\t".join(fields) + "\n").encode()


def is_shell_name(name):
    return bool(name) and (name[0].isalpha() or name[0] == "_") and all(c.isalnum() or c == "_" for c in name)


def shell_quote(text):
    return "'" + text.replace("'", "'\\''") + "'"


RUNNERS = {"javascript": NodeRunner, "typescript": TypeScriptRunner, "bash": BashRunner, "java": JavaRunner}

# The Node.js side: a REPL server's evaluator (top-level await, persistent declarations) on a
# context of its own, static imports rewritten to dynamic ones, TypeScript transpiled by the
# TypeScript compiler when given. One JSON request per line on the request fd, one answer per line
# on the answer fd (both from argv).
NODE_DRIVER = r"""
'use strict';
const fs = require('fs'), repl = require('repl'), util = require('util'), readline = require('readline');
const { PassThrough } = require('stream');
const ts = process.env.WAXELL_TYPESCRIPT ? require(process.env.WAXELL_TYPESCRIPT) : null;
delete process.env.WAXELL_TYPESCRIPT;
const sink = new PassThrough(); sink.resume();
const server = repl.start({ input: new PassThrough(), output: sink, terminal: false, prompt: '', useGlobal: false });
const [requestFd, answerFd] = process.argv.slice(1).map(Number);
// The REPL's context logs to the REPL's output: cells log to the process's fds 1/2.
server.context.console = console;
// The REPL reports a cell's exceptions (thrown, or rejected after an await) to its domain, not to
// the evaluator's callback: they end the running cell. Later ones (a timer's) have no cell to go to.
let current = null;
server._domain.removeAllListeners('error');
server._domain.on('error', (e) => { if (current) current({ error: describe(e) }); });
const answer = (msg) => fs.writeSync(answerFd, JSON.stringify(msg) + '\n');
const IMPORT = /^([ \t]*)import\s+(?:([\w$]+)\s*,?\s*)?(?:\*\s+as\s+([\w$]+)|\{([^}]*)\})?\s*(?:from\s*)?(['"][^'"\n]+['"])[ \t]*;?/gm;
let imports = 0;
function rewriteImports(code) {
  return code.replace(IMPORT, (all, indent, def, star, named, spec) => {
    const mod = '__waxell_import' + (imports++);
    let out = indent + 'var ' + mod + ' = await import(' + spec + ');';
    if (def) out += ' var ' + def + ' = ' + mod + '.default;';
    if (star) out += ' var ' + star + ' = ' + mod + ';';
    if (named && named.trim()) {
      const names = named.split(',').map((n) => n.trim()).filter(Boolean)
        .map((n) => n.replace(/^([\w$]+)\s+as\s+([\w$]+)$/, '$1: $2'));
      out += ' var { ' + names.join(', ') + ' } = ' + mod + ';';
    }
    return out;
  });
}
function transpile(code) {
  if (!ts) return code;
  const out = ts.transpileModule(code, { reportDiagnostics: false, compilerOptions: {
    target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.ESNext, removeComments: false } }).outputText;
  return out.replace(/^export \{\};\s*$/m, '');
}
function describe(err) {
  if (err && err.err) err = err.err; // a REPL Recoverable wraps the SyntaxError
  // Errors of the cell's context are of another realm's Error: not `instanceof Error` here.
  if (util.types.isNativeError(err) || (err && typeof err === 'object' && 'message' in err && 'name' in err)) {
    const stack = String(err.stack || err);
    const cut = stack.split('\n').findIndex((l) => /\(node:(vm|repl|internal)/.test(l));
    return { name: String(err.name), value: String(err.message), traceback: (cut > 0 ? stack.split('\n').slice(0, cut) : [stack]).join('\n') };
  }
  return { name: 'Error', value: util.inspect(err), traceback: '' };
}
const lines = readline.createInterface({ input: fs.createReadStream(null, { fd: requestFd }) });
let queue = Promise.resolve();
lines.on('line', (line) => { queue = queue.then(() => run(JSON.parse(line))); });
lines.on('close', () => process.exit(0));
function run(req) {
  return new Promise((resolve) => {
    const saved = {};
    for (const [k, v] of Object.entries(req.env || {})) { saved[k] = process.env[k]; process.env[k] = String(v); }
    const done = (msg) => {
      if (current !== done) return;
      current = null;
      for (const [k, v] of Object.entries(saved)) { if (v === undefined) delete process.env[k]; else process.env[k] = v; }
      msg.nonce = req.nonce; answer(msg); resolve();
    };
    current = done;
    let code;
    try { code = rewriteImports(transpile(req.code)); } catch (e) { return done({ error: describe(e) }); }
    if (!code.trim()) return done({});
    try {
      server.eval(code, server.context, 'cell', (err, value) => {
        if (err) return done({ error: describe(err) });
        if (value === undefined) return done({});
        done({ result: { 'text/plain': typeof value === 'string' ? util.inspect(value) : util.inspect(value, { depth: 4 }) } });
      });
    } catch (e) { done({ error: describe(e) }); }
  });
}
"""

# The Java side, compiled by `java` from source at start: one request per line (nonce, code and
# the run's env vars, base64, tab-separated), one JSON answer per line.
JAVA_DRIVER = r"""
import java.io.*;
import java.nio.charset.StandardCharsets;
import java.util.*;
import jdk.jshell.*;

/** waxell's Java runner: JShell in this JVM, one request per line, answers as JSON lines. */
public class WaxellJava {
    static volatile String nonce = "";
    static OutputStream answers;

    static synchronized void answer(String json) {
        try {
            answers.write((json + "\n").getBytes(StandardCharsets.UTF_8));
            answers.flush();
        } catch (IOException e) {
            System.exit(1);
        }
    }

    static String q(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            switch (c) {
                case '"': b.append("\\\""); break;
                case '\\': b.append("\\\\"); break;
                case '\n': b.append("\\n"); break;
                case '\r': b.append("\\r"); break;
                case '\t': b.append("\\t"); break;
                default:
                    if (c < 0x20) b.append(String.format("\\u%04x", (int) c)); else b.append(c);
            }
        }
        return b.append('"').toString();
    }

    /** System.out and System.err: each write is one stream frame. */
    static class Frames extends OutputStream {
        final String name;
        Frames(String name) { this.name = name; }
        @Override public void write(int b) { write(new byte[] {(byte) b}, 0, 1); }
        @Override public void write(byte[] b, int off, int len) {
            String text = new String(b, off, len, StandardCharsets.UTF_8);
            // A line's end is a frame of its own, as E2B's Java kernel sends `println`.
            if (text.length() > 1 && text.endsWith("\n")) {
                frame(text.substring(0, text.length() - 1));
                frame("\n");
            } else if (!text.isEmpty()) {
                frame(text);
            }
        }
        void frame(String text) {
            answer("{\"nonce\":" + q(nonce) + ",\"stream\":" + q(name) + ",\"text\":" + q(text) + "}");
        }
    }

    static String decode(String b64) { return new String(Base64.getDecoder().decode(b64), StandardCharsets.UTF_8); }

    static String error(String name, String value, String traceback) {
        return "\"error\":{\"name\":" + q(name) + ",\"value\":" + q(value) + ",\"traceback\":" + q(traceback) + "}";
    }

    public static void main(String[] args) throws Exception {
        BufferedReader requests = new BufferedReader(new InputStreamReader(new FileInputStream("/dev/fd/" + args[0]), StandardCharsets.UTF_8));
        answers = new FileOutputStream("/dev/fd/" + args[1]);
        PrintStream out = new PrintStream(new Frames("stdout"), true, "UTF-8");
        PrintStream err = new PrintStream(new Frames("stderr"), true, "UTF-8");
        System.setOut(out);
        System.setErr(err);
        // E2B's Java kernel shows the environment as system properties.
        System.getenv().forEach(System::setProperty);
        JShell shell = JShell.builder().executionEngine("local").out(out).err(err).build();
        SourceCodeAnalysis analysis = shell.sourceCodeAnalysis();
        String line;
        while ((line = requests.readLine()) != null) {
            String[] parts = line.split("\t", -1);
            nonce = parts[0];
            String code = decode(parts[1]);
            Map<String, String> saved = new HashMap<>();
            for (int i = 2; i < parts.length; i++) {
                String[] kv = parts[i].split(":", 2);
                if (kv.length != 2) continue;
                String key = decode(kv[0]);
                saved.put(key, System.getProperty(key));
                System.setProperty(key, decode(kv[1]));
            }
            String result = null, failure = null;
            String remaining = code;
            cell:
            while (!remaining.isBlank()) {
                SourceCodeAnalysis.CompletionInfo info = analysis.analyzeCompletion(remaining);
                String source = info.completeness().isComplete() ? info.source() : remaining;
                remaining = info.completeness().isComplete() ? info.remaining() : "";
                for (SnippetEvent event : shell.eval(source)) {
                    if (event.causeSnippet() != null) continue;
                    if (event.exception() != null) {
                        JShellException e = event.exception();
                        String name = e instanceof EvalException ? ((EvalException) e).getExceptionClassName() : e.getClass().getName();
                        StringWriter trace = new StringWriter();
                        e.printStackTrace(new PrintWriter(trace));
                        failure = error(name, String.valueOf(e.getMessage()), trace.toString());
                        break cell;
                    }
                    if (event.status() == Snippet.Status.REJECTED) {
                        StringBuilder why = new StringBuilder();
                        shell.diagnostics(event.snippet()).forEach(d -> why.append(d.getMessage(Locale.ROOT)).append('\n'));
                        failure = error("CompilationException", why.toString().trim(), source);
                        break cell;
                    }
                    Snippet.SubKind kind = event.snippet().subKind();
                    boolean expression = kind == Snippet.SubKind.TEMP_VAR_EXPRESSION_SUBKIND
                        || kind == Snippet.SubKind.VAR_VALUE_SUBKIND
                        || kind == Snippet.SubKind.OTHER_EXPRESSION_SUBKIND;
                    result = expression && event.value() != null && !event.value().isEmpty() ? event.value() : null;
                }
            }
            saved.forEach((k, v) -> { if (v == null) System.clearProperty(k); else System.setProperty(k, v); });
            String done = failure != null ? failure : result != null ? "\"result\":{\"text/plain\":" + q(result) + "}" : null;
            answer("{\"nonce\":" + q(nonce) + (done != null ? "," + done : "") + "}");
        }
        System.exit(0);
    }
}
"""


class StreamWriter(io.TextIOBase):
    """sys.stdout / sys.stderr: whole lines become stream messages at once; a partial line waits
    briefly for its end (so `print` is one message, as in IPython's kernel)."""

    def __init__(self, kernel, name, fd):
        self._kernel = kernel
        self._name = name
        self._fd = fd
        self._buffer = []
        self._buffered = 0
        self._lock = _thread.RLock()
        self._timer = None

    @property
    def encoding(self):
        return "utf-8"

    def writable(self):
        return True

    def isatty(self):
        return False

    def fileno(self):
        return self._fd

    def write(self, text):
        if not isinstance(text, str):
            raise TypeError("write() argument must be str, not %s" % type(text).__name__)
        if not text:
            return 0
        with self._lock:
            self._buffer.append(text)
            self._buffered += len(text)
            # A long partial line is not held back (nor kept in memory) either.
            whole_line = text.endswith("\n") or self._buffered >= STREAM_HOLD_LIMIT
            # Before `ready` (output of a preloaded module) there is no `threading` to time it with:
            # the text goes at once. Imported only by the main thread, which it takes as its main.
            threading = sys.modules.get("threading")
            if threading is None:
                whole_line = True
            elif not whole_line and self._timer is None:
                self._timer = threading.Timer(STREAM_FLUSH_DELAY, self.flush)
                self._timer.daemon = True
                self._timer.start()
        if whole_line:
            self.flush()
        return len(text)

    def flush(self):
        # Sent under the lock: a timer's flush and the next line's cannot swap places.
        with self._lock:
            text = "".join(self._buffer)
            self._buffer = []
            self._buffered = 0
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._kernel.emit_stream(self._name, text)

    @property
    def buffer(self):
        return BytesWriter(self)


class BytesWriter(io.RawIOBase):
    def __init__(self, text_writer):
        self._text = text_writer

    def writable(self):
        return True

    def write(self, data):
        self._text.write(bytes(data).decode("utf-8", "replace"))
        return len(data)


def safe_str(obj):
    try:
        return str(obj)
    except Exception:
        return "<unprintable %s>" % type(obj).__name__


def json_safe(value, depth=0):
    """Plain JSON (the host parses strictly): NaN/inf as null, numpy scalars and arrays as numbers
    and lists, anything else unknown as its str."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        import math

        return value if math.isfinite(value) else None
    if depth > 64:
        return safe_str(value)
    if isinstance(value, dict):
        return {str(k): json_safe(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v, depth + 1) for v in value]
    for method in ("tolist", "item"):
        fn = getattr(value, method, None)
        if callable(fn):
            try:
                return json_safe(fn(), depth + 1)
            except Exception:
                pass
    if hasattr(value, "isoformat"):
        try:
            return value.isoformat()
        except Exception:
            pass
    return safe_str(value)


def new_main_module():
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = builtins
    return main


def quiet_warnings():
    """Once per interpreter (a zygote's kernels inherit its filters)."""
    global WARNINGS_QUIETED
    if WARNINGS_QUIETED:
        return
    import warnings

    warnings.filterwarnings("ignore", message=".*non-interactive.*")
    warnings.filterwarnings("ignore", message="To exit: use")
    WARNINGS_QUIETED = True


WARNINGS_QUIETED = False


def use_profile_dir(shell):
    """A shell made in the zygote found its profile in the zygote's private directory: move it to
    the sandbox's own (`IPYTHONDIR`), whose directories the profile makes as it moves (cheaper in
    memory than a new profile object)."""
    try:
        shell.ipython_dir = os.environ.get("IPYTHONDIR") or shell.ipython_dir
        shell.profile_dir.location = os.path.join(shell.ipython_dir, "profile_default")
    except Exception:
        pass


class KernelRef:
    """Stands for the kernel in a shell made before it exists (in the zygote): every attribute is the
    kernel's, set once the forked process makes its `Kernel`."""

    target = None

    def __getattr__(self, name):
        return getattr(KernelRef.target, name)

    def __setattr__(self, name, value):
        setattr(KernelRef.target, name, value)


# ---- zygote -------------------------------------------------------------------------------------
# The local backend starts kernels by forking them from one zygote that has imported the kernel's
# modules and made its IPython shell: its pages are shared by every kernel until written, so a
# kernel takes a few MiB of its own instead of the whole interpreter's, and starts in milliseconds.
# A forked process joins a sandbox made by bubblewrap (its namespaces, from the host), its cgroup
# and rlimits, then as its own process in its pid namespace drops to the sandbox's ids, every
# capability, sets no-new-privs and the sandbox's seccomp filters, and becomes the kernel. Nothing
# of one sandbox ever passes through the zygote (requests carry ids, limits and descriptors only), so
# no sandbox finds another's data in the memory it inherits.
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_SECCOMP = 22
PR_CAPBSET_DROP = 24
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
SECCOMP_MODE_FILTER = 2
CAPABILITY_VERSION_3 = 0x20080522


def zygote_serve(control_fd):
    """Serve kernel starts on `control_fd` (a SOCK_SEQPACKET socket from the host) until it closes.
    A request is a JSON object and descriptors: the reply socket, a pidfd of the sandbox's holder
    (killed when the kernel ends, which ends the sandbox's pid namespace as bwrap would when its
    program exits), the kernel's stdin, stdout and stderr, `procs` cgroup.procs files, the namespaces named in `namespaces`, and `seccomp` filter
    programs. The reply socket gets `pid <host pid>` (or `error <why>`), then `exit <status>`."""
    import ctypes
    import gc
    import json
    import select
    import signal
    import socket
    import time

    libc = ctypes.CDLL(None, use_errno=True)
    # The environment a kernel starts with (the zygote's own points IPython and matplotlib elsewhere).
    kernel_env = json.loads(os.environ.pop("SBX_KERNEL_ENV", "{}"))
    for name in DEFERRED_IMPORTS + ("threading", "resource"):
        __import__(name)
    main = new_main_module()
    shell = None
    try:
        import IPython  # noqa: F401
    except ImportError:
        pass
    else:
        shell = make_shell(KernelRef(), main)
        warm_up(shell)
    quiet_warnings()
    prctl(libc, PR_SET_PDEATHSIG, signal.SIGKILL)
    prctl(libc, PR_SET_CHILD_SUBREAPER, 1)
    # Not readable or traceable by anyone without privileges until a forked kernel has dropped to
    # the sandbox's ids (`enter_sandbox` makes it dumpable again, as an exec would).
    prctl(libc, PR_SET_DUMPABLE, 0)
    control = socket.socket(fileno=control_fd)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    if len(os.listdir("/proc/self/task")) != 1:
        raise SystemExit("the zygote must be single-threaded to join user namespaces")
    # Out of the collector's reach: a kernel's collections then never write to the shared objects.
    gc.collect()
    gc.freeze()
    kernels = {}
    starting = {}
    control.send(b"ready")
    # poll, not select: with a socket and a pidfd per live kernel, descriptors pass FD_SETSIZE.
    poller = select.poll()
    poller.register(control, select.POLLIN)
    poller.register(wake_r, select.POLLIN)
    while True:
        deadline = min((start.deadline for start in starting.values()), default=None)
        timeout = None if deadline is None else max(0, int((deadline - time.monotonic()) * 1000) + 1)
        ready = {fd for fd, _ in poller.poll(timeout)}
        # Every answer read before any reaping: a kernel's pid is written before it can become the
        # zygote's child to reap, so its exit is never seen before its start.
        for fd in list(starting):
            if fd in ready or time.monotonic() >= starting[fd].deadline:
                starting[fd].read(poller, starting, kernels)
        if wake_r in ready:
            os.read(wake_r, 4096)
            for fd in list(starting):
                starting[fd].read(poller, starting, kernels, drain_only=True)
            reap(kernels)
        if control.fileno() in ready:
            msg, fds, _, _ = socket.recv_fds(control, 1 << 16, 64)
            if not msg:
                os._exit(0)
            start = start_kernel(libc, json.loads(msg), fds, shell, main, kernel_env)
            starting[start.pid_r] = start
            poller.register(start.pid_r, select.POLLIN)


class WarmUpSink:
    """The kernel of the zygote's warm-up cell: what it would send goes nowhere."""

    cell_error = None

    def send_result(self, data, is_main):
        pass


def warm_up(shell):
    """Run what every kernel's first cell runs (IPython's transforms, compiler, execution, the
    formatters) once in the zygote: the caches and objects it makes are then shared, not made or
    written again in each kernel (about 3 MiB less of each kernel's own). No trace stays in the
    namespace or the counts a kernel starts with."""
    names = set(shell.user_ns)
    count = shell.execution_count
    KernelRef.target = WarmUpSink()
    try:
        shell.run_cell("_waxell_warm_up = [str(i) for i in range(8)]", store_history=False)
        shell.display_formatter.format([1, "a", {"b": 2.5}])
    finally:
        KernelRef.target = None
    for name in set(shell.user_ns) - names:
        del shell.user_ns[name]
    shell.execution_count = count


def reap(kernels):
    import signal

    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        ends = kernels.pop(pid, None)
        if ends is not None:
            reply, holder = ends
            try:
                signal.pidfd_send_signal(holder, signal.SIGKILL)
            except OSError:
                pass  # already gone
            os.close(holder)
            try:
                os.write(reply, b"exit %d\n" % status)
            except OSError:
                pass
            os.close(reply)


def start_kernel(libc, request, fds, shell, main, env):
    """Fork the process that enters the sandbox and forks the kernel there. Returns at once: the
    zygote serves other starts while this one sets up (`KernelStart.read` takes its answer)."""
    reply, holder = fds[0], fds[1]
    pid_r, pid_w = os.pipe()
    child = os.fork()
    if child == 0:
        try:
            os.close(pid_r)
            enter_sandbox(libc, request, fds, pid_w, env)
            kernel = Kernel(shell, main)
            _signal.signal(_signal.SIGINT, kernel.on_interrupt)
            kernel.serve()
        except BaseException as e:  # noqa: B902 - reported, then this process ends
            try:
                os.write(pid_w, ("error %s\n" % (e,)).encode("utf-8", "replace"))
            except OSError:
                pass
        os._exit(1)
    os.close(pid_w)
    for fd in fds[2:]:
        os.close(fd)
    os.set_blocking(pid_r, False)
    return KernelStart(pid_r, reply, holder)


class KernelStart:
    """A kernel being forked: its answer (`pid <host pid>` or `error <why>`) comes on `pid_r`, then
    end of file once the process between the zygote and the kernel has ended."""

    TIMEOUT_S = 5.0

    def __init__(self, pid_r, reply, holder):
        import time

        self.pid_r, self.reply, self.holder = pid_r, reply, holder
        self.answer = b""
        self.deadline = time.monotonic() + self.TIMEOUT_S

    def read(self, poller, starting, kernels, drain_only=False):
        import time

        while True:
            try:
                chunk = os.read(self.pid_r, 4096)
            except BlockingIOError:
                if drain_only or time.monotonic() < self.deadline:
                    return
                break
            if not chunk:
                break
            self.answer += chunk
        poller.unregister(self.pid_r)
        os.close(self.pid_r)
        del starting[self.pid_r]
        answer = self.answer
        if answer.startswith(b"pid "):
            kernels[int(answer[4:].strip())] = (self.reply, self.holder)
        else:
            answer = answer or b"error the forked kernel said nothing\n"
        try:
            os.write(self.reply, answer)
        except OSError:
            pass
        if not answer.startswith(b"pid "):
            os.close(self.reply)
            os.close(self.holder)


def enter_sandbox(libc, request, fds, pid_w, env):
    """In the forked process: join the sandbox, then (in its pid namespace) confine this process.
    Returns in the kernel process; the process in between reports the kernel's host pid and ends."""
    import resource
    import signal

    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for target, fd in enumerate(fds[2:5]):
        os.dup2(fd, target)
    n_procs, names, n_seccomp = request["procs"], request["namespaces"], request["seccomp"]
    procs = fds[5 : 5 + n_procs]
    namespaces = fds[5 + n_procs : 5 + n_procs + len(names)]
    programs = []
    for fd in fds[5 + n_procs + len(names) :][:n_seccomp]:
        program = b""
        while True:
            chunk = os.pread(fd, 1 << 16, len(program))
            if not chunk:
                break
            program += chunk
        programs.append(program)
    # Only what this kernel needs stays open: never the zygote's control socket, nor any other
    # kernel's reply socket.
    close_all_but(libc, set(procs) | set(namespaces) | {0, 1, 2, pid_w})
    for fd in procs:
        os.write(fd, b"0\n")
        os.close(fd)
    infinite = resource.RLIM_INFINITY
    for res, soft, hard in request["rlimits"]:
        # Sent as unsigned 64-bit values; Python's infinity is -1.
        soft, hard = (infinite if v >= 1 << 63 else v for v in (soft, hard))
        _, current_hard = resource.getrlimit(res)
        # Never above the zygote's own hard limit (as spawn.rs for bwrap); lowering always works.
        if current_hard != infinite:
            hard = current_hard if hard == infinite else min(hard, current_hard)
        if soft == infinite or (hard != infinite and soft > hard):
            soft = hard
        resource.setrlimit(res, (soft, hard))
    for name, fd in zip(names, namespaces):
        if libc.setns(fd, 0) != 0:
            raise OSError(ctypes_errno(), "cannot join the sandbox's %s namespace" % name)
        os.close(fd)
    kernel = os.fork()
    if kernel:
        os.write(pid_w, b"pid %d\n" % kernel)
        os._exit(0)
    os.close(pid_w)
    os.setsid()
    for cap in range(64):
        if prctl(libc, PR_CAPBSET_DROP, cap, check=False) != 0:
            break
    prctl(libc, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    uid = request.get("uid")
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    drop_capabilities(libc)
    prctl(libc, PR_SET_NO_NEW_PRIVS, 1)
    for program in programs:
        install_seccomp(libc, program)
    prctl(libc, PR_SET_DUMPABLE, 1)
    os.environ.clear()
    os.environ.update(env)
    os.chdir(request["cwd"])
    sys.argv = [request["argv0"]]


SYS_CLOSE_RANGE = 436  # the same number on x86_64 and aarch64


def close_all_but(libc, keep):
    """Close every descriptor not in `keep`, with close_range(2) between the kept ones: the zygote
    holds descriptors of every live kernel, and listing them here would cost each kernel time and
    memory in proportion to how many live."""
    import ctypes

    low = 0
    for fd in sorted(keep) + [None]:
        high = 0xFFFFFFFF if fd is None else fd - 1
        if low <= high and libc.syscall(ctypes.c_long(SYS_CLOSE_RANGE), ctypes.c_uint(low), ctypes.c_uint(high), ctypes.c_uint(0)) != 0:
            for stale in [int(n) for n in os.listdir("/proc/self/fd")]:  # a kernel before Linux 5.9
                if stale >= low and stale <= high:
                    try:
                        os.close(stale)
                    except OSError:
                        pass
        if fd is not None:
            low = fd + 1


def ctypes_errno():
    import ctypes

    return ctypes.get_errno()


def prctl(libc, option, arg=0, check=True):
    import ctypes

    result = libc.prctl(ctypes.c_int(option), ctypes.c_ulong(arg), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))
    if result != 0 and check:
        raise OSError(ctypes_errno(), "prctl(%d) failed" % option)
    return result


def drop_capabilities(libc):
    import ctypes

    header = (ctypes.c_uint32 * 2)(CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()
    if libc.capset(header, data) != 0:
        raise OSError(ctypes_errno(), "cannot drop the capabilities")


def install_seccomp(libc, program):
    import ctypes

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    if not program or len(program) % 8:
        raise OSError(0, "a seccomp program of %d bytes" % len(program))
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = SockFprog(len(program) // 8, ctypes.addressof(buffer))
    if libc.prctl(ctypes.c_int(PR_SET_SECCOMP), ctypes.c_ulong(SECCOMP_MODE_FILTER), ctypes.byref(fprog),
                  ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:
        raise OSError(ctypes_errno(), "cannot install the seccomp filter")


def main():
    kernel = Kernel()
    # `_signal`, the C part of `signal`, which would import `enum` before `ready`.
    _signal.signal(_signal.SIGINT, kernel.on_interrupt)
    kernel.serve()


if __name__ == "__main__":
    main()
