#!/usr/bin/env bash
# Everything the demo and the tests need beyond the Rust toolchain, installed by the project itself:
# bubblewrap + setpriv and the sandbox's Python venv (numpy, pandas, matplotlib), the E2B conformance peer
# (the official `e2b-code-interpreter` SDK in its own venv), Debian's chromium (the `waxell ui` browser
# tests) and cargo-nextest when missing.
# Idempotent: a second run takes a second or two.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

install_nextest() {
    if ! cargo nextest --version >/dev/null 2>&1; then
        echo "[setup] installing cargo-nextest" >&2
        cargo install --locked cargo-nextest >&2
    fi
}

if [ "$(uname -s)" != Linux ]; then
    # The local sandbox needs Linux (namespaces, seccomp, cgroups). Elsewhere (macOS) the demo's
    # `--sandbox auto` runs the code in a container of Docker Desktop, Podman or Colima: build the
    # sandbox image there (it pulls debian:bookworm-slim from Docker Hub once).
    engine="$(command -v docker || command -v podman || true)"
    if [ -z "$engine" ]; then
        echo "[setup] the local sandbox needs Linux; on $(uname -s) install Docker Desktop (or Podman, or Colima) so the demo can run its code in a container, then run this again" >&2
        exit 1
    fi
    if "$engine" image inspect waxell-sandbox:latest >/dev/null 2>&1; then
        echo "[setup] $(uname -s): the container sandbox image waxell-sandbox:latest is ready ($(basename "$engine"))" >&2
    else
        echo "[setup] $(uname -s): building the container sandbox image waxell-sandbox:latest with $(basename "$engine")" >&2
        "$engine" build -t waxell-sandbox:latest "$here/../waxell-sandbox/container" >&2
    fi
    install_nextest
    exit 0
fi

bash "$here/setup-sandbox.sh"

# Podman + runc + runsc, the container sandbox image (built from Debian packages, cached) and the
# Docker API services the container backend's tests use. Its stdout is the env for scripts/test.sh.
bash "$here/setup-container.sh" >/dev/null

if [ -f "$here/setup-e2b-peer.sh" ]; then
    bash "$here/setup-e2b-peer.sh"
fi

# Debian's chromium for the browser tests of `waxell ui`.
bash "$here/setup-browser.sh"

install_nextest
