"""The check helpers the E2B SDK scripts of tests/ share (e2b_conformance.py, e2b_files.py,
e2b_kernel.py): one `ok` / `FAIL` line per check, a failed step reported instead of ending the
script, and `finish()` printing the verdict the Rust tests look for."""

import sys
import traceback

failures = []


def check(name, condition, detail=""):
    if condition:
        print(f"ok   - {name}")
    else:
        print(f"FAIL - {name}: {detail}")
        failures.append(name)


def step(name, fn):
    """Run one step; an exception fails it (and is reported) instead of ending the script."""
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - every SDK error is a failure here
        print(f"FAIL - {name}: {type(e).__name__}: {e}")
        traceback.print_exc()
        failures.append(name)
        return None


def finish():
    """Exit 1 naming the failed checks, or print "all checks passed"."""
    if failures:
        print(f"{len(failures)} check(s) failed: {', '.join(failures)}")
        sys.exit(1)
    print("all checks passed")
