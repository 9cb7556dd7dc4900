//! Abuse suite: every category of docs/sandbox.md ("Abuse categories", from sandbox-isolation.md §5).
//! Each case asserts that the host is unaffected and that the sandbox reported what happened.
#![cfg(target_os = "linux")]

mod common;
#[path = "abuse/isolation.rs"]
mod isolation;

use std::io::Read;
use std::net::TcpListener;
use std::time::Duration;

use common::*;
use waxell::sandbox::{RunOptions, SandboxSession};
use waxell_sandbox::{Feature, Limits};

/// Python helpers defined in every abuse sandbox: `attempt(fn)` and `syscall(nr, *args)` return
/// "OK" or the errno name.
const PRELUDE: &str = r#"
import ctypes, errno, json, os, signal, socket, subprocess, sys
_libc = ctypes.CDLL(None, use_errno=True)
def attempt(fn):
    try:
        fn()
        return "OK"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
def syscall(nr, *args):
    r = _libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    if r == 0 and nr == 56:
        os._exit(0)  # a clone child, should the filter ever let one through
    return "OK" if r >= 0 else errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
def write(path, data="x"):
    with open(path, "w") as f:
        f.write(data)
"#;

async fn abuse_sandbox(backend: &waxell_sandbox::LocalBackend) -> waxell_sandbox::LocalSandbox {
    let sandbox = sandbox(backend).await;
    let prelude = run(&sandbox, PRELUDE).await;
    assert!(prelude.error.is_none(), "{:?}", prelude.error);
    sandbox
}

/// Run code that sets `result` to a JSON-able value and return that value (printed as JSON).
async fn json_of(sandbox: &waxell_sandbox::LocalSandbox, code: &str) -> serde_json::Value {
    let execution = run(sandbox, &format!("{code}\nprint(json.dumps(result))")).await;
    assert!(execution.error.is_none(), "{:?}", execution.error);
    let stdout = execution.stdout();
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_filling_hits_the_caps() {
    let limits = Limits::default()
        .with_tmp_bytes(2 << 20)
        .with_max_file_bytes(4 << 20)
        .with_scratch_bytes(10 << 20);
    let backend = backend_with(config().with_limits(limits));
    let sandbox = abuse_sandbox(&backend).await;
    let code = r#"
def fill(path, chunk=1 << 20, total=64 << 20):
    with open(path, "wb") as f:
        for _ in range(total // chunk):
            f.write(b"x" * chunk)
            f.flush()
def many_files(total=64):
    # Each file stays under the per-file cap; only a cap on the whole scratch dir stops this.
    for i in range(total):
        fill(f"/home/user/part{i}", total=3 << 20)
result = {"tmp": attempt(lambda: fill("/tmp/fill")), "scratch": attempt(lambda: fill("/home/user/fill"))}
result["scratch_size"] = os.path.getsize("/home/user/fill")
os.remove("/home/user/fill")
result["many_files"] = attempt(many_files)
result["scratch_total"] = sum(e.stat().st_size for e in os.scandir("/home/user"))"#;
    let result = json_of(&sandbox, code).await;
    assert_eq!(result["tmp"], "ENOSPC");
    assert_eq!(result["scratch"], "EFBIG");
    assert!(result["scratch_size"].as_u64().unwrap() <= 4 << 20);
    let total_capped = enforced(&backend, Feature::ScratchSize);
    if total_capped {
        assert_eq!(result["many_files"], "ENOSPC", "{result}");
        assert!(result["scratch_total"].as_u64().unwrap() <= 10 << 20, "{result}");
    }
    // The host file API enforces the same caps: one file over the per-file cap, and a file that
    // fits the per-file cap but not the full scratch dir.
    assert!(sandbox.write_file("big.bin", &vec![0u8; 5 << 20]).await.is_err());
    if total_capped {
        assert!(sandbox.write_file("fits.bin", &vec![0u8; 3 << 20]).await.is_err());
    }
    // The kernel survived (CPython ignores SIGXFSZ) and can free space again.
    assert_eq!(
        eval(
            &sandbox,
            "import glob; [os.remove(p) for p in glob.glob('/home/user/part*')]; 1 + 1"
        )
        .await,
        "2"
    );
    sandbox.write_file("fits.bin", &vec![0u8; 3 << 20]).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fork_bomb_hits_the_process_cap() {
    let backend = backend_with(config().with_limits(Limits::default().with_max_processes(32)));
    // Without a pids cgroup, RLIMIT_NPROC per interpreter stands in (logged when so).
    let _ = enforced(&backend, Feature::ProcessLimit);
    let sandbox = abuse_sandbox(&backend).await;
    let bomb = "while True:\n    try:\n        os.fork()\n    except OSError:\n        pass";
    let done = std::sync::atomic::AtomicBool::new(false);
    let watch = async {
        let mut reached = false;
        while !done.load(std::sync::atomic::Ordering::SeqCst) && !reached {
            reached = sandbox.process_cap_reached();
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        reached
    };
    let bombing = async {
        let execution = run_with_timeout(&sandbox, bomb, Duration::from_millis(2000)).await;
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        execution
    };
    let (reached, execution) = tokio::join!(watch, bombing);
    assert!(reached, "pids.max reached during the bomb");
    let error = execution.error.expect("timeout reported");
    assert_eq!(error.name, "TimeoutError");
    assert!(sandbox.host_pids().len() <= 32);
    assert_eq!(eval(&sandbox, "1 + 1").await, "2", "the kernel still answers");
    // The host can still fork.
    assert!(std::process::Command::new("true").status().unwrap().success());
    let before = footprint(&sandbox);
    drop(sandbox);
    assert_gone(&before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_bomb_is_reported_as_out_of_memory() {
    let backend = backend_with(config().with_limits(Limits::default().with_memory_bytes(128 << 20)));
    // Without a memory cgroup, the host-side watchdog stands in (logged when so).
    let _ = enforced(&backend, Feature::MemoryLimit);
    let sandbox = abuse_sandbox(&backend).await;
    eval(&sandbox, "before = 1").await;
    let execution = run(
        &sandbox,
        "hog = []\nwhile True:\n    hog.append(b'x' * (8 << 20))",
    )
    .await;
    let error = execution.error.expect("OOM reported");
    assert_eq!(error.name, "OutOfMemory", "{error:?}");
    assert!(error.value.contains("128 MiB"), "{}", error.value);
    // A fresh interpreter replaces the killed one; its state is gone.
    assert_eq!(eval(&sandbox, "'before' in globals()").await, "False");
    // A child process blowing the cap is the one killed: reported, and the kernel's state survives.
    eval(&sandbox, "kept = 1").await;
    let child = "import subprocess, sys\nhog = 'b = bytearray(400 << 20)\\nb[::4096] = bytes(len(b[::4096]))'\nrc = subprocess.run([sys.executable, '-c', hog]).returncode";
    let execution = run(&sandbox, child).await;
    assert_eq!(execution.error.expect("OOM reported").name, "OutOfMemory");
    assert_eq!(eval(&sandbox, "(kept, rc)").await, "(1, -9)");
}

/// How many of `pids` share the user namespace most of them are in (all of them as root).
fn largest_user_namespace_share(pids: &[u32]) -> usize {
    let mut counts = std::collections::HashMap::new();
    for pid in pids {
        if let Ok(namespace) = std::fs::read_link(format!("/proc/{pid}/ns/user")) {
            *counts.entry(namespace).or_insert(0) += 1;
        }
    }
    counts.into_values().max().unwrap_or(0)
}

/// JavaScript and bash run as children of the kernel, in the same sandbox: the memory cap, the
/// process cap, the read-only runtime and the missing network hold for them as for Python.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_languages_are_held_by_the_same_limits() {
    if !std::path::Path::new("/usr/bin/node").exists() {
        return eprintln!("SKIP: no Node.js on this host (scripts/setup-sandbox.sh installs it)");
    }
    let limits = Limits::default()
        .with_memory_bytes(192 << 20)
        .with_max_processes(48);
    let backend = backend_with(config().with_limits(limits));
    let _ = enforced(&backend, Feature::MemoryLimit);
    let sandbox = abuse_sandbox(&backend).await;
    let js = RunOptions::default().with_language("javascript");
    let bash = RunOptions::default().with_language("bash");
    eval(&sandbox, "kept = 1").await;

    // Memory outside V8's heap, past the sandbox's cap: the runtime is killed and reported.
    let bomb = "const hog = []; while (true) hog.push(Buffer.alloc(8 << 20, 1))";
    let execution = sandbox.run_code(bomb, &js).await.unwrap();
    let error = execution.error.expect("OOM reported");
    assert_eq!(error.name, "OutOfMemory", "{error:?}");
    let again = sandbox.run_code("6 * 7", &js).await.unwrap();
    assert_eq!(
        again.text(),
        Some("42"),
        "a fresh runtime replaces the killed one"
    );

    // A fork bomb in bash stops at the process cap and is ended by the run's timeout.
    let fork_bomb = "f() { f | f & }; f; sleep 30";
    let execution = sandbox
        .run_code(fork_bomb, &bash.clone().with_timeout(Duration::from_secs(2)))
        .await
        .unwrap();
    assert_eq!(execution.error.expect("timeout").name, "TimeoutError");
    // The cap counts the processes of the sandbox's user: as root all of its cgroup's; rootless, those in its
    // user namespace, where bwrap's launcher process (in the namespace outside it) does not count.
    assert!(
        largest_user_namespace_share(&sandbox.host_pids()) <= 48,
        "{:?}",
        sandbox.host_pids()
    );

    // No network, no writes outside the writable places, from either language.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let connect =
        format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected; touch /usr/x /root/x 2>&1 | wc -l");
    let execution = sandbox.run_code(&connect, &bash).await.unwrap();
    assert_eq!(
        execution.stdout().trim(),
        "2",
        "both writes refused, no connection: {execution:?}"
    );
    let write = "try { require('fs').writeFileSync('/usr/x', '') } catch (e) { e.code }";
    let execution = sandbox.run_code(write, &js).await.unwrap();
    assert!(
        matches!(execution.text(), Some("EROFS" | "EACCES")),
        "{execution:?}"
    );
    assert_eq!(
        eval(&sandbox, "kept").await,
        "1",
        "the Python context is untouched"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_loop_is_interrupted_and_state_kept() {
    let backend = backend();
    let sandbox = abuse_sandbox(&backend).await;
    let execution = run_with_timeout(
        &sandbox,
        "kept = 1\nwhile True:\n    pass",
        Duration::from_millis(500),
    )
    .await;
    assert_eq!(execution.error.expect("timeout").name, "TimeoutError");
    assert_eq!(eval(&sandbox, "kept").await, "1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_ignoring_loop_is_killed_after_the_grace_period() {
    let backend = backend_with(config().with_interrupt_grace(Duration::from_millis(500)));
    let sandbox = abuse_sandbox(&backend).await;
    let pids_before = sandbox.host_pids();
    let started = std::time::Instant::now();
    let code = "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nlost = 1\nwhile True:\n    pass";
    let execution = run_with_timeout(&sandbox, code, Duration::from_millis(500)).await;
    let error = execution.error.expect("timeout");
    assert_eq!(error.name, "TimeoutError");
    assert!(error.value.contains("killed"), "{}", error.value);
    assert!(started.elapsed() < Duration::from_secs(5));
    for pid in pids_before {
        assert!(!process_alive(pid), "old kernel process {pid} survived");
    }
    assert_eq!(
        eval(&sandbox, "'lost' in globals()").await,
        "False",
        "a fresh interpreter"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_flood_is_truncated() {
    let limits = Limits::default()
        .with_output_chars(100_000)
        .with_output_hard_bytes(1 << 20);
    let backend = backend_with(config().with_limits(limits));
    let sandbox = abuse_sandbox(&backend).await;
    let execution = run(
        &sandbox,
        "for _ in range(1000):\n    print('y' * 1000)\nsurvived = True",
    )
    .await;
    assert_eq!(
        execution.error.as_ref().expect("truncation reported").name,
        "OutputTruncated"
    );
    assert!(execution.stdout().len() <= 100_000);
    assert!(execution.stderr().contains("output truncated"));
    assert_eq!(eval(&sandbox, "survived").await, "True");
    // Raw flood on the protocol fd, bypassing the kernel's soft cap: the host kills at the hard cap.
    let raw = "import gc\nk = [o for o in gc.get_objects() if type(o).__name__ == 'Kernel'][0]\nos.write(k.proto_out, b'{\"type\": \"done\", \"id\": 999}\\n')\nwhile True:\n    os.write(k.proto_out, b'z' * 65536)";
    let flooded = run(&sandbox, raw).await;
    let error = flooded.error.expect("hard cap reported");
    assert_eq!(error.name, "OutputTruncated");
    assert!(error.value.contains("killed"), "{}", error.value);
    assert_eq!(eval(&sandbox, "1 + 1").await, "2", "a fresh interpreter answers");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_run_timeout_option_is_respected_by_run_code() {
    let backend = backend();
    let sandbox = abuse_sandbox(&backend).await;
    let started = std::time::Instant::now();
    let execution = sandbox
        .run_code(
            "import time\ntime.sleep(30)",
            &RunOptions::default().with_timeout(Duration::from_millis(300)),
        )
        .await
        .unwrap();
    assert_eq!(execution.error.unwrap().name, "TimeoutError");
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cpu_hog_is_throttled_and_the_cpu_budget_ends_the_interpreter() {
    let backend = backend_with(config().with_limits(Limits::default().with_cpus(0.2)));
    let sandbox = abuse_sandbox(&backend).await;
    // Two busy processes for 1 s of wall time: with a 0.2 CPU quota they get about 0.2 s together.
    let code = r#"import time, multiprocessing
def spin(seconds):
    end = time.time() + seconds
    while time.time() < end:
        pass
start = os.times()
procs = [multiprocessing.Process(target=spin, args=(1.0,)) for _ in range(2)]
for p in procs: p.start()
for p in procs: p.join()
used = os.times()
result = {"cpu": used.children_user + used.children_system - start.children_user - start.children_system}"#;
    let result = json_of(&sandbox, code).await;
    let cpu = result["cpu"].as_f64().unwrap();
    if enforced(&backend, Feature::CpuQuota) {
        assert!(
            cpu < 0.6,
            "throttled to the quota: {cpu} CPU-seconds in 1 s of two spinning processes"
        );
    }
    // The interpreter's own lifetime CPU budget (1 s here) ends it; reported, then replaced.
    let backend = backend_with(config().with_limits(Limits::default().with_cpu_seconds(1)));
    let sandbox = common::sandbox(&backend).await;
    let execution = run_with_timeout(&sandbox, "while True:\n    pass", Duration::from_secs(15)).await;
    let error = execution.error.expect("death reported");
    assert_eq!(error.name, "KernelDied", "{error:?}");
    assert_eq!(eval(&sandbox, "1 + 1").await, "2");
}

/// Kernel pools shared by the whole host (AIO contexts, pseudo-terminals, keys) and per-process
/// grants that reach them (locked memory, message queues): a cell gets a clear error and the host's
/// counters do not move while the sandbox is alive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_wide_kernel_pools_are_untouched() {
    let read = |path: &str| std::fs::read_to_string(path).unwrap().trim().to_owned();
    let aio_before = read("/proc/sys/fs/aio-nr");
    let pty_before = read("/proc/sys/kernel/pty/nr");
    let backend = backend();
    let sandbox = abuse_sandbox(&backend).await;
    let keys_before = read("/proc/key-users")
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("{}:", sandbox.uid())))
        .map(str::to_owned);
    let code = r#"held = []
def check(r, what):
    if r < 0:
        raise OSError(ctypes.get_errno(), what)
    return r
def io_setup():
    ctx = ctypes.c_ulong(0)
    check(_libc.syscall(ctypes.c_long(206), ctypes.c_long(1024), ctypes.byref(ctx)), "io_setup")
    held.append(ctx)
def openpty():
    held.extend(os.openpty())
def mlock():
    buf = ctypes.create_string_buffer(4096)
    held.append(buf)
    check(_libc.mlock(buf, ctypes.c_size_t(4096)), "mlock")
def mq_open():
    flags = ctypes.c_long(os.O_CREAT | os.O_RDWR)
    held.append(check(_libc.syscall(ctypes.c_long(240), b"waxell-q", flags, ctypes.c_long(0o600), None), "mq_open"))
def repeat(fn, n):
    for _ in range(n):
        fn()
result = {
  "io_setup": attempt(lambda: repeat(io_setup, 64)),
  "io_uring_setup": syscall(425, 1, 0),
  "openpty": attempt(lambda: repeat(openpty, 16)),
  "ptmx": attempt(lambda: os.open("/dev/ptmx", os.O_RDWR)),
  "mlock": attempt(mlock),
  "mlockall": syscall(151, 3),
  "mq_open": attempt(mq_open),
  "add_key": syscall(248, 0, 0, 0, 0, 0),
  "request_key": syscall(249, 0, 0, 0, 0),
  "keyctl": syscall(250, 0, 0, 0, 0, 0),
}"#;
    let result = json_of(&sandbox, code).await;
    // Checked while the cell still holds whatever it got.
    assert_eq!(read("/proc/sys/fs/aio-nr"), aio_before, "host AIO pool: {result}");
    assert_eq!(
        read("/proc/sys/kernel/pty/nr"),
        pty_before,
        "host pty pool: {result}"
    );
    let uid = format!("{}:", sandbox.uid());
    let keys_of_uid = || {
        read("/proc/key-users")
            .lines()
            .find(|l| l.trim_start().starts_with(&uid))
            .map(str::to_owned)
    };
    if rootless(&backend) {
        // Rootless, the sandbox is the invoking user (host report: "uid N inside maps to the invoking
        // user"), who may own keys of its own (a login session keyring): the cell adds none.
        assert_eq!(
            keys_of_uid(),
            keys_before,
            "the user's key count did not move: {result}"
        );
    } else {
        assert_eq!(keys_of_uid(), None, "the sandbox uid owns no keys: {result}");
    }
    let expected = [
        ("io_setup", "ENOSYS"),
        ("io_uring_setup", "EPERM"),
        ("openpty", "ENOENT"),
        ("ptmx", "ENOENT"),
        ("mlock", "EPERM"),
        ("mlockall", "EPERM"),
        ("mq_open", "EPERM"),
        ("add_key", "EPERM"),
        ("request_key", "EPERM"),
        ("keyctl", "EPERM"),
    ];
    for (key, outcome) in expected {
        assert_eq!(result[key], outcome, "{key}: {result}");
    }
    assert_eq!(eval(&sandbox, "1 + 1").await, "2");
}

/// The attack of issue 33 on the home directory, with the default limits: 300,000 empty files,
/// then files each under the per-file cap until the disk would be full. Both end at the home tmpfs's
/// caps, as root (a host tmpfs) and rootless (a tmpfs in the sandbox's own user and mount
/// namespaces: the invoking user's disk is never touched), and the host's file calls still work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn home_flood_and_fill_hit_the_default_caps() {
    let backend = backend();
    assert!(enforced(&backend, Feature::ScratchSize));
    let limits = Limits::default();
    let sandbox = abuse_sandbox(&backend).await;
    let code = r#"def flood(n=300_000):
    made = 0
    try:
        for i in range(n):
            open(f"/home/user/i{i}", "w").close()
            made += 1
    except OSError as e:
        return [errno.errorcode.get(e.errno, str(e.errno)), made]
    return ["OK", made]
def fill(chunk=8 << 20):
    total = 0
    try:
        for i in range(1000):
            with open(f"/home/user/big{i}", "wb") as f:
                f.write(b"x" * chunk)
            total += chunk
    except OSError as e:
        return [errno.errorcode.get(e.errno, str(e.errno)), total]
    return ["OK", total]
inodes = flood()
for i in range(inodes[1]):
    os.remove(f"/home/user/i{i}")
size = fill()
result = {"inodes": inodes, "size": size}"#;
    let result = json_of(&sandbox, code).await;
    eprintln!("home flood and fill: {result}");
    assert_eq!(result["inodes"][0], "ENOSPC", "{result}");
    assert!(
        result["inodes"][1].as_u64().unwrap() <= limits.tmpfs_inodes,
        "{result}"
    );
    assert_eq!(result["size"][0], "ENOSPC", "{result}");
    assert!(
        result["size"][1].as_u64().unwrap() <= limits.scratch_bytes,
        "{result}"
    );
    // The home is full: the host's write is refused by the same cap; after a cell frees space it
    // goes through (through the sandbox's mount namespace).
    assert!(sandbox
        .write_file("one-more.bin", &vec![0u8; 16 << 20])
        .await
        .is_err());
    run(
        &sandbox,
        "import glob; [os.remove(p) for p in glob.glob('/home/user/big*')]",
    )
    .await;
    sandbox.write_file("one-more.bin", b"fits").await.unwrap();
    assert_eq!(
        eval(&sandbox, "open('/home/user/one-more.bin').read()").await,
        "fits"
    );
}

/// Empty files cost no bytes, only inodes and dentries: every tmpfs of the sandbox caps their count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tmpfs_inodes_are_capped() {
    let backend = backend_with(config().with_limits(Limits::default().with_tmpfs_inodes(1000)));
    // The tmpfs mounts are in the sandbox's own mount namespace (rootless, with its own user
    // namespace: the host report says "mounted in the sandbox's own user and mount namespaces").
    assert!(enforced(&backend, Feature::ScratchSize));
    let sandbox = abuse_sandbox(&backend).await;
    let code = r#"def touch_many(d, n=3000):
    made = 0
    try:
        for i in range(n):
            open(f"{d}/f{i}", "w").close()
            made += 1
    except OSError as e:
        return [errno.errorcode.get(e.errno, str(e.errno)), made]
    return ["OK", made]
result = {d: touch_many(d) for d in ["/tmp", "/home/user", "/dev/shm"]}
for d, (_, made) in result.items():
    for i in range(made):
        os.remove(f"{d}/f{i}")"#;
    let result = json_of(&sandbox, code).await;
    for dir in ["/tmp", "/home/user", "/dev/shm"] {
        assert_eq!(result[dir][0], "ENOSPC", "{dir}: {result}");
        assert!(result[dir][1].as_u64().unwrap() < 1000, "{dir}: {result}");
    }
    // Host side: the home tmpfs's inode table has exactly the configured size, seen through a
    // sandbox process's root (as root and rootless alike; the launchers' root is the host's).
    let sizes: Vec<String> = sandbox
        .host_pids()
        .iter()
        .filter_map(|pid| {
            let out = std::process::Command::new("stat")
                .args(["-f", "-c", "%T %c"])
                .arg(format!("/proc/{pid}/root/home/user"))
                .output()
                .ok()?;
            let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            text.strip_prefix("tmpfs ").map(str::to_owned)
        })
        .collect();
    assert!(
        !sizes.is_empty() && sizes.iter().all(|s| s == "1000"),
        "{sizes:?}"
    );
    assert_eq!(eval(&sandbox, "1 + 1").await, "2");
}

/// inotify instances are a per-uid pool: one sandbox exhausting its own leaves another untouched
/// (sandboxes never share a uid).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inotify_exhaustion_stays_inside_one_sandbox() {
    let backend = backend();
    if rootless(&backend) {
        eprintln!("rootless: NOT ENFORCED: every sandbox runs as this user, so per-uid pools (inotify) are shared (docs/sandbox.md)");
        return;
    }
    let greedy = abuse_sandbox(&backend).await;
    let other = abuse_sandbox(&backend).await;
    assert_ne!(greedy.uid(), other.uid());
    let code = r#"held = []
def grab():
    while True:
        fd = _libc.inotify_init()
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init")
        held.append(fd)
result = [attempt(grab), len(held)]"#;
    let result = json_of(&greedy, code).await;
    assert_eq!(result[0], "EMFILE", "{result}");
    assert!(result[1].as_u64().unwrap() > 0);
    let one = "result = attempt(lambda: os.close(_libc.inotify_init()) if True else None)";
    assert_eq!(json_of(&other, one).await, "OK");
}

/// Every rlimit is set, none inherited: the host process's own (MEMLOCK 8 MiB, MSGQUEUE 800 KiB,
/// SIGPENDING and RTTIME sized for the host, unlimited hard STACK) must not reach the sandbox.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rlimit_is_set_explicitly() {
    let backend = backend();
    let sandbox = abuse_sandbox(&backend).await;
    let code = r#"import re
result = {}
for line in open("/proc/self/limits").read().splitlines()[1:]:
    parts = re.split(r"\s{2,}", line.strip())
    result[parts[0]] = parts[1:3]"#;
    let limits = json_of(&sandbox, code).await;
    let expected = [
        ("Max realtime priority", "0"),
        ("Max nice priority", "0"),
        ("Max locked memory", "0"),
        ("Max msgqueue size", "0"),
        ("Max realtime timeout", "0"),
        ("Max core file size", "0"),
        ("Max pending signals", "1024"),
        ("Max stack size", "8388608"),
        ("Max open files", "256"),
        ("Max processes", "128"),
    ];
    for (name, value) in expected {
        assert_eq!(
            limits[name],
            serde_json::json!([value, value]),
            "{name}: {limits}"
        );
    }
}

/// A uid range of its own, so no other test process takes these uids meanwhile.
const LEASE_TEST_BASE: u32 = 0x7000_0000 + 60_000;
const LEASE_TEST_SPAN: u32 = 24;
const LEASE_HELPER_VAR: &str = "WAXELL_UID_LEASE_HELPER";

fn lease_test_config() -> waxell_sandbox::LocalConfig {
    let mut config = config();
    config.uid_base = LEASE_TEST_BASE;
    config.uid_span = LEASE_TEST_SPAN;
    config
}

/// Live sandboxes never share a uid: not within one process, not across processes on the host
/// (with uids hashed into 24 slots, 24 sandboxes would collide almost surely); the 25th is refused
/// with a clear error; a dead holder's uids are reclaimed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_sandboxes_never_share_a_uid() {
    use std::io::BufRead;
    let backend = backend_with(lease_test_config());
    if rootless(&backend) {
        eprintln!("rootless: NOT ENFORCED: every sandbox runs as this user; uid leases are for the root launcher (docs/sandbox.md)");
        return;
    }
    let mut mine = Vec::new();
    for _ in 0..LEASE_TEST_SPAN / 2 {
        mine.push(sandbox(&backend).await);
    }
    let my_uids: std::collections::BTreeSet<u32> = mine.iter().map(|s| s.uid()).collect();
    assert_eq!(
        my_uids.len(),
        mine.len(),
        "distinct uids in one process: {my_uids:?}"
    );

    // Another process (this test binary running the helper below) takes the other half.
    let mut helper = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "uid_lease_helper", "--ignored", "--nocapture"])
        .env(LEASE_HELPER_VAR, "1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = std::io::BufReader::new(helper.stdout.take().unwrap());
    let line = stdout
        .lines()
        .map(Result::unwrap)
        .find(|l| l.starts_with("UIDS "))
        .expect("the helper reports its uids");
    let their_uids: std::collections::BTreeSet<u32> = serde_json::from_str(&line[5..]).unwrap();
    assert_eq!(their_uids.len() as u32, LEASE_TEST_SPAN / 2);
    assert!(
        my_uids.is_disjoint(&their_uids),
        "two processes share uids: {my_uids:?} {their_uids:?}"
    );
    for uid in my_uids.iter().chain(&their_uids) {
        assert!((LEASE_TEST_BASE..LEASE_TEST_BASE + LEASE_TEST_SPAN).contains(uid));
    }

    let refused = backend
        .create_sandbox(&waxell::sandbox::SandboxOptions::default())
        .await
        .expect_err("every uid is taken");
    assert!(
        matches!(
            &refused,
            waxell::sandbox::SandboxError::LimitExceeded {
                limit: waxell::sandbox::LimitKind::Sandboxes,
                ..
            }
        ),
        "{refused}"
    );
    assert!(refused.to_string().contains("in use"), "{refused}");

    // The helper dies without cleaning up: the kernel drops its locks and its uids come back.
    helper.kill().unwrap();
    helper.wait().unwrap();
    let next = sandbox(&backend).await;
    assert!(their_uids.contains(&next.uid()), "{} reclaimed", next.uid());
    drop((next, mine));
    // Sweeps the dead helper's cgroups and directories.
    drop(backend_with(lease_test_config()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "helper process of live_sandboxes_never_share_a_uid"]
async fn uid_lease_helper() {
    if std::env::var_os(LEASE_HELPER_VAR).is_none() {
        return;
    }
    let backend = backend_with(lease_test_config());
    let mut held = Vec::new();
    for _ in 0..LEASE_TEST_SPAN / 2 {
        held.push(sandbox(&backend).await);
    }
    let uids: Vec<u32> = held.iter().map(|s| s.uid()).collect();
    println!("UIDS {}", serde_json::to_string(&uids).unwrap());
    // Hold them until the parent kills this process.
    tokio::task::spawn_blocking(|| std::io::Read::read_to_end(&mut std::io::stdin(), &mut Vec::new()))
        .await
        .unwrap()
        .unwrap();
}

/// Protocol integrity: cell code that writes a `done` frame on the kernel's protocol fd (the real
/// run id, from the main thread or a background thread) neither ends its run early nor escapes
/// the timeout, and frames it writes for later runs (guessing their ids) are never shown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_protocol_frames_are_not_believed() {
    let backend = backend();
    let sandbox = abuse_sandbox(&backend).await;
    let setup = r#"import gc, threading, time
k = [o for o in gc.get_objects() if type(o).__name__ == "Kernel"][0]
def frame(**msg):
    os.write(k.proto_out, (json.dumps(msg) + "\n").encode())
def forge(run_id):
    frame(type="result", id=run_id, is_main=True, data={"text/plain": "FORGED"})
    frame(type="done", id=run_id, execution_count=99, truncated=False)
    for guess in range(1, 64):
        frame(type="stream", id=run_id + guess, name="stdout", text="FORGED-LATER")
        frame(type="done", id=run_id + guess, execution_count=99, truncated=False)"#;
    eval(&sandbox, &format!("{setup}\n1")).await;
    for (how, code) in [
        ("main thread", "forge(k.current_id)\ntime.sleep(5)\nfinished = 1"),
        (
            "background thread",
            "t = threading.Thread(target=lambda rid=k.current_id: [forge(rid) or time.sleep(0.05) for _ in range(20)])\nt.start()\ntime.sleep(5)\nfinished = 2",
        ),
    ] {
        let started = std::time::Instant::now();
        let execution = run_with_timeout(&sandbox, code, Duration::from_secs(1)).await;
        let elapsed = started.elapsed();
        let error = execution.error.clone().expect("the timeout still applies");
        assert_eq!(error.name, "TimeoutError", "{how}: {execution:?}");
        assert!(elapsed >= Duration::from_secs(1), "{how}: ended early after {elapsed:?}");
        assert!(elapsed < Duration::from_secs(4), "{how}: {elapsed:?}");
        assert_eq!(eval(&sandbox, "'finished' in globals()").await, "False", "{how}");
    }
    // Later runs show nothing of the frames written for guessed ids.
    eval(&sandbox, "t.join()\n1").await;
    let later = run(&sandbox, "print('real')\n7").await;
    assert_eq!(later.stdout(), "real\n");
    assert_eq!(later.text(), Some("7"));
    assert!(later.error.is_none());
}
