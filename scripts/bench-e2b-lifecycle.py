"""Pause, resume and fork latency of `waxell-sandbox serve` through E2B's Python SDK: an idle Python
kernel, and one holding a large pandas DataFrame (lost on resume: pauses keep files only). Median
and spread of N rounds each, and the bytes one pause saved.

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


def rounds(sbx, setup=None):
    pauses, resumes = [], []
    for _ in range(ROUNDS):
        if setup:
            setup(sbx)
        pauses.append(timed(lambda: httpx.post(f"{API}/sandboxes/{sbx.sandbox_id}/pause", headers=HEADERS,
                                               json={"memory": False}, timeout=120).raise_for_status()))
        resumes.append(timed(lambda: httpx.post(f"{API}/sandboxes/{sbx.sandbox_id}/connect", headers=HEADERS,
                                                json={"timeout": 300}, timeout=120).raise_for_status()))
    return pauses, resumes


def main():
    sbx = Sandbox.create(timeout=600)
    try:
        sbx.run_code("1")
        pauses, resumes = rounds(sbx)
        print(f"idle kernel: pause {summary(pauses)}; resume (connect) {summary(resumes)}")
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
        pauses, resumes = rounds(sbx, setup=load)
        print(f"kernel holding a {DATAFRAME_MB} MB DataFrame (mem_used {memory >> 20} MiB before pause): "
              f"pause {summary(pauses)}; resume {summary(resumes)}; the DataFrame is not kept")
        sbx.pause()
        detail = httpx.get(f"{API}/v2/sandboxes", headers=HEADERS).json()
        print(f"paused sandboxes listed: {sum(1 for d in detail if d['state'] == 'paused')}")
    finally:
        sbx.kill()


if __name__ == "__main__":
    main()
