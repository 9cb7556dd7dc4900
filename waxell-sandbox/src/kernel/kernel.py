"""waxell sandbox kernel: one stateful Python interpreter speaking JSON lines.

Host -> kernel (fd 0 at start):  execute {id, code, env}, setenv {env}; interrupts are SIGINT from the host
Kernel -> host (fd 1 at start):   ready, stream {id, name, text}, result {id, is_main, data},
                                  error {id, name, value, traceback}, done {id, execution_count, truncated}
The original fds 0/1 are moved to private protocol fds; fd 0 becomes /dev/null and fds 1/2 become
pipes drained by pump threads, so C-level and subprocess output is captured too.
The host treats everything here as untrusted: user code can write to the protocol fd. It accepts
`done` only while it sees this process's main thread blocked reading the request pipe (the fd
`ready` names), which a frame written by cell code cannot fake; see docs/sandbox.md.
"""

import builtins
import codecs
import io
import json
import os
import signal
import sys
import threading
import types
import warnings

# Needed only once code runs: imported by a thread after `ready` so start-up is not delayed (a
# module import in the main thread waits for the thread's import to finish, never duplicates it).
DEFERRED_IMPORTS = ("ast", "linecache", "traceback", "base64")

KERNEL_FILE = __file__
OUTPUT_LIMIT = int(os.environ.pop("SBX_OUTPUT_LIMIT", str(1 << 20)))
RESULT_LIMIT = int(os.environ.pop("SBX_RESULT_LIMIT", str(4 << 20)))
PRELOAD = [m for m in os.environ.pop("SBX_PRELOAD", "").split(",") if m]
# Written to fds 1/2 after a cell; the pumps pass everything before it on, then signal the marker.
SYNC_MARKER = b"\x00\x1bwaxell-sync\x1b\x00"

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


class Kernel:
    def __init__(self):
        # Read by the main thread only: between cells it blocks here, which the host checks.
        self.proto_in = os.fdopen(os.dup(0), "rb")
        self.proto_out = os.dup(1)
        os.set_inheritable(self.proto_out, False)
        devnull = os.open("/dev/null", os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        self.send_lock = threading.Lock()
        self.state_lock = threading.Lock()
        self.current_id = None
        self.executing = False
        self.output_chars = 0
        self.truncated = False
        self.stream_truncated = False
        self.execution_count = 0
        self.pid = os.getpid()
        self.synced = {1: threading.Event(), 2: threading.Event()}
        for fd, name in ((1, "stdout"), (2, "stderr")):
            r, w = os.pipe()
            os.dup2(w, fd)
            os.close(w)
            threading.Thread(target=self.pump, args=(r, fd, name), daemon=True).start()
        sys.stdout = StreamWriter(self, "stdout", 1)
        sys.stderr = StreamWriter(self, "stderr", 2)
        self.main = types.ModuleType("__main__")
        self.main.__dict__["__builtins__"] = builtins
        sys.modules["__main__"] = self.main

    # ---- protocol -------------------------------------------------------------------------------
    def send(self, msg):
        data = json.dumps(msg, ensure_ascii=False).encode("utf-8", "replace") + b"\n"
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
        for name in PRELOAD:
            try:
                __import__(name)
            except Exception:
                pass
        self.send(
            {
                "type": "ready",
                "pid": os.getpid(),
                "uid": os.getuid(),
                "gid": os.getgid(),
                "prefix": sys.prefix,
                "base_prefix": sys.base_prefix,
                "version": sys.version.split()[0],
                "request_fd": self.proto_in.fileno(),
            }
        )
        # Started after `ready`: a second thread wanting the GIL would delay it by up to a switch
        # interval.
        threading.Thread(target=lambda: [__import__(m) for m in DEFERRED_IMPORTS], daemon=True).start()
        pending_id = None
        while True:
            try:
                msg = self.next_request()
                kind = msg.get("type")
                if kind == "setenv":
                    for k, v in dict(msg.get("env") or {}).items():
                        os.environ[str(k)] = str(v)
                    if msg.get("cwd"):
                        try:
                            os.chdir(str(msg["cwd"]))
                        except OSError as e:
                            self.emit_stream("stderr", "[cannot change directory: %s]\n" % e)
                elif kind == "execute":
                    pending_id = msg.get("id")
                    self.execute(pending_id, str(msg.get("code", "")), dict(msg.get("env") or {}))
                    pending_id = None
            except KeyboardInterrupt:
                # An interrupt that landed outside user code: finish the execution it was meant for.
                if pending_id is not None:
                    self.finish(pending_id, None)
                    pending_id = None

    def execute(self, exec_id, code, env):
        self.execution_count += 1
        with self.state_lock:
            self.current_id = exec_id
            self.output_chars = 0
            self.truncated = False
            self.stream_truncated = False
        saved_env = {k: os.environ.get(k) for k in env}
        os.environ.update({str(k): str(v) for k, v in env.items()})
        error = None
        try:
            with self.state_lock:
                self.executing = True
            # From here a KeyboardInterrupt ends this cell with a `done`. The host interrupts only
            # after this frame: earlier, between reading the request and starting it, the interrupt
            # would drop the request and no `done` would ever come.
            self.send({"type": "started", "id": exec_id})
            try:
                value = self.run_cell(code)
            finally:
                if os.getpid() != self.pid:
                    # A process forked by the cell ran off its end into the kernel: it must not
                    # answer for the kernel (its `done` would end the execution early).
                    os._exit(0)
                with self.state_lock:
                    self.executing = False
            if value is not None:
                self.main.__dict__["_"] = value
                self.send_result(exec_id, value, True)
        except BaseException as e:  # noqa: B902 - exit() and KeyboardInterrupt end only the cell
            error = self.error_message(exec_id, e)
        finally:
            for k, v in saved_env.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        self.emit_figures(exec_id)
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

    def run_cell(self, code):
        import ast
        import linecache

        filename = "<cell-%d>" % self.execution_count
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        tree = ast.parse(code, filename, "exec")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        ns = self.main.__dict__
        exec(compile(tree, filename, "exec"), ns)
        if last is not None:
            return eval(compile(last, filename, "eval"), ns)
        return None

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
    def send_result(self, exec_id, value, is_main):
        data = mime_bundle(value)
        size = sum(len(v) if isinstance(v, str) else 0 for v in data.values())
        if size > RESULT_LIMIT:
            data = {"text/plain": "[result dropped: %d characters exceed the limit]" % size}
            with self.state_lock:
                self.truncated = True
        try:
            self.send({"type": "result", "id": exec_id, "is_main": is_main, "data": data})
        except (TypeError, ValueError):
            self.send({"type": "result", "id": exec_id, "is_main": is_main, "data": {"text/plain": data["text/plain"]}})

    def emit_figures(self, exec_id):
        plt = sys.modules.get("matplotlib.pyplot")
        if plt is None:
            return
        try:
            for num in plt.get_fignums():
                self.send_result(exec_id, plt.figure(num), False)
        except Exception as e:
            self.emit_stream("stderr", "[figure export failed: %s]\n" % safe_str(e))
        finally:
            try:
                plt.close("all")
            except Exception:
                pass


class StreamWriter(io.TextIOBase):
    """sys.stdout / sys.stderr: each write becomes a stream message at once."""

    def __init__(self, kernel, name, fd):
        self._kernel = kernel
        self._name = name
        self._fd = fd

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
        self._kernel.emit_stream(self._name, text)
        return len(text)

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


def mime_bundle(obj):
    import base64

    try:
        data = {"text/plain": repr(obj)}
    except Exception as e:
        data = {"text/plain": "<repr failed: %s>" % safe_str(e)}
    cls = type(obj)
    if cls.__module__ == "matplotlib.figure" and hasattr(obj, "savefig"):
        buf = io.BytesIO()
        obj.savefig(buf, format="png", bbox_inches="tight")
        data["image/png"] = base64.b64encode(buf.getvalue()).decode("ascii")
        return data
    for mime, method in MIME_METHODS:
        fn = getattr(cls, method, None)
        if not callable(fn):
            continue
        try:
            value = fn(obj)
        except Exception:
            continue
        if isinstance(value, tuple):
            value = value[0]
        if value is None:
            continue
        if isinstance(value, (bytes, bytearray)):
            value = base64.b64encode(bytes(value)).decode("ascii")
        data[mime] = value
    return data


def main():
    warnings.filterwarnings("ignore", message=".*non-interactive.*")
    kernel = Kernel()
    signal.signal(signal.SIGINT, kernel.on_interrupt)
    kernel.serve()


if __name__ == "__main__":
    main()
