#!/usr/bin/env bash
# Provision what the container sandbox backend (waxell-sandbox feature `container`) needs for its tests
# and benchmarks on Debian, with no container registry:
#   * podman (Docker Engine API service), runc (Debian's default crun refuses hybrid cgroup v1 hosts),
#     runsc (gVisor) and debootstrap, from Debian's packages;
#   * the sandbox image (Python 3 + numpy + pandas + matplotlib, user 1000) built from Debian's packages
#     with debootstrap and imported into podman; the rootfs tarball is cached, keyed by a hash of the
#     recipe below, so later runs only re-import it (or do nothing when podman already has the image);
#   * Podman's Docker-compatible API service on a unix socket with runc, and a second one whose runtime
#     is gVisor's runsc (Podman's Docker API ignores the per-container runtime, so one service per
#     runtime), through a wrapper adding runsc's own `--network=none` (runsc refuses to start in the
#     root network namespace otherwise).
# Prints nothing on stdout except `export DOCKER_HOST=unix://...` and `export WAXELL_RUNSC_DOCKER_HOST=...`
# for the caller to eval. Idempotent; runs as root.
#
# Environment:
#   WAXELL_CONTAINER_SOCKET  socket path of the runc API service (default /run/waxell/podman.sock)
#   WAXELL_RUNSC_SOCKET      socket path of the runsc API service (default /run/waxell/podman-runsc.sock)
#   WAXELL_CONTAINER_IMAGE   image name (default waxell-sandbox:latest)
#   WAXELL_CACHE_DIR         where the rootfs tarball is cached (default /var/cache/waxell)
#   DEBIAN_MIRROR            debootstrap mirror (default http://deb.debian.org/debian)
set -euo pipefail

SOCKET="${WAXELL_CONTAINER_SOCKET:-/run/waxell/podman.sock}"
RUNSC_SOCKET="${WAXELL_RUNSC_SOCKET:-/run/waxell/podman-runsc.sock}"
IMAGE="${WAXELL_CONTAINER_IMAGE:-waxell-sandbox:latest}"
CACHE="${WAXELL_CACHE_DIR:-/var/cache/waxell}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
STATE=/var/lib/waxell
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

log() { printf '[setup-container] %s\n' "$*" >&2; }

if [ "$(id -u)" -ne 0 ]; then
    log "needs root (podman's rootful service, debootstrap); skipped. Point DOCKER_HOST at a Docker or Podman socket instead."
    exit 0
fi

# --- packages ------------------------------------------------------------------------------------
missing=()
for pair in podman:podman runc:runc runsc:runsc debootstrap:debootstrap curl:curl; do
    command -v "${pair%%:*}" >/dev/null || missing+=("${pair#*:}")
done
if [ "${#missing[@]}" -gt 0 ]; then
    log "installing: ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

# --- engine configuration (only for our service: CONTAINERS_CONF, nothing system-wide) -------------
mkdir -p "$STATE/bin" "$(dirname "$SOCKET")" "$(dirname "$RUNSC_SOCKET")" "$CACHE"
# Named `runsc` so the engine reports the runtime by that name.
printf '%s\n' '#!/bin/sh' \
    '# gVisor for podman: runsc must not configure networking itself (the container has none anyway).' \
    'exec /usr/bin/runsc --network=none "$@"' >"$STATE/bin/runsc"
chmod 0755 "$STATE/bin/runsc"
cat >"$STATE/containers.conf" <<EOF
[containers]
# This host's limits are below podman's defaults; the backend sets them per container as well.
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"

[engine.runtimes]
runc = ["/usr/bin/runc"]
runsc = ["$STATE/bin/runsc"]
EOF

# --- image ---------------------------------------------------------------------------------------
# The recipe: everything that changes the image is in this heredoc, and its hash names the cache.
PACKAGES="python3,python3-numpy,python3-pandas,python3-matplotlib,fonts-dejavu-core"
recipe="debootstrap --variant=minbase --include=$PACKAGES bookworm; trim docs/locales/caches; user 1000 'user' home /home/user; v2"
key="$(printf '%s' "$recipe" | sha256sum | cut -c1-16)"
tarball="$CACHE/sandbox-rootfs-$key.tar"
label="io.waxell.recipe=$key"

have_image() {
    [ "$(podman --runtime /usr/bin/runc image inspect --format '{{index .Labels "io.waxell.recipe"}}' "$IMAGE" 2>/dev/null)" = "$key" ]
}

if ! have_image; then
    if [ ! -s "$tarball" ]; then
        log "building the sandbox rootfs with debootstrap (about 3 min, once; cached as $tarball)"
        rootfs="$(mktemp -d "$CACHE/rootfs.XXXXXX")"
        trap 'rm -rf "$rootfs"' EXIT
        debootstrap --variant=minbase --include="$PACKAGES" bookworm "$rootfs" "$MIRROR" >"$CACHE/debootstrap.log" 2>&1 ||
            { tail -20 "$CACHE/debootstrap.log" >&2; exit 1; }
        rm -rf "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* \
            "$rootfs"/var/cache/apt/* "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/log/*
        find "$rootfs/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name 'C.UTF-8' -exec rm -rf {} + 2>/dev/null || true
        chroot "$rootfs" /usr/sbin/groupadd -g 1000 user
        chroot "$rootfs" /usr/sbin/useradd -u 1000 -g 1000 -d /home/user -M -s /bin/sh user
        install -d -m 0755 -o 1000 -g 1000 "$rootfs/home/user"
        tar -C "$rootfs" --numeric-owner -cf "$tarball.part" .
        mv "$tarball.part" "$tarball"
        rm -rf "$rootfs"
        trap - EXIT
        find "$CACHE" -maxdepth 1 -name 'sandbox-rootfs-*.tar' ! -name "$(basename "$tarball")" -delete
    fi
    log "importing $tarball as $IMAGE"
    podman --runtime /usr/bin/runc import \
        --change 'USER=1000:1000' --change 'WORKDIR=/home/user' \
        --change 'ENV=PATH=/usr/local/bin:/usr/bin:/bin' --change "LABEL=$label" \
        --change 'CMD=["python3"]' \
        "$tarball" "$IMAGE" >/dev/null
fi
log "image $IMAGE ready (recipe $key)"

# --- API services --------------------------------------------------------------------------------
ping() { curl -sf --max-time 2 --unix-socket "$1" http://d/_ping >/dev/null 2>&1; }
start_service() { # socket runtime-path name
    local socket="$1" runtime="$2" name="$3"
    if ! ping "$socket"; then
        rm -f "$socket"
        log "starting podman's Docker API service ($name) on $socket"
        CONTAINERS_CONF="$STATE/containers.conf" setsid nohup podman --runtime "$runtime" \
            system service --time=0 "unix://$socket" >"$STATE/podman-$name.log" 2>&1 </dev/null &
        echo $! >"$STATE/podman-$name.pid"
        for _ in $(seq 1 100); do ping "$socket" && break; sleep 0.1; done
        ping "$socket" || { log "the podman service did not answer; see $STATE/podman-$name.log"; tail -5 "$STATE/podman-$name.log" >&2; exit 1; }
    fi
    log "Docker API ($name) on unix://$socket"
}
start_service "$SOCKET" /usr/bin/runc runc
start_service "$RUNSC_SOCKET" "$STATE/bin/runsc" runsc
echo "export DOCKER_HOST=unix://$SOCKET"
echo "export WAXELL_RUNSC_DOCKER_HOST=unix://$RUNSC_SOCKET"
