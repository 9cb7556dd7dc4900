#!/usr/bin/env bash
# Run every test: unit, behaviour, trybuild UI, OTLP wire tests on loopback, the real sandbox (isolation and
# abuse suite; as root, then again rootless as an unprivileged user), the E2B-compatible server against the
# official SDK, the dry-run demo (also as that user), and the doc tests.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
# DOCKER_HOST / WAXELL_RUNSC_DOCKER_HOST for the container backend's tests (already set up: instant).
eval "$(bash scripts/setup-container.sh)"
cargo nextest run --workspace --all-features --profile ci
# The local sandbox again as an unprivileged user (rootless mode): its suites and the dry-run demo.
bash scripts/test-rootless.sh
cargo test --workspace --all-features --doc
