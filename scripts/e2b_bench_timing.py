"""Timing helpers shared by the E2B SDK benches in this folder (bench-e2b-*.py)."""

import statistics
import time


def summary(samples):
    """Median, min, max and count of durations in seconds, in milliseconds."""
    s = sorted(samples)
    return f"median {statistics.median(s) * 1000:.2f} ms (min {s[0] * 1000:.2f}, max {s[-1] * 1000:.2f}, n={len(s)})"


def timed(call):
    """Seconds `call()` took."""
    start = time.perf_counter()
    call()
    return time.perf_counter() - start
