#!/usr/bin/env bash
# Debian's chromium (and its chromedriver), for the browser tests of `waxell ui` (demos/tests/ui_browser.rs)
# and scripts/ui-screenshot.sh, which run it headless. Installed from the distribution's packages only,
# never downloaded otherwise. Idempotent: nothing to do once `chromium` is on PATH.
set -euo pipefail

log() { printf '[setup-browser] %s\n' "$*" >&2; }

if command -v chromium >/dev/null 2>&1; then
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    log "apt-get not found: install chromium with your package manager to run the waxell ui browser tests"
    exit 0
fi
as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"
    elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then sudo "$@"
    elif command -v sudo >/dev/null && [ -t 0 ]; then sudo "$@"
    else
        log "installing chromium needs root, and this user has no sudo: ask an administrator to run"
        log "  apt-get install -y chromium chromium-driver"
        return 1
    fi
}
log "installing chromium and chromium-driver (Debian packages)"
as_root bash "$(dirname "${BASH_SOURCE[0]}")/apt-get.sh" update -qq
as_root bash "$(dirname "${BASH_SOURCE[0]}")/apt-get.sh" install -y -qq chromium chromium-driver >&2
