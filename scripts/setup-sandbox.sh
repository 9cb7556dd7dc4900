#!/usr/bin/env bash
# Provision what the local code sandbox (crate waxell-sandbox) needs on Debian/Ubuntu:
#   * bubblewrap (namespaces, the isolation itself) and util-linux's setpriv (drops to a non-root uid);
#   * a Python venv with numpy, pandas, matplotlib, IPython (the kernel runs Python cells in it) and
#     e2b-charts (E2B's chart extractor), like E2B's default template;
#   * Node.js and Debian's TypeScript compiler for JavaScript and TypeScript contexts (skip with
#     WAXELL_SANDBOX_NO_NODE=1).
# Idempotent and quick when everything is already there. Runs unattended as root on a fresh machine.
#
# Per user: run it as the user who will run the sandbox. System packages need root (it uses sudo when
# not root, and stops naming the packages when it cannot); the venv goes into that user's home. Run
# through sudo, the venv still goes to the invoking user's home ($SUDO_USER), created as that user.
#
# Environment:
#   WAXELL_SANDBOX_VENV        venv location (default: $HOME/.local/share/waxell/sandbox-venv)
#   WAXELL_SANDBOX_BASE_PYTHON interpreter the venv is made from (default: python3 on PATH)
#   WAXELL_SANDBOX_PACKAGES    packages to install (default: "numpy pandas matplotlib<3.11 ipython e2b-charts";
#                              matplotlib as E2B's template pins it)
#   WAXELL_SANDBOX_NO_PACKAGES=1  create the venv without packages (stdlib only)
set -euo pipefail

as_venv_owner=()
if [ -z "${WAXELL_SANDBOX_VENV:-}" ] && [ "$(id -u)" -eq 0 ] && [ -n "${SUDO_USER:-}" ] && [ "$SUDO_USER" != root ]; then
    # `sudo bash scripts/setup.sh`: the sandbox will run as $SUDO_USER, who cannot read root's home.
    HOME="$(getent passwd "$SUDO_USER" | cut -d: -f6)"
    as_venv_owner=(setpriv --reuid="$SUDO_USER" --regid="$SUDO_USER" --init-groups env HOME="$HOME")
fi
VENV="${WAXELL_SANDBOX_VENV:-${HOME:-/root}/.local/share/waxell/sandbox-venv}"
BASE_PYTHON="${WAXELL_SANDBOX_BASE_PYTHON:-python3}"
PACKAGES="${WAXELL_SANDBOX_PACKAGES:-numpy pandas matplotlib<3.11 ipython e2b-charts}"

log() { printf '[setup-sandbox] %s\n' "$*" >&2; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
        sudo "$@"
    elif command -v sudo >/dev/null && [ -t 0 ]; then sudo "$@"; else
        log "installing system packages needs root, and this user has no sudo: ask an administrator to run"
        log "  $*"
        log "then run this script again as $(id -un) (the venv needs no root)"
        return 1
    fi
}

apt_updated=0
apt_install() {
    if ! command -v apt-get >/dev/null; then
        log "apt-get not found: install these packages with your package manager: $*"
        return 1
    fi
    if [ "$apt_updated" -eq 0 ]; then
        as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
        apt_updated=1
    fi
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"
}

# --- system packages -------------------------------------------------------------------------------
missing=()
command -v bwrap >/dev/null || missing+=(bubblewrap)
command -v setpriv >/dev/null || missing+=(util-linux)
command -v "$BASE_PYTHON" >/dev/null || missing+=(python3)
if [ "${WAXELL_SANDBOX_NO_NODE:-0}" != "1" ]; then
    command -v node >/dev/null || missing+=(nodejs)
    [ -f /usr/share/nodejs/typescript/package.json ] || missing+=(node-typescript)
fi
if [ "${#missing[@]}" -gt 0 ]; then
    log "installing: ${missing[*]}"
    apt_install "${missing[@]}"
fi
# Fonts for matplotlib text in charts (optional; matplotlib ships DejaVu itself).
log "bubblewrap $(bwrap --version | awk '{print $2}'), $(setpriv --version 2>&1 | head -1)"

# --- sandbox venv ----------------------------------------------------------------------------------
venv_python="$VENV/bin/python3"
if [ ! -x "$venv_python" ]; then
    log "creating venv $VENV from $BASE_PYTHON"
    "${as_venv_owner[@]}" mkdir -p "$(dirname "$VENV")"
    if ! "${as_venv_owner[@]}" "$BASE_PYTHON" -m venv "$VENV" 2>/dev/null; then
        # Debian's python3 needs python3-venv for ensurepip.
        rm -rf "$VENV"
        apt_install python3-venv
        "${as_venv_owner[@]}" "$BASE_PYTHON" -m venv "$VENV"
    fi
fi

if [ "${WAXELL_SANDBOX_NO_PACKAGES:-0}" != "1" ]; then
    # Check the import names (a requirement's name without its version, `-` as `_`, IPython's own
    # spelling) before touching the network.
    check="import importlib.util, re, sys
names = [re.split('[<>=!~ ;]', p)[0].replace('-', '_') for p in sys.argv[1:]]
names = ['IPython' if n.lower() == 'ipython' else n for n in names]
sys.exit(any(importlib.util.find_spec(n) is None for n in names))"
    # shellcheck disable=SC2086
    if ! "$venv_python" -I -c "$check" $PACKAGES; then
        log "installing into the venv: $PACKAGES (about 20-40 s)"
        # shellcheck disable=SC2086
        "${as_venv_owner[@]}" "$venv_python" -m pip install -q --disable-pip-version-check --no-cache-dir $PACKAGES
    fi
fi

# Rootless mode needs user namespaces; say early (with the fix) when this host forbids them.
if [ "$(id -u)" -ne 0 ] && ! bwrap --unshare-user --ro-bind / / true 2>/dev/null; then
    if [ "$(cat /proc/sys/kernel/apparmor_restrict_unprivileged_userns 2>/dev/null)" = 1 ]; then
        log "warning: AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns=1):"
        log "  the rootless sandbox needs an AppArmor profile allowing bwrap userns (see docs/sandbox.md, Rootless mode)"
    else
        log "warning: bwrap cannot create a user namespace as $(id -un): the rootless sandbox will be unavailable"
        log "  (user.max_user_namespaces=$(cat /proc/sys/user/max_user_namespaces 2>/dev/null); see docs/sandbox.md)"
    fi
fi

# Warm matplotlib's font cache once on the host would not help: the sandbox has its own MPLCONFIGDIR.
log "ready: WAXELL_SANDBOX_PYTHON defaults to $venv_python ($("$venv_python" -V 2>&1))"
