#!/usr/bin/env bash
# Provision what the container sandbox backend (waxell-sandbox feature `container`) needs for its tests
# and benchmarks on Debian, with no container registry:
#   * podman (Docker Engine API service), runc (Debian's default crun refuses hybrid cgroup v1 hosts),
#     runsc (gVisor) and debootstrap, from Debian's packages;
#   * the sandbox image (Python 3 + IPython + numpy + pandas + matplotlib + E2B's chart extractor, Node.js
#     + TypeScript, bash, a JDK with JShell, user 1000) built from Debian's packages with debootstrap
#     (IPython and the chart extractor from PyPI) and imported into podman; the rootfs tarball is cached, keyed
#     by a hash of the recipe below, so later runs only re-import it (or do nothing when podman already
#     has the image);
#   * Podman's Docker-compatible API service on a unix socket with runc, and a second one whose runtime
#     is gVisor's runsc (Podman's Docker API ignores the per-container runtime, so one service per
#     runtime), through a wrapper adding runsc's own `--network=none` (runsc refuses to start in the
#     root network namespace otherwise);
#   * Docker Engine itself (Debian's docker.io: dockerd, containerd, runc) on a socket of its own, with
#     runsc registered as a second runtime and the same image imported, so the tests also run against the
#     engine most users have (Docker Desktop runs this engine too) and not only Podman's emulation of it.
#     It manages no networking (`--bridge=none --iptables=false`): sandboxes have no network anyway.
#     `--experimental` for its checkpoints: a pause there keeps a gVisor sandbox's memory.
# Prints nothing on stdout except `export DOCKER_HOST=unix://...`, `export WAXELL_RUNSC_DOCKER_HOST=...`
# and `export WAXELL_DOCKER_ENGINE_HOST=...` for the caller to eval. Idempotent; runs as root.
#
# Environment:
#   WAXELL_CONTAINER_SOCKET  socket path of the runc API service (default /run/waxell/podman.sock)
#   WAXELL_RUNSC_SOCKET      socket path of the runsc API service (default /run/waxell/podman-runsc.sock)
#   WAXELL_DOCKERD_SOCKET    socket path of Docker Engine (default /run/waxell/docker.sock)
#   WAXELL_CONTAINER_IMAGE   image name (default waxell-sandbox:latest)
#   WAXELL_CACHE_DIR         where the rootfs tarball is cached (default /var/cache/waxell)
#   DEBIAN_MIRROR            debootstrap mirror (default http://deb.debian.org/debian)
set -euo pipefail

SOCKET="${WAXELL_CONTAINER_SOCKET:-/run/waxell/podman.sock}"
RUNSC_SOCKET="${WAXELL_RUNSC_SOCKET:-/run/waxell/podman-runsc.sock}"
DOCKERD_SOCKET="${WAXELL_DOCKERD_SOCKET:-/run/waxell/docker.sock}"
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
for pair in podman:podman runc:runc runsc:runsc debootstrap:debootstrap curl:curl dockerd:docker.io; do
    command -v "${pair%%:*}" >/dev/null || missing+=("${pair#*:}")
done
if [ "${#missing[@]}" -gt 0 ]; then
    log "installing: ${missing[*]}"
    bash "$here/apt-get.sh" update -qq
    bash "$here/apt-get.sh" install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

# --- engine configuration (only for our service: CONTAINERS_CONF, nothing system-wide) -------------
mkdir -p "$STATE/bin" "$(dirname "$SOCKET")" "$(dirname "$RUNSC_SOCKET")" "$CACHE"
# Named `runsc` so the engine reports the runtime by that name.
printf '%s\n' '#!/bin/sh' \
    '# gVisor for podman: runsc must not configure networking itself (the container has none anyway).' \
    'exec /usr/bin/runsc --network=none --oci-seccomp "$@"' >"$STATE/bin/runsc"
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
# The runtimes are the local backend's (see waxell-sandbox/src/kernel/language.rs): IPython for Python
# cells, Node.js and the TypeScript compiler, bash (in minbase already) and a JDK with JShell.
# matplotlib's own dependencies come from Debian; matplotlib itself from PyPI (below).
PACKAGES="python3,python3-numpy,python3-pandas,python3-cycler,python3-dateutil,python3-kiwisolver,python3-pil,python3-pyparsing,python3-fonttools,python3-packaging,python3-contourpy,fonts-dejavu-core,nodejs,node-typescript,bash,openjdk-17-jdk-headless,python-is-python3"
# From PyPI, pinned so the recipe names exactly what it holds, installed without dependencies (numpy
# and pandas stay Debian's) into the rootfs's /usr/local dist-packages by the host's pip: IPython as the
# local sandbox's venv has it (Debian's 8.5 imports about 3x and runs a cell about 1.5x slower), with
# the matplotlib it needs (Debian's 3.6 imports what IPython 9 removed), and E2B's chart extractor,
# which is on PyPI only and needs a newer pydantic than Debian's.
PIP_PACKAGES="matplotlib==3.10.9 ipython==9.18.1 traitlets==5.16.1 prompt-toolkit==3.0.53 jedi==0.20.1 parso==0.8.7 pygments==2.21.0 stack-data==0.6.3 executing==2.3.0 asttokens==3.0.2 pure-eval==0.2.4 pexpect==4.9.0 ptyprocess==0.7.0 matplotlib-inline==0.2.2 wcwidth==0.9.4 ipython-pygments-lexers==1.1.1 psutil==7.2.2 e2b-charts==1.0.0 pydantic==2.14.4 pydantic-core==2.50.5 typing-extensions==4.16.0 annotated-types==0.8.0 typing-inspection==0.4.5"
# The sandbox's `sudo` (runs as the sandbox user and says so: there is no root), as the local backend binds it.
sudo_shim="$here/../waxell-sandbox/container/sudo"
recipe="debootstrap --variant=minbase --include=$PACKAGES bookworm; pip --no-deps $PIP_PACKAGES; trim docs/locales/caches; user 1000 'user' home /home/user; /root empty 0755; sudo $(sha256sum <"$sudo_shim" | cut -c1-16); v6"
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
        pip_target="$(chroot "$rootfs" /usr/bin/python3 -c 'import sys; print("/usr/local/lib/python%d.%d/dist-packages" % sys.version_info[:2])')"
        pyver="$(chroot "$rootfs" /usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
        host_pip=(python3 -m pip)
        "${host_pip[@]}" --version >/dev/null 2>&1 || host_pip=(pip3)
        # Wheels for the rootfs's Python and architecture, whatever Python the host runs.
        PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore "${host_pip[@]}" install -q --no-cache-dir --no-deps \
            --only-binary=:all: --implementation cp --python-version "$pyver" \
            --platform "manylinux2014_$(uname -m)" --target "$rootfs$pip_target" $PIP_PACKAGES >&2
        rm -rf "$rootfs$pip_target/bin"
        rm -rf "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* \
            "$rootfs"/var/cache/apt/* "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/log/*
        find "$rootfs/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name 'C.UTF-8' -exec rm -rf {} + 2>/dev/null || true
        chroot "$rootfs" /usr/sbin/groupadd -g 1000 user
        chroot "$rootfs" /usr/sbin/useradd -u 1000 -g 1000 -d /home/user -M -s /bin/sh user
        install -d -m 0755 -o 1000 -g 1000 "$rootfs/home/user"
        install -m 0755 "$sudo_shim" "$rootfs/usr/local/bin/sudo"
        # E2B runs code as root, so its users name /root: as in the local sandbox, it is an empty
        # directory the sandbox user may enter (and, the root file system being read-only, not write).
        find "$rootfs/root" -mindepth 1 -delete
        chmod 0755 "$rootfs/root"
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
    # The image it replaced (an older recipe) is left untagged: remove it, and only ours (1-2 GB each).
    podman --runtime /usr/bin/runc image prune -f --filter label=io.waxell.recipe >/dev/null 2>&1 || true
fi
log "image $IMAGE ready (recipe $key)"

# --- API services --------------------------------------------------------------------------------
ping() { curl -sf --max-time 2 --unix-socket "$1" http://d/_ping >/dev/null 2>&1; }
# A service started from a directory that was deleted since (a CI clone, a removed checkout) still
# answers pings, but conmon cannot get its working directory and every container start fails with
# "exit status 1": stop it so it is started again. The services are started from / for that reason.
stop_if_cwd_deleted() { # pidfile name
    local pid
    pid="$(cat "$1" 2>/dev/null)" || return 0
    if [ -n "$pid" ] && readlink "/proc/$pid/cwd" 2>/dev/null | grep -q ' (deleted)$'; then
        log "restarting $2: its working directory was deleted"
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
}
start_service() { # socket runtime-path name
    local socket="$1" runtime="$2" name="$3"
    stop_if_cwd_deleted "$STATE/podman-$name.pid" "podman's service ($name)"
    if ! ping "$socket"; then
        rm -f "$socket"
        log "starting podman's Docker API service ($name) on $socket"
        (cd / && CONTAINERS_CONF="$STATE/containers.conf" exec setsid nohup podman --runtime "$runtime" \
            system service --time=0 "unix://$socket" >"$STATE/podman-$name.log" 2>&1 </dev/null) &
        echo $! >"$STATE/podman-$name.pid"
        for _ in $(seq 1 100); do ping "$socket" && break; sleep 0.1; done
        ping "$socket" || { log "the podman service did not answer; see $STATE/podman-$name.log"; tail -5 "$STATE/podman-$name.log" >&2; exit 1; }
    fi
    log "Docker API ($name) on unix://$socket"
}
start_service "$SOCKET" /usr/bin/runc runc
start_service "$RUNSC_SOCKET" "$STATE/bin/runsc" runsc

# --- Docker Engine -------------------------------------------------------------------------------
# Its own data root and exec root, so it shares nothing with a Docker the host may already run.
# `--experimental`: its checkpoints, which keep a gVisor sandbox's memory across a pause; one started
# without it (by an earlier version of this script) is restarted.
DOCKERD_ROOT="$STATE/docker"
stop_if_cwd_deleted "$DOCKERD_ROOT/dockerd.pid" "Docker Engine"
if ping "$DOCKERD_SOCKET" && ! curl -sf --max-time 5 --unix-socket "$DOCKERD_SOCKET" http://d/info |
    python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin).get("ExperimentalBuild") else 1)'; then
    log "restarting Docker Engine with --experimental (checkpoints)"
    pid="$(cat "$DOCKERD_ROOT/dockerd.pid" 2>/dev/null || true)"
    if [ -n "$pid" ]; then
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
fi
if ! ping "$DOCKERD_SOCKET"; then
    rm -f "$DOCKERD_SOCKET"
    mkdir -p "$DOCKERD_ROOT/data" "$DOCKERD_ROOT/exec"
    log "starting Docker Engine on $DOCKERD_SOCKET"
    (cd / && exec setsid nohup dockerd --host "unix://$DOCKERD_SOCKET" --data-root "$DOCKERD_ROOT/data" \
        --exec-root "$DOCKERD_ROOT/exec" --pidfile "$DOCKERD_ROOT/dockerd.pid" --experimental \
        --bridge=none --iptables=false --ip-forward=false --ip-masq=false \
        --add-runtime "runsc=$STATE/bin/runsc" \
        --default-ulimit nofile=1024:1024 --default-ulimit nproc=1024:1024 \
        >"$STATE/dockerd.log" 2>&1 </dev/null) &
    for _ in $(seq 1 300); do ping "$DOCKERD_SOCKET" && break; sleep 0.1; done
    ping "$DOCKERD_SOCKET" || { log "dockerd did not answer; see $STATE/dockerd.log"; tail -5 "$STATE/dockerd.log" >&2; exit 1; }
fi
engine_label() { # the recipe label of $IMAGE in Docker Engine, if it has it
    curl -sf --max-time 5 --unix-socket "$DOCKERD_SOCKET" "http://d/images/$IMAGE/json" |
        python3 -c 'import json,sys; print((json.load(sys.stdin)["Config"].get("Labels") or {}).get("io.waxell.recipe",""))' 2>/dev/null || true
}
if [ "$(engine_label)" != "$key" ]; then
    log "importing the sandbox image into Docker Engine"
    if [ -s "$tarball" ]; then
        DOCKER_HOST="unix://$DOCKERD_SOCKET" docker import \
            --change 'USER 1000:1000' --change 'WORKDIR /home/user' \
            --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin' --change "LABEL $label" \
            --change 'CMD ["python3"]' \
            "$tarball" "$IMAGE" >/dev/null
    else # the rootfs cache was cleared but Podman has the image: copy it across
        podman --runtime /usr/bin/runc save --format docker-archive "$IMAGE" |
            DOCKER_HOST="unix://$DOCKERD_SOCKET" docker load >/dev/null
        DOCKER_HOST="unix://$DOCKERD_SOCKET" docker tag "localhost/$IMAGE" "$IMAGE"
    fi
    DOCKER_HOST="unix://$DOCKERD_SOCKET" docker image prune -f --filter label=io.waxell.recipe >/dev/null 2>&1 || true
fi
log "Docker Engine on unix://$DOCKERD_SOCKET"

echo "export DOCKER_HOST=unix://$SOCKET"
echo "export WAXELL_RUNSC_DOCKER_HOST=unix://$RUNSC_SOCKET"
echo "export WAXELL_DOCKER_ENGINE_HOST=unix://$DOCKERD_SOCKET"
