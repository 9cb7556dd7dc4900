#!/usr/bin/env bash
# The whole test suite again as an unprivileged user (the local sandbox then runs rootless), in a
# login environment (`su -`: HOME, USER, LOGNAME, SHELL and PATH of that user, nothing of root's).
# Called by scripts/test.sh after the root run, as root. Nothing is compiled for the user: the root
# run's test binaries are packed into a nextest archive, and the user runs that archive against a
# copy of the source tree it can read (the checkout may sit in root's 0700 home).
#
# Not run as the user: the trybuild UI cases (`waxell-macro-ui`'s `ui` test), which compile code and so need
# the Rust toolchain; they check what the compiler says, which does not depend on the user.
#
# Run as root. As any other user the normal test run already is the rootless run, so this exits.
# `--setup-only`: create the user and set up its sandbox venv and E2B's SDKs, then stop (CI does this
# early, beside its builds, so the run itself starts at once).
# Environment:
#   WAXELL_ROOTLESS_USER  the test user (default: waxell-rootless; created with `useradd -m`)
#   WAXELL_ROOTLESS_ARGS  extra arguments for `cargo nextest run`, e.g. a filter (default: none)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { printf '[test-rootless] %s\n' "$*" >&2; }

if [ "$(id -u)" -ne 0 ]; then
    log "not root: the main test run was already rootless; nothing more to do"
    exit 0
fi
user="${WAXELL_ROOTLESS_USER:-waxell-rootless}"
if ! id "$user" >/dev/null 2>&1; then
    log "creating test user $user"
    useradd -m -s /bin/bash "$user"
fi
# A login shell of the user: its own environment only (su - clears root's), in its home.
as_user() { su - "$user" -c "$1"; }

work="$(mktemp -d /tmp/waxell-rootless.XXXXXX)"
trap 'rm -rf "$work"' EXIT
chmod 0755 "$work"

# The user's own sandbox venv (in its home, where it can read it), made by the same setup script.
install -m 0644 scripts/setup-sandbox.sh scripts/apt-get.sh "$work/"
as_user "bash $work/setup-sandbox.sh"
# Likewise E2B's SDKs (the suites' peers), before the tests start rather than by the first test needing them.
install -m 0644 scripts/setup-e2b-peer.sh "$work/setup-e2b-peer.sh"
as_user "bash $work/setup-e2b-peer.sh"
if [ "${1:-}" = --setup-only ]; then
    log "$user is set up"
    exit 0
fi

# The root run's test binaries, packed (same package set, features and profile as that run, so
# nothing is rebuilt), the nextest program, and the source tree the tests read their files from.
start=$SECONDS
cargo nextest archive --workspace --all-features --archive-file "$work/tests.tar.zst"
install -m 0755 "$(command -v cargo-nextest)" "$work/cargo-nextest"
mkdir "$work/src"
tar -c --exclude=./target --exclude=./.git . | tar -x -C "$work/src"
chmod -R a+rX "$work/src" "$work/tests.tar.zst"
# The tests may write next to their sources (cargo-made scratch dirs): give the copy to the user.
chown -R "$user:" "$work/src"
log "archive ready in $((SECONDS - start)) s ($(du -sh "$work/tests.tar.zst" | cut -f1))"

log "running the whole suite as $user (rootless, login environment)"
start=$SECONDS
status=0
as_user "cd $work/src && $work/cargo-nextest nextest run --archive-file $work/tests.tar.zst \
    --workspace-remap $work/src --profile ci -E 'not binary_id(waxell-macro-ui::ui)' \
    ${WAXELL_ROOTLESS_ARGS:-}" || status=$?
log "rootless run finished in $((SECONDS - start)) s with status $status"
exit "$status"
