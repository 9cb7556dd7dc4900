# What the sandbox image carries (run once per image when a container backend starts): for each
# path in argv, its real path (symlinks resolved, as /etc/alternatives has them) or null when
# missing, and whether the Python modules the kernel uses when present (IPython, E2B's chart
# extractor) can be imported. One JSON object on stdout.
import importlib.util
import json
import os
import sys

files = {path: (os.path.realpath(path) if os.path.exists(path) else None) for path in sys.argv[1:]}
modules = {}
for name in ("IPython", "e2b_charts"):
    try:
        modules[name] = importlib.util.find_spec(name) is not None
    except Exception:
        modules[name] = False
print(json.dumps({"files": files, "modules": modules}))
