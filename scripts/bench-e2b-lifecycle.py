"""Pause, resume and fork latency of `waxell-sandbox serve` through E2B's Python SDK: an idle Python
kernel, and one holding a large pandas DataFrame. Median and spread of N rounds each, which pause
the server gave (`Waxell-Pause`: memory where it keeps it, else filesystem: then the DataFrame is
lost on resume), and with WAXELL_STATE_DIR (the server's --state-dir) the bytes one pause keeps.
WAXELL_BENCH_MEMORY=0 asks for the files-only pause.

    E2B_API_URL=http://127.0.0.1:3000 E2B_SANDBOX_URL=http://127.0.0.1:3000 E2B_API_KEY=... \\
        python scripts/bench-e2b-lifecycle.py [ROUNDS] [DATAFRAME_MB]
"""

import os
import sys

import httpx
from e2b_code_interpreter import Sandbox
from e2b_bench_timing import summary, timed

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 10
DATAFRAME_MB = int(sys.argv[2]) if len(sys.argv) > 2 else 200
API = os.environ["E2B_API_URL"]
HEADERS = {"X-API-KEY": os.environ["E2B_API_KEY"]}
# E2B's default pause (memory where the server keeps it), or the files-only one.
PAUSE = {} if os.environ.get("WAXELL_BENCH_MEMORY", "1") != "0" else {"memory": False}
KINDS = set()


def pause(sbx):
    r = httpx.post(f"{API}/sandboxes/{sbx.sandbox_id}/pause", headers=HEADERS, json=PAUSE, timeout=120)
    r.raise_for_status()
    KINDS.add(r.headers.get("waxell-pause", "?"))


def kept_bytes(sandbox_id):
    """What a paused sandbox holds in the state directory, if it is known."""
    root = os.environ.get("WAXELL_STATE_DIR")
    if not root:
        return None
    total = 0
    for path, _, files in os.walk(os.path.join(root, "paused", sandbox_id)):
        total += sum(os.lstat(os.path.join(path, f)).st_size for f in files)
    return total


def rounds(sbx, setup=None):
    pauses, resumes = [], []
    for _ in range(ROUNDS):
        if setup:
            setup(sbx)
        pauses.append(timed(lambda: pause(sbx)))
        resumes.append(timed(lambda: httpx.post(f"{API}/sandboxes/{sbx.sandbox_id}/connect", headers=HEADERS,
                                                json={"timeout": 300}, timeout=120).raise_for_status()))
    return pauses, resumes


def main():
    sbx = Sandbox.create(timeout=600)
    try:
        sbx.run_code("1")
        pauses, resumes = rounds(sbx)
        pause(sbx)
        idle_bytes = kept_bytes(sbx.sandbox_id)
        sbx.connect(timeout=600)
        print(f"idle kernel ({'/'.join(sorted(KINDS))} pause): pause {summary(pauses)}; resume (connect) "
              f"{summary(resumes)}; kept {idle_bytes} bytes")
        sbx.files.write("/home/user/data.bin", b"\1" * (1 << 20))
        forks = []
        fork_times = [timed(lambda: forks.extend(sbx.fork())) for _ in range(ROUNDS)]
        for fork in forks:
            fork.kill()
        print(f"fork (1 MiB of files): {summary(fork_times)}")

        rows = DATAFRAME_MB * (1 << 20) // 16

        def load(s):
            s.run_code(f"import pandas as pd, numpy as np\ndf = pd.DataFrame({{'a': np.arange({rows}), "
                       f"'b': np.ones({rows})}})")

        load(sbx)
        memory = sbx.get_metrics()[0].mem_used
        KINDS.clear()
        pauses, resumes = rounds(sbx)
        kept = sbx.run_code("df.shape[0]")
        kept = "kept" if kept.error is None and kept.text == str(rows) else "not kept"
        pause(sbx)
        df_bytes = kept_bytes(sbx.sandbox_id)
        sbx.connect(timeout=600)
        if kept != "kept":
            pauses, resumes = rounds(sbx, setup=load)
        print(f"kernel holding a {DATAFRAME_MB} MB DataFrame (mem_used {memory >> 20} MiB before pause, "
              f"{'/'.join(sorted(KINDS))} pause): pause {summary(pauses)}; resume {summary(resumes)}; "
              f"the DataFrame is {kept}; kept {df_bytes} bytes")
        sbx.pause()
        detail = httpx.get(f"{API}/v2/sandboxes", headers=HEADERS).json()
        print(f"paused sandboxes listed: {sum(1 for d in detail if d['state'] == 'paused')}")
    finally:
        sbx.kill()


if __name__ == "__main__":
    main()
