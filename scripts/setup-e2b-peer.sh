#!/usr/bin/env bash
# Install the E2B conformance peers: the official `e2b-code-interpreter` Python SDK (from PyPI) in its own
# venv, used by tests/e2b_conformance.py and tests/e2b_kernel.py, and the official `@e2b/code-interpreter`
# JS SDK (from npm) in its own directory, used by tests/e2b_kernel.mjs, against `waxell-sandbox serve`.
# Idempotent; a second run only checks that the SDKs load.
#
# Environment:
#   WAXELL_E2B_PEER_VENV        venv location (default: $HOME/.local/share/waxell/e2b-peer-venv)
#   WAXELL_E2B_PEER_PYTHON      interpreter the venv is made from (default: python3 on PATH)
#   WAXELL_E2B_PEER_PACKAGE     pip requirement (default: e2b-code-interpreter)
#   WAXELL_E2B_PEER_JS          JS SDK directory (default: $HOME/.local/share/waxell/e2b-peer-js)
#   WAXELL_E2B_PEER_JS_PACKAGE  npm package (default: @e2b/code-interpreter)
set -euo pipefail

VENV="${WAXELL_E2B_PEER_VENV:-${HOME:-/root}/.local/share/waxell/e2b-peer-venv}"
BASE_PYTHON="${WAXELL_E2B_PEER_PYTHON:-python3}"
PACKAGE="${WAXELL_E2B_PEER_PACKAGE:-e2b-code-interpreter}"

JS_DIR="${WAXELL_E2B_PEER_JS:-${HOME:-/root}/.local/share/waxell/e2b-peer-js}"
JS_PACKAGE="${WAXELL_E2B_PEER_JS_PACKAGE:-@e2b/code-interpreter}"

log() { printf '[setup-e2b-peer] %s\n' "$*" >&2; }
# Written once both SDKs load (tests look for it, not for the venv's python, which exists mid-install).
READY="$VENV/.waxell-peers-ready"

# Tests running in parallel processes may call this at once: one installs, the others then find it done.
mkdir -p "$(dirname "$VENV")"
exec 9>"$(dirname "$VENV")/.setup-e2b-peer.lock"
flock 9

# The JS SDK: a package.json-less directory with node_modules, loaded by path from the test script.
setup_js() {
    if [ -f "$JS_DIR/node_modules/@e2b/code-interpreter/package.json" ]; then
        log "ok: JS SDK in $JS_DIR"
        return 0
    fi
    if ! command -v npm >/dev/null; then
        log "npm not found: install Node.js (scripts/setup-sandbox.sh does) and rerun"
        return 1
    fi
    mkdir -p "$JS_DIR"
    (cd "$JS_DIR" && npm install --no-audit --no-fund --no-save --silent "$JS_PACKAGE") \
        || { log "npm install $JS_PACKAGE failed"; return 1; }
    log "installed $JS_PACKAGE into $JS_DIR"
}

if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c 'import e2b_code_interpreter' 2>/dev/null; then
    log "ok: $("$VENV/bin/python" -m pip show e2b-code-interpreter 2>/dev/null | grep '^Version' || true) in $VENV"
    setup_js && touch "$READY"
    exit $?
fi

if ! "$BASE_PYTHON" -c 'import venv, ensurepip' 2>/dev/null; then
    log "$BASE_PYTHON lacks venv/ensurepip; installing python3-venv"
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
        bash "$(dirname "${BASH_SOURCE[0]}")/apt-get.sh" update -qq
        bash "$(dirname "${BASH_SOURCE[0]}")/apt-get.sh" install -y -qq --no-install-recommends python3-venv
        BASE_PYTHON=/usr/bin/python3
    else
        log "install python3-venv (or set WAXELL_E2B_PEER_PYTHON) and rerun"
        exit 1
    fi
fi

log "creating $VENV"
mkdir -p "$(dirname "$VENV")"
"$BASE_PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$PACKAGE"
"$VENV/bin/python" -c 'import e2b_code_interpreter' \
    || { log "e2b_code_interpreter does not import after install"; exit 1; }
log "installed $("$VENV/bin/python" -m pip show e2b-code-interpreter | grep '^Version') into $VENV"
setup_js
touch "$READY"
