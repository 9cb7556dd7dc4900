"""A file's E2B metadata, shared by fileop.py and watch.py (prepended to each). envd keeps it as
user.e2b.* extended attributes, and so do we, except under gVisor: its gofer, which serves the
scratch volumes to the sandbox, refuses user.* attributes. There a store volume holds one JSON file
per inode number (named by it), so the metadata follows a rename as an attribute would; the host's
tmpfs never reuses an inode number, so a new file cannot inherit a removed one's metadata."""
import errno, json, os, stat, time

META = "user.e2b."
METADATA_STORE = "/var/lib/waxell/metadata"
USE_STORE = os.path.isdir(METADATA_STORE)


def metadata(path):
    """The metadata of a file or directory (never of a symlink), {} when it has none."""
    out = {}
    if USE_STORE:
        try:
            with open(os.path.join(METADATA_STORE, str(os.lstat(path).st_ino)), "rb") as f:
                out = json.loads(f.read())
        except (OSError, ValueError):
            pass
        return out if isinstance(out, dict) else {}
    try:
        names = os.listxattr(path, follow_symlinks=False)
    except OSError:
        return out
    for name in names:
        if name.startswith(META):
            try:
                out[name[len(META):]] = os.getxattr(path, name, follow_symlinks=False).decode()
            except (OSError, UnicodeDecodeError):
                pass
    return out


def set_metadata(path, wanted, home):
    """Replace the metadata of `path` (already checked: no symlink, inside `home`) by `wanted`."""
    if not USE_STORE:
        for name in os.listxattr(path, follow_symlinks=False):
            if name.startswith(META) and name[len(META):] not in wanted:
                os.removexattr(path, name, follow_symlinks=False)
        for key, value in wanted.items():
            os.setxattr(path, META + key, value.encode(), follow_symlinks=False)
        return
    entry = os.path.join(METADATA_STORE, str(os.lstat(path).st_ino))
    if not wanted:
        try:
            os.unlink(entry)
        except FileNotFoundError:
            pass
        return
    body = json.dumps(wanted).encode()
    try:
        store_write(entry, body)
    except OSError as e:
        if e.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        forget_removed(home)
        try:
            store_write(entry, body)
        except OSError as again:
            if again.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            raise OSError(again.errno, "the metadata store is full: at most %d files and directories can carry "
                          "metadata under gVisor" % (os.statvfs(METADATA_STORE).f_files - 1)) from None


def store_write(entry, body):
    """Write one store entry whole (a reader never sees half of it)."""
    part = "%s.%d.part" % (entry, os.getpid())
    try:
        with open(part, "wb") as f:
            f.write(body)
        os.replace(part, entry)
    except OSError:
        try:
            os.unlink(part)
        except OSError:
            pass
        raise


def forget_removed(home):
    """Drop the store's entries of inodes no longer in the home. Entries written after the walk
    began are kept: a concurrent write may be for a file the walk did not see."""
    began = time.time()
    live = set()
    for root, dirs, files in os.walk(home):
        for name in dirs + files:
            try:
                live.add(str(os.lstat(os.path.join(root, name)).st_ino))
            except OSError:
                pass
    live.add(str(os.lstat(home).st_ino))
    for name in os.listdir(METADATA_STORE):
        if name.isdigit() and name not in live:
            entry = os.path.join(METADATA_STORE, name)
            try:
                if os.lstat(entry).st_mtime < began:
                    os.unlink(entry)
            except OSError:
                pass
