#!/usr/bin/env bash
# Guards the lean default build (issue: "crates a user can pick from"): what a user compiles for
# `waxell = "..."` with default features, and for `waxell-sandbox` without its server.
#   * no system library: no openssl-sys in waxell's graph with its own stacks on (export, LLM and E2B clients,
#     CLI and its web app); TLS is reqwest's own rustls with aws-lc-rs, whose C is built by `cc` (no cmake binary needed);
#   * never a provider-less TLS: wherever reqwest's rustls is on, so is its default provider, or every other
#     reqwest client in a user's tree would panic (tests/tls-neighbour builds one for real);
#   * at most 130 distinct crates for waxell with default features (normal + build dependencies);
#   * waxell-sandbox without features pulls none of the server's stack (axum, clap, flate2) nor the
#     export stacks (tonic, reqwest).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

crates() { cargo tree -e normal,build --prefix none "$@" 2>/dev/null | sed 's/ (\*)//;s/ (proc-macro)//' | awk '{print $1}' | sort -u; }
fail=0

own="grpc llm e2b tracing testing cli ui"
c_builds=$(crates -p waxell --features "${own// /,}" | grep -E '^(openssl-sys)$' || true)
if [ -n "$c_builds" ]; then echo "footprint: waxell (features: $own) needs a system library: $c_builds" >&2; fail=1; fi

reqwest_features=$(cargo tree -p waxell --features "${own// /,},async-openai" -e features -i reqwest --prefix none 2>/dev/null || true)
if grep -q '"__rustls"' <<<"$reqwest_features" && ! grep -q '"__rustls-aws-lc-rs"' <<<"$reqwest_features"; then
    echo "footprint: reqwest's rustls is on without a provider: other crates' reqwest clients would panic" >&2; fail=1
fi

count=$(cargo tree -p waxell -e normal,build --prefix none 2>/dev/null | sed 's/ (\*)//;s/ (proc-macro)//' | awk '{print $1, $2}' | sort -u | wc -l)
if [ "$count" -gt 130 ]; then echo "footprint: waxell's default features resolve $count crates (limit 130)" >&2; fail=1; fi

heavy=$(crates -p waxell-sandbox | grep -E '^(axum|clap|flate2|tonic|reqwest)$' || true)
if [ -n "$heavy" ]; then echo "footprint: waxell-sandbox without features pulls: $heavy" >&2; fail=1; fi

[ "$fail" -eq 0 ] && echo "footprint: ok (waxell default features: $count crates, no system library, TLS with a provider; waxell-sandbox lean)"
exit "$fail"
