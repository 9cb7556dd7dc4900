#!/usr/bin/env python3
"""The rows of docs/performance.md's table, as a Python or shell bench writes them: one JSON file per row
(<id>.json) in WAXELL_BENCH_ROWS_DIR, else $CARGO_TARGET_DIR/bench-rows, else target/bench-rows. The same
fields as the Rust benches' tests/src/bench_row.rs; scripts/bench-all.sh renders the table from them.

From Python:  import bench_rows; load = bench_rows.load_1min(); ...; bench_rows.emit(rows, "[B]", load)
From a shell: python3 scripts/bench_rows.py --reproduce '[B]' --load-start "$load" --id ... --what ... \\
                  --measured ... --anchor ... --ratio ... --target ... --verdict met|missed|none [--quick]
              python3 scripts/bench_rows.py --print-load    (the 1-minute load average, for --load-start)
"""
import argparse
import datetime
import json
import os
import re
import sys

FIELDS = ("id", "what", "measured", "anchor", "ratio", "target", "verdict")


def load_1min():
    try:
        with open("/proc/loadavg") as f:
            return f.read().split()[0]
    except OSError:
        return "unknown"


def rows_dir():
    if os.environ.get("WAXELL_BENCH_ROWS_DIR"):
        return os.environ["WAXELL_BENCH_ROWS_DIR"]
    target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "target")
    return os.path.join(target, "bench-rows")


def emit(rows, reproduce, load_start, quick=False):
    """Write each row (a dict with FIELDS) with the load at load_start and now, and today's date (UTC)."""
    load = f"{load_start}-{load_1min()}"
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    directory = rows_dir()
    os.makedirs(directory, exist_ok=True)
    for row in rows:
        missing = [f for f in FIELDS if not str(row.get(f, "")).strip()]
        if missing:
            raise ValueError(f"bench row {row.get('id')!r}: no {', '.join(missing)} (write 'none' if it has none)")
        if not re.fullmatch(r"[a-z0-9._-]+", row["id"]):
            raise ValueError(f"bench row id {row['id']!r}: expected [a-z0-9._-]+")
        if row["verdict"] not in ("met", "missed", "none"):
            raise ValueError(f"bench row {row['id']!r}: verdict {row['verdict']!r}, expected met, missed or none")
        out = {f: row[f] for f in FIELDS}
        out.update(load=load, date=date, reproduce=reproduce, quick=quick)
        with open(os.path.join(directory, row["id"] + ".json"), "w") as f:
            json.dump(out, f, indent=2, ensure_ascii=False)
            f.write("\n")
    print(f"bench rows: {len(rows)} row(s) of {reproduce} written to {directory} (load {load})")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--print-load", action="store_true")
    parser.add_argument("--reproduce")
    parser.add_argument("--load-start")
    parser.add_argument("--quick", action="store_true")
    for f in FIELDS:
        parser.add_argument("--" + f)
    args = parser.parse_args()
    if args.print_load:
        print(load_1min())
        return
    if not args.reproduce or not args.load_start:
        parser.error("--reproduce and --load-start are required")
    emit([{f: getattr(args, f) or "" for f in FIELDS}], args.reproduce, args.load_start, args.quick)


if __name__ == "__main__":
    try:
        main()
    except ValueError as e:
        sys.exit(f"bench_rows.py: {e}")
