//! Functional behaviour with real Python in the real sandbox.
#![cfg(target_os = "linux")]

mod common;
#[path = "functional/files.rs"]
mod files;
#[path = "functional/lifecycle.rs"]
mod lifecycle;

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
    // Python's layout: the failing line of the cell, by number and by text.
    assert!(
        error.traceback.contains("line 2") && error.traceback.contains("return 1 / 0"),
        "{}",
        error.traceback
    );
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
    // matplotlib started from the font list the set-up made (it rewrites the file when it lists the
    // fonts itself), and that list holds only fonts the sandbox has.
    let fonts = eval(
        &sandbox,
        "import glob, os, sys, matplotlib, matplotlib.font_manager as fm\n\
         [seed] = glob.glob(os.path.join(sys.prefix, 'share/waxell/matplotlib/fontlist-*.json'))\n\
         used = os.path.join(matplotlib.get_cachedir(), os.path.basename(seed))\n\
         (open(seed, 'rb').read() == open(used, 'rb').read(), \
          all(os.path.exists(f.fname) for f in fm.fontManager.ttflist), len(fm.fontManager.ttflist) > 0)",
    )
    .await;
    assert_eq!(fonts, "(True, True, True)");
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
    // Listed as E2B lists them: the default first, the new one last (the default JavaScript
    // context between them when the host has Node.js).
    let listed = sandbox.list_contexts().await.unwrap();
    assert_eq!(listed.first().map(|c| c.id.as_str()), Some("default"));
    assert_eq!(listed.last().map(|c| c.id.as_str()), Some(context.id.as_str()));
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
    // Another language runs in its own default context when the host has its runtime; one it
    // has not is refused with the reason.
    let js = sandbox
        .run_code(
            "[1, 2].map((v) => v * 21)[1]",
            &RunOptions::default().with_language("javascript"),
        )
        .await;
    if std::path::Path::new("/usr/bin/node").exists() {
        assert_eq!(js.unwrap().text(), Some("42"));
    } else {
        assert!(matches!(js, Err(waxell::sandbox::SandboxError::InvalidArgument(m)) if m.contains("node")));
    }
    let r = sandbox
        .run_code("1", &RunOptions::default().with_language("r"))
        .await;
    assert!(matches!(r, Err(waxell::sandbox::SandboxError::InvalidArgument(m)) if m.contains("\"r\"")));
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
    // Set apart from the slow cell: a fresh kernel may still be importing IPython when the first
    // cell comes, and the caller below gives up after 300 ms.
    eval(&sandbox, "kept = 1").await;
    let slow = sandbox.run_code("import time\ntime.sleep(30)", &options);
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

fn own_euid() -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let uids = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    uids.split_whitespace().nth(2).unwrap().parse().unwrap()
}
