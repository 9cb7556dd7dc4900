//! `waxell ui` benchmarks (feature `ui`), each figure beside its anchor measured in the same run:
//!
//! - `ingest`: the UI's ingest rate against an exporter's send rate. The send rate: spans/s that the plain
//!   OpenTelemetry SDK + OTLP/HTTP exporter (batch of 512, protobuf) sends to a sink that answers at once
//!   (taking the body in, not reading it), and waxell's own pipeline (`init()`) into that sink. The ingest
//!   rate: that exporter's recorded requests posted to `waxell ui` one at a time, as the exporter posts them,
//!   by a client that only writes and reads (every span counted in the store at the end). Target: the UI
//!   ingests faster than an exporter sends. Also end to end: the exporter's program sending straight into the
//!   UI, every span counted in the store when the flush returns; on a 2-core machine the program, its
//!   exporter and the UI then share the cores, so that figure is the sum of their work, not the UI's rate.
//! - `page`: a 10,000-span run's page vs a 1-span run's page, twice: in one headless chromium kept running
//!   (driven over the DevTools protocol), from the navigation's start to the first span row drawn, as a page
//!   load is timed; and from chromium's start to its DOM dump (`--dump-dom`), mostly the browser's own start.
//!   Also the API's answer for the run alone (`GET /api/runs/{id}`). Target: the 10,000-span page under 1 s.
//!
//! - `receiver`: the receiver's own work per span, in process (no HTTP, no exporter): decoding requests of
//!   512 spans as the exporter sends them and storing them as the receiver does (`Store::ingest_protobuf`: read
//!   in place, each span kept as its own bytes), beside decoding them with prost and storing them as
//!   `SpanRecord`s' JSON (`spans_of` + `Store::ingest`, the receiver's path before). Run it under
//!   `valgrind --tool=callgrind` for instruction counts.
//!
//! - `rest`: 1,000,000 spans stored (50,000 runs of 20 spans, written through the store's own ingest): the
//!   process's resident memory once idle beside its memory before, the store file's size, and the run
//!   list's answer (`GET /api/runs`, the newest 200 of 50,000 runs).
//!
//! `cargo bench -p waxell --features ui --bench ui` (`-- --quick` for fewer rounds; `WAXELL_BENCH_ROUNDS=n`
//! sets the `ingest` rounds). Needs chromium for
//! `page` (`scripts/setup-browser.sh`); without it that case is skipped.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[path = "../../tests/src/bench_row.rs"]
mod bench_row;
use bench_row::Row;

use opentelemetry::trace::{Span as _, TraceContextExt as _, Tracer as _, TracerProvider as _};
use opentelemetry::KeyValue;
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider};
use waxell::ui::{UiOptions, UiServer};

const TOOLS_PER_RUN: usize = 19;

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn temp_dir(name: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let dir = std::env::temp_dir().join(format!("waxell-ui-bench-{name}-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn options(dir: &Path) -> UiOptions {
    UiOptions {
        listen: "127.0.0.1:0".parse().unwrap(),
        otlp: Some("127.0.0.1:0".parse().unwrap()),
        otlp_grpc: None,
        store: dir.join("store.redb"),
        follow: Vec::new(),
        retention: None,
        ..UiOptions::default()
    }
}

/// One agent run of 20 spans with the attributes waxell's spans carry.
fn agent_run(tracer: &opentelemetry_sdk::trace::SdkTracer, i: usize) {
    let root = tracer
        .span_builder("invoke_agent bench")
        .with_attributes(vec![
            KeyValue::new("gen_ai.operation.name", "invoke_agent"),
            KeyValue::new("gen_ai.agent.name", "bench"),
            KeyValue::new("openinference.span.kind", "AGENT"),
            KeyValue::new("input.value", format!("{{\"run\":{i}}}")),
        ])
        .start(tracer);
    let cx = opentelemetry::Context::current_with_span(root);
    for t in 0..TOOLS_PER_RUN {
        let mut span = tracer
            .span_builder("execute_tool step")
            .with_attributes(vec![
                KeyValue::new("gen_ai.operation.name", "execute_tool"),
                KeyValue::new("gen_ai.tool.name", "step"),
                KeyValue::new("openinference.span.kind", "TOOL"),
                KeyValue::new("gen_ai.tool.call.arguments", format!("{{\"i\":{t}}}")),
                KeyValue::new("output.value", (t * 3).to_string()),
            ])
            .start_with_context(tracer, &cx);
        span.end();
    }
    cx.span().end();
}

fn provider(endpoint: &str) -> SdkTracerProvider {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_endpoint(format!("{endpoint}/v1/traces"))
        .build()
        .expect("otlp exporter");
    let batch = BatchSpanProcessor::builder(exporter)
        .with_batch_config(
            BatchConfigBuilder::default()
                .with_max_queue_size(8192)
                .with_max_export_batch_size(512)
                .with_scheduled_delay(Duration::from_millis(1000))
                .build(),
        )
        .build();
    SdkTracerProvider::builder().with_span_processor(batch).build()
}

/// Send `runs` runs in bursts of 100 (flushing after each, so the queue never overflows); the time taken
/// until the last flush returned and `received` returned (the receiver has every span).
fn send(endpoint: &str, runs: usize, received: &dyn Fn()) -> Duration {
    let provider = provider(endpoint);
    let tracer = provider.tracer("bench");
    let start = Instant::now();
    for burst in 0..runs / 100 {
        for i in 0..100 {
            agent_run(&tracer, burst * 100 + i);
        }
        provider.force_flush().expect("flush");
    }
    received();
    let took = start.elapsed();
    let _ = provider.shutdown();
    took
}

/// A sink that answers every POST with 200 and an empty body at once (its body taken in, not read): the
/// exporter's ceiling.
fn sink() -> (
    String,
    std::thread::JoinHandle<()>,
    tokio::sync::oneshot::Sender<()>,
) {
    recording_sink(None)
}

/// [`sink`], keeping each body it is sent in `kept` when given.
fn recording_sink(
    kept: Option<std::sync::Arc<std::sync::Mutex<Vec<Vec<u8>>>>>,
) -> (
    String,
    std::thread::JoinHandle<()>,
    tokio::sync::oneshot::Sender<()>,
) {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    listener.set_nonblocking(true).unwrap();
    let handle = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let app = axum::Router::new().route(
                "/v1/traces",
                // The body is taken in (as any server must, or hyper closes the connection under the
                // exporter's next request, and a batch is lost) and not looked at.
                axum::routing::post(move |body: axum::body::Bytes| async move {
                    if let Some(kept) = &kept {
                        kept.lock().unwrap().push(body.to_vec());
                    }
                    ([("content-type", "application/x-protobuf")], Vec::<u8>::new())
                }),
            );
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = rx.await;
                })
                .await;
        });
    });
    (format!("http://{addr}"), handle, tx)
}

fn bench_ingest(quick: bool) {
    let runs = if quick { 200 } else { 5000 };
    let rounds = std::env::var("WAXELL_BENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(if quick { 1 } else { 5 });
    let spans = runs * (TOOLS_PER_RUN + 1);
    let bodies = recorded_requests(runs);
    let (mut ui_times, mut sink_times) = (Vec::new(), Vec::new());
    let (mut capacity_times, mut replay_sink_times) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let measure_ui = || {
            let dir = temp_dir("ingest");
            let ui = UiServer::start(options(&dir)).unwrap();
            let took = send(&ui.otlp_endpoint().unwrap(), runs, &|| ui.wait_stored());
            let stored = ui.store().counts().unwrap()["spans"] as usize;
            assert_eq!(
                stored, spans,
                "every span is in the store when the exporter's flush returns"
            );
            ui.shutdown();
            let _ = std::fs::remove_dir_all(dir);
            took
        };
        // The UI alone: the exporter's recorded requests posted as it posts them, by a client that costs
        // next to nothing, so the figure is the UI's own rate.
        let measure_capacity = || {
            let dir = temp_dir("capacity");
            let ui = UiServer::start(options(&dir)).unwrap();
            let took = replay(&ui.otlp_endpoint().unwrap(), &bodies, &|| ui.wait_stored());
            let stored = ui.store().counts().unwrap()["spans"] as usize;
            assert_eq!(
                stored, spans,
                "every replayed span is in the store when the last answer came"
            );
            ui.shutdown();
            let _ = std::fs::remove_dir_all(dir);
            took
        };
        let measure_replay_sink = || {
            let (url, handle, stop) = sink();
            let took = replay(&url, &bodies, &|| {});
            let _ = stop.send(());
            let _ = handle.join();
            took
        };
        let measure_sink = || {
            let (url, handle, stop) = sink();
            let took = send(&url, runs, &|| {});
            let _ = stop.send(());
            let _ = handle.join();
            took
        };
        if round % 2 == 0 {
            ui_times.push(measure_ui());
            sink_times.push(measure_sink());
            capacity_times.push(measure_capacity());
            replay_sink_times.push(measure_replay_sink());
        } else {
            replay_sink_times.push(measure_replay_sink());
            capacity_times.push(measure_capacity());
            sink_times.push(measure_sink());
            ui_times.push(measure_ui());
        }
    }
    let rate = |d: Duration| spans as f64 / d.as_secs_f64();
    // Each round's sides ran back to back: their ratio moves less with the machine's load than either.
    let paired_ratios = |slower: &[Duration], faster: &[Duration]| {
        let mut r: Vec<f64> = slower
            .iter()
            .zip(faster)
            .map(|(u, s)| s.as_secs_f64() / u.as_secs_f64())
            .collect();
        r.sort_by(f64::total_cmp);
        r
    };
    let paired = paired_ratios(&ui_times, &sink_times);
    let capacity_paired = paired_ratios(&capacity_times, &sink_times);
    let (u, s) = (rate(median(&mut ui_times)), rate(median(&mut sink_times)));
    let c = rate(median(&mut capacity_times));
    let client = rate(median(&mut replay_sink_times));
    println!(
        "ingest/capacity: {c:.0} spans/s into the store (the exporter's {} recorded requests posted one at a time)",
        bodies.len()
    );
    println!("ingest/replay_ceiling: {client:.0} spans/s (the same client into the sink: its own ceiling)");
    println!(
        "ingest: capacity / exporter ceiling = {:.2} (median of the rounds' own ratios: {:.2}, range {:.2}-{:.2})",
        c / s,
        capacity_paired[capacity_paired.len() / 2],
        capacity_paired[0],
        capacity_paired[capacity_paired.len() - 1]
    );
    println!(
        "ingest/waxell_ui: {u:.0} spans/s into the store ({spans} spans per round, {rounds} rounds, median)"
    );
    println!("ingest/exporter_ceiling: {s:.0} spans/s (the same exporter into a sink that answers at once)");
    println!(
        "ingest: waxell ui / exporter ceiling = {:.2} (median of the rounds' own ratios: {:.2}, range {:.2}-{:.2})",
        u / s,
        paired[paired.len() / 2],
        paired[0],
        paired[paired.len() - 1]
    );

    // waxell's own pipeline (its spans, fail-open export, scrubbing) into the UI and into the sink: whether
    // the UI keeps up with what waxell itself sends. Once each, at the end: `init()` is process-wide.
    let dir = temp_dir("ingest-waxell");
    let ui = UiServer::start(options(&dir)).unwrap();
    let into_ui = rate(send_with_waxell(&ui.otlp_endpoint().unwrap(), runs, &|| {
        ui.wait_stored()
    }));
    let stored = ui.store().counts().unwrap()["spans"] as usize;
    assert_eq!(
        stored, spans,
        "every waxell span is in the store when the flush returns"
    );
    ui.shutdown();
    let _ = std::fs::remove_dir_all(dir);
    let (url, handle, stop) = sink();
    let into_sink = rate(send_with_waxell(&url, runs, &|| {}));
    let _ = stop.send(());
    let _ = handle.join();
    println!(
        "ingest/waxell_exporter_into_ui: {into_ui:.0} spans/s (waxell's pipeline, every span in the store)"
    );
    println!("ingest/waxell_exporter_ceiling: {into_sink:.0} spans/s (waxell's pipeline into the sink)");
    println!(
        "ingest: waxell ui / waxell's exporter ceiling = {:.2}",
        into_ui / into_sink
    );

    let mut rows = bench_row::Rows::start("[U]", quick);
    let rate = |r: f64| format!("{} spans/s", bench_row::grouped(r));
    rows.push(Row {
        id: "ui.ingest.capacity".into(),
        what: format!(
            "`waxell ui`'s ingest rate over OTLP/HTTP protobuf: the plain exporter's own {} requests (up to 512 spans \
             each, recorded) posted one at a time over one connection, each after the last one's answer, every span \
             counted in the store at the end ({spans} spans per round, {rounds} rounds, alternating; the client \
             alone reaches {} into the sink)",
            bodies.len(),
            rate(client)
        ),
        measured: rate(c),
        anchor: format!(
            "the plain OpenTelemetry SDK + OTLP exporter's send rate (batches of 512) into a sink that answers at \
             once: {}",
            rate(s)
        ),
        ratio: format!(
            "**{:.2}** (rounds' own ratios: {:.2}-{:.2})",
            c / s,
            capacity_paired[0],
            capacity_paired[capacity_paired.len() - 1]
        ),
        target: ">= 1.0x".into(),
        verdict: Some(c / s >= 1.0),
    });
    rows.push(Row {
        id: "ui.ingest.capacity.waxell".into(),
        what: "the same ingest rate beside waxell's own pipeline (`init()`, agents and tools)".into(),
        measured: rate(c),
        anchor: format!(
            "waxell's pipeline's send rate into that sink: {}",
            rate(into_sink)
        ),
        ratio: format!("**{:.2}**", c / into_sink),
        target: ">= 1.0x".into(),
        verdict: Some(c / into_sink >= 1.0),
    });
    rows.push(Row {
        id: "ui.ingest.otel".into(),
        what: format!(
            "end to end on one machine: the plain exporter's program sending into the UI's store, every span \
             counted there when the flush returns (the program, its exporter and the UI share the 2 cores; {spans} \
             spans per round, {rounds} rounds, alternating)"
        ),
        measured: rate(u),
        anchor: format!("the same program into the sink: {}", rate(s)),
        ratio: format!("**{:.2}** (rounds' own ratios: {:.2}-{:.2})", u / s, paired[0], paired[paired.len() - 1]),
        target: "none".into(),
        verdict: None,
    });
    rows.push(Row {
        id: "ui.ingest.waxell".into(),
        what: "same end to end, waxell's own pipeline into the UI's store".into(),
        measured: rate(into_ui),
        anchor: format!("waxell's pipeline into the sink: {}", rate(into_sink)),
        ratio: format!("**{:.2}**", into_ui / into_sink),
        target: "none".into(),
        verdict: None,
    });
    rows.finish();
}

#[waxell::tool]
fn step(i: usize) -> usize {
    i * 3
}

#[waxell::agent(name = "bench")]
fn waxell_run(i: usize) -> usize {
    (0..TOOLS_PER_RUN).map(|t| step(i + t)).sum()
}

/// Like [`send`], through `waxell::init()`'s pipeline: runs of one agent and 19 tools.
fn send_with_waxell(endpoint: &str, runs: usize, received: &dyn Fn()) -> Duration {
    let guard = waxell::builder()
        .with_env(|_| None)
        .with_otlp_endpoint(format!("{endpoint}/v1/traces"))
        .with_trace_file(None)
        .init()
        .expect("waxell init");
    let start = Instant::now();
    for burst in 0..runs / 100 {
        for i in 0..100 {
            std::hint::black_box(waxell_run(burst * 100 + i));
        }
        guard.force_flush().expect("flush");
    }
    received();
    let took = start.elapsed();
    let counter = guard.drop_counter();
    if let Err(e) = guard.shutdown() {
        panic!(
            "every span sent to {endpoint}: {e} (last error: {:?})",
            counter.last_error()
        );
    }
    took
}

fn chromium() -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("chromium"))
            .find(|p| p.is_file())
    })
}

fn load_page(browser: &Path, url: &str, expect: &str) -> Duration {
    let profile = temp_dir("profile");
    let start = Instant::now();
    let output = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--disable-dev-shm-usage",
            "--virtual-time-budget=30000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--dump-dom")
        .arg(url)
        .stderr(Stdio::null())
        .output()
        .expect("chromium runs");
    let took = start.elapsed();
    let _ = std::fs::remove_dir_all(profile);
    let dom = String::from_utf8_lossy(&output.stdout);
    assert!(dom.contains(expect), "the page did not draw {expect:?}");
    took
}

/// One headless chromium kept running, driven over the DevTools protocol on a pipe
/// (`--remote-debugging-pipe`: commands on its fd 3, answers on its fd 4, each JSON ending in a NUL byte).
struct Browser {
    child: std::process::Child,
    to: std::process::ChildStdin,
    from: std::io::BufReader<std::process::ChildStdout>,
    next_id: u64,
    session: String,
    profile: PathBuf,
}

impl Browser {
    fn start(browser: &Path) -> Self {
        let profile = temp_dir("cdp-profile");
        // The shell hands chromium our pipes as its fds 3 and 4.
        let script = format!(
            "exec '{}' --headless --no-sandbox --disable-gpu --disable-background-networking \\
             --disable-component-update --disable-sync --no-first-run --disable-dev-shm-usage \\
             --user-data-dir='{}' --remote-debugging-pipe about:blank 3<&0 4>&1 0</dev/null 1>/dev/null",
            browser.display(),
            profile.display()
        );
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromium starts");
        let to = child.stdin.take().unwrap();
        let from = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut b = Self {
            child,
            to,
            from,
            next_id: 0,
            session: String::new(),
            profile,
        };
        let target = b.call(
            None,
            "Target.createTarget",
            serde_json::json!({"url": "about:blank"}),
        );
        let target = target["targetId"].as_str().expect("a target").to_owned();
        let attached = b.call(
            None,
            "Target.attachToTarget",
            serde_json::json!({"targetId": target, "flatten": true}),
        );
        b.session = attached["sessionId"].as_str().expect("a session").to_owned();
        b.call_page("Page.enable", serde_json::json!({}));
        // Before any script of each page: note the time (ms since the navigation started) at which the
        // first span row appears.
        b.call_page(
            "Page.addScriptToEvaluateOnNewDocument",
            serde_json::json!({"source": "new MutationObserver((_, o) => { if (document.querySelector('.tree [data-span]')) { window.__drawn = performance.now(); o.disconnect(); } }).observe(document, {childList: true, subtree: true});"}),
        );
        b
    }

    fn call(&mut self, session: Option<&str>, method: &str, params: serde_json::Value) -> serde_json::Value {
        use std::io::BufRead;
        self.next_id += 1;
        let id = self.next_id;
        let mut msg = serde_json::json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            msg["sessionId"] = s.into();
        }
        let mut bytes = serde_json::to_vec(&msg).unwrap();
        bytes.push(0);
        self.to.write_all(&bytes).unwrap();
        self.to.flush().unwrap();
        loop {
            let mut buf = Vec::new();
            let n = self.from.read_until(0, &mut buf).unwrap();
            assert!(n > 0, "chromium closed the DevTools pipe");
            buf.pop();
            let reply: serde_json::Value = serde_json::from_slice(&buf).unwrap();
            if reply["id"].as_u64() == Some(id) {
                assert!(reply.get("error").is_none(), "{method}: {reply}");
                return reply["result"].clone();
            }
        }
    }

    fn call_page(&mut self, method: &str, params: serde_json::Value) -> serde_json::Value {
        let session = self.session.clone();
        self.call(Some(&session), method, params)
    }

    /// Navigate to `url` and wait until the tree is drawn with `expect` in it: the time from the
    /// navigation's start to the first span row, as the page's own clock measured it.
    fn load(&mut self, url: &str, expect: &str) -> Duration {
        self.call_page("Page.navigate", serde_json::json!({"url": url}));
        let deadline = Instant::now() + Duration::from_secs(30);
        let check = format!(
            "window.__drawn && document.querySelector('.tree').textContent.includes({}) ? window.__drawn : 0",
            serde_json::to_string(expect).unwrap()
        );
        loop {
            let r = self.call_page(
                "Runtime.evaluate",
                serde_json::json!({"expression": check, "returnByValue": true}),
            );
            let ms = r["result"]["value"].as_f64().unwrap_or(0.0);
            if ms > 0.0 {
                return Duration::from_secs_f64(ms / 1000.0);
            }
            assert!(Instant::now() < deadline, "the page did not draw {expect:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

fn get(addr: std::net::SocketAddr, path: &str) -> usize {
    let mut stream = TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n"
    )
    .unwrap();
    let mut body = Vec::new();
    stream.read_to_end(&mut body).unwrap();
    assert!(body.starts_with(b"HTTP/1.1 200"));
    body.len()
}

fn bench_page(quick: bool) {
    let Some(browser) = chromium() else {
        println!("page: skipped, chromium is not installed (scripts/setup-browser.sh)");
        return;
    };
    let rounds = if quick { 1 } else { 5 };
    let dir = temp_dir("page");
    let ui = UiServer::start(options(&dir)).unwrap();
    // One run of 10,000 spans (an agent with 9,999 tool calls), and one of a single span.
    {
        let provider = provider(&ui.otlp_endpoint().unwrap());
        let tracer = provider.tracer("bench");
        let root = tracer.span_builder("invoke_agent big").start(&tracer);
        let cx = opentelemetry::Context::current_with_span(root);
        for i in 0..9_999 {
            let mut span = tracer
                .span_builder(format!("execute_tool step_{}", i % 50))
                .with_attributes(vec![
                    KeyValue::new("gen_ai.operation.name", "execute_tool"),
                    KeyValue::new("output.value", i.to_string()),
                ])
                .start_with_context(&tracer, &cx);
            span.end();
            if i % 2000 == 1999 {
                provider.force_flush().unwrap();
            }
        }
        cx.span().end();
        tracer.span_builder("invoke_agent small").start(&tracer).end();
        provider.shutdown().unwrap();
    }
    let (runs, _) = ui.store().runs(&waxell::ui::RunFilter::default()).unwrap();
    let big = runs
        .iter()
        .find(|r| r.spans == 10_000)
        .expect("the 10,000-span run")
        .trace_id
        .clone();
    let small = runs
        .iter()
        .find(|r| r.spans == 1)
        .expect("the 1-span run")
        .trace_id
        .clone();

    let (mut big_times, mut small_times, mut api_times) = (Vec::new(), Vec::new(), Vec::new());
    let (mut big_warm, mut small_warm) = (Vec::new(), Vec::new());
    let mut bytes = 0;
    let mut running = Browser::start(&browser);
    // A first navigation, not counted: the browser's own first-page start-up.
    running.load(&ui.run_url(&small), "invoke_agent small");
    for round in 0..rounds {
        if round % 2 == 0 {
            big_warm.push(running.load(&ui.run_url(&big), "execute_tool step_49"));
            small_warm.push(running.load(&ui.run_url(&small), "invoke_agent small"));
        } else {
            small_warm.push(running.load(&ui.run_url(&small), "invoke_agent small"));
            big_warm.push(running.load(&ui.run_url(&big), "execute_tool step_49"));
        }
    }
    drop(running);
    for round in 0..rounds {
        let big_page = || load_page(&browser, &ui.run_url(&big), "execute_tool step_49");
        let small_page = || load_page(&browser, &ui.run_url(&small), "invoke_agent small");
        if round % 2 == 0 {
            big_times.push(big_page());
            small_times.push(small_page());
        } else {
            small_times.push(small_page());
            big_times.push(big_page());
        }
        let start = Instant::now();
        bytes = get(ui.addr(), &format!("/api/runs/{big}"));
        api_times.push(start.elapsed());
    }
    let (b, s, a) = (
        median(&mut big_times),
        median(&mut small_times),
        median(&mut api_times),
    );
    let (bw, sw) = (median(&mut big_warm), median(&mut small_warm));
    println!("page/10000_spans_loaded: {bw:?} (in a running chromium: navigation start to the tree drawn, {rounds} rounds, median)");
    println!("page/1_span_loaded: {sw:?} (the same for a 1-span run)");
    println!("page/10000_spans: {b:?} (chromium start to DOM dump, {rounds} rounds, median)");
    println!("page/1_span: {s:?} (the same for a 1-span run: browser start-up, assets, one fetch)");
    println!(
        "page: the 10,000 spans cost {:?} over the 1-span page",
        b.saturating_sub(s)
    );
    println!("page/api: GET /api/runs/{{id}} for 10,000 spans: {a:?} ({bytes} bytes)");
    ui.shutdown();
    let _ = std::fs::remove_dir_all(dir);
}

/// Requests of 512 spans (runs of 20 as [`agent_run`] makes them), protobuf-encoded.
/// The request bodies the plain exporter sends for `runs` runs ([`send`] into a sink that keeps them).
fn recorded_requests(runs: usize) -> Vec<Vec<u8>> {
    let kept = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let (url, handle, stop) = recording_sink(Some(kept.clone()));
    send(&url, runs, &|| {});
    let _ = stop.send(());
    let _ = handle.join();
    let bodies = std::mem::take(&mut *kept.lock().unwrap());
    bodies
}

/// Post `bodies` to the OTLP/HTTP `endpoint` as an exporter does, one at a time over one kept-alive
/// connection, each after the last one's answer (a 200); the time from the first to the last answer. The
/// requests are written out beforehand, so the client costs a write and a read per request.
fn replay(endpoint: &str, bodies: &[Vec<u8>], received: &dyn Fn()) -> Duration {
    use std::io::BufRead;
    let addr = endpoint.strip_prefix("http://").expect("an http:// endpoint");
    let requests: Vec<Vec<u8>> = bodies
        .iter()
        .map(|body| {
            let mut r = format!(
                "POST /v1/traces HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/x-protobuf\r\n\
                 content-length: {}\r\n\r\n",
                body.len()
            )
            .into_bytes();
            r.extend_from_slice(body);
            r
        })
        .collect();
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_nodelay(true).unwrap();
    let mut answers = std::io::BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    let start = Instant::now();
    for request in &requests {
        stream.write_all(request).unwrap();
        line.clear();
        answers.read_line(&mut line).unwrap();
        assert!(line.starts_with("HTTP/1.1 200"), "the receiver answered {line:?}");
        let mut length = 0;
        loop {
            line.clear();
            answers.read_line(&mut line).unwrap();
            let header = line.trim_end().to_ascii_lowercase();
            if header.is_empty() {
                break;
            }
            if let Some(v) = header.strip_prefix("content-length:") {
                length = v.trim().parse().unwrap();
            }
        }
        let mut body = vec![0; length];
        answers.read_exact(&mut body).unwrap();
    }
    received();
    start.elapsed()
}

fn encoded_requests(runs: usize) -> Vec<Vec<u8>> {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue as Kv};
    use opentelemetry_proto::tonic::resource::v1::Resource;
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
    use prost::Message;
    let kv = |k: &str, v: String| Kv {
        key: k.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(v)),
        }),
        ..Default::default()
    };
    let mut spans = Vec::new();
    for run in 0..runs {
        let mut trace = [0u8; 16];
        trace[..8].copy_from_slice(&(run as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15).to_be_bytes());
        trace[8..].copy_from_slice(&(run as u64 + 7).to_be_bytes());
        for i in 0..=TOOLS_PER_RUN as u64 {
            let attributes = if i == 0 {
                vec![
                    kv("gen_ai.operation.name", "invoke_agent".into()),
                    kv("gen_ai.agent.name", "bench".into()),
                    kv("openinference.span.kind", "AGENT".into()),
                    kv("input.value", format!("{{\"run\":{run}}}")),
                ]
            } else {
                vec![
                    kv("gen_ai.operation.name", "execute_tool".into()),
                    kv("gen_ai.tool.name", "step".into()),
                    kv("openinference.span.kind", "TOOL".into()),
                    kv("gen_ai.tool.call.arguments", format!("{{\"i\":{i}}}")),
                    kv("output.value", (i * 3).to_string()),
                ]
            };
            spans.push(Span {
                trace_id: trace.to_vec(),
                span_id: (run as u64 * 100 + i + 1).to_be_bytes().to_vec(),
                parent_span_id: if i == 0 {
                    Vec::new()
                } else {
                    (run as u64 * 100 + 1).to_be_bytes().to_vec()
                },
                name: if i == 0 {
                    "invoke_agent bench"
                } else {
                    "execute_tool step"
                }
                .into(),
                kind: 1,
                start_time_unix_nano: 1_700_000_000_000_000_000 + run as u64 * 1_000_000 + i,
                end_time_unix_nano: 1_700_000_000_000_000_000 + run as u64 * 1_000_000 + 500_000,
                attributes,
                ..Default::default()
            });
        }
    }
    spans
        .chunks(512)
        .map(|chunk| {
            ExportTraceServiceRequest {
                resource_spans: vec![ResourceSpans {
                    resource: Some(Resource {
                        attributes: vec![kv("service.name", "bench".into())],
                        ..Default::default()
                    }),
                    scope_spans: vec![ScopeSpans {
                        scope: Some(InstrumentationScope {
                            name: "bench".into(),
                            ..Default::default()
                        }),
                        spans: chunk.to_vec(),
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
            }
            .encode_to_vec()
        })
        .collect()
}

fn bench_receiver(quick: bool) {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use prost::Message;
    let runs = if quick { 500 } else { 2_000 };
    let rounds = if quick { 1 } else { 5 };
    let spans = runs * (TOOLS_PER_RUN + 1);
    let requests = encoded_requests(runs);
    let (mut direct, mut records) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let measure = |as_records: bool| {
            let dir = temp_dir("receiver");
            let store = waxell::ui::Store::open(&dir.join("store.redb")).unwrap();
            let start = Instant::now();
            for body in &requests {
                if as_records {
                    let request = ExportTraceServiceRequest::decode(body.as_slice()).unwrap();
                    store
                        .ingest(&waxell::ui::model::spans_of(&request), None)
                        .unwrap();
                } else {
                    store.ingest_protobuf(body).unwrap();
                }
            }
            let took = start.elapsed();
            assert_eq!(store.counts().unwrap()["spans"] as usize, spans);
            drop(store);
            let _ = std::fs::remove_dir_all(dir);
            took
        };
        if round % 2 == 0 {
            direct.push(measure(false));
            records.push(measure(true));
        } else {
            records.push(measure(true));
            direct.push(measure(false));
        }
    }
    let per_span = |d: Duration| d.as_secs_f64() * 1e6 / spans as f64;
    let (d, r) = (per_span(median(&mut direct)), per_span(median(&mut records)));
    println!("receiver/ingest_protobuf: {d:.2} us per span (read + store, {spans} spans in requests of 512, {rounds} rounds, median)");
    println!("receiver/as_records: {r:.2} us per span (prost decode + spans_of + Store::ingest)");
    println!("receiver: ingest_protobuf / as_records = {:.2}", d / r);
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn bench_rest(quick: bool) {
    use waxell::ui::SpanRecord;
    let runs = if quick { 5_000 } else { 50_000 };
    let dir = temp_dir("rest");
    let mut opts = options(&dir);
    opts.otlp = None;
    let ui = UiServer::start(opts).unwrap();
    let before = rss_kib();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let start = Instant::now();
    let mut batch = Vec::with_capacity(5_000);
    for run in 0..runs {
        let trace = format!("{:032x}", run + 1);
        let root = format!("{:016x}", 1);
        for i in 0..20u64 {
            let mut attributes = serde_json::Map::new();
            attributes.insert(
                "gen_ai.operation.name".into(),
                (if i == 0 { "invoke_agent" } else { "execute_tool" }).into(),
            );
            attributes.insert("gen_ai.agent.name".into(), "bench".into());
            attributes.insert("output.value".into(), format!("result {i} of run {run}").into());
            batch.push(SpanRecord {
                trace_id: trace.clone(),
                span_id: format!("{:016x}", i + 1),
                parent_id: if i == 0 { String::new() } else { root.clone() },
                name: if i == 0 {
                    "invoke_agent bench".into()
                } else {
                    "execute_tool step".into()
                },
                kind: "internal".into(),
                start: now + run as u64 * 1_000_000 + i,
                end: now + run as u64 * 1_000_000 + 500_000,
                status: "unset".into(),
                status_message: String::new(),
                attributes,
                events: Vec::new(),
                links: Vec::new(),
                service: "bench".into(),
                scope: "bench".into(),
            });
        }
        if batch.len() >= 5_000 {
            ui.store().ingest(&batch, None).unwrap();
            batch.clear();
        }
    }
    ui.store().ingest(&batch, None).unwrap();
    let took = start.elapsed();
    let spans = runs * 20;
    assert_eq!(ui.store().counts().unwrap()["spans"] as usize, spans);
    std::thread::sleep(Duration::from_secs(2));
    let after = rss_kib();
    let size = std::fs::metadata(dir.join("store.redb"))
        .map(|m| m.len())
        .unwrap_or(0);
    let mut list_times = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        get(ui.addr(), "/api/runs");
        list_times.push(t.elapsed());
    }
    println!("rest/stored: {spans} spans in {runs} runs, written in {took:?} through Store::ingest (5,000 per commit)");
    println!(
        "rest/memory: resident {} MiB with them stored and idle, {} MiB before (the process: UI, runtime, bench)",
        after / 1024,
        before / 1024
    );
    println!("rest/store_file: {} MiB", size / (1024 * 1024));
    println!(
        "rest/run_list: GET /api/runs (newest 200 of {runs}): {:?} (median of 5)",
        median(&mut list_times)
    );
    ui.shutdown();
    let _ = std::fs::remove_dir_all(dir);
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let only = std::env::var("WAXELL_BENCH_ONLY").unwrap_or_default();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load average before: {}", load.trim());
    if only.is_empty() || only.contains("ingest") {
        bench_ingest(quick);
    }
    if only.is_empty() || only.contains("page") {
        bench_page(quick);
    }
    if only.is_empty() || only.contains("receiver") {
        bench_receiver(quick);
    }
    if only.is_empty() || only.contains("rest") {
        bench_rest(quick);
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load average after: {}", load.trim());
}
