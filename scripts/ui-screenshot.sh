#!/usr/bin/env bash
# Refresh docs/ui-run.png, the screenshot in docs/ui.md: the demo's dry run imported by `waxell ui`, its run
# page with the sandbox cell that drew the chart open, as headless chromium (Debian's) renders it.
# Everything stays on 127.0.0.1; chromium runs with a fresh profile and no background traffic.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root="$(pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
out="${1:-$root/docs/ui-run.png}"

bash scripts/setup-browser.sh
cargo build -q -p waxell --features ui --bin waxell
cargo build -q -p demos

work="$(mktemp -d)"
ui_pid=""
cleanup() {
    if [ -n "$ui_pid" ]; then kill "$ui_pid" 2>/dev/null || true; wait "$ui_pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

(cd "$work" && env -u OTEL_EXPORTER_OTLP_ENDPOINT -u OTEL_EXPORTER_OTLP_TRACES_ENDPOINT -u WAXELL_OTEL_ENDPOINT \
    -u WAXELL_API_URL -u WAXELL_API_KEY -u OPENAI_API_KEY WAXELL_TRACE_FILE="$work/traces/demo.jsonl" \
    "$target/debug/demos" --dry-run --quiet --output-dir "$work/out" >/dev/null 2>&1)

port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
"$target/debug/waxell" ui --listen "127.0.0.1:$port" --no-otlp --follow "$work/traces" \
    --store "$work/store.redb" >"$work/ui.log" 2>&1 &
ui_pid=$!

# The run, once its root span is in, and the cell whose span holds the chart.
url=""
for _ in $(seq 1 100); do
    url="$(curl -sf "http://127.0.0.1:$port/api/runs" | python3 -c '
import json, sys, urllib.request
port = sys.argv[1]
runs = [r for r in json.load(sys.stdin)["runs"] if r.get("root_seen")]
if runs:
    trace = runs[0]["trace_id"]
    spans = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/api/runs/{trace}"))["spans"]
    cell = next(s["span_id"] for s in spans if any(k.endswith(".png") for k in s["attributes"]))
    print(f"http://127.0.0.1:{port}/runs/{trace}#span={cell}")
' "$port" 2>/dev/null || true)"
    [ -n "$url" ] && break
    sleep 0.2
done
[ -n "$url" ] || { echo "ui-screenshot: the demo's run did not arrive" >&2; cat "$work/ui.log" >&2; exit 1; }

chromium --headless --no-sandbox --disable-gpu --disable-background-networking --disable-component-update \
    --disable-sync --no-first-run --user-data-dir="$work/profile" --hide-scrollbars --window-size=1500,1150 \
    --virtual-time-budget=8000 --screenshot="$out" "$url" 2>/dev/null
echo "ui-screenshot: wrote $out ($url)" >&2
