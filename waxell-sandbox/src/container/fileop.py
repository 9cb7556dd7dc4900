"""File operations inside a container sandbox, run as the sandbox's user (never by the host on the
container's files). Mirrors the local backend's rules: paths under /home/user only, no symlink in
any component, regular files only, sizes capped. Errors: exit 2, JSON {"reason": ...} on stderr;
a missing path: exit 3; a file over the size cap: exit 4.
Usage: fileop.py OP PATH [ARG]; `write` reads a decimal length line, then that many bytes;
`setmeta` reads the metadata likewise, as a JSON object (stored as metadata.py says);
`disk` prints the bytes used on the home's file system."""
import json, os, shutil, stat, sys

# metadata.py is prepended: metadata(), set_metadata().

HOME = "/home/user"


def fail(reason, code=2):
    sys.stderr.write(json.dumps({"reason": reason}))
    sys.exit(code)


def missing():
    fail("no such file or directory", 3)


def check(path, must_exist=True):
    """Refuse a symlink (or non-directory parent) in any component below HOME."""
    if path != HOME and not path.startswith(HOME + "/"):
        fail("only paths inside %s are accessible" % HOME)
    parts = [p for p in path[len(HOME):].split("/") if p]
    cur = HOME
    for i, part in enumerate(parts):
        cur = cur + "/" + part
        try:
            st = os.lstat(cur)
        except FileNotFoundError:
            if must_exist:
                missing()
            return
        if stat.S_ISLNK(st.st_mode):
            fail("refused: a component is a symlink or not a directory")
        if i < len(parts) - 1 and not stat.S_ISDIR(st.st_mode):
            fail("refused: a component is a symlink or not a directory")


def absolute(link, target):
    """A link's target as an absolute path, from its text alone (never followed)."""
    return os.path.normpath(target if target.startswith("/") else os.path.join(os.path.dirname(link), target))


def entry(path):
    st = os.lstat(path)
    is_dir, is_link = stat.S_ISDIR(st.st_mode), stat.S_ISLNK(st.st_mode)
    return {
        "name": os.path.basename(path), "path": path, "is_dir": is_dir, "size": st.st_size,
        "mode": stat.S_IMODE(st.st_mode),
        "modified": {"secs_since_epoch": st.st_mtime_ns // 10**9, "nanos_since_epoch": st.st_mtime_ns % 10**9},
        "symlink_target": absolute(path, os.readlink(path)) if is_link else None,
        "metadata": {} if is_link else metadata(path),
    }


def make_parents(path):
    parent = os.path.dirname(path)
    check(parent, must_exist=False)
    os.makedirs(parent, exist_ok=True)
    check(parent)


def main():
    op, path = sys.argv[1], sys.argv[2]
    try:
        if op == "read":
            limit = int(sys.argv[3])
            check(path)
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):
                fail("is a directory")
            if not stat.S_ISREG(st.st_mode):
                fail("not a regular file")
            if st.st_size > limit:
                fail("file is %d bytes, over the %d-byte limit" % (st.st_size, limit), 4)
            with os.fdopen(fd, "rb") as f:
                sys.stdout.buffer.write(f.read(limit + 1))
        elif op == "write":
            n = int(sys.stdin.buffer.readline())
            data = sys.stdin.buffer.read(n)
            make_parents(path)
            check(path, must_exist=False)
            if os.path.isdir(path):
                fail("is a directory")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
            # envd's steps (create, chown, write): a watch sees CREATE, CHMOD, WRITE.
            os.fchown(fd, os.getuid(), os.getgid())
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            print(json.dumps(entry(path)))
        elif op == "list":
            check(path)
            if not os.path.isdir(path):
                fail("not a directory")
            print(json.dumps([entry(os.path.join(path, n)) for n in sorted(os.listdir(path))]))
        elif op == "mkdir":
            check(path, must_exist=False)
            if os.path.lexists(path):
                if not os.path.isdir(path):
                    fail("exists and is not a directory")
                print("false")
            else:
                os.makedirs(path)
                check(path)
                print("true")
        elif op == "rename":
            target = sys.argv[3]
            check(path)
            make_parents(target)
            check(target, must_exist=False)
            os.rename(path, target)
            print(json.dumps(entry(target)))
        elif op == "setmeta":
            n = int(sys.stdin.buffer.readline())
            wanted = json.loads(sys.stdin.buffer.read(n))
            check(path)
            st = os.lstat(path)
            if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
                fail("metadata goes on regular files and directories only")
            set_metadata(path, wanted, HOME)
            print(json.dumps(entry(path)))
        elif op == "disk":
            # Bytes used on the home's tmpfs (its size cap is the sandbox's scratch limit).
            st = os.statvfs(HOME)
            print((st.f_blocks - st.f_bfree) * st.f_frsize)
        elif op == "remove":
            check(path)
            if path == HOME:
                fail("refusing to remove the home directory")
            if stat.S_ISDIR(os.lstat(path).st_mode):
                shutil.rmtree(path)
            else:
                os.unlink(path)
            print("null")
        else:
            fail("unknown operation")
    except OSError as e:
        if e.errno == 2:
            missing()
        fail(e.strerror or str(e))


main()
