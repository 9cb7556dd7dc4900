"""A directory watch inside a container sandbox, run as the sandbox's user: inotify (through ctypes,
no package needed) on a directory under /home/user, opened without following a symlink, recursive
when asked. Prints JSON lines on stdout: first {"ready": true} (or {"error": ..., "missing": bool}
and exit), then each event as it happens; for each line read on stdin, every event the kernel has
queued until then and {"synced": true}. Events are mapped as envd maps fsnotify's. Usage: watch.py PATH RECURSIVE(0|1) INCLUDE_ENTRY(0|1)"""
import ctypes, errno, json, os, select, stat, struct, sys

# metadata.py is prepended: metadata().

HOME = "/home/user"
IN_MODIFY, IN_ATTRIB, IN_MOVED_FROM, IN_MOVED_TO = 0x2, 0x4, 0x40, 0x80
IN_CREATE, IN_DELETE, IN_DELETE_SELF, IN_MOVE_SELF = 0x100, 0x200, 0x400, 0x800
IN_Q_OVERFLOW, IN_IGNORED, IN_ONLYDIR, IN_DONT_FOLLOW, IN_ISDIR = 0x4000, 0x8000, 0x1000000, 0x2000000, 0x40000000
MASK = (IN_MODIFY | IN_ATTRIB | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_DELETE_SELF
        | IN_MOVE_SELF | IN_ONLYDIR | IN_DONT_FOLLOW)
KINDS = [(IN_CREATE | IN_MOVED_TO, "create"), (IN_MOVED_FROM | IN_MOVE_SELF, "rename"), (IN_ATTRIB, "chmod"),
         (IN_MODIFY, "write"), (IN_DELETE | IN_DELETE_SELF, "remove")]
MAX_DIRS = 1024

libc = ctypes.CDLL(None, use_errno=True)


def say(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def refuse(reason, missing=False):
    say({"error": reason, "missing": missing})
    sys.exit(0)


def entry(path):
    try:
        st = os.lstat(path)
    except OSError:
        return None
    is_dir, is_link = stat.S_ISDIR(st.st_mode), stat.S_ISLNK(st.st_mode)
    meta = {} if is_link else metadata(path)
    target = None
    if is_link:
        text = os.readlink(path)
        target = os.path.normpath(text if text.startswith("/") else os.path.join(os.path.dirname(path), text))
    return {"name": os.path.basename(path), "path": path, "is_dir": is_dir, "size": st.st_size,
            "mode": stat.S_IMODE(st.st_mode),
            "modified": {"secs_since_epoch": st.st_mtime_ns // 10**9, "nanos_since_epoch": st.st_mtime_ns % 10**9},
            "symlink_target": target, "metadata": meta}


def main():
    root, recursive, include_entry = sys.argv[1], sys.argv[2] == "1", sys.argv[3] == "1"
    if root != HOME and not root.startswith(HOME + "/"):
        refuse("only paths inside %s are accessible" % HOME)
    # No symlink in any component below HOME (the same rule as the file helper).
    cur = HOME
    for part in [p for p in root[len(HOME):].split("/") if p]:
        cur += "/" + part
        try:
            st = os.lstat(cur)
        except FileNotFoundError:
            refuse("no such file or directory", missing=True)
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
            refuse("refused: a component is a symlink or not a directory")
    fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    if fd < 0:
        refuse("inotify: " + os.strerror(ctypes.get_errno()))
    dirs = {}

    def add(rel):
        if len(dirs) >= MAX_DIRS:
            return
        path = root.rstrip("/") + ("/" + rel if rel else "")
        wd = libc.inotify_add_watch(fd, path.encode(), MASK)
        if wd < 0:
            return
        dirs[wd] = rel
        if recursive:
            try:
                names = sorted(os.listdir(path))
            except OSError:
                return
            for name in names:
                if stat.S_ISDIR(os.lstat(os.path.join(path, name)).st_mode):
                    add((rel + "/" if rel else "") + name)

    add("")
    if not dirs:
        refuse("cannot watch %s" % root)
    say({"ready": True})
    sent = 0

    def drain():
        """Print every event the kernel has queued; False once the watch must end."""
        nonlocal sent
        while True:
            try:
                data = os.read(fd, 65536)
            except BlockingIOError:
                return True
            offset = 0
            while offset < len(data):
                wd, mask, _cookie, length = struct.unpack_from("iIII", data, offset)
                name = data[offset + 16:offset + 16 + length].split(b"\0", 1)[0].decode(errors="replace")
                offset += 16 + length
                if mask & IN_Q_OVERFLOW:
                    say({"error": "the kernel dropped events: too many changes at once", "missing": False})
                    return False
                if wd not in dirs:
                    continue
                if mask & IN_IGNORED:
                    del dirs[wd]
                    continue
                base = dirs[wd]
                if name:
                    rel = (base + "/" if base else "") + name
                elif base == "":
                    rel = ""
                else:
                    continue
                if recursive and mask & IN_ISDIR and mask & (IN_CREATE | IN_MOVED_TO):
                    add(rel)
                for bits, kind in KINDS:
                    if mask & bits:
                        event = {"name": rel, "kind": kind}
                        if include_entry and kind in ("create", "write", "chmod"):
                            event["entry"] = entry(root.rstrip("/") + "/" + rel)
                        say(event)

    while True:
        readable, _, _ = select.select([0, fd], [], [])
        if not drain():
            return
        if 0 in readable:
            requests = os.read(0, 4096)
            if not requests:
                return
            for _ in range(requests.count(b"\n")):
                say({"synced": True})


main()
