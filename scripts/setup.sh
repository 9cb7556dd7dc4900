#!/usr/bin/env bash
# Everything the demo and the tests need beyond the Rust toolchain, installed by the project itself:
# bubblewrap + setpriv and the sandbox's Python venv (numpy, pandas, matplotlib), the E2B conformance peer
# (the official `e2b-code-interpreter` SDK in its own venv) and cargo-nextest when missing.
# Idempotent: a second run takes a second or two.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

bash "$here/setup-sandbox.sh"

# Podman + runc + runsc, the container sandbox image (built from Debian packages, cached) and the
# Docker API services the container backend's tests use. Its stdout is the env for scripts/test.sh.
bash "$here/setup-container.sh" >/dev/null

if [ -f "$here/setup-e2b-peer.sh" ]; then
    bash "$here/setup-e2b-peer.sh"
fi

if ! cargo nextest --version >/dev/null 2>&1; then
    echo "[setup] installing cargo-nextest" >&2
    cargo install --locked cargo-nextest >&2
fi
