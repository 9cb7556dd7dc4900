#!/usr/bin/env bash
# Runs every side-by-side comparison of docs/performance.md and rewrites its table from what they measured.
#
#   bash scripts/bench-all.sh                  every bench, full rounds; rewrites the table
#   bash scripts/bench-all.sh --only O1,T:exit one tag ([O1]) and one case of a tag ([T] `exit`)
#   bash scripts/bench-all.sh --quick          fewer rounds; prints the table, leaves the docs alone
#   bash scripts/bench-all.sh --quick --write  ... and rewrites the table anyway (rows say "quick run")
#   bash scripts/bench-all.sh --list           the selectors and what each needs
#
# Each bench writes its rows as JSON (one file per row id) into the rows directory (target/bench-rows, or
# target/bench-rows-quick with --quick); `bench-table` (tests/src/bin/bench-table.rs) merges them into the
# table between <!-- bench-all:begin --> and <!-- bench-all:end -->. A selected bench whose prerequisite is
# missing is skipped with the reason printed, and its rows keep their figures and date, marked not rerun.
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
target="${CARGO_TARGET_DIR:-$repo/target}"
doc="$repo/docs/performance.md"

all=(O1 O2 S:local S:modes S:containers S:docker-engine I D T F L U B)
usage() { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; }
list() {
    cat <<'EOF'
O1               cargo bench -p waxell --bench overhead (criterion + interleaved wall time)
O2               the overhead bench under valgrind --tool=callgrind (instructions per call); needs valgrind
S:local          cargo bench -p waxell-sandbox --bench sandbox; needs root and bwrap (scripts/setup-sandbox.sh)
S:modes          the same, root vs rootless; needs root and WAXELL_BENCH_ROOTLESS_USER=<an unprivileged user>
S:containers     the container backend on Podman; needs DOCKER_HOST (eval "$(bash scripts/setup-container.sh)")
S:docker-engine  the same on Docker Engine; needs WAXELL_DOCKER_ENGINE_HOST (same script)
I                IPython's cost in containers; needs DOCKER_HOST and WAXELL_BENCH_PLAIN_IMAGE=<image without IPython>
D                scripts/bench-density.py: live sandboxes per machine through E2B's Python SDK against
                 waxell-sandbox serve; needs root, bwrap and the E2B peer venv (scripts/setup-e2b-peer.sh);
                 also on Docker Engine with WAXELL_DOCKER_ENGINE_HOST
T                cargo bench -p waxell-tests --bench suite; needs root and bwrap (scripts/setup.sh). One case:
                 T:run_code, T:concurrent, T:export, T:collector_down, T:demo, T:exit
F                the fail_open test's overhead table and its million-span test (release)
L                cargo bench -p waxell-tests --bench llm_integrations
U                cargo bench -p waxell --features ui --bench ui, the ingest case (waxell ui's OTLP receiver and store)
B                bash scripts/bench-build-time.sh (two clean builds per round)
EOF
}

quick=0 write=0 only=""
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) quick=1 ;;
        --write) write=1 ;;
        --only) only="${2:?--only needs a list, e.g. O1,T:exit}"; shift ;;
        --only=*) only="${1#--only=}" ;;
        --list) list; exit 0 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "bench-all: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
[ "$quick" = 1 ] || write=1

# The selectors to run, in the order of `all`; `S` selects every S:*, `T` the whole suite.
selected=()
if [ -z "$only" ]; then
    selected=("${all[@]}")
else
    IFS=',' read -r -a wanted <<<"$only"
    for w in "${wanted[@]}"; do
        w="${w// /}"
        case "$w" in
            S) selected+=(S:local S:modes S:containers S:docker-engine) ;;
            O1|O2|S:local|S:modes|S:containers|S:docker-engine|I|D|T|F|L|U|B) selected+=("$w") ;;
            T:run_code|T:concurrent|T:export|T:collector_down|T:demo|T:exit) selected+=("$w") ;;
            *) echo "bench-all: unknown selector $w (see --list)" >&2; exit 2 ;;
        esac
    done
fi

rows="${WAXELL_BENCH_ROWS_DIR:-$target/bench-rows$([ "$quick" = 1 ] && echo -quick)}"
rm -rf "$rows" && mkdir -p "$rows"
export WAXELL_BENCH_ROWS_DIR="$rows" CARGO_TARGET_DIR="$target"
log="$rows/log"
mkdir -p "$log"
# Quick mode: the benches' own short modes.
q=() && [ "$quick" = 1 ] && q=(-- --quick)
[ "$quick" = 1 ] && export WAXELL_BENCH_QUICK=1

echo "bench-all: $([ "$quick" = 1 ] && echo quick || echo full) run of ${selected[*]}; load $(cut -d' ' -f1-3 /proc/loadavg); rows in $rows"
start_all=$(date +%s)
echo "== build (release, once): demos, waxell-tests binaries"
if ! cargo build --release -p demos -p waxell-tests --bins; then
    echo "bench-all: the release build failed" >&2
    exit 1
fi
table="$target/release/bench-table"

is_root() { [ "$(id -u)" = 0 ]; }
has() { command -v "$1" >/dev/null 2>&1; }
# E2B's official Python SDK (scripts/setup-e2b-peer.sh), which [D] drives.
peer_python="${WAXELL_E2B_PEER_VENV:-$HOME/.local/share/waxell/e2b-peer-venv}/bin/python"
# Why a selector cannot run here, or nothing when it can.
missing() {
    case "$1" in
        O2) has valgrind || echo "valgrind is not installed" ;;
        S:local|T|T:*) if ! is_root; then echo "needs root (the local sandbox backend)"; elif ! has bwrap; then echo "bwrap is not installed (scripts/setup.sh)"; fi ;;
        S:modes) if ! is_root; then echo "needs root"; elif [ -z "${WAXELL_BENCH_ROOTLESS_USER:-}" ]; then echo "WAXELL_BENCH_ROOTLESS_USER is not set"; fi ;;
        S:containers) [ -n "${DOCKER_HOST:-}" ] || echo "no container engine: DOCKER_HOST is not set (eval \"\$(bash scripts/setup-container.sh)\")" ;;
        S:docker-engine) [ -n "${WAXELL_DOCKER_ENGINE_HOST:-}" ] || echo "no Docker Engine: WAXELL_DOCKER_ENGINE_HOST is not set (eval \"\$(bash scripts/setup-container.sh)\")" ;;
        I) if [ -z "${DOCKER_HOST:-}" ]; then echo "no container engine: DOCKER_HOST is not set"; elif [ -z "${WAXELL_BENCH_PLAIN_IMAGE:-}" ]; then echo "WAXELL_BENCH_PLAIN_IMAGE (an image without IPython) is not set"; fi ;;
        D) if ! is_root; then echo "needs root (the local sandbox backend)"; elif ! has bwrap; then echo "bwrap is not installed (scripts/setup.sh)"; elif [ ! -x "$peer_python" ]; then echo "no E2B peer venv at $peer_python (scripts/setup-e2b-peer.sh)"; fi ;;
    esac
}

# Instructions per call under callgrind: (Ir(2n) - Ir(n)) / n, so the set-up cancels out.
callgrind() {
    local exe case=$1 n=$2 a b
    exe=$(cargo bench -p waxell --bench overhead --no-run --message-format=json 2>/dev/null |
        python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "overhead" and m.get("executable"): print(m["executable"])' | tail -1)
    [ -n "$exe" ] || { echo "no overhead bench executable" >&2; return 1; }
    total() {
        local out="$log/callgrind.$case.$1"
        WAXELL_BENCH_ONLY=$case WAXELL_BENCH_CALLS=$1 valgrind --tool=callgrind --callgrind-out-file="$out" "$exe" >/dev/null 2>&1 || return 1
        awk '/^(summary|totals):/ {print $2; exit}' "$out"
    }
    a=$(total "$n") && b=$(total $((2 * n))) || return 1
    echo $(((b - a) / n))
}

run_o2() {
    local n=100000 load hand wax trc
    [ "$quick" = 1 ] && n=5000
    load=$(python3 scripts/bench_rows.py --print-load)
    cargo bench -p waxell --bench overhead --no-run || return 1
    hand=$(callgrind hand $n) && wax=$(callgrind waxell $n) && trc=$(callgrind tracing $n) || return 1
    echo "callgrind, instructions per call ($n and $((2 * n)) calls): hand-written $hand, #[tool] $wax, tracing $trc"
    local extra=() && [ "$quick" = 1 ] && extra=(--quick)
    fmt() { python3 -c 'import sys; print(f"{int(sys.argv[1]):,}")' "$1"; }
    python3 scripts/bench_rows.py --reproduce "[O2]" --load-start "$load" "${extra[@]}" \
        --id overhead.tool-vs-hand.instr \
        --what "one \`#[tool]\` call, SDK on, batch processor, no-op exporter (instructions per call)" \
        --measured "**$(fmt "$wax") instr**" \
        --anchor "hand-written OpenTelemetry span, same 14 attributes: $(fmt "$hand") instr" \
        --ratio "**$(awk -v a="$wax" -v b="$hand" 'BEGIN {printf "%.2f", a / b}')**" --target "<= 1.2x" \
        --verdict "$(awk -v a="$wax" -v b="$hand" 'BEGIN {print (a / b <= 1.2 ? "met" : "missed")}')" || return 1
    python3 scripts/bench_rows.py --reproduce "[O2]" --load-start "$load" "${extra[@]}" \
        --id overhead.tool-vs-tracing.instr \
        --what "one \`#[tool]\` call vs \`#[tracing::instrument]\` via \`tracing-opentelemetry\` (instructions per call)" \
        --measured "$(fmt "$wax") instr" --anchor "tracing: $(fmt "$trc") instr" \
        --ratio "**$(awk -v a="$wax" -v b="$trc" 'BEGIN {printf "%.2f", a / b}')**" --target "<= 0.6x" \
        --verdict "$(awk -v a="$wax" -v b="$trc" 'BEGIN {print (a / b <= 0.6 ? "met" : "missed")}')"
}

run() {
    case "$1" in
        O1) cargo bench -p waxell --bench overhead "${q[@]}" ;;
        O2) run_o2 ;;
        S:local) env -u WAXELL_BENCH_ROOTLESS_USER cargo bench -p waxell-sandbox --bench sandbox "${q[@]}" ;;
        # A filter no criterion group matches: only the mode comparison runs.
        S:modes) cargo bench -p waxell-sandbox --bench sandbox -- no-such-bench ;;
        S:containers) env -u WAXELL_BENCH_ROOTLESS_USER WAXELL_BENCH_ENGINE=podman \
            cargo bench -p waxell-sandbox --features container --bench sandbox -- side_by_side ;;
        S:docker-engine) env -u WAXELL_BENCH_ROOTLESS_USER WAXELL_BENCH_ENGINE=docker-engine \
            DOCKER_HOST="$WAXELL_DOCKER_ENGINE_HOST" WAXELL_RUNSC_DOCKER_HOST="$WAXELL_DOCKER_ENGINE_HOST" \
            cargo bench -p waxell-sandbox --features container --bench sandbox -- side_by_side ;;
        I) cargo bench -p waxell-sandbox --features container --bench image ;;
        # The serve binary just built ($CARGO_TARGET_DIR/release), not one WAXELL_SANDBOX_BIN names.
        D) local extra=() && [ "$quick" = 1 ] && extra=(--quick)
            cargo build --release -p waxell-sandbox --features server,container &&
                env -u WAXELL_SANDBOX_BIN "$peer_python" scripts/bench-density.py "${extra[@]}" ;;
        T) env -u WAXELL_BENCH_ONLY cargo bench -p waxell-tests --bench suite "${q[@]}" ;;
        T:*) WAXELL_BENCH_ONLY="${1#T:}" cargo bench -p waxell-tests --bench suite "${q[@]}" ;;
        F) local runs=() && [ "$quick" = 1 ] && runs=(WAXELL_OVERHEAD_RUNS=200)
            env "${runs[@]}" cargo test --release -p waxell-tests --test fail_open -- \
                --ignored --exact overhead_table --nocapture &&
                cargo test --release -p waxell-tests --test fail_open -- --exact --nocapture \
                    collector_down_a_million_spans_keep_memory_bounded_and_every_drop_is_counted ;;
        L) cargo bench -p waxell-tests --bench llm_integrations "${q[@]}" ;;
        U) WAXELL_BENCH_ONLY=ingest cargo bench -p waxell --features ui --bench ui "${q[@]}" ;;
        B) bash scripts/bench-build-time.sh "$([ "$quick" = 1 ] && echo 1 || echo 2)" ;;
    esac
}

failed=0
summary=()
for sel in "${selected[@]}"; do
    why="$(missing "$sel")"
    if [ -n "$why" ]; then
        echo "== $sel: SKIPPED, $why (its rows keep their figures, marked not rerun)"
        printf '%s\t%s\n' "$sel" "$why" >>"$rows/skipped.tsv"
        summary+=("$sel: skipped ($why)")
        continue
    fi
    echo "== $sel (load $(cut -d' ' -f1 /proc/loadavg))"
    t0=$(date +%s)
    if run "$sel" 2>&1 | tee "$log/${sel/:/-}.log"; then
        echo "$sel" >>"$rows/ran.txt"
        summary+=("$sel: $(($(date +%s) - t0)) s")
    else
        failed=1
        echo "== $sel FAILED (log: $log/${sel/:/-}.log)"
        printf '%s\t%s\n' "$sel" "the bench failed on $(date -u +%F)" >>"$rows/skipped.tsv"
        summary+=("$sel: FAILED after $(($(date +%s) - t0)) s")
    fi
done

echo
echo "bench-all: done in $(($(date +%s) - start_all)) s; load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '  %s\n' "${summary[@]}"
if [ "$write" = 1 ]; then
    "$table" render "$rows" "$doc" --write && "$table" check "$doc" || failed=1
else
    echo "bench-all: quick run, docs/performance.md left alone (--write rewrites it); the table would be:"
    "$table" render "$rows" "$doc" || failed=1
fi
exit "$failed"
