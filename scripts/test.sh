#!/usr/bin/env bash
# Run every test: unit, behaviour, trybuild UI, OTLP wire tests on loopback, the real sandbox (isolation and
# abuse suite), the E2B-compatible server against the official SDK, the dry-run demo, the LLM-crate
# examples (dry run against a fake provider on 127.0.0.1), and the doc tests. As root, every nextest test
# but the trybuild UI cases then runs again as an unprivileged user (the sandbox rootless).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
# DOCKER_HOST / WAXELL_RUNSC_DOCKER_HOST for the container backend's tests (already set up: instant).
eval "$(bash scripts/setup-container.sh)"
# As root the set-up above provides the engines, so the container tests must run, not skip.
if [ "$(id -u)" = 0 ]; then export WAXELL_REQUIRE_CONTAINER_TESTS=1; fi
# Likewise chromium, for the `waxell ui` browser tests.
if [ "$(id -u)" = 0 ]; then export WAXELL_REQUIRE_BROWSER_TESTS=1; fi
cargo nextest run --workspace --all-features --profile ci
# The container tests again against Docker Engine itself (the run above used Podman's Docker API): the
# backend's suites under runc and runsc (one engine, the runtime chosen per container), `serve --backend
# docker`, the E2B conformance and files scripts and the dry-run demo.
if [ -n "${WAXELL_DOCKER_ENGINE_HOST:-}" ]; then
  DOCKER_HOST="$WAXELL_DOCKER_ENGINE_HOST" WAXELL_RUNSC_DOCKER_HOST="$WAXELL_DOCKER_ENGINE_HOST" \
    cargo nextest run --workspace --all-features --profile ci \
    -E 'test(/^containers::|serve_backend_docker|kernel_scripts_in_containers|conformance_script_against_containers|signed_urls_(against_containers|under_gvisor)|runs_in_a_container|falls_back_to_a_container/)'
fi
# The LLM-crate examples, dry run: each answers from a fake provider on 127.0.0.1, and with no
# collector configured nothing leaves the machine.
for example in async_openai genai rig rig_agent; do
  env -u OTEL_EXPORTER_OTLP_ENDPOINT -u OTEL_EXPORTER_OTLP_TRACES_ENDPOINT -u WAXELL_OTEL_ENDPOINT \
    -u WAXELL_API_URL -u WAXELL_API_KEY -u WAXELL_KEY \
    cargo run -q -p waxell-tests --all-features --example "$example"
done
# Adding waxell never breaks another crate: async-openai's own reqwest client (no TLS feature of its own), built
# beside waxell in a tree of its own, where no other member can lend reqwest a TLS provider. Its Cargo.lock pins
# what it shares with the workspace; cargo adds only what waxell gained since.
cargo run -q --manifest-path tests/tls-neighbour/Cargo.toml \
    --target-dir "${CARGO_TARGET_DIR:-target}/tls-neighbour"
# docs/configuration.md names every variable, flag, feature and builder method the code has, and no other.
python3 scripts/check-config-docs.py
# The whole suite again as an unprivileged user in a login environment (the local sandbox then runs
# rootless), from an archive of the test binaries built above: nothing is recompiled.
bash scripts/test-rootless.sh
cargo test --workspace --all-features --doc
