#!/usr/bin/env bash
# Provision what the local code sandbox (crate waxell-sandbox) needs on Debian/Ubuntu:
#   * bubblewrap (namespaces, the isolation itself) and util-linux's setpriv (drops to a non-root uid);
#   * a Python venv with numpy, pandas, matplotlib, IPython (the kernel runs Python cells in it) and
#     e2b-charts (E2B's chart extractor), like E2B's default template;
#   * Node.js and Debian's TypeScript compiler for JavaScript and TypeScript contexts (skip with
#     WAXELL_SANDBOX_NO_NODE=1);
#   * the sandbox root: the files of the Debian packages the sandbox needs, which it sees as /usr.
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
#   WAXELL_SANDBOX_ROOT        the sandbox root, the tree sandboxes see as /usr
#                              (default: $HOME/.local/share/waxell/sandbox-root)
#   WAXELL_SANDBOX_ROOT_PACKAGES  more Debian packages (installed ones) to put into the sandbox root
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
        as_root bash "$(dirname "${BASH_SOURCE[0]}")/apt-get.sh" update -qq
        apt_updated=1
    fi
    as_root bash "$(dirname "${BASH_SOURCE[0]}")/apt-get.sh" install -y -qq --no-install-recommends "$@"
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

# --- sandbox root ----------------------------------------------------------------------------------
# What the sandbox sees as /usr (and of /etc: fonts, time zone, CA certificates, OpenSSL's and the
# JDK's configuration): the files of the Debian packages it needs (the Essential set, shell tools,
# Node.js, TypeScript, the JDK with jshell, the packages of the libraries the Python and its venv
# load) and their dependency closure, hard-linked where the file system allows (as root) and copied
# otherwise. Files no package owns (/usr/local, anything else dropped into /usr) are not in it.
# Cached: rebuilt only when the package set, a version or the Python's paths change, into a new
# generation that the root's symlink then points at. See docs/sandbox.md, "What the sandbox sees".
ROOT="${WAXELL_SANDBOX_ROOT:-$HOME/.local/share/waxell/sandbox-root}"
"${as_venv_owner[@]}" mkdir -p "$(dirname "$ROOT")"
"${as_venv_owner[@]}" env WAXELL_SANDBOX_ROOT_PACKAGES="${WAXELL_SANDBOX_ROOT_PACKAGES:-}" \
    "$venv_python" -I - "$ROOT" "$venv_python" "${WAXELL_SANDBOX_PYTHON:-}" <<'PYTHON' | while read -r line; do log "$line"; done
import glob, hashlib, json, os, re, shutil, stat, subprocess, sys, time

root_link = sys.argv[1]
pythons = [p for p in sys.argv[2:] if p]
started = time.time()
VERSION = "5"  # bump when what goes into a root changes (the cache key)


# Quick check first: nothing changed since the last build (the package database, the extra packages,
# the interpreters and their package directories), so the root is current without recomputing it.
def quick_key():
    def st(path):
        try:
            m = os.stat(path)
            return [m.st_mtime_ns, m.st_size]
        except OSError:
            return None
    key = [VERSION, st("/var/lib/dpkg/status"), os.environ.get("WAXELL_SANDBOX_ROOT_PACKAGES", "")]
    for python in pythons:
        prefix = os.path.dirname(os.path.dirname(os.path.abspath(python)))
        key += [python, os.path.realpath(python), st(os.path.realpath(python))]
        for dirpath in sorted(glob.glob(prefix + "/lib/python3*/site-packages")):
            key += [dirpath, st(dirpath)]
    return json.dumps(key)


stamp = os.path.join(root_link, "quick-key")
try:
    with open(stamp) as f:
        if f.read() == quick_key():
            print(f"sandbox root {root_link} is current (nothing changed since it was built)")
            sys.exit(0)
except OSError:
    pass
# Everything a shell command expects (Debian's Essential set is added below) and the runtimes.
SEEDS = ("bash coreutils dash util-linux findutils grep sed mawk gawk diffutils tar gzip bzip2 xz-utils zstd "
         "procps psmisc file less which debianutils ncurses-bin hostname ca-certificates tzdata media-types "
         "fontconfig-config fonts-dejavu-core openssl curl wget git jq unzip zip sqlite3 make patch").split()
SEEDS += os.environ.get("WAXELL_SANDBOX_ROOT_PACKAGES", "").split()
SEED_FILES = ["/usr/bin/node", "/usr/share/nodejs/typescript/package.json", "/usr/bin/java", "/usr/bin/jshell",
              "/usr/bin/setpriv", "/usr/bin/setsid"]
# What of /etc the sandbox sees (the launcher binds these from the sandbox root).
ETC = ("/etc/fonts", "/etc/localtime", "/etc/ssl/certs", "/etc/ssl/openssl.cnf", "/etc/mime.types", "/etc/java-")
MERGED = [d for d in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
          if os.path.islink(d) and os.readlink(d).lstrip("/") == "usr" + d]


def canonical(path):
    for d in MERGED:
        if path == d or path.startswith(d + "/"):
            return "/usr" + path
    return path


SKIP = ("/usr/share/doc/", "/usr/share/man/", "/usr/share/info/")


def wanted(path):
    if path.startswith(SKIP):
        return False
    return path.startswith("/usr/") or any(path == e or path.startswith(e if e.endswith("-") else e + "/")
                                           for e in ETC)


# --- installed packages: versions, dependencies, files ------------------------------------------
fields = "${binary:Package}\t${Package}\t${Version}\t${db:Status-Abbrev}\t${Essential}\t${Pre-Depends}\t${Depends}\t${Provides}\n"
out = subprocess.run(["dpkg-query", "-W", "-f", fields], check=True, capture_output=True, text=True).stdout
packages, by_name = {}, {}
for line in out.splitlines():
    binary, name, version, status, essential, pre, dep, provides = line.split("\t")
    if not status.startswith("ii"):
        continue
    packages[binary] = {"name": name, "version": version, "essential": essential == "yes", "deps": pre + "," + dep}
    by_name.setdefault(name, []).append(binary)
    for p in provides.split(","):
        p = re.split(r"[ (:]", p.strip())[0]
        if p:
            by_name.setdefault(p, []).append(binary)

info = "/var/lib/dpkg/info"
owner = {}


def files_of(binary):
    for candidate in (binary, binary.split(":")[0]):
        path = os.path.join(info, candidate + ".list")
        if os.path.exists(path):
            with open(path, encoding="utf-8", errors="surrogateescape") as f:
                return [canonical(l.rstrip("\n")) for l in f if l.strip() and l != "/.\n"]
    return []


def owner_of(path):
    if not owner:
        for binary in packages:
            for f in files_of(binary):
                owner.setdefault(f, binary)
    return owner.get(canonical(path))


# --- seeds: the packages named, Essential ones, the owners of the runtimes and the Python's libraries
seeds = {b for b, p in packages.items() if p["essential"]}
for name in SEEDS:
    seeds.update(by_name.get(name, []))
for name in os.environ.get("WAXELL_SANDBOX_ROOT_PACKAGES", "").split():
    if not by_name.get(name):
        print(f"warning: WAXELL_SANDBOX_ROOT_PACKAGES names {name}, which is not installed: left out")
elf_files = []
for f in SEED_FILES:
    if os.path.exists(f):
        for path in {f, os.path.realpath(f)}:
            if owner_of(path):
                seeds.add(owner_of(path))
        elf_files.append(os.path.realpath(f))
probe = ("import json, sys, sysconfig; v = sysconfig.get_config_var; "
         "print(json.dumps({'prefix': sys.prefix, 'base': sys.base_prefix, 'exe': sys.executable, "
         "'dirs': sorted({sysconfig.get_path(n) for n in ('stdlib', 'platstdlib', 'purelib', 'platlib')}), "
         "'libpython': (v('LIBDIR') or '') + '/' + (v('INSTSONAME') or '') if v('Py_ENABLE_SHARED') else None}))")
mountpoints, links = [], []
for python in pythons:
    try:
        p = json.loads(subprocess.run([python, "-I", "-c", probe], check=True, capture_output=True, text=True).stdout)
    except (OSError, subprocess.CalledProcessError, ValueError) as e:
        sys.exit(f"cannot ask {python} for its paths: {e}")
    exe = os.path.realpath(p["exe"])
    paths = [exe] + ([p["libpython"]] if p["libpython"] else []) + p["dirs"] + [p["prefix"]]
    link = p["exe"]
    for _ in range(16):  # the symlinks on the way to the binary
        if not os.path.islink(link):
            break
        if link.startswith("/usr/") and not owner_of(link):
            links.append(link)
        link = os.path.join(os.path.dirname(link), os.readlink(link))
    elf_files += [x for x in paths if os.path.isfile(x)]
    for d in p["dirs"]:
        for dirpath, _, names in os.walk(d):
            elf_files += [os.path.join(dirpath, n) for n in names if ".so" in n]
    for x in paths:
        if os.path.exists(x) and owner_of(x):
            seeds.add(owner_of(x))
        elif x.startswith("/usr/") and os.path.exists(x):
            mountpoints.append((x, os.path.isdir(x)))  # bound from the host by the launcher
# The packages of the shared libraries they load (ldd: the loader's own search).
libs = set()
for chunk in range(0, len(elf_files), 200):
    r = subprocess.run(["ldd"] + elf_files[chunk:chunk + 200], capture_output=True, text=True)
    libs.update(re.findall(r"=> (/\S+) \(", r.stdout))
    libs.update(re.findall(r"^\s+(/\S+) \(", r.stdout, re.M))
for lib in libs:
    for path in (lib, os.path.realpath(lib)):
        if owner_of(path):
            seeds.add(owner_of(path))

# --- dependency closure ---------------------------------------------------------------------------
closure, todo = set(), sorted(seeds)
while todo:
    b = todo.pop()
    if b in closure or b not in packages:
        continue
    closure.add(b)
    for group in packages[b]["deps"].split(","):
        alternatives = [re.split(r"[ (:]", a.strip())[0] for a in group.split("|") if a.strip()]
        for alt in alternatives:
            if by_name.get(alt):
                todo.extend(by_name[alt])  # every installed package of the first alternative present
                break

manifest = VERSION + "\n" + "".join(sorted(f"{b} {packages[b]['version']}\n" for b in closure))
manifest += "".join(f"mountpoint {x} {d}\n" for x, d in sorted(set(mountpoints)))
manifest += "".join(f"link {x} {os.readlink(x)}\n" for x in sorted(set(links)))
digest = hashlib.sha256(manifest.encode()).hexdigest()[:16]
store = root_link + ".d"
target = os.path.join(store, digest)
if os.path.islink(root_link) and os.readlink(root_link) == target and os.path.isfile(os.path.join(target, "manifest")):
    with open(stamp, "w") as f:
        f.write(quick_key())
    print(f"sandbox root {root_link} is current ({len(closure)} packages)")
    sys.exit(0)

# --- build: hard links where allowed (same file system, owner), copies otherwise ------------------
os.makedirs(store, exist_ok=True)
os.chmod(store, 0o755)
work = target + ".tmp"
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
os.chmod(work, 0o755)
counts = {"linked": 0, "copied": 0, "skipped": 0}


def ensure_dir(path):
    if not os.path.isdir(path):
        ensure_dir(os.path.dirname(path))
        os.mkdir(path)
        os.chmod(path, 0o755)


def place(src, dst):
    st = os.lstat(src)
    if stat.S_ISDIR(st.st_mode):
        ensure_dir(dst)
    elif stat.S_ISLNK(st.st_mode):
        ensure_dir(os.path.dirname(dst))
        link = os.readlink(src)
        if link.startswith("/etc/alternatives/"):
            link = os.path.realpath(src)  # no /etc/alternatives inside: point at the chosen program
        if not os.path.lexists(dst):
            os.symlink(link, dst)
    elif stat.S_ISREG(st.st_mode):
        if st.st_mode & (stat.S_ISUID | stat.S_ISGID):
            counts["skipped"] += 1  # set-id programs: no use under no-new-privs
            return
        ensure_dir(os.path.dirname(dst))
        if os.path.lexists(dst):
            return
        try:
            os.link(src, dst)
            counts["linked"] += 1
        except OSError:
            shutil.copy2(src, dst)
            os.chmod(dst, stat.S_IMODE(st.st_mode) & 0o555)  # read-only, even to its owner
            counts["copied"] += 1


for b in sorted(closure):
    for path in files_of(b):
        if wanted(path) and os.path.lexists(path):
            place(path, work + path)
# Made by maintainer scripts, not listed by dpkg: the JDK's class-data archives (faster start) and
# the CA bundle and links of update-ca-certificates (only links into /usr and the bundle itself).
for jvm in ([os.path.join("/usr/lib/jvm", j) for j in os.listdir("/usr/lib/jvm")] if os.path.isdir("/usr/lib/jvm") else []):
    if os.path.isdir(work + jvm):
        for dirpath, _, names in os.walk(jvm):
            for n in names:
                if n.endswith(".jsa") and os.path.isdir(work + dirpath):
                    place(os.path.join(dirpath, n), work + os.path.join(dirpath, n))
certs = "/etc/ssl/certs"
if os.path.isdir(certs):
    for n in os.listdir(certs):
        src = os.path.join(certs, n)
        if os.path.islink(src) and os.path.realpath(src).startswith(("/usr/share/ca-certificates/", "/etc/ssl/certs/")):
            place(src, work + src)
        elif n == "ca-certificates.crt":
            place(src, work + src)
    if os.path.isfile(certs + "/java/cacerts"):
        place(certs + "/java/cacerts", work + certs + "/java/cacerts")
# The links update-alternatives made (awk, java, jshell, ...: no package owns them), pointing
# straight at the program chosen on the host when the root has it.
for d in ("/usr/bin", "/usr/sbin"):
    for n in os.listdir(d):
        src = os.path.join(d, n)
        if os.path.islink(src) and os.readlink(src).startswith("/etc/alternatives/"):
            if os.path.exists(work + os.path.realpath(src)):
                place(src, work + src)
# The time zone, a link into /usr/share/zoneinfo (written by tzdata's scripts).
if os.path.islink("/etc/localtime") and os.path.realpath("/etc/localtime").startswith("/usr/share/zoneinfo/"):
    place("/etc/localtime", work + "/etc/localtime")
# Mount points for the Python installation's pieces under /usr that no package owns, and the
# symlinks to its binary.
for x in links:
    place(x, work + x)
for x, is_dir in set(mountpoints):
    if is_dir:
        ensure_dir(work + x)
    else:
        ensure_dir(os.path.dirname(work + x))
        open(work + x, "a").close()
for d in ("/usr", "/etc"):
    ensure_dir(work + d)
for d in MERGED:  # as inside the sandbox (the launcher makes these links there), for lookups
    os.symlink("usr" + d, work + d)
with open(os.path.join(work, "manifest"), "w") as f:
    f.write(manifest)
with open(os.path.join(work, "quick-key"), "w") as f:
    f.write(quick_key())
shutil.rmtree(target, ignore_errors=True)
os.rename(work, target)
tmp_link = root_link + ".tmp"
if os.path.lexists(tmp_link):
    os.unlink(tmp_link)
os.symlink(target, tmp_link)
previous = os.readlink(root_link) if os.path.islink(root_link) else None
if os.path.isdir(root_link) and not os.path.islink(root_link):
    shutil.rmtree(root_link)
os.rename(tmp_link, root_link)
# Keep the previous generation (running sandboxes may still start from it), drop older ones.
for old in os.listdir(store):
    path = os.path.join(store, old)
    if path not in (target, previous):
        shutil.rmtree(path, ignore_errors=True)
print(f"sandbox root {root_link}: {len(closure)} packages, {counts['linked']} files linked, "
      f"{counts['copied']} copied, {counts['skipped']} set-id programs left out, {time.time() - started:.1f} s")
PYTHON

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

# --- matplotlib's font list ------------------------------------------------------------------------
# matplotlib lists the fonts it can use on its first import into an empty MPLCONFIGDIR (about 100 ms),
# and each sandbox starts with an empty one. Made once here, with only the fonts the sandbox sees (the
# venv's and the sandbox root's), the kernel copies it into the sandbox's MPLCONFIGDIR at start.
if [ "${WAXELL_SANDBOX_NO_PACKAGES:-0}" != "1" ]; then
    mpl_tmp="$("${as_venv_owner[@]}" mktemp -d)"
    "${as_venv_owner[@]}" env -i HOME=/nonexistent PATH=/usr/bin:/bin MPLCONFIGDIR="$mpl_tmp" \
        "$venv_python" -I - "$ROOT" "$VENV/share/waxell/matplotlib" "$mpl_tmp" <<'PYTHON' | while read -r line; do log "$line"; done
import glob, json, os, sys

root, out, built = sys.argv[1:4]
try:
    import matplotlib.font_manager  # noqa: F401 - builds the list into MPLCONFIGDIR
except ImportError:
    sys.exit(0)
[listing] = glob.glob(os.path.join(built, "fontlist-*.json"))
with open(listing) as f:
    fonts = json.load(f)
data = matplotlib.get_data_path()


def seen_by_sandbox(name):
    path = name if os.path.isabs(name) else os.path.join(data, name)
    if path.startswith(sys.prefix + os.sep):
        return True
    # The sandbox's /usr is the root's; nothing else of the host is there.
    return path.startswith("/usr/") and os.path.exists(os.path.join(root, path[1:]))


kept = {}
for kind in ("ttflist", "afmlist"):
    entries = fonts.get(kind, [])
    fonts[kind] = [e for e in entries if seen_by_sandbox(e["fname"])]
    kept[kind] = (len(fonts[kind]), len(entries))
os.makedirs(out, exist_ok=True)
for old in glob.glob(os.path.join(out, "fontlist-*.json")):
    os.unlink(old)
target = os.path.join(out, os.path.basename(listing))
with open(target + ".tmp", "w") as f:
    json.dump(fonts, f)
os.replace(target + ".tmp", target)
print(f"matplotlib font list for sandboxes: {kept['ttflist'][0]} of the host's {kept['ttflist'][1]} fonts")
PYTHON
    rm -rf "$mpl_tmp"
fi

log "ready: WAXELL_SANDBOX_PYTHON defaults to $venv_python ($("$venv_python" -V 2>&1))"
