#!/usr/bin/env bash
# apt-get for the set-up scripts, made to survive what a fresh machine does to it: another apt holding the
# dpkg lock (unattended upgrades at boot; waited for up to 5 minutes) and a mirror that fails a download
# (each download retried 5 times, the whole command tried 3 times).
#
#   bash scripts/apt-get.sh update -qq
#   bash scripts/apt-get.sh install -y -qq --no-install-recommends bubblewrap
set -uo pipefail
export DEBIAN_FRONTEND=noninteractive
for attempt in 1 2 3; do
    apt-get -o DPkg::Lock::Timeout=300 -o Acquire::Retries=5 "$@" && exit 0
    rc=$?
    printf '[apt-get] `apt-get %s` failed (exit %d), attempt %d of 3\n' "$*" "$rc" "$attempt" >&2
    [ "$attempt" = 3 ] && exit "$rc"
    sleep 15
done
