//! Escapes: what the code must never see or touch of the host (identity, files, environment,
//! network, processes, namespaces, sysctls, the host's layout).

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identity_is_never_root() {
    let backend = backend();
    let sandbox = abuse_sandbox(&backend).await;
    let status = eval(&sandbox, "open('/proc/self/status').read()").await;
    let field = |name: &str| {
        status
            .split("\\n")
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or_else(|| panic!("{name} in {status}"))
            .replace("\\t", " ")
            .trim()
            .to_owned()
    };
    let uid = sandbox.uid().to_string();
    assert_eq!(
        field("Uid:").split_whitespace().collect::<Vec<_>>(),
        [uid.as_str(); 4]
    );
    assert_eq!(
        field("Gid:").split_whitespace().collect::<Vec<_>>(),
        [uid.as_str(); 4]
    );
    if rootless(&backend) {
        // An unprivileged launcher cannot drop its supplementary groups: they show as the
        // sandbox's own gid or as the overflow gid, and the host report says so.
        assert!(!enforced(&backend, Feature::Groups));
        for group in field("Groups:").split_whitespace() {
            assert!(group == uid || group == "65534", "group {group}");
        }
    } else {
        assert_eq!(field("Groups:"), "");
    }
    for caps in ["CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:"] {
        assert_eq!(field(caps), "0000000000000000", "{caps}");
    }
    assert_eq!(field("NoNewPrivs:"), "1");
    assert_eq!(field("Seccomp:"), "2");
    // setresuid back to 0 fails (rootless: uid 0 is not even mapped in the namespace, EINVAL).
    let setresuid = eval(&sandbox, "attempt(lambda: os.setresuid(0, 0, 0))").await;
    if rootless(&backend) {
        assert!(setresuid == "EPERM" || setresuid == "EINVAL", "{setresuid}");
    } else {
        assert_eq!(setresuid, "EPERM");
    }
    // Host side: no process of the sandbox except the root launchers (bwrap) has a zero id.
    for pid in sandbox.host_pids() {
        let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
            continue;
        };
        if status.lines().next().unwrap_or("").contains("bwrap") {
            continue;
        }
        let uid_line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
        assert!(
            !uid_line.split_whitespace().skip(1).any(|id| id == "0"),
            "host pid {pid}: {uid_line}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_secret_files_are_invisible() {
    let backend = backend();
    let sandbox = abuse_sandbox(&backend).await;
    let project = std::env::current_dir().unwrap();
    let code = format!(
        r#"paths = ["/etc/shadow", "/root/.ssh", "/root/.bash_history", "/var/log", "/sys/class", "{}", "/etc/hostname"]
result = {{p: attempt(lambda p=p: os.stat(p)) for p in paths}}
result["proc1_environ"] = attempt(lambda: open("/proc/1/environ").read())
result["proc1_root"] = attempt(lambda: os.listdir("/proc/1/root"))"#,
        project.display()
    );
    let result = json_of(&sandbox, &code).await;
    for (path, outcome) in result.as_object().unwrap() {
        let expected = if !path.starts_with("proc1") {
            "ENOENT"
        } else if rootless(&backend) {
            // Pid 1 is the sandbox's own bwrap init, run by the same user: readable, and holding
            // nothing (checked below).
            "OK"
        } else {
            "EACCES"
        };
        assert_eq!(outcome, expected, "{path}");
    }
    if rootless(&backend) {
        let environ = eval(&sandbox, "open('/proc/1/environ').read()").await;
        assert_eq!(
            environ, r"PATH=/usr/bin:/bin\x00",
            "the launcher's environment is cleared"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_environment_does_not_leak() {
    // Planted in this (host) process before the backend starts anything.
    std::env::set_var("WAXELL_FAKE_OPENAI_API_KEY", "sk-fake-host-secret-123");
    let backend = backend();
    let sandbox = abuse_sandbox(&backend).await;
    let environ = json_of(&sandbox, "result = dict(os.environ)").await;
    let keys: Vec<&str> = environ.as_object().unwrap().keys().map(String::as_str).collect();
    let allowed = [
        "PATH",
        "HOME",
        "USER",
        "TMPDIR",
        "LANG",
        "MPLBACKEND",
        "MPLCONFIGDIR",
        "IPYTHONDIR",
        "OPENBLAS_NUM_THREADS",
        "OMP_NUM_THREADS",
        "PYTHONUNBUFFERED",
        "PYTHONDONTWRITEBYTECODE",
        "PWD",
        "LC_CTYPE",
    ];
    for key in &keys {
        assert!(
            allowed.contains(key),
            "unexpected variable {key} in the sandbox: {keys:?}"
        );
    }
    let everything = eval(
        &sandbox,
        "open('/proc/1/cmdline').read() + open('/proc/self/environ').read() + str(os.environ)",
    )
    .await;
    assert!(!everything.contains("sk-fake-host-secret"), "host secret visible");
    let subprocess_env = eval(
        &sandbox,
        "subprocess.run(['env'], capture_output=True, text=True).stdout",
    )
    .await;
    assert!(!subprocess_env.contains("WAXELL_FAKE_OPENAI_API_KEY"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_outside_scratch_fail_and_tmp_is_private() {
    let backend = backend();
    let sandbox = abuse_sandbox(&backend).await;
    let prefix = backend.python().prefix.display().to_string();
    let base = backend.python().base_prefix.display().to_string();
    let marker = format!("waxell-private-tmp-{}", std::process::id());
    let code = format!(
        r#"targets = ["/usr/x", "{prefix}/x", "{base}/x", "/etc/x", "/home/x", "/opt/waxell/x", "/x", "/proc/sys/kernel/hostname"]
result = {{t: attempt(lambda t=t: write(t)) for t in targets}}
result["tmp"] = attempt(lambda: write("/tmp/{marker}"))
result["home"] = attempt(lambda: write("/home/user/ok.txt"))"#
    );
    let result = json_of(&sandbox, &code).await;
    for (target, outcome) in result.as_object().unwrap() {
        match target.as_str() {
            "tmp" | "home" => assert_eq!(outcome, "OK", "{target}"),
            t if t.starts_with("/usr") || t.starts_with(&prefix) => assert_eq!(outcome, "EROFS", "{target}"),
            // Only parts of the base installation are bound: its directory is bwrap's, root 0755.
            t if t.starts_with(&base) => {
                assert!(outcome == "EROFS" || outcome == "EACCES", "{target}: {outcome}")
            }
            "/proc/sys/kernel/hostname" => {
                assert!(outcome == "EACCES" || outcome == "EROFS", "{target}: {outcome}")
            }
            // Rootless, bwrap's own directories belong to the sandbox user and the root is
            // remounted read-only instead.
            _ if rootless(&backend) => assert_eq!(outcome, "EROFS", "{target}"),
            _ => assert_eq!(outcome, "EACCES", "{target}"),
        }
    }
    assert!(
        !std::env::temp_dir().join(&marker).exists(),
        "the sandbox's /tmp is private"
    );
    assert!(!std::path::Path::new("/x").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_network_at_all() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let abstract_name = format!("waxell-abuse-{}", std::process::id());
    let abstract_listener = {
        use std::os::linux::net::SocketAddrExt;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(abstract_name.as_bytes()).unwrap();
        std::os::unix::net::UnixListener::bind_addr(&addr).unwrap()
    };
    abstract_listener.set_nonblocking(true).unwrap();
    let backend = backend();
    let sandbox = abuse_sandbox(&backend).await;
    let code = format!(
        r#"def tcp(host, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM); s.settimeout(2); s.connect((host, port))
def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b"x", ("8.8.8.8", 53))
def dns():
    try:
        socket.getaddrinfo("example.com", 80)
    except socket.gaierror as e:
        raise OSError(errno.EAGAIN, str(e))
def abstract():
    s = socket.socket(socket.AF_UNIX); s.connect("\0{abstract_name}")
result = {{
  "host_loopback": attempt(lambda: tcp("127.0.0.1", {port})),
  "internet": attempt(lambda: tcp("1.1.1.1", 443)),
  "ipv6": attempt(lambda: socket.socket(socket.AF_INET6)),
  "udp": attempt(udp),
  "dns": attempt(dns),
  "netlink": attempt(lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)),
  "packet": attempt(lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW)),
  "alg": attempt(lambda: socket.socket(38, socket.SOCK_SEQPACKET)),
  "abstract_unix": attempt(abstract),
  "unix_pair": attempt(lambda: socket.socketpair()),
  "interfaces": sorted(os.listdir("/sys/class/net")) if os.path.exists("/sys/class/net") else [],
}}"#
    );
    let result = json_of(&sandbox, &code).await;
    for key in [
        "host_loopback",
        "internet",
        "ipv6",
        "udp",
        "netlink",
        "packet",
        "alg",
    ] {
        assert_eq!(result[key], "EPERM", "{key}: {result}");
    }
    assert_eq!(result["dns"], "EAGAIN");
    assert_eq!(result["abstract_unix"], "ECONNREFUSED", "own network namespace");
    assert_eq!(result["unix_pair"], "OK", "local unix sockets keep working");
    // The host saw nothing.
    assert!(
        listener.accept().is_err(),
        "host loopback listener must accept 0 connections"
    );
    assert!(
        abstract_listener.accept().is_err(),
        "host abstract socket must accept 0 connections"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_processes_are_invisible() {
    let backend = backend();
    let sandbox = abuse_sandbox(&backend).await;
    let code = r#"pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
result = {
  "pids": pids,
  "kill_init": attempt(lambda: os.kill(1, signal.SIGKILL)),
  "kallsyms_zeroed": all(l.startswith("0000000000000000") for l in open("/proc/kallsyms").read().splitlines()[:50]),
  "dmesg": syscall(103, 3, 0, 0),
}"#;
    let result = json_of(&sandbox, code).await;
    let pids = result["pids"].as_array().unwrap();
    assert!(pids.len() <= 3, "only the sandbox's own processes: {pids:?}");
    if rootless(&backend) {
        // Init is the sandbox user's own bwrap: the kernel ignores SIGKILL sent to a namespace's
        // init from inside it, so the call "succeeds" and nothing happens.
        assert!(result["kill_init"] == "OK" || result["kill_init"] == "EPERM");
        assert_eq!(eval(&sandbox, "1 + 1").await, "2", "the sandbox's init survived");
    } else {
        assert_eq!(result["kill_init"], "EPERM");
    }
    assert_eq!(result["kallsyms_zeroed"], true);
    assert_eq!(result["dmesg"], "EPERM");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ptrace_is_denied() {
    let backend = backend();
    let sandbox = abuse_sandbox(&backend).await;
    let code = r#"child = subprocess.Popen(["sleep", "30"])
result = {
  "attach_init": syscall(101, 16, 1, 0, 0),
  "attach_child": syscall(101, 16, child.pid, 0, 0),
  "traceme": syscall(101, 0, 0, 0, 0),
  "vm_readv": syscall(310, child.pid, 0, 0, 0, 0, 0),
}
child.kill()"#;
    let result = json_of(&sandbox, code).await;
    for (key, outcome) in result.as_object().unwrap() {
        assert_eq!(outcome, "EPERM", "{key}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_nested_namespaces_mounts_or_setuid() {
    let backend = backend();
    let sandbox = abuse_sandbox(&backend).await;
    let code = r#"su = subprocess.run(["su", "-c", "id"], capture_output=True, input=b"", timeout=10) if os.path.exists("/usr/bin/su") else None
result = {
  "unshare_user": syscall(272, 0x10000000),
  "unshare_net": syscall(272, 0x40000000),
  "clone_newuser": syscall(56, 0x10000000 | 17, 0, 0, 0, 0),
  "clone_newns": syscall(56, 0x00020000 | 17, 0, 0, 0, 0),
  "clone3": syscall(435, 0, 0),
  "setns": syscall(308, 0, 0),
  "mount_tmpfs": syscall(165, 0, 0, 0, 0, 0),
  "bpf": syscall(321, 0, 0, 0),
  "perf_event_open": syscall(298, 0, 0, -1, -1, 0),
  "io_uring_setup": syscall(425, 1, 0),
  "keyctl": syscall(250, 0, 0, 0, 0, 0),
  "x32_getpid": syscall(0x40000000 | 39),
  "su_rc": None if su is None else su.returncode,
  "threads_work": attempt(lambda: __import__("threading").Thread(target=lambda: None).start()),
  "subprocess_works": subprocess.run(["true"]).returncode,
}"#;
    let result = json_of(&sandbox, code).await;
    for key in [
        "unshare_user",
        "unshare_net",
        "clone_newuser",
        "clone_newns",
        "setns",
        "mount_tmpfs",
        "bpf",
        "perf_event_open",
        "io_uring_setup",
        "keyctl",
        "x32_getpid",
    ] {
        assert_eq!(result[key], "EPERM", "{key}: {result}");
    }
    assert_eq!(result["clone3"], "ENOSYS");
    assert_ne!(result["su_rc"], 0, "su must not elevate");
    assert_eq!(result["threads_work"], "OK");
    assert_eq!(result["subprocess_works"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sysctls_are_not_writable() {
    let backend = backend();
    let sandbox = abuse_sandbox(&backend).await;
    let host_value = std::fs::read_to_string("/proc/sys/kernel/printk_ratelimit_burst").unwrap();
    let code = r#"burst = open("/proc/sys/kernel/printk_ratelimit_burst").read()
result = {
  "core_pattern_writable": os.access("/proc/sys/kernel/core_pattern", os.W_OK),
  "write_same_value": attempt(lambda: write("/proc/sys/kernel/printk_ratelimit_burst", burst)),
}"#;
    let result = json_of(&sandbox, code).await;
    assert_eq!(result["core_pattern_writable"], false);
    let outcome = result["write_same_value"].as_str().unwrap();
    assert!(outcome == "EACCES" || outcome == "EROFS", "{outcome}");
    assert_eq!(
        std::fs::read_to_string("/proc/sys/kernel/printk_ratelimit_burst").unwrap(),
        host_value
    );
    // Never touch core_pattern itself; check it is the host's untouched value.
    let mut core = String::new();
    std::fs::File::open("/proc/sys/kernel/core_pattern")
        .unwrap()
        .read_to_string(&mut core)
        .unwrap();
    assert!(!core.contains("home/user"));
}

/// What a cell learns about the host: bwrap's options (host paths) are not in /proc/1/cmdline,
/// and of the Python installation only what the interpreter needs is visible.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_layout_stays_hidden() {
    let backend = backend();
    let sandbox = abuse_sandbox(&backend).await;
    let cmdline = eval(&sandbox, "open('/proc/1/cmdline').read()").await;
    let scratch = sandbox.scratch_dir().display().to_string();
    assert!(!cmdline.contains(&scratch), "host scratch path in {cmdline}");
    assert!(!cmdline.contains("--bind"), "bwrap options in {cmdline}");
    let python = backend.python().clone();
    let base = python.base_prefix.display().to_string();
    if !python.base_prefix.starts_with("/usr") {
        // The base installation shows only bin/<the binary> and lib/; its own site-packages are
        // empty when a venv is used, and its neighbours (other versions, ...) are absent.
        let code = format!(
            r#"base = "{base}"
result = {{
  "base": sorted(os.listdir(base)),
  "bin": sorted(os.listdir(base + "/bin")),
  "neighbours": sorted(os.listdir(os.path.dirname(base))),
  "base_site": sorted(os.listdir(sys.base_prefix + "/lib/python%d.%d/site-packages" % sys.version_info[:2]))
               if sys.prefix != sys.base_prefix else [],
}}"#
        );
        let seen = json_of(&sandbox, &code).await;
        assert_eq!(seen["base"], serde_json::json!(["bin", "lib"]), "{seen}");
        // The binary and the symlinks leading to it; no pip, no other tools.
        let bin = seen["bin"].as_array().unwrap();
        assert!(
            !bin.is_empty() && bin.iter().all(|b| b.as_str().unwrap().starts_with("python")),
            "{seen}"
        );
        let own_name = python
            .base_prefix
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        assert_eq!(seen["neighbours"], serde_json::json!([own_name]), "{seen}");
        assert_eq!(seen["base_site"], serde_json::json!([]), "{seen}");
    }
    // Packages of the venv still import (numpy when the setup script installed it).
    assert_eq!(eval(&sandbox, "import json, sqlite3; 'ok'").await, "ok");
}

/// An interpreter whose prefix is `/` or a home directory is refused: binding parts of it would
/// show the home inside every sandbox.
#[test]
fn a_prefix_that_is_a_home_or_the_root_is_refused() {
    let dir = std::env::temp_dir().join(format!("waxell-fake-python-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    for prefix in ["/", home.as_str()] {
        let fake = dir.join("python3");
        let probe = serde_json::json!({
            "executable": fake, "prefix": prefix, "base_prefix": prefix, "version": "3.11.2", "recent": true,
            "stdlib": [format!("{prefix}/lib/python3.11")], "site": [], "libpython": null,
        });
        std::fs::write(&fake, format!("#!/bin/sh\necho '{probe}'\n")).unwrap();
        std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let error = waxell_sandbox::LocalBackend::new(config().with_python(&fake)).expect_err("refused");
        assert!(error.to_string().contains("home directory"), "{prefix}: {error}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Files the host keeps under `/usr`, `/opt` and `/etc` that no package the sandbox needs owns (an
/// app deployed under `/usr/local` with its `.env`, a stray file in `/usr/lib`, a certificate
/// directory's extra file) are not in the sandbox: it sees the sandbox root (the needed packages'
/// files), not the host's `/usr`. As root the test plants such files; as any user it checks the
/// host's own `/usr/local` files. Python, IPython, numpy, Node.js, TypeScript, bash, Java and a
/// shell command still run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_files_no_needed_package_owns_are_unreadable() {
    struct Planted(Vec<std::path::PathBuf>);
    impl Drop for Planted {
        fn drop(&mut self) {
            for path in self.0.iter().rev() {
                let _ = std::fs::remove_file(path).or_else(|_| std::fs::remove_dir(path));
            }
        }
    }
    let tag = format!("waxell-planted-{}", std::process::id());
    let mut planted = Planted(Vec::new());
    let mut secrets: Vec<String> = Vec::new();
    if euid() == 0 {
        for dir in [
            format!("/usr/local/{tag}"),
            "/usr/lib".into(),
            "/usr/lib/x86_64-linux-gnu".into(),
            "/usr/bin".into(),
            format!("/opt/{tag}"),
            "/etc".into(),
            "/etc/ssl/certs".into(),
            "/etc/fonts".into(),
        ] {
            let dir = std::path::PathBuf::from(dir);
            if !dir.exists() && std::fs::create_dir_all(&dir).is_ok() {
                planted.0.push(dir.clone());
            }
            let file = dir.join(if dir.ends_with(&tag) {
                ".env".to_owned()
            } else {
                format!("{tag}.txt")
            });
            if std::fs::write(&file, "SECRET=planted\n").is_ok() {
                planted.0.push(file.clone());
                secrets.push(file.display().to_string());
            }
        }
        assert!(secrets.len() >= 6, "planted only {secrets:?}");
    }
    // The host's own files under /usr/local (no package owns any), whoever runs the test.
    let mut stack = vec![std::path::PathBuf::from("/usr/local")];
    let mut host_local = 0;
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            match entry.file_type() {
                Ok(t) if t.is_dir() => stack.push(path),
                Ok(t) if t.is_file() && host_local < 50 && std::fs::File::open(&path).is_ok() => {
                    host_local += 1;
                    secrets.push(path.display().to_string());
                }
                _ => {}
            }
        }
    }
    eprintln!(
        "{} host files checked ({host_local} of the host's own under /usr/local)",
        secrets.len()
    );

    let backend = backend();
    let sandbox = abuse_sandbox(&backend).await;
    let result = json_of(
        &sandbox,
        &format!(
            "paths = {}\nresult = {{p: attempt(lambda p=p: open(p).read()) for p in paths}}\n\
             result['/usr/local listing'] = sorted(os.listdir('/usr/local')) if os.path.isdir('/usr/local') else []\n\
             result['/opt listing'] = sorted(os.listdir('/opt'))",
            serde_json::to_string(&secrets).unwrap()
        ),
    )
    .await;
    for secret in &secrets {
        assert_eq!(
            result[secret], "ENOENT",
            "{secret} is readable in the sandbox: {result}"
        );
    }
    assert_eq!(result["/usr/local listing"], serde_json::json!([]), "{result}");
    assert_eq!(result["/opt listing"], serde_json::json!(["waxell"]), "{result}");

    // What the sandbox runs still runs.
    let libraries = "import IPython, numpy, pandas, matplotlib.pyplot as plt\n\
                     (get_ipython() is not None, int(numpy.arange(4).sum()), len(pandas.DataFrame({'a': [1, 2]})))";
    assert_eq!(eval(&sandbox, libraries).await, "(True, 6, 2)");
    let shell = "import subprocess\nprint(subprocess.run(['sh', '-c', 'test $(ls /usr/bin | wc -l) -gt 100 && echo 1; \
                 echo abc | sed s/b/x/ | tr a-z A-Z; date +%Y | wc -c; ps -o pid= -p 1 | xargs; \
                 printf x | sha256sum | cut -c1-8'], capture_output=True, text=True).stdout, end='')";
    let execution = run(&sandbox, shell).await;
    assert_eq!(execution.stdout(), "1\nAXC\n5\n1\n2d711642\n", "{execution:?}");
    let output = sandbox
        .start_process(&waxell::sandbox::ProcessSpec::shell(
            "id -u; command -v python3 >/dev/null && echo python; find /usr/share/zoneinfo -maxdepth 0; \
             ls /etc/ssl/certs | grep -c pem | awk '{print ($1 > 10)}'; tar --version | head -1 | cut -d' ' -f1",
        ))
        .await
        .expect("start a command")
        .wait()
        .await;
    assert_eq!(output.exit.exit_code, 0, "{output:?}");
    assert_eq!(
        output.stdout_text(),
        format!("{}\npython\n/usr/share/zoneinfo\n1\ntar\n", sandbox.uid()),
        "{output:?}"
    );
    let bash = RunOptions::default().with_language("bash");
    let execution = sandbox
        .run_code("echo $((6 * 7)) from $BASH_VERSION", &bash)
        .await
        .unwrap();
    assert!(execution.stdout().starts_with("42 from "), "{execution:?}");
    for (language, code, expected) in [
        (
            "javascript",
            "require('os').platform() + ' ' + [1, 2, 3].map(x => x * 2).join(',')",
            "linux 2,4,6",
        ),
        ("typescript", "const n: number = 40; n + 2", "42"),
        (
            "java",
            "String.join(\",\", java.util.List.of(\"a\", \"b\")) + java.time.ZoneId.systemDefault()",
            "a,b",
        ),
    ] {
        if sandbox.check_language(language).is_err() {
            eprintln!("{language}: not installed on this host, skipped");
            continue;
        }
        let options = RunOptions::default().with_language(language);
        let execution = sandbox.run_code(code, &options).await.unwrap();
        assert!(execution.error.is_none(), "{language}: {execution:?}");
        let text = execution.text().unwrap_or_default();
        assert!(text.contains(expected), "{language}: {text:?} {execution:?}");
    }
}

/// Kernels are forked from one zygote (zygote.rs): what one sandbox's kernel held must never be in
/// the memory another inherits, and nothing of the zygote (its sockets, its host directory) stays
/// reachable in a kernel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forked_kernel_holds_nothing_of_another_sandbox_or_the_zygote() {
    // Finds `WXSECRET` and 32 hex digits anywhere in this process's readable memory, and answers
    // how many matched the SHA-256 given (so the secret itself is never in the scanning kernel's
    // code).
    const SCAN: &str = r#"
import hashlib, re
def scan(digest):
    found = 0
    with open('/proc/self/maps') as maps, open('/proc/self/mem', 'rb', 0) as mem:
        for line in maps.read().splitlines():
            fields = line.split()
            start, end = (int(x, 16) for x in fields[0].split('-'))
            if 'r' not in fields[1] or end - start > 1 << 28 or (len(fields) > 5 and fields[5].startswith('[v')):
                continue
            try:
                mem.seek(start)
                chunk = mem.read(end - start)
            except (OSError, ValueError, OverflowError):
                continue
            for m in re.finditer(rb'WXSECRET([0-9a-f]{32})', chunk):
                found += hashlib.sha256(m.group(1)).hexdigest() == digest
    return found
"#;
    let backend = backend();
    let mut bytes = [0u8; 16];
    rustix::rand::getrandom(&mut bytes, rustix::rand::GetRandomFlags::empty()).unwrap();
    let secret: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let digest = {
        let out = std::process::Command::new("sha256sum")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut child| {
                use std::io::Write;
                child.stdin.take().unwrap().write_all(secret.as_bytes())?;
                child.wait_with_output()
            })
            .unwrap();
        String::from_utf8(out.stdout)
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .to_owned()
    };
    let options =
        waxell::sandbox::SandboxOptions::default().with_env("API_TOKEN", format!("WXSECRET{secret}"));
    let first = backend.create_sandbox(&options).await.unwrap();
    eval(&first, "import os; token = os.environ['API_TOKEN']; len(token)").await;
    eval(&first, SCAN).await;
    // The scanner finds it where it is (so it would find it elsewhere).
    let seen = eval(&first, &format!("scan('{digest}') > 0")).await;
    assert_eq!(
        seen, "True",
        "the scan does not find the secret in the kernel that holds it"
    );
    for _ in 0..2 {
        let other = sandbox(&backend).await;
        eval(&other, SCAN).await;
        assert_eq!(
            eval(&other, &format!("scan('{digest}')")).await,
            "0",
            "another sandbox's secret is in this kernel's memory"
        );
        let fds = eval(
            &other,
            // The listing's own descriptor is gone by the time it is read.
            "import os\nseen = []\nfor fd in os.listdir('/proc/self/fd'):\n    try:\n        seen.append(os.readlink('/proc/self/fd/' + fd))\n    except OSError:\n        pass\nsorted(seen)",
        )
        .await;
        assert!(!fds.contains("socket:"), "a socket is open in the kernel: {fds}");
        let shown = eval(
            &other,
            "open('/proc/self/environ', 'rb').read() + open('/proc/self/cmdline', 'rb').read()",
        )
        .await;
        assert!(
            !shown.contains("waxell-zygote"),
            "the zygote's directory shows: {shown}"
        );
        if !rootless(&backend) {
            // Forked: the kernel's parent (the zygote) is outside its pid namespace.
            let ppid = eval(
                &other,
                "[l for l in open('/proc/self/status') if l.startswith('PPid:')][0].split()[1]",
            )
            .await;
            assert_eq!(ppid, "0", "the kernel was not forked from the zygote");
        }
    }
}
