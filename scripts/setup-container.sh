#!/usr/bin/env bash
# Provision what the container sandbox backend (waxell-sandbox feature `container`) needs for its tests
# and benchmarks on Debian, with no container registry:
#   * podman (Docker Engine API service), runc (Debian's default crun refuses hybrid cgroup v1 hosts),
#     runsc (gVisor) and debootstrap, from Debian's packages;
#   * the sandbox image (Python 3 + numpy + pandas + matplotlib, user 1000) built from Debian's packages
#     with debootstrap and imported into podman; the rootfs tarball is cached, keyed by a hash of the
#     recipe below, so later runs only re-import it (or do nothing when podman already has the image);
#   * Podman's Docker-compatible API service on a unix socket, with two runtimes: `runc` (default) and
#     `runsc` (gVisor, through a wrapper adding runsc's own `--network=none`: the engine's netns is not
#     enough for it under podman).
# Prints nothing on stdout except, last, `DOCKER_HOST=unix://...` for the caller. Idempotent; runs as root.
#
# Environment:
#   WAXELL_CONTAINER_SOCKET  socket path of the API service (default /run/waxell/podman.sock)
#   WAXELL_CONTAINER_IMAGE   image name (default waxell-sandbox:latest)
#   WAXELL_CACHE_DIR         where the rootfs tarball is cached (default /var/cache/waxell)
#   DEBIAN_MIRROR            debootstrap mirror (default http://deb.debian.org/debian)
set -euo pipefail

SOCKET="${WAXELL_CONTAINER_SOCKET:-/run/waxell/podman.sock}"
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
mkdir -p "$STATE" "$(dirname "$SOCKET")" "$CACHE"
cat >"$STATE/runsc-nonet" <<'EOF'
#!/bin/sh
# gVisor for podman: runsc must not configure networking itself (the container has none anyway).
exec /usr/bin/runsc --network=none "$@"
EOF
chmod 0755 "$STATE/runsc-nonet"
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
runsc = ["$STATE/runsc-nonet"]
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

# --- API service ---------------------------------------------------------------------------------
ping() { curl -sf --max-time 2 --unix-socket "$SOCKET" http://d/_ping >/dev/null 2>&1; }
if ! ping; then
    rm -f "$SOCKET"
    log "starting podman's Docker API service on $SOCKET"
    CONTAINERS_CONF="$STATE/containers.conf" setsid nohup podman --runtime /usr/bin/runc \
        system service --time=0 "unix://$SOCKET" >"$STATE/podman-service.log" 2>&1 </dev/null &
    echo $! >"$STATE/podman-service.pid"
    for _ in $(seq 1 100); do ping && break; sleep 0.1; done
    ping || { log "the podman service did not answer; see $STATE/podman-service.log"; tail -5 "$STATE/podman-service.log" >&2; exit 1; }
fi
log "Docker API on unix://$SOCKET ($(curl -sf --unix-socket "$SOCKET" http://d/version | sed -n 's/.*"Version":"\([^"]*\)".*/\1/p' | head -1))"
echo "DOCKER_HOST=unix://$SOCKET"
