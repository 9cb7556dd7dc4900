#!/usr/bin/env bash
# Guards the lean default build (issue: "crates a user can pick from"): what a user compiles for
# `waxell = "..."` with default features, and for `waxell-sandbox` without its server.
#   * no C build: no aws-lc-sys, openssl-sys or cmake in waxell's graph with its own stacks on (export,
#     LLM and E2B clients, CLI); the integrations of other crates bring what those crates need;
#   * at most 130 distinct crates for waxell with default features (normal + build dependencies);
#   * waxell-sandbox without features pulls none of the server's stack (axum, clap, flate2) nor the
#     export stacks (tonic, reqwest).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

crates() { cargo tree -e normal,build --prefix none "$@" 2>/dev/null | sed 's/ (\*)//;s/ (proc-macro)//' | awk '{print $1}' | sort -u; }
fail=0

own="grpc llm e2b tracing testing cli"
c_builds=$(crates -p waxell --features "${own// /,}" | grep -E '^(aws-lc-sys|aws-lc-rs|openssl-sys|cmake)$' || true)
if [ -n "$c_builds" ]; then echo "footprint: waxell (features: $own) needs a C build: $c_builds" >&2; fail=1; fi

count=$(cargo tree -p waxell -e normal,build --prefix none 2>/dev/null | sed 's/ (\*)//;s/ (proc-macro)//' | awk '{print $1, $2}' | sort -u | wc -l)
if [ "$count" -gt 130 ]; then echo "footprint: waxell's default features resolve $count crates (limit 130)" >&2; fail=1; fi

heavy=$(crates -p waxell-sandbox | grep -E '^(axum|clap|flate2|tonic|reqwest)$' || true)
if [ -n "$heavy" ]; then echo "footprint: waxell-sandbox without features pulls: $heavy" >&2; fail=1; fi

[ "$fail" -eq 0 ] && echo "footprint: ok (waxell default features: $count crates, no C build; waxell-sandbox lean)"
exit "$fail"
