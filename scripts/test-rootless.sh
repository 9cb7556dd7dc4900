#!/usr/bin/env bash
# The local sandbox as an unprivileged user (rootless mode): its functional, abuse and host-crash
# suites and the dry-run demo, run as a test user made for this (idempotently). Called by
# scripts/test.sh after the root run; it reuses that run's compiled test binaries (copied where the
# test user can read them), so nothing is compiled for the user.
#
# Run as root. As any other user the normal test run already is the rootless run, so this exits.
# Environment:
#   WAXELL_ROOTLESS_USER  the test user (default: waxell-rootless; created with `useradd -m`)
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
home="$(getent passwd "$user" | cut -d: -f6)"
as_user() {
    setpriv --reuid="$user" --regid="$user" --init-groups \
        env -i HOME="$home" USER="$user" PATH=/usr/local/bin:/usr/bin:/bin TMPDIR=/tmp LANG=C.UTF-8 "$@"
}

# The user's own sandbox venv (in its home, where it can read it), made by the same setup script.
work="$(mktemp -d /tmp/waxell-rootless.XXXXXX)"
trap 'rm -rf "$work"' EXIT
cp scripts/setup-sandbox.sh "$work/"
chmod 0755 "$work"
chmod 0644 "$work/setup-sandbox.sh"
as_user bash "$work/setup-sandbox.sh"

# The test binaries of the root run and the demo. Same package set and features as that run, so cargo
# finds them built (a narrower `-p` would unify features differently and rebuild).
artifacts() {
    python3 -c '
import json, sys
package, wanted = sys.argv[1], sys.argv[2:]
for line in sys.stdin:
    m = json.loads(line)
    # A bin target is built twice by `cargo test`: as its unit-test harness (profile.test) and as the
    # program itself (for CARGO_BIN_EXE_*); integration tests only as harnesses. Take the program for a
    # bin, the harness for a test.
    if (m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] in wanted
            and f"/{package}#" in m["package_id"]
            and m["profile"]["test"] == ("bin" not in m["target"]["kind"])):
        print(m["target"]["name"], m["executable"])' "$@"
}
built=$(cargo test --workspace --all-features --no-run --message-format=json 2>/dev/null)
bins=$(artifacts waxell-sandbox functional abuse host_crash <<<"$built" | sort -u)
# The demo binary is built for its own integration test (demos/tests/dry_run.rs).
demo=$(artifacts demos demos <<<"$built" | head -1 | cut -d' ' -f2)
install -m 0755 "$demo" "$work/demos"
failed=0
while read -r name path; do
    install -m 0755 "$path" "$work/$name"
    log "running the $name suite as $user (rootless)"
    if ! (cd "$work" && as_user "$work/$name" --test-threads=2); then
        log "FAILED: $name as $user"
        failed=1
    fi
done <<<"$bins"
[ "$(wc -l <<<"$bins")" -eq 3 ] || { log "expected 3 test binaries, found: $bins"; failed=1; }

log "running the dry-run demo as $user (rootless)"
mkdir -m 0777 "$work/demo-out"
if ! (cd "$work/demo-out" && as_user "$work/demos" --dry-run --quiet --output-dir "$work/demo-out"); then
    log "FAILED: the dry-run demo as $user"
    failed=1
fi
exit "$failed"
