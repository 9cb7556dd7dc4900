//! `waxell::e2b` end to end against an in-process `waxell-sandbox serve` (local isolated Python):
//! the whole lifecycle through the instrumented `Sandbox` wrapper.

mod e2b_support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use e2b_support::{client_config, server_config, start_server};
use waxell::e2b::E2bBackend;
use waxell::sandbox::{RunOptions, Sandbox, SandboxError, SandboxOptions};

async fn create(url: &str, options: &SandboxOptions) -> Sandbox {
    let backend = E2bBackend::new(client_config(url)).unwrap();
    Sandbox::create(&backend, options).await.expect("create over E2B")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_code_streams_output_results_errors_and_counts() {
    let url = start_server(server_config()).await;
    let options = SandboxOptions::new()
        .with_template("code-interpreter-v1")
        .with_timeout(Duration::from_secs(120))
        .with_env("GREETING", "hello")
        .with_metadata("suite", "client");
    let sandbox = create(&url, &options).await;
    assert_eq!(sandbox.backend(), "e2b");
    assert_eq!(
        sandbox.sandbox_id().len(),
        20,
        "E2B-style id: {}",
        sandbox.sandbox_id()
    );

    // Callbacks fire as lines arrive, not when the run ends.
    type Events = Arc<Mutex<Vec<(&'static str, String, Instant)>>>;
    let events: Events = Arc::default();
    let (out, err, res) = (events.clone(), events.clone(), events.clone());
    let started = Instant::now();
    let execution = sandbox
        .run_code(
            "import sys, time\nprint('first', flush=True)\ntime.sleep(1.5)\nprint('second', file=sys.stderr)\n'done'",
            &RunOptions::new()
                .on_stdout(move |m| out.lock().unwrap().push(("out", m.line.clone(), Instant::now())))
                .on_stderr(move |m| err.lock().unwrap().push(("err", m.line.clone(), Instant::now())))
                .on_result(move |r| {
                    let text = r.text.clone().unwrap_or_default();
                    res.lock().unwrap().push(("result", text, Instant::now()))
                }),
        )
        .await
        .unwrap();
    let ended = Instant::now();
    assert_eq!(execution.stdout(), "first\n");
    assert_eq!(execution.stderr(), "second\n");
    assert_eq!(execution.text(), Some("done"));
    assert!(execution.error.is_none(), "{:?}", execution.error);
    let events = events.lock().unwrap().clone();
    let of = |kind: &str| -> String {
        events
            .iter()
            .filter(|e| e.0 == kind)
            .map(|e| e.1.as_str())
            .collect()
    };
    assert_eq!(
        (of("out"), of("err"), of("result")),
        ("first\n".into(), "second\n".into(), "done".into())
    );
    // Order kept: all stdout (before the sleep), then stderr, then the result.
    let kinds: Vec<&str> = events.iter().map(|e| e.0).collect();
    let mut sorted = kinds.clone();
    sorted.sort_by_key(|k| ["out", "err", "result"].iter().position(|x| x == k));
    assert_eq!(kinds, sorted, "{events:?}");
    assert!(
        ended.duration_since(events[0].2) >= Duration::from_secs(1),
        "stdout was delivered {:?} after the start, the run ended {:?} after it",
        events[0].2 - started,
        ended - started
    );

    // The sandbox's env vars, a run's own, state between runs and the execution count.
    let first = sandbox
        .run_code(
            "import os\nvalue = os.environ['GREETING'] + '/' + os.environ['PER_RUN']\nvalue",
            &RunOptions::new().with_env("PER_RUN", "yes"),
        )
        .await
        .unwrap();
    assert_eq!(first.text(), Some("hello/yes"));
    let second = sandbox.run_code("value", &RunOptions::new()).await.unwrap();
    assert_eq!(second.text(), Some("hello/yes"));
    let (a, b) = (first.execution_count.unwrap(), second.execution_count.unwrap());
    assert_eq!(b, a + 1);

    // An error of the code comes back in the execution, not as Err.
    let failed = sandbox.run_code("1 / 0", &RunOptions::new()).await.unwrap();
    let error = failed.error.expect("ZeroDivisionError");
    assert_eq!(error.name, "ZeroDivisionError");
    assert!(error.value.contains("division by zero"), "{error:?}");
    assert!(error.traceback.contains("ZeroDivisionError"), "{error:?}");

    // A matplotlib figure comes back as a PNG result.
    let figure = sandbox
        .run_code(
            "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()",
            &RunOptions::new(),
        )
        .await
        .unwrap();
    assert!(
        figure
            .results
            .iter()
            .any(|r| r.png.as_deref().is_some_and(|p| p.starts_with("iVBOR"))),
        "{:?}",
        figure.results.iter().map(|r| r.formats()).collect::<Vec<_>>()
    );

    // Both a language and a context is refused before anything is sent.
    let both = sandbox
        .run_code("1", &RunOptions::new().with_language("python").with_context("x"))
        .await;
    assert!(matches!(both, Err(SandboxError::InvalidArgument(_))), "{both:?}");
    sandbox.kill().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_context_has_its_own_state() {
    let url = start_server(server_config()).await;
    let sandbox = create(&url, &SandboxOptions::new()).await;
    let context = sandbox.create_context(Some("python"), None).await.unwrap();
    assert_eq!(context.language, "python");
    sandbox
        .run_code("y = 5", &RunOptions::new().with_context(context.id.clone()))
        .await
        .unwrap();
    let in_context = sandbox
        .run_code("y", &RunOptions::new().with_context(context.id.clone()))
        .await
        .unwrap();
    assert_eq!(in_context.text(), Some("5"));
    let in_default = sandbox
        .run_code("'y' in globals()", &RunOptions::new())
        .await
        .unwrap();
    assert_eq!(in_default.text(), Some("False"));
    let listed = sandbox.list_contexts().await.unwrap();
    assert!(listed.iter().any(|c| c.id == context.id), "{listed:?}");

    sandbox.restart_context(&context.id).await.unwrap();
    let after_restart = sandbox
        .run_code("y", &RunOptions::new().with_context(context.id.clone()))
        .await
        .unwrap();
    assert_eq!(after_restart.error.map(|e| e.name).as_deref(), Some("NameError"));

    sandbox.remove_context(&context.id).await.unwrap();
    let gone = sandbox
        .run_code("1", &RunOptions::new().with_context(context.id.clone()))
        .await;
    assert!(matches!(gone, Err(SandboxError::ContextNotFound(_))), "{gone:?}");
    let removed_again = sandbox.remove_context(&context.id).await;
    assert!(
        matches!(removed_again, Err(SandboxError::ContextNotFound(_))),
        "{removed_again:?}"
    );
    sandbox.kill().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_are_written_read_and_listed_and_bad_paths_refused() {
    let url = start_server(server_config()).await;
    let sandbox = create(&url, &SandboxOptions::new()).await;
    let info = sandbox
        .write_file("/home/user/data.bin", b"\x00binary\xffdata")
        .await
        .unwrap();
    assert_eq!(info.path, "/home/user/data.bin");
    assert_eq!(info.size, 12);
    assert_eq!(
        sandbox.read_file("data.bin").await.unwrap(),
        b"\x00binary\xffdata"
    );
    let seen = sandbox
        .run_code("open('/home/user/data.bin', 'rb').read()", &RunOptions::new())
        .await
        .unwrap();
    assert_eq!(seen.text(), Some("b'\\x00binary\\xffdata'"));

    sandbox
        .run_code(
            "import os\nos.makedirs('sub', exist_ok=True)\nopen('sub/inner.txt', 'w').write('inner')\n\
             os.symlink('/etc/passwd', 'link')",
            &RunOptions::new(),
        )
        .await
        .unwrap();
    let listing = sandbox.list_files("/home/user").await.unwrap();
    let names: Vec<(&str, bool)> = listing.iter().map(|e| (e.name.as_str(), e.is_dir)).collect();
    assert!(names.contains(&("data.bin", false)), "{names:?}");
    assert!(names.contains(&("sub", true)), "{names:?}");
    assert_eq!(sandbox.read_file("sub/inner.txt").await.unwrap(), b"inner");

    let missing = sandbox.read_file("missing.txt").await;
    assert!(
        matches!(&missing, Err(SandboxError::InvalidPath { reason, .. }) if reason.contains("404")),
        "{missing:?}"
    );
    for bad in ["../../etc/passwd", "/home/user/../../etc/passwd", "link"] {
        let read = sandbox.read_file(bad).await;
        assert!(
            matches!(&read, Err(SandboxError::InvalidPath { reason, .. }) if reason.contains("400")),
            "{bad}: {read:?}"
        );
    }
    let write = sandbox.write_file("../escape.txt", b"x").await;
    assert!(
        matches!(write, Err(SandboxError::InvalidPath { .. })),
        "{write:?}"
    );

    // make_dir and remove, checked by what the code inside sees.
    assert!(
        sandbox.make_dir("/home/user/out/charts").await.unwrap(),
        "created"
    );
    assert!(!sandbox.make_dir("out/charts").await.unwrap(), "already there");
    sandbox.write_file("out/charts/a.png", b"png").await.unwrap();
    let seen = sandbox
        .run_code("import os; sorted(os.listdir('out/charts'))", &RunOptions::new())
        .await
        .unwrap();
    assert_eq!(seen.text(), Some("['a.png']"));
    let moved = sandbox.rename("out/charts/a.png", "final/a.png").await.unwrap();
    assert_eq!((moved.path.as_str(), moved.size), ("/home/user/final/a.png", 3));
    assert_eq!(sandbox.read_file("final/a.png").await.unwrap(), b"png");
    sandbox.remove("final").await.unwrap();
    sandbox.remove("out").await.unwrap();
    sandbox.remove("link").await.unwrap();
    let seen = sandbox
        .run_code(
            "(os.path.exists('out'), os.path.lexists('link'), os.path.exists('/etc/passwd'))",
            &RunOptions::new(),
        )
        .await
        .unwrap();
    assert_eq!(
        seen.text(),
        Some("(False, False, True)"),
        "the link went, never its target"
    );
    // As envd (`os.RemoveAll`): removing what is no longer there succeeds.
    sandbox
        .remove("out")
        .await
        .expect("removing a missing path is not an error");
    let escape = sandbox.remove("../../etc").await;
    assert!(
        matches!(&escape, Err(SandboxError::InvalidPath { reason, .. }) if reason.contains("400")),
        "{escape:?}"
    );
    sandbox.kill().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_leaving_while_queued_never_interrupts_the_run_ahead_of_it() {
    let url = start_server(server_config()).await;
    let sandbox = create(&url, &SandboxOptions::new()).await;
    let patient = RunOptions::new().with_timeout(Duration::from_secs(20));
    let running = sandbox.run_code("import time\ntime.sleep(3)\n'first finished'", &patient);
    let queued = async {
        // Queued behind the first run on the same context; the client gives up after 500 ms and
        // closes the connection (noticed by the server's 200 ms keepalive, well before 3 s).
        tokio::time::sleep(Duration::from_millis(300)).await;
        sandbox
            .run_code(
                "open('queued_ran', 'w').write('yes')",
                &RunOptions::new().with_timeout(Duration::from_millis(500)),
            )
            .await
    };
    let (running, queued) = tokio::join!(running, queued);
    assert!(matches!(queued, Err(SandboxError::Timeout(_))), "{queued:?}");
    let running = running.unwrap();
    assert!(
        running.error.is_none(),
        "the run ahead was interrupted: {:?}",
        running.error
    );
    assert_eq!(running.text(), Some("first finished"));
    let ran = sandbox
        .run_code("import os; os.path.exists('queued_ran')", &RunOptions::new())
        .await
        .unwrap();
    assert_eq!(
        ran.text(),
        Some("False"),
        "the abandoned queued run never started"
    );
    sandbox.kill().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_execution_timeout_interrupts_the_code_and_keeps_the_state() {
    let url = start_server(server_config()).await;
    let sandbox = create(&url, &SandboxOptions::new()).await;
    let started = Instant::now();
    let timed_out = sandbox
        .run_code(
            "import time\nprogress = 'sleeping'\ntry:\n    time.sleep(60)\nexcept KeyboardInterrupt:\n    \
             open('interrupted', 'w').write('yes')\n    raise\nprogress = 'finished'",
            &RunOptions::new().with_timeout(Duration::from_secs(1)),
        )
        .await;
    assert!(
        matches!(timed_out, Err(SandboxError::Timeout(_))),
        "{timed_out:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );

    // The server saw the connection go and interrupted the sleep on its own, before any other run
    // (the files API does not queue behind runs).
    let deadline = Instant::now() + Duration::from_secs(10);
    let marker = loop {
        match sandbox.read_file("interrupted").await {
            // The file exists from `open` on and holds "yes" once written: wait for both.
            Ok(marker) if !marker.is_empty() || Instant::now() >= deadline => break marker,
            Ok(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            Err(_) if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(100)).await,
            Err(e) => panic!("the abandoned code was not interrupted within 10 s: {e}"),
        }
    };
    assert_eq!(marker, b"yes");

    // The variable survived, and the next run does not wait.
    let started = Instant::now();
    let after = sandbox
        .run_code(
            "progress",
            &RunOptions::new().with_timeout(Duration::from_secs(30)),
        )
        .await
        .unwrap();
    assert_eq!(after.text(), Some("sleeping"));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the next run waited {:?} behind the abandoned one",
        started.elapsed()
    );
    sandbox.kill().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_timeout_expires_the_sandbox_and_kill_ends_it() {
    let url = start_server(server_config()).await;
    let backend = E2bBackend::new(client_config(&url)).unwrap();
    let sandbox = Sandbox::create(&backend, &SandboxOptions::new()).await.unwrap();
    sandbox.set_timeout(Duration::from_secs(1)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let expired = sandbox.run_code("1", &RunOptions::new()).await;
    assert!(matches!(expired, Err(SandboxError::NotFound(_))), "{expired:?}");
    let expired_kill = sandbox.kill().await;
    assert!(
        matches!(expired_kill, Err(SandboxError::NotFound(_))),
        "{expired_kill:?}"
    );

    // Connect to a live sandbox by id, then kill it: gone on both planes.
    let other = backend.create_sandbox(&SandboxOptions::new()).await.unwrap();
    let id = waxell::sandbox::SandboxSession::sandbox_id(&other).to_owned();
    let connected = backend.connect(&id, Some(Duration::from_secs(60))).await.unwrap();
    let connected = Sandbox::from_session("e2b", Box::new(connected));
    assert_eq!(
        connected
            .run_code("6 * 7", &RunOptions::new())
            .await
            .unwrap()
            .text(),
        Some("42")
    );
    connected.kill().await.unwrap();
    let after_kill = connected.list_files("/home/user").await;
    assert!(
        matches!(after_kill, Err(SandboxError::NotFound(_))),
        "{after_kill:?}"
    );
    let reconnect = backend.connect(&id, None).await;
    assert!(
        matches!(reconnect, Err(SandboxError::NotFound(_))),
        "{reconnect:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_api_key_and_the_sandbox_limit_are_typed_errors() {
    let url = start_server(server_config().with_max_sandboxes(1)).await;
    let wrong = E2bBackend::new(client_config(&url).with_api_key("e2b_ffff")).unwrap();
    let denied = Sandbox::create(&wrong, &SandboxOptions::new()).await;
    assert!(
        matches!(denied, Err(SandboxError::Authentication(_))),
        "{denied:?}"
    );

    // No key for a server of our own: allowed to try, and this server (which wants one) says 401.
    let keyless = waxell::e2b::E2bConfig::new()
        .with_api_url(&url)
        .with_sandbox_url(&url);
    let denied = Sandbox::create(&E2bBackend::new(keyless).unwrap(), &SandboxOptions::new()).await;
    assert!(
        matches!(&denied, Err(SandboxError::Authentication(m)) if m.contains("401")),
        "{denied:?}"
    );
    // No key for E2B's cloud: refused before any request.
    let cloud = E2bBackend::new(waxell::e2b::E2bConfig::new());
    assert!(matches!(cloud, Err(SandboxError::Authentication(_))), "{cloud:?}");

    let backend = E2bBackend::new(client_config(&url).with_max_retries(0)).unwrap();
    let first = Sandbox::create(&backend, &SandboxOptions::new()).await.unwrap();
    let second = Sandbox::create(&backend, &SandboxOptions::new()).await;
    assert!(matches!(second, Err(SandboxError::RateLimited(_))), "{second:?}");
    first.kill().await.unwrap();
    let third = Sandbox::create(&backend, &SandboxOptions::new()).await.unwrap();
    third.kill().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debug_mode_makes_no_control_plane_calls() {
    let url = start_server(
        waxell_sandbox::server::ServerConfig::new()
            .without_auth()
            .with_debug_sandbox(true),
    )
    .await;
    // A control plane that refuses connections: debug mode must never dial it.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    };
    let config = waxell::e2b::E2bConfig::new()
        .with_debug(true)
        .with_api_url(closed)
        .with_sandbox_url(&url);
    let backend = E2bBackend::new(config).expect("debug mode needs no API key");
    let sandbox = Sandbox::create(&backend, &SandboxOptions::new()).await.unwrap();
    assert_eq!(sandbox.sandbox_id(), "debug_sandbox_id");
    let execution = sandbox.run_code("2 ** 10", &RunOptions::new()).await.unwrap();
    assert_eq!(execution.text(), Some("1024"));
    sandbox.set_timeout(Duration::from_secs(60)).await.unwrap();
    sandbox.kill().await.unwrap();
    // kill was a no-op: the sandbox still runs.
    let again = sandbox.run_code("1", &RunOptions::new()).await.unwrap();
    assert_eq!(again.text(), Some("1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_and_watches_through_the_client_are_traced() {
    let capture = waxell::testing::capture();
    let url = start_server(server_config()).await;
    let sandbox = create(&url, &SandboxOptions::new().with_timeout(Duration::from_secs(60))).await;

    let metadata = std::collections::BTreeMap::from([("owner".to_owned(), "agent-7".to_owned())]);
    sandbox.make_dir("watched").await.unwrap();
    let mut watch = sandbox
        .watch_dir(
            "watched",
            waxell::sandbox::WatchOptions::default().include_entry(true),
        )
        .await
        .unwrap();
    let written = sandbox
        .write_file_with_metadata("watched/report.txt", b"quarterly", &metadata)
        .await
        .unwrap();
    assert_eq!(
        written.metadata, metadata,
        "the upload's answer carries the metadata"
    );
    let listed = sandbox.list_files("watched").await.unwrap();
    assert_eq!(listed[0].metadata, metadata, "{listed:?}");
    assert!(
        listed[0].modified.is_some() && listed[0].mode == Some(0o644),
        "{listed:?}"
    );

    let events = watch.take_events().await.unwrap();
    let kinds: Vec<_> = events.iter().map(|e| (e.kind, e.name.as_str())).collect();
    use waxell::sandbox::FsEventKind::{Chmod, Create, Write};
    assert_eq!(
        &kinds[..3],
        &[
            (Create, "report.txt"),
            (Chmod, "report.txt"),
            (Write, "report.txt")
        ],
        "{events:?}"
    );
    let entry = events[2].entry.as_ref().expect("include_entry");
    assert_eq!(entry.path, "/home/user/watched/report.txt");
    // The metadata (xattrs) arrive after the write: a CHMOD for them follows.
    let later = tokio::time::timeout(Duration::from_secs(5), watch.next_events()).await;
    assert!(
        kinds.len() > 3 || later.is_ok_and(|e| e.is_ok_and(|e| e.iter().any(|e| e.kind == Chmod))),
        "{events:?}"
    );
    drop(watch);
    sandbox.kill().await.unwrap();

    let spans = capture.spans();
    let write = spans
        .iter()
        .find(|s| {
            s.name().ends_with("sandbox.write_file") && s.attr("waxell.sandbox.file.metadata_count").is_some()
        })
        .expect("a write_file span with metadata_count");
    write.assert_attr("waxell.sandbox.file.metadata_count", 1_i64);
    assert!(
        !format!("{:?}", write.attributes()).contains("agent-7"),
        "metadata values stay out of spans"
    );
    spans
        .iter()
        .find(|s| s.name().ends_with("sandbox.watch_dir"))
        .expect("a watch_dir span")
        .assert_attr("waxell.sandbox.watch.recursive", false);
}
