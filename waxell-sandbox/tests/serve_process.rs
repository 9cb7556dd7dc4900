//! The real `waxell-sandbox serve` process: it starts closed (a made-up key, printed with the
//! environment variables E2B's SDKs read) and SIGTERM cleans up as Ctrl-C does: every scratch
//! mount and cgroup of its sandboxes, pooled and live, is gone when it exits.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Kills the server if the test fails before it exits.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One HTTP/1.1 request by hand (no client dependency); returns the status line and the body.
fn request(
    address: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (String, String) {
    let mut stream = TcpStream::connect(address).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut text = format!("{method} {path} HTTP/1.1\r\nHost: {address}\r\nconnection: close\r\n");
    for (name, value) in headers {
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    text.push_str(&format!(
        "content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    ));
    stream.write_all(text.as_bytes()).unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    (
        head.lines().next().unwrap_or_default().to_owned(),
        body.to_owned(),
    )
}

/// Scratch mounts, scratch directories and cgroups whose names start with `<pid>-` (sandbox ids
/// start with the pid of the process that made them).
fn leftovers(pid: u32) -> Vec<String> {
    let prefix = format!("/waxell-sandbox/{pid}-");
    let mut found: Vec<String> = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter(|line| line.contains(&prefix))
        .map(|line| format!("mount: {line}"))
        .collect();
    // The tmpfs mounts live in each sandbox's own mount namespace; the host sees the directories
    // they sit on (`<id>`, `<id>.tmp`, `<id>.shm`).
    found.extend(
        common::scratch_roots()
            .iter()
            .filter_map(|root| std::fs::read_dir(root).ok())
            .flat_map(|entries| entries.flatten())
            .filter(|e| e.file_name().to_string_lossy().starts_with(&format!("{pid}-")))
            .map(|e| format!("dir: {}", e.path().display())),
    );
    for controller in ["memory", "pids", "cpu"] {
        let Ok(entries) = std::fs::read_dir(waxell_sandbox::cgroup_subtree_dir(controller)) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(&format!("{pid}-")) {
                found.push(format!("cgroup: {}", entry.path().display()));
            }
        }
    }
    found
}

#[test]
fn serve_starts_closed_and_sigterm_removes_every_sandbox() {
    let mut command = Command::new(common::sandbox_exe());
    command
        .args(["serve", "--listen", "127.0.0.1:0", "--pool-size", "1"])
        .env_remove("WAXELL_SANDBOX_API_KEY")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    // Started with the usual soft open-file limit of 1,024 below its hard limit, as from a login shell.
    let hard = rustix::process::getrlimit(rustix::process::Resource::Nofile).maximum;
    let soft = hard.map(|h| h.min(1024) - 1);
    // SAFETY: setrlimit is a plain system call, allowed between fork and exec.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut command, move || {
            let limit = rustix::process::Rlimit {
                current: soft,
                maximum: hard,
            };
            rustix::process::setrlimit(rustix::process::Resource::Nofile, limit).map_err(std::io::Error::from)
        });
    }
    let child = command.spawn().expect("start waxell-sandbox serve");
    let mut server = Server(child);
    let pid = server.0.id();

    // The banner: where it listens and the key, as the E2B_* variables the SDKs read.
    let mut lines = BufReader::new(server.0.stdout.take().unwrap()).lines();
    let mut vars = std::collections::HashMap::new();
    while vars.len() < 3 {
        let line = lines.next().expect("the banner").expect("stdout");
        if let Some((name, value)) = line
            .trim()
            .strip_prefix("export ")
            .and_then(|l| l.split_once('='))
        {
            vars.insert(name.to_owned(), value.to_owned());
        }
    }
    let url = &vars["E2B_API_URL"];
    assert_eq!(&vars["E2B_SANDBOX_URL"], url);
    let key = &vars["E2B_API_KEY"];
    assert!(key.starts_with("e2b_") && key.len() == 44, "{key}");
    let address = url.trim_start_matches("http://").to_owned();

    // It raised its open-file limit to the hard one (descriptors held per live sandbox).
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let open_files: Vec<&str> = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("the open-file limit")
        .split_whitespace()
        .skip(3)
        .take(2)
        .collect();
    assert_eq!(
        open_files[0], open_files[1],
        "soft and hard open-file limits: {open_files:?}"
    );

    // Closed: no key, no sandbox.
    let (status, _) = request(&address, "POST", "/v2/sandboxes", &[], "{}");
    assert!(status.contains(" 401 "), "{status}");
    let (status, body) = request(&address, "POST", "/v2/sandboxes", &[("X-API-KEY", key)], "{}");
    assert!(status.contains(" 201 "), "{status}: {body}");

    // One live sandbox and one pooled interpreter behind it, each with its scratch directory, on
    // which its own mount namespace has the tmpfs (none of its mounts is in the host's table), and
    // cgroups (as root; rootless only where a subtree is delegated to the user).
    let root = common::euid() == 0;
    let scratch_count = || {
        let scratch = |l: &&String| l.starts_with("dir:") && !l.ends_with(".tmp") && !l.ends_with(".shm");
        leftovers(pid).iter().filter(scratch).count()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while scratch_count() < 2 {
        assert!(
            Instant::now() < deadline,
            "expected 2 scratch directories: {:?}",
            leftovers(pid)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let mounts: Vec<String> = leftovers(pid)
        .into_iter()
        .filter(|l| l.starts_with("mount:"))
        .collect();
    assert!(
        mounts.is_empty(),
        "sandbox mounts in the host's mount table: {mounts:#?}"
    );
    if root {
        assert!(leftovers(pid).iter().any(|l| l.starts_with("cgroup:")));
    }

    let killed = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = server.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "serve did not exit within 30 s of SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "serve exited with {status} on SIGTERM");
    let left = leftovers(pid);
    assert!(left.is_empty(), "left behind after SIGTERM: {left:#?}");
}

/// Names of the engine's containers (at DOCKER_HOST) whose sandbox label starts with `<pid>-`.
#[cfg(feature = "container")]
fn containers_of(pid: u32) -> Vec<String> {
    let host =
        std::env::var("DOCKER_HOST").expect("DOCKER_HOST (eval \"$(bash scripts/setup-container.sh)\")");
    let socket = host.trim_start_matches("unix://");
    let mut stream = std::os::unix::net::UnixStream::connect(socket).expect("engine socket");
    stream
        // HTTP/1.0: the answer is not chunked.
        .write_all(b"GET /containers/json?all=true HTTP/1.0\r\nHost: d\r\n\r\n")
        .unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).unwrap();
    let answer = String::from_utf8_lossy(&answer);
    let (_, body) = answer.split_once("\r\n\r\n").expect("an HTTP answer");
    let end = body.rfind(']').map(|i| i + 1).unwrap_or(body.len());
    let list: Vec<serde_json::Value> = serde_json::from_str(&body[..end]).expect("container list");
    list.iter()
        .filter(|c| {
            c["Labels"]["io.waxell.sandbox"]
                .as_str()
                .is_some_and(|owner| owner.starts_with(&format!("{pid}-")))
        })
        .map(|c| c["Names"][0].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// `serve --backend docker`: sandboxes are containers, and SIGTERM removes them all, pooled and live.
#[cfg(feature = "container")]
#[test]
fn serve_backend_docker_creates_containers_and_sigterm_removes_them() {
    if let Some(why) = common::container_engine_missing("DOCKER_HOST") {
        return eprintln!("skipped: {why}");
    }
    let child = Command::new(common::sandbox_exe())
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--pool-size",
            "1",
            "--backend",
            "docker",
        ])
        .env_remove("WAXELL_SANDBOX_API_KEY")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start waxell-sandbox serve --backend docker");
    let mut server = Server(child);
    let pid = server.0.id();
    let mut lines = BufReader::new(server.0.stdout.take().unwrap()).lines();
    let mut vars = std::collections::HashMap::new();
    while vars.len() < 3 {
        let line = lines.next().expect("the banner").expect("stdout");
        if let Some((name, value)) = line
            .trim()
            .strip_prefix("export ")
            .and_then(|l| l.split_once('='))
        {
            vars.insert(name.to_owned(), value.to_owned());
        }
    }
    let address = vars["E2B_API_URL"].trim_start_matches("http://").to_owned();
    let (status, body) = request(
        &address,
        "POST",
        "/v2/sandboxes",
        &[("X-API-KEY", &vars["E2B_API_KEY"])],
        "{}",
    );
    assert!(status.contains(" 201 "), "{status}: {body}");
    // The live sandbox's container and the pooled one.
    let deadline = Instant::now() + Duration::from_secs(60);
    while containers_of(pid).len() < 2 {
        assert!(
            Instant::now() < deadline,
            "expected 2 containers: {:?}",
            containers_of(pid)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap()
        .success());
    let deadline = Instant::now() + Duration::from_secs(40);
    let status = loop {
        if let Some(status) = server.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "serve did not exit within 40 s of SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "serve exited with {status} on SIGTERM");
    let left = containers_of(pid);
    assert!(left.is_empty(), "containers left behind after SIGTERM: {left:?}");
}
