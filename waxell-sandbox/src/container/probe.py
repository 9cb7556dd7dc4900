# What the sandbox image carries (run once per image when a container backend starts): for each
# path in argv after the first, its real path (symlinks resolved, as /etc/alternatives has them) or null when
# missing, and whether the Python modules the kernel uses when present (IPython, E2B's chart
# extractor) can be imported. It also compiles the kernel (its source is argv[1]; compiling runs
# none of it) into the argument the host's kernel boot takes: "@" and the code object, marshalled,
# compressed and base64-encoded (null when this Python cannot). One JSON object on stdout.
import binascii
import importlib.util
import json
import marshal
import os
import sys
import zlib

files = {path: (os.path.realpath(path) if os.path.exists(path) else None) for path in sys.argv[2:]}
modules = {}
for name in ("IPython", "e2b_charts"):
    try:
        modules[name] = importlib.util.find_spec(name) is not None
    except Exception:
        modules[name] = False
try:
    code = compile(sys.argv[1], "/opt/waxell/kernel.py", "exec")
    kernel = "@" + binascii.b2a_base64(zlib.compress(marshal.dumps(code), 9), newline=False).decode()
except Exception:
    kernel = None
print(json.dumps({"files": files, "modules": modules, "kernel": kernel}))
