#!/usr/bin/env bash
# Clean debug build of the README's quick start (waxell, default features) beside a plain
# opentelemetry-otlp HTTP/protobuf app with rustls, alternating, each in a fresh target directory.
# Prints each run, the medians and the ratio; also the distinct-crate count of each.
# Usage: bash scripts/bench-build-time.sh [rounds]   (default 2; crates come from the local registry cache)
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
rounds="${1:-2}"
load_start="$(python3 "$repo/scripts/bench_rows.py" --print-load)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

mkdir -p "$work/quickstart/src" "$work/plain/src"
cat >"$work/quickstart/Cargo.toml" <<TOML
[package]
name = "quickstart"
version = "0.1.0"
edition = "2021"
[dependencies]
waxell = { path = "$repo/waxell" }
tokio = { version = "1", features = ["rt-multi-thread", "macros"] }
[workspace]
TOML
# The README's quick start, verbatim.
sed -n '/```rust,no_run/,/```/p' "$repo/README.md" | sed '1d;$d' >"$work/quickstart/src/main.rs"

cat >"$work/plain/Cargo.toml" <<'TOML'
[package]
name = "plain"
version = "0.1.0"
edition = "2021"
[dependencies]
opentelemetry = "0.33"
opentelemetry_sdk = "0.33"
opentelemetry-otlp = { version = "0.33", features = ["reqwest-rustls"] }
tokio = { version = "1", features = ["rt-multi-thread", "macros"] }
[workspace]
TOML
cat >"$work/plain/src/main.rs" <<'RS'
use opentelemetry::trace::{Tracer, TracerProvider as _};
#[tokio::main]
async fn main() {
    let exporter = opentelemetry_otlp::SpanExporter::builder().with_http().build().unwrap();
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().with_batch_exporter(exporter).build();
    provider.tracer("plain").in_span("weather", |_cx| println!("Lisbon: 21.5 °C"));
    provider.shutdown().unwrap();
}
RS

count() { (cd "$work/$1" && cargo tree -e normal,build --prefix none 2>/dev/null | sed 's/ (\*)//;s/ (proc-macro)//' | awk '{print $1, $2}' | sort -u | wc -l); }
build() {
    local dir="$work/$1" target="$work/target-$1"
    rm -rf "$target"
    local start end
    start=$(date +%s.%N)
    (cd "$dir" && CARGO_TARGET_DIR="$target" CARGO_INCREMENTAL=0 cargo build -q)
    end=$(date +%s.%N)
    awk -v a="$start" -v b="$end" 'BEGIN {printf "%.1f", b - a}'
}
(cd "$work/quickstart" && cargo fetch -q) && (cd "$work/plain" && cargo fetch -q)
echo "crates: quickstart $(count quickstart), plain $(count plain)"
q=() p=()
for i in $(seq "$rounds"); do
    p+=("$(build plain)"); echo "round $i: plain ${p[-1]} s"
    q+=("$(build quickstart)"); echo "round $i: quickstart ${q[-1]} s"
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
mq=$(median "${q[@]}"); mp=$(median "${p[@]}")
ratio="$(awk -v a="$mq" -v b="$mp" 'BEGIN {printf "%.2f", a / b}')"
echo "median: quickstart $mq s, plain $mp s, ratio $ratio"
# Its row of docs/performance.md (target/bench-rows/, or WAXELL_BENCH_ROWS_DIR; see scripts/bench-all.sh).
python3 "$repo/scripts/bench_rows.py" --reproduce "[B]" --load-start "$load_start" \
    --id build.quickstart-vs-plain \
    --what "clean debug build of the README's quick start (waxell, default features), fresh target directory, \`CARGO_INCREMENTAL=0\`, median of $rounds, alternating" \
    --measured "$mq s ($(count quickstart) crates)" \
    --anchor "a plain \`opentelemetry-otlp\` HTTP/protobuf app with rustls, same run: $mp s ($(count plain) crates)" \
    --ratio "**${ratio}x**" --target "none (build cost)" --verdict none
