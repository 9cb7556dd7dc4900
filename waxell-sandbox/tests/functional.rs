//! Functional behaviour with real Python in the real sandbox.
#![cfg(target_os = "linux")]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use common::*;
use waxell::sandbox::{RunOptions, SandboxOptions, SandboxSession};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_persists_across_runs_in_a_real_main() {
    let backend = backend();
    let sandbox = sandbox(&backend).await;
    let first = run(&sandbox, "x = 41\ndef inc(v):\n    return v + 1\n").await;
    assert!(first.error.is_none(), "{:?}", first.error);
    assert!(first.results.is_empty(), "no last expression, no result");
    assert_eq!(eval(&sandbox, "inc(x)").await, "42");
    assert_eq!(eval(&sandbox, "__name__").await, "__main__");
    // Cell-defined functions pickle (needs a real __main__ module).
    assert_eq!(
        eval(&sandbox, "import pickle; pickle.loads(pickle.dumps(inc))(1)").await,
        "2"
    );
    let third = run(&sandbox, "print('a'); x").await;
    assert_eq!(third.execution_count, Some(5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_streams_and_errors_come_back() {
    let backend = backend();
    let sandbox = sandbox(&backend).await;
    let chunks = Arc::new(Mutex::new(Vec::new()));
    let seen = chunks.clone();
    let options = RunOptions::default().on_stdout(move |m| seen.lock().unwrap().push(m.line.clone()));
    let code = "import sys, os, subprocess\nprint('hello')\nsys.stderr.write('warn\\n')\nos.write(1, b'fd-level\\n')\nsubprocess.run(['echo', 'from-child'])\n";
    let execution = sandbox.run_code(code, &options).await.unwrap();
    assert!(execution.error.is_none(), "{:?}", execution.error);
    let stdout = execution.stdout();
    for expected in ["hello\n", "fd-level\n", "from-child\n"] {
        assert!(stdout.contains(expected), "{expected:?} missing from {stdout:?}");
    }
    assert_eq!(execution.stderr(), "warn\n");
    assert_eq!(
        chunks.lock().unwrap().concat(),
        stdout,
        "callback saw the same chunks"
    );

    let failed = run(&sandbox, "def f():\n    return 1 / 0\nf()").await;
    let error = failed.error.expect("error");
    assert_eq!(error.name, "ZeroDivisionError");
    assert_eq!(error.value, "division by zero");
    assert!(error.traceback.contains("line 2, in f"), "{}", error.traceback);
    assert!(
        !error.traceback.contains("kernel.py"),
        "kernel frames stripped: {}",
        error.traceback
    );

    let syntax = run(&sandbox, "def (").await;
    assert_eq!(syntax.error.expect("error").name, "SyntaxError");
    // exit() ends only the cell.
    assert_eq!(
        run(&sandbox, "exit(3)").await.error.expect("error").name,
        "SystemExit"
    );
    assert_eq!(eval(&sandbox, "1 + 1").await, "2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rich_results_carry_every_representation() {
    let backend = backend();
    let sandbox = sandbox(&backend).await;
    let code = r#"
class Rich:
    def __repr__(self): return "Rich()"
    def _repr_html_(self): return "<b>rich</b>"
    def _repr_markdown_(self): return "**rich**"
    def _repr_json_(self): return {"rich": True}
    def _repr_png_(self): return b"\x89PNG\r\n\x1a\nfake"
    def _repr_latex_(self): return r"$\rho$"
Rich()
"#;
    let execution = run(&sandbox, code).await;
    assert!(execution.error.is_none(), "{:?}", execution.error);
    let main = execution
        .results
        .iter()
        .find(|r| r.is_main_result)
        .expect("main result");
    assert_eq!(main.text.as_deref(), Some("Rich()"));
    assert_eq!(main.html.as_deref(), Some("<b>rich</b>"));
    assert_eq!(main.markdown.as_deref(), Some("**rich**"));
    assert_eq!(main.json, Some(serde_json::json!({"rich": true})));
    assert_eq!(main.latex.as_deref(), Some(r"$\rho$"));
    let png = base64::engine::general_purpose::STANDARD
        .decode(main.png.as_deref().unwrap())
        .unwrap();
    assert!(png.starts_with(b"\x89PNG"));
    assert_eq!(
        main.formats(),
        ["text", "html", "markdown", "png", "latex", "json"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pandas_and_matplotlib_when_installed() {
    let backend = backend();
    let sandbox = sandbox(&backend).await;
    let has = eval(
        &sandbox,
        "import importlib.util as u; all(u.find_spec(m) for m in ('pandas', 'matplotlib'))",
    )
    .await;
    if has != "True" {
        eprintln!(
            "SKIP: pandas/matplotlib not installed in {:?}",
            backend.python().executable
        );
        return;
    }
    let frame = run(
        &sandbox,
        "import pandas as pd\ndf = pd.DataFrame({'x': [1, 2, 3]})\ndf",
    )
    .await;
    assert!(frame.error.is_none(), "{:?}", frame.error);
    let main = &frame.results[0];
    assert!(
        main.html.as_deref().unwrap().contains("<table"),
        "DataFrame has an HTML repr"
    );
    let chart = run(&sandbox, "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.title('squares')\nprint(df.x.sum())").await;
    assert!(chart.error.is_none(), "{:?}", chart.error);
    assert_eq!(chart.stdout(), "6\n");
    let figure = chart
        .results
        .iter()
        .find(|r| r.png.is_some())
        .expect("figure as PNG result");
    assert!(!figure.is_main_result);
    let png = base64::engine::general_purpose::STANDARD
        .decode(figure.png.as_deref().unwrap())
        .unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    // Figures are closed after being sent.
    let after = run(&sandbox, "1").await;
    assert!(after.results.iter().all(|r| r.png.is_none()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupt_on_timeout_keeps_state() {
    let backend = backend();
    let sandbox = sandbox(&backend).await;
    let execution = run_with_timeout(
        &sandbox,
        "kept = 'yes'\nimport time\nwhile True:\n    time.sleep(0.01)",
        Duration::from_millis(500),
    )
    .await;
    let error = execution.error.expect("timeout reported");
    assert_eq!(error.name, "TimeoutError");
    assert!(error.value.contains("state is kept"), "{}", error.value);
    assert_eq!(eval(&sandbox, "kept").await, "yes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contexts_are_independent() {
    let backend = backend();
    let sandbox = sandbox(&backend).await;
    eval(&sandbox, "a = 1").await;
    let context = sandbox.create_context(Some("python"), None).await.unwrap();
    let in_context = RunOptions::default().with_context(context.id.clone());
    let other = sandbox.run_code("'a' in globals()", &in_context).await.unwrap();
    assert_eq!(other.text(), Some("False"));
    // Same scratch directory.
    eval(&sandbox, "open('shared.txt', 'w').write('hi')").await;
    let read = sandbox
        .run_code("open('shared.txt').read()", &in_context)
        .await
        .unwrap();
    assert_eq!(read.text(), Some("hi"));
    assert_eq!(sandbox.list_contexts().await.unwrap().len(), 2);
    // Restarting a context loses its state, keeps its id and leaves the others alone.
    sandbox.run_code("b = 2", &in_context).await.unwrap();
    sandbox.restart_context(&context.id).await.unwrap();
    let restarted = sandbox.run_code("'b' in globals()", &in_context).await.unwrap();
    assert_eq!(restarted.text(), Some("False"));
    assert_eq!(eval(&sandbox, "a").await, "1");
    sandbox.remove_context(&context.id).await.unwrap();
    let gone = sandbox.run_code("1", &in_context).await;
    assert!(
        matches!(gone, Err(waxell::sandbox::SandboxError::ContextNotFound(_))),
        "{gone:?}"
    );
    let both = sandbox
        .run_code(
            "1",
            &RunOptions::default()
                .with_context("default")
                .with_language("python"),
        )
        .await;
    assert!(matches!(
        both,
        Err(waxell::sandbox::SandboxError::InvalidArgument(_))
    ));
    let js = sandbox
        .run_code("1", &RunOptions::default().with_language("javascript"))
        .await;
    assert!(matches!(
        js,
        Err(waxell::sandbox::SandboxError::InvalidArgument(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn env_vars_are_exactly_the_ones_passed() {
    let backend = backend();
    let options = SandboxOptions::default().with_env("GREETING", "hello");
    let sandbox = backend.create_sandbox(&options).await.unwrap();
    assert_eq!(eval(&sandbox, "import os; os.environ['GREETING']").await, "hello");
    let per_run = sandbox
        .run_code(
            "import os; os.environ['ONCE']",
            &RunOptions::default().with_env("ONCE", "1"),
        )
        .await
        .unwrap();
    assert_eq!(per_run.text(), Some("1"));
    assert_eq!(eval(&sandbox, "'ONCE' in os.environ").await, "False");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_round_trip_and_list() {
    let backend = backend();
    let sandbox = sandbox(&backend).await;
    let info = sandbox.write_file("data/in.csv", b"a,b\n1,2\n").await.unwrap();
    assert_eq!(info.path, "/home/user/data/in.csv");
    assert_eq!(info.size, 8);
    assert_eq!(
        eval(&sandbox, "open('/home/user/data/in.csv').read()").await,
        "a,b\\n1,2\\n"
    );
    eval(&sandbox, "open('out.txt', 'w').write('from sandbox')").await;
    assert_eq!(
        sandbox.read_file("/home/user/out.txt").await.unwrap(),
        b"from sandbox"
    );
    assert_eq!(sandbox.read_file("out.txt").await.unwrap(), b"from sandbox");
    let names: Vec<(String, bool)> = sandbox
        .list_files("/home/user")
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.name, e.is_dir))
        .collect();
    assert_eq!(names, [("data".to_owned(), true), ("out.txt".to_owned(), false)]);
    // The sandbox can write files it was given (ownership is the sandbox uid).
    eval(&sandbox, "open('data/in.csv', 'a').write('3,4\\n')").await;
    for bad in ["/etc/passwd", "../x", "/home/user/../../etc/passwd", ""] {
        let err = sandbox.read_file(bad).await.unwrap_err();
        assert!(
            matches!(err, waxell::sandbox::SandboxError::InvalidPath { .. }),
            "{bad:?}: {err:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn symlink_traps_planted_by_the_sandbox_give_errors_not_content() {
    let backend = backend();
    let sandbox = sandbox(&backend).await;
    let secret = std::env::temp_dir().join(format!("waxell-host-secret-{}", std::process::id()));
    std::fs::write(&secret, "HOST SECRET").unwrap();
    let code = format!(
        "import os\nos.symlink('/etc/shadow', 'report.txt')\nos.symlink('{0}', 'secret.txt')\nos.symlink('/etc', 'etcdir')\nos.mkfifo('pipe')",
        secret.display()
    );
    let planted = run(&sandbox, &code).await;
    assert!(planted.error.is_none(), "{:?}", planted.error);
    for path in [
        "report.txt",
        "secret.txt",
        "etcdir/passwd",
        "/home/user/etcdir/shadow",
        "pipe",
    ] {
        let result = sandbox.read_file(path).await;
        assert!(
            matches!(result, Err(waxell::sandbox::SandboxError::InvalidPath { .. })),
            "{path}: {result:?}"
        );
    }
    // Writes through the symlinks are refused too, and the targets are untouched.
    assert!(sandbox.write_file("secret.txt", b"overwritten").await.is_err());
    assert!(sandbox.write_file("etcdir/evil", b"x").await.is_err());
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "HOST SECRET");
    assert!(!std::path::Path::new("/etc/evil").exists());
    assert!(sandbox.list_files("etcdir").await.is_err());
    std::fs::remove_file(secret).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn make_dir_and_remove_never_leave_the_scratch_dir() {
    let backend = backend();
    let sandbox = sandbox(&backend).await;
    // A host directory the sandbox cannot see but can name in a symlink's target.
    let outside = std::env::temp_dir().join(format!("waxell-host-outside-{}", std::process::id()));
    std::fs::create_dir_all(outside.join("keep")).unwrap();
    std::fs::write(outside.join("keep/data.txt"), "HOST DATA").unwrap();

    assert!(sandbox.make_dir("a/b/c").await.unwrap(), "created");
    assert!(
        !sandbox.make_dir("/home/user/a/b/c").await.unwrap(),
        "already there"
    );
    assert_eq!(
        eval(
            &sandbox,
            "import os; (os.path.isdir('a/b/c'), os.stat('a/b/c').st_uid == os.getuid())"
        )
        .await,
        "(True, True)",
        "the code sees the directory, owned by the sandbox user"
    );

    let code = format!(
        "os.makedirs('tree/deep', exist_ok=True)\nopen('tree/deep/f.txt', 'w').write('x')\n\
         os.symlink('{0}', 'tree/escape')\nos.symlink('{0}', 'link')\nos.symlink('{0}/keep/data.txt', 'file_link')",
        outside.display()
    );
    let planted = run(&sandbox, &code).await;
    assert!(planted.error.is_none(), "{:?}", planted.error);
    // Removing a tree with a symlink in it, or a symlink, removes the link and never its target.
    sandbox.remove("tree").await.unwrap();
    sandbox.remove("link").await.unwrap();
    sandbox.remove("file_link").await.unwrap();
    assert_eq!(
        eval(
            &sandbox,
            "(os.path.lexists('tree'), os.path.lexists('link'), os.path.lexists('file_link'))"
        )
        .await,
        "(False, False, False)"
    );
    assert_eq!(
        std::fs::read_to_string(outside.join("keep/data.txt")).unwrap(),
        "HOST DATA"
    );
    // make_dir through a symlink is refused, and nothing appears at its target.
    run(&sandbox, &format!("os.symlink('{}', 'link')", outside.display())).await;
    assert!(sandbox.make_dir("link/new").await.is_err());
    assert!(!outside.join("new").exists());

    for bad in ["", "/home/user", "..", "../x", "/etc"] {
        let result = sandbox.remove(bad).await;
        assert!(
            matches!(result, Err(waxell::sandbox::SandboxError::InvalidPath { .. })),
            "{bad:?}: {result:?}"
        );
    }
    let missing = sandbox.remove("missing").await;
    assert!(
        matches!(&missing, Err(waxell::sandbox::SandboxError::FileNotFound { path }) if path == "missing"),
        "{missing:?}"
    );
    // rename: the destination's parents are made; a link moves as a link; no move through a link.
    sandbox.write_file("r/a.txt", b"moved").await.unwrap();
    let moved = sandbox
        .rename("r/a.txt", "/home/user/m/deep/b.txt")
        .await
        .unwrap();
    assert_eq!(
        (moved.path.as_str(), moved.size, moved.is_dir),
        ("/home/user/m/deep/b.txt", 5, false)
    );
    assert_eq!(
        eval(
            &sandbox,
            "(open('m/deep/b.txt').read(), os.path.exists('r/a.txt'))"
        )
        .await,
        "('moved', False)"
    );
    sandbox.rename("link", "link2").await.unwrap();
    assert_eq!(eval(&sandbox, "os.path.islink('link2')").await, "True");
    assert!(sandbox.rename("m/deep/b.txt", "link2/b.txt").await.is_err());
    assert!(!outside.join("b.txt").exists());
    assert!(sandbox.rename("m", "../m").await.is_err());
    sandbox.rename("link2", "link").await.unwrap();
    sandbox.remove("m").await.unwrap();
    sandbox.remove("r").await.unwrap();

    sandbox.remove("a").await.unwrap();
    assert_eq!(eval(&sandbox, "sorted(os.listdir('.'))").await, "['link']");
    std::fs::remove_dir_all(outside).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_sandboxes_in_parallel() {
    let backend = backend();
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let backend = backend.clone();
            tokio::spawn(async move {
                let sandbox = backend.create_sandbox(&SandboxOptions::default()).await.unwrap();
                eval(&sandbox, &format!("n = {i}")).await;
                let text = eval(&sandbox, "n * 10").await;
                (sandbox.sandbox_id().to_owned(), sandbox.uid(), text, i)
            })
        })
        .collect();
    let mut ids = std::collections::BTreeSet::new();
    for task in tasks {
        let (id, uid, text, i) = task.await.unwrap();
        assert_eq!(text, (i * 10).to_string());
        assert_ne!(uid, 0);
        ids.insert(id);
    }
    assert_eq!(ids.len(), 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_and_drop_leave_nothing_behind() {
    let backend = backend();
    let killed = sandbox(&backend).await;
    eval(
        &killed,
        "import subprocess; p = subprocess.Popen(['sleep', '60'])",
    )
    .await;
    let before = footprint(&killed);
    // Rootless, the scratch dir is a plain directory (the host report says its size is not capped).
    assert_eq!(
        is_mount_point(&before.scratch),
        !rootless(&backend),
        "the scratch dir is its own tmpfs exactly when running as root"
    );
    assert!(
        before.pids.len() >= 3,
        "launcher, kernel and child in the cgroup: {:?}",
        before.pids
    );
    killed.kill().await.unwrap();
    assert_gone(&before);
    assert!(matches!(
        killed.run_code("1", &RunOptions::default()).await,
        Err(waxell::sandbox::SandboxError::NotFound(_))
    ));

    let dropped = sandbox(&backend).await;
    eval(
        &dropped,
        "import subprocess; p = subprocess.Popen(['sleep', '60'])",
    )
    .await;
    let before = footprint(&dropped);
    drop(dropped);
    assert_gone(&before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifetime_expiry_kills_the_sandbox() {
    let backend = backend();
    let options = SandboxOptions::default().with_timeout(Duration::from_millis(300));
    let sandbox = backend.create_sandbox(&options).await.unwrap();
    sandbox.set_timeout(Duration::from_millis(600)).await.unwrap();
    let before = footprint(&sandbox);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(matches!(
        sandbox.run_code("1", &RunOptions::default()).await,
        Err(waxell::sandbox::SandboxError::NotFound(_))
    ));
    assert_gone(&before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warm_pool_hands_out_fresh_interpreters() {
    let backend = backend_with(config().with_pool_size(2));
    backend.warm_up().await.unwrap();
    assert_eq!(backend.pool_len(), 2);
    let first = backend
        .create_sandbox(&SandboxOptions::default().with_env("WHO", "first"))
        .await
        .unwrap();
    eval(&first, "marker = 'first'").await;
    let second = backend.create_sandbox(&SandboxOptions::default()).await.unwrap();
    assert_eq!(eval(&second, "'marker' in globals()").await, "False");
    assert_eq!(eval(&second, "import os; 'WHO' in os.environ").await, "False");
    assert_eq!(eval(&first, "import os; os.environ.get('WHO')").await, "first");
    assert_ne!(first.scratch_dir(), second.scratch_dir());
    // The pool refills in the background.
    for _ in 0..100 {
        if backend.pool_len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(backend.pool_len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forked_child_falling_through_the_cell_does_not_answer_for_the_kernel() {
    let backend = backend();
    let sandbox = sandbox(&backend).await;
    let code =
        "import os, time\npid = os.fork()\nif pid:\n    time.sleep(0.3)\n    print('parent done')\n'parent'";
    let execution = run(&sandbox, code).await;
    assert!(execution.error.is_none(), "{:?}", execution.error);
    assert_eq!(execution.text(), Some("parent"));
    assert_eq!(execution.stdout(), "parent done\n");
    assert_eq!(eval(&sandbox, "os.getpid() == os.getpid()").await, "True");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_run_is_interrupted_before_the_next_one() {
    let backend = backend();
    let sandbox = sandbox(&backend).await;
    let options = RunOptions::default();
    let slow = sandbox.run_code("kept = 1\nimport time\ntime.sleep(30)", &options);
    assert!(
        tokio::time::timeout(Duration::from_millis(300), slow)
            .await
            .is_err(),
        "caller gave up"
    );
    let started = std::time::Instant::now();
    assert_eq!(eval(&sandbox, "kept").await, "1", "state survives the interrupt");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the abandoned sleep did not block the next run"
    );
}

/// Regression: a timeout that passes before the kernel has started the cell (1 ms, or a loaded host)
/// interrupted it between reading the request and starting it; the request was lost, no `done` came,
/// and the kernel was killed with its state. The interrupt now waits for the kernel's `started`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_before_the_cell_starts_keeps_the_state() {
    let backend = backend();
    let sandbox = sandbox(&backend).await;
    assert_eq!(eval(&sandbox, "kept = 41\nkept").await, "41");
    for _ in 0..20 {
        let execution = run_with_timeout(&sandbox, "kept += 0", Duration::from_millis(1)).await;
        if let Some(error) = &execution.error {
            assert!(error.value.contains("the state is kept"), "{error:?}");
        }
    }
    assert_eq!(
        eval(&sandbox, "kept + 1").await,
        "42",
        "the state survived every interrupt"
    );
}

#[test]
fn bad_configuration_is_refused_with_a_clear_error() {
    let missing =
        waxell_sandbox::LocalBackend::new(config().with_python("/nonexistent/python3")).unwrap_err();
    assert!(
        matches!(missing, waxell::sandbox::SandboxError::Unavailable(_)),
        "{missing:?}"
    );
    assert!(missing.to_string().contains("/nonexistent/python3"), "{missing}");
    let limits = waxell_sandbox::Limits::default().with_memory_bytes(1 << 20);
    let tiny = waxell_sandbox::LocalBackend::new(config().with_limits(limits)).unwrap_err();
    assert!(tiny.to_string().contains("limits.memory_bytes"), "{tiny}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_and_results_stream_before_the_run_returns() {
    let backend = backend();
    let sandbox = sandbox(&backend).await;
    let first_chunk = Arc::new(Mutex::new(None));
    let results = Arc::new(Mutex::new(Vec::new()));
    let (seen, collected) = (first_chunk.clone(), results.clone());
    let options = RunOptions::default()
        .on_stdout(move |_| {
            seen.lock().unwrap().get_or_insert_with(std::time::Instant::now);
        })
        .on_result(move |r| collected.lock().unwrap().push(r.text.clone()));
    let execution = sandbox
        .run_code(
            "import time\nprint('early', flush=True)\ntime.sleep(0.5)\n'late'",
            &options,
        )
        .await
        .unwrap();
    let returned = std::time::Instant::now();
    let first = first_chunk.lock().unwrap().expect("stdout callback called");
    assert!(
        returned - first >= Duration::from_millis(400),
        "stdout arrived as written, not at the end"
    );
    assert_eq!(*results.lock().unwrap(), [Some("late".to_owned())]);
    assert_eq!(execution.stdout(), "early\n");
}

#[test]
fn sandboxes_outlive_the_thread_that_created_them() {
    // bwrap's --die-with-parent fires when the *forking thread* exits; spawns go through a
    // long-lived thread, so a short-lived caller thread must not take the sandbox with it.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let handle = runtime.handle().clone();
    let (backend, sandbox) = std::thread::spawn(move || {
        handle.block_on(async {
            let backend = backend();
            let sandbox = sandbox(&backend).await;
            (backend, sandbox)
        })
    })
    .join()
    .unwrap();
    runtime.block_on(async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(eval(&sandbox, "6 * 7").await, "42");
        drop((sandbox, backend));
    });
}

#[test]
fn a_shared_or_foreign_scratch_root_is_refused() {
    let mut shared = config();
    shared.scratch_root = Some("/tmp".into());
    let error = waxell_sandbox::LocalBackend::new(shared).unwrap_err().to_string();
    // Root is refused for the sticky world-writable mode, a rootless user first for the owner.
    assert!(
        error.contains("writable by group or others") || error.contains("is not owned by uid"),
        "{error}"
    );
    let tmp_mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata("/tmp").unwrap().permissions());
    assert_eq!(tmp_mode & 0o7777, 0o1777, "/tmp untouched");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooled_interpreter_killed_while_waiting_is_not_handed_out() {
    // It kills every sandbox process of its host process, so it runs alone in a process of its own.
    if ran_in_own_process("a_pooled_interpreter_killed_while_waiting_is_not_handed_out") {
        return;
    }
    let backend = backend_with(config().with_pool_size(1));
    backend.warm_up().await.unwrap();
    // Kill the pooled sandbox from outside: every process below this one (launcher, init, interpreter).
    let pooled = own_descendants();
    assert!(pooled.len() >= 3, "launcher, init and interpreter: {pooled:?}");
    for pid in &pooled {
        std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()
            .unwrap();
    }
    // Died while waiting: SIGKILL is delivered at once, but a loaded machine may take a moment to tear
    // the processes down (one killed but not yet dead when taken from the pool dies in use instead).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while pooled.iter().any(|pid| process_alive(*pid)) && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let sandbox = backend.create_sandbox(&SandboxOptions::default()).await.unwrap();
    assert_eq!(eval(&sandbox, "6 * 7").await, "42");
}

/// The host report matches how this process runs: root mode as root, rootless otherwise, with the
/// limits this host can enforce and a fix for each that it cannot; the sandbox really runs as the
/// identity the report names (rootless: the invoking user's uid, never 0).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_report_matches_the_mode_and_the_sandbox() {
    use waxell_sandbox::{Feature, IsolationMode, Status};
    let backend = backend();
    let report = backend.capabilities();
    let euid = own_euid();
    let expected = if euid == 0 {
        IsolationMode::Rootful
    } else {
        IsolationMode::Rootless
    };
    assert_eq!(report.mode, Some(expected));
    for feature in [
        Feature::User,
        Feature::Namespaces,
        Feature::Seccomp,
        Feature::Network,
        Feature::ReadOnlyRuntime,
        Feature::PrivateTmp,
        Feature::NoNewPrivileges,
        Feature::CpuTime,
        Feature::FileSize,
    ] {
        assert!(report.enforces(feature), "{feature:?} in every mode: {report}");
    }
    for check in &report.checks {
        if check.status != Status::Enforced {
            assert!(check.fix.is_some(), "{:?} without a fix: {report}", check.feature);
        }
    }
    let sandbox = sandbox(&backend).await;
    let uid: u32 = eval(&sandbox, "__import__('os').getuid()").await.parse().unwrap();
    assert_ne!(uid, 0);
    if expected == IsolationMode::Rootless {
        assert_eq!(uid, euid, "rootless: the sandbox is the invoking user");
        assert_eq!(
            report.check(Feature::ScratchSize).unwrap().status,
            Status::Partial
        );
        assert!(report.summary().contains("rootless"), "{}", report.summary());
    } else {
        assert!(report.enforces(Feature::ScratchSize));
    }
    // The host-side view of every sandbox process: no uid 0 outside the root launchers.
    for pid in sandbox.host_pids() {
        let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
            continue;
        };
        let uids = status.lines().find(|l| l.starts_with("Uid:")).unwrap_or("");
        let launcher = status.lines().next().unwrap_or("").contains("bwrap") && euid == 0;
        assert!(
            launcher || !uids.split_whitespace().skip(1).any(|id| id == "0"),
            "host pid {pid}: {uids}"
        );
    }
}

fn own_euid() -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let uids = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    uids.split_whitespace().nth(2).unwrap().parse().unwrap()
}
