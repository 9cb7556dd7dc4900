"""E2B's filesystem surface through the official Python SDK against `waxell-sandbox serve`: file
metadata, directory watches (polled and streamed), signed URLs, Remove of a missing path, ListDir
order, and what the host must refuse (a symlink the code planted is never followed).

Run with the peer venv's python (scripts/setup-e2b-peer.sh), configured like tests/e2b_conformance.py:

    E2B_API_URL=http://127.0.0.1:P E2B_SANDBOX_URL=http://127.0.0.1:P E2B_API_KEY=e2b_<hex> \
        python tests/e2b_files.py

Options: `--own-boot-id` (each sandbox shows a boot id of its own: the local backend),
`--metadata-store` (metadata is kept outside extended attributes: gVisor).

Prints one `ok` / `FAIL` line per check and exits 1 if any failed. tests/tests/e2b_files.rs runs it.
"""

import asyncio
import json
import os
import sys
import time
import urllib.error
import urllib.request

from e2b import AsyncSandbox, FileType, FilesystemEventType, Sandbox
from e2b.exceptions import FileNotFoundException, SandboxException

from e2b_checks import check, failures, finish, step  # noqa: E402 - tests/ is on the path


def raises(fn, kind):
    try:
        fn()
    except kind as e:
        return e
    except Exception as e:  # noqa: BLE001
        return AssertionError(f"raised {type(e).__name__}: {e}, not {kind.__name__}")
    return AssertionError("did not raise")


sbx = Sandbox.create(timeout=120)

# --- metadata -------------------------------------------------------------------------------
def metadata():
    info = sbx.files.write("meta/a.txt", "data", metadata={"author": "mish", "Stage": "draft"})
    check("write returns the metadata, keys lower-cased", info.metadata == {"author": "mish", "stage": "draft"}, info)
    got = sbx.files.get_info("meta/a.txt")
    check("get_info returns the stored metadata", got.metadata == {"author": "mish", "stage": "draft"}, got)
    check("get_info has a modification time", got.modified_time.year >= 2024, got.modified_time)
    listed = {e.name: e for e in sbx.files.list("meta")}
    check("list returns the metadata", listed["a.txt"].metadata == {"author": "mish", "stage": "draft"}, listed)
    moved = sbx.files.rename("meta/a.txt", "meta/b.txt")
    check("rename keeps the metadata", sbx.files.get_info(moved.path).metadata == {"author": "mish", "stage": "draft"})
    sbx.files.write("meta/b.txt", "again", metadata={"author": "kim"})
    check("a new upload replaces the metadata", sbx.files.get_info("meta/b.txt").metadata == {"author": "kim"})
    sbx.files.write("meta/b.txt", "plain")
    check("an upload without metadata clears it", sbx.files.get_info("meta/b.txt").metadata is None)
    # The metadata follows a rename by the code, and a new file at a removed one's path has none.
    sbx.files.write("meta/d.txt", "x", metadata={"k": "v"})
    sbx.commands.run("mv /home/user/meta/d.txt /home/user/meta/e.txt")
    check("a rename by the code keeps the metadata", sbx.files.get_info("meta/e.txt").metadata == {"k": "v"})
    sbx.commands.run("rm /home/user/meta/e.txt && echo new > /home/user/meta/e.txt")
    check("a new file at a removed one's path has none", sbx.files.get_info("meta/e.txt").metadata is None)
    if "--metadata-store" in sys.argv:
        # Under gVisor the metadata lives in the store volume, not in extended attributes.
        return
    # The code sees and sets the same values as extended attributes.
    from e2b_code_interpreter import Sandbox as CodeSandbox
    sbx.files.write("meta/c.txt", "x", metadata={"k": "v"})
    code = CodeSandbox.connect(sbx.sandbox_id)
    run = code.run_code("import os; p = '/home/user/meta/c.txt'; os.setxattr(p, 'user.e2b.by', b'code');"
                        " os.getxattr(p, 'user.e2b.k').decode()")
    check("the code reads the metadata as an xattr", run.text == "v", (run.text, run.error))
    check("xattrs the code sets are metadata", sbx.files.get_info("meta/c.txt").metadata == {"k": "v", "by": "code"})

step("metadata", metadata)

# --- Remove and ListDir ---------------------------------------------------------------------
def remove_and_list():
    sbx.files.remove("never-existed.txt")
    check("removing a missing path succeeds", True)
    for d in ["tree/b", "tree/a/y", "tree/a/x"]:
        sbx.files.make_dir(d)
    sbx.files.write("tree/c.txt", "c")
    names = [e.path.removeprefix("/home/user/tree/") for e in sbx.files.list("tree", depth=2)]
    check("ListDir depth 2 in envd's order", names == ["a", "a/x", "a/y", "b", "c.txt"], names)

step("remove and list", remove_and_list)

# --- polled watch (CreateWatcher / GetWatcherEvents) ----------------------------------------
def polled_watch():
    sbx.files.make_dir("w")
    handle = sbx.files.watch_dir("w")
    sbx.files.write("w/new.txt", "hello")
    events = handle.get_new_events()
    kinds = [(e.type, e.name) for e in events]
    check(
        "a new file gives CREATE, CHMOD, WRITE as envd",
        kinds == [(FilesystemEventType.CREATE, "new.txt"), (FilesystemEventType.CHMOD, "new.txt"),
                  (FilesystemEventType.WRITE, "new.txt")],
        kinds,
    )
    sbx.files.rename("w/new.txt", "w/renamed.txt")
    sbx.files.remove("w/renamed.txt")
    kinds = {(e.type, e.name) for e in handle.get_new_events()}
    check("rename and remove are reported",
          {(FilesystemEventType.RENAME, "new.txt"), (FilesystemEventType.CREATE, "renamed.txt"),
           (FilesystemEventType.REMOVE, "renamed.txt")} <= kinds, kinds)
    handle.stop()

    sbx.files.make_dir("r")
    deep = sbx.files.watch_dir("r", recursive=True, include_entry=True)
    sbx.files.make_dir("r/sub")
    sbx.files.write("r/sub/f.txt", "x")
    events = deep.get_new_events()
    writes = [e for e in events if e.type == FilesystemEventType.WRITE and e.name == "sub/f.txt"]
    check("a recursive watch follows a directory made after it started", bool(writes), events)
    check("include_entry attaches the entry", bool(writes) and writes[0].entry is not None
          and writes[0].entry.path == "/home/user/r/sub/f.txt" and writes[0].entry.type == FileType.FILE, writes)
    deep.stop()

    check("watching a missing directory is FileNotFound",
          isinstance(raises(lambda: sbx.files.watch_dir("missing-dir"), FileNotFoundException), FileNotFoundException))
    sbx.files.write("plain.txt", "x")
    check("watching a file is refused",
          isinstance(raises(lambda: sbx.files.watch_dir("plain.txt"), SandboxException), SandboxException))

step("polled watch", polled_watch)

# --- what the host refuses ------------------------------------------------------------------
def hostile():
    from e2b_code_interpreter import Sandbox as CodeSandbox
    code = CodeSandbox.connect(sbx.sandbox_id)
    code.run_code("import os; os.symlink('/etc', '/home/user/etc-link'); os.symlink('/etc/passwd', '/home/user/pw')")
    info = sbx.files.get_info("pw")
    check("a planted symlink shows its target, not the host file", info.symlink_target == "/etc/passwd"
          and info.size < 100, info)
    check("watching through a planted symlink is refused",
          isinstance(raises(lambda: sbx.files.watch_dir("etc-link"), SandboxException), SandboxException))
    flood = sbx.files.watch_dir("w")
    code.run_code("open('/home/user/w/by-code.txt', 'w').write('x')")
    kinds = {(e.type, e.name) for e in flood.get_new_events()}
    check("a watch sees the code's writes", (FilesystemEventType.CREATE, "by-code.txt") in kinds, kinds)
    code.run_code("import os\nfor i in range(12000): os.mkdir(f'/home/user/w/d{i}')")
    overflow = raises(flood.get_new_events, SandboxException)
    check("an event flood ends the watch with an error, not unbounded memory",
          isinstance(overflow, SandboxException) and ("events" in str(overflow)), overflow)
    flood.stop()
    handles = []
    error = None
    try:
        for _ in range(9):
            handles.append(sbx.files.watch_dir("w"))
    except SandboxException as e:
        error = e
    check("a sandbox holds at most 8 watches", len(handles) == 8 and error is not None, (len(handles), error))
    for h in handles:
        h.stop()
    again = step("a stopped watch frees its place", lambda: sbx.files.watch_dir("w"))
    if again:
        again.stop()

step("hostile", hostile)

# --- streamed watch (WatchDir), async SDK ---------------------------------------------------
async def streamed_watch():
    asbx = await AsyncSandbox.connect(sbx.sandbox_id)
    await asbx.files.make_dir("s")
    seen = []
    got = asyncio.Event()

    def on_event(event):
        seen.append((event.type, event.name))
        if event.type == FilesystemEventType.WRITE:
            got.set()

    handle = await asbx.files.watch_dir("s", on_event)
    started = time.monotonic()
    await asbx.files.write("s/streamed.txt", "x")
    await asyncio.wait_for(got.wait(), 10)
    latency_ms = (time.monotonic() - started) * 1000
    check("the WatchDir stream delivers events", (FilesystemEventType.CREATE, "streamed.txt") in seen, seen)
    print(f"     write -> streamed event: {latency_ms:.1f} ms")
    await handle.stop()

step("streamed watch", lambda: asyncio.run(streamed_watch()))

# --- files outside /home/user, read inside the sandbox as its user -----------------------------
def outside_home():
    sbx.commands.run("echo from-tmp > /tmp/out.txt && echo x > /tmp/locked && chmod 000 /tmp/locked")
    check("a file in /tmp is read through the file API", sbx.files.read("/tmp/out.txt") == "from-tmp\n")
    passwd = sbx.files.read("/etc/passwd")
    check("/etc/passwd is the sandbox's, naming its user", "user:" in passwd, passwd)
    check("a missing file outside the home is not found",
          isinstance(raises(lambda: sbx.files.read("/etc/never-there"), FileNotFoundException), FileNotFoundException))
    for path, words in [("/etc", "is a directory"), ("/dev/zero", "not a regular file"),
                        ("/tmp/locked", "permission denied")]:
        error = raises(lambda: sbx.files.read(path), SandboxException)
        check(f"reading {path} is refused: {words}", isinstance(error, SandboxException) and words in str(error), error)
    if "--own-boot-id" in sys.argv:
        boot = sbx.files.read("/proc/sys/kernel/random/boot_id").strip()
        with open("/proc/sys/kernel/random/boot_id") as f:
            host = f.read().strip()
        other = Sandbox.create(timeout=60)
        check("the sandbox has a boot id of its own, not the host's",
              len(boot) == 36 and boot != host and boot != other.files.read("/proc/sys/kernel/random/boot_id").strip(),
              (boot, host))
        other.files.write("kept.txt", "kept")
        before = other.files.read("/proc/sys/kernel/random/boot_id").strip()
        other.pause(keep_memory=False)
        resumed = other.connect()
        check("a filesystem-only resume is a new boot, with the files kept",
              resumed.files.read("/proc/sys/kernel/random/boot_id").strip() != before
              and resumed.files.read("kept.txt") == "kept")
        resumed.kill()

step("outside home", outside_home)

# --- signed URLs (a secure sandbox) ---------------------------------------------------------
def signed_urls():
    secure = Sandbox.create(timeout=60, secure=True)
    secure.files.write("s.txt", "signed content")
    url = secure.download_url("s.txt", "user")
    check("a signed URL carries its signature", "signature=v1_" in url, url)
    with urllib.request.urlopen(url) as response:
        check("a signed download needs no headers", response.read() == b"signed content")
    with urllib.request.urlopen(secure.download_url("s.txt", "user", use_signature_expiration=60)) as response:
        check("a signed download with an expiry works before it", response.status == 200)
    try:
        urllib.request.urlopen(secure.download_url("s.txt", "user", use_signature_expiration=-60))
        check("an expired signature is refused", False, "200")
    except urllib.error.HTTPError as e:
        body = json.loads(e.read())
        check("an expired signature is refused with envd's message",
              e.code == 401 and body == {"code": 401, "message": "signature is already expired"}, body)
    tampered = url.replace("path=s.txt", "path=other.txt")
    try:
        urllib.request.urlopen(tampered)
        check("a signature for another path is refused", False, "200")
    except urllib.error.HTTPError as e:
        check("a signature for another path is refused", e.code == 401, e.code)
    upload = secure.upload_url("up.txt", "user")
    request = urllib.request.Request(upload, data=b"uploaded", method="POST",
                                     headers={"Content-Type": "application/octet-stream"})
    with urllib.request.urlopen(request) as response:
        check("a signed upload writes the file", response.status == 200 and secure.files.read("up.txt") == "uploaded")
    read_url_for_write = secure.download_url("up.txt", "user").replace("/files?", "/files?")
    request = urllib.request.Request(read_url_for_write, data=b"x", method="POST",
                                     headers={"Content-Type": "application/octet-stream"})
    try:
        urllib.request.urlopen(request)
        check("a read signature does not allow a write", False, "200")
    except urllib.error.HTTPError as e:
        check("a read signature does not allow a write", e.code == 401, e.code)
    secure.kill()

step("signed urls", signed_urls)

sbx.kill()
finish()
