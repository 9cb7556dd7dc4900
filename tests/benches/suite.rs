//! The cross-crate benchmark suite: every figure next to its anchor, both measured in the same run.
//!
//! - `run_code`: `run_code("1+1")` in process (local backend) vs over the E2B-compatible HTTP server
//!   (`waxell::e2b` client -> `waxell-sandbox` router on 127.0.0.1). Target: over HTTP <= 3 ms.
//! - `concurrent`: N sandboxes created and each running a small cell at once, vs one alone.
//! - `export`: spans/s through `waxell::builder().with_otlp_endpoint(..)` into an `OtlpReceiver` on
//!   127.0.0.1, every span counted on arrival, vs the plain OpenTelemetry SDK + OTLP/HTTP exporter.
//! - `collector_down`: wall time of an instrumented agent workload with nothing listening on the
//!   collector port vs a healthy receiver. Target: down <= 5 % above healthy.
//! - `demo`: the built `demos --dry-run --quiet` as a whole process vs its floor, the sandbox venv's
//!   Python importing pandas and matplotlib. Target: <= 3 s.
//!
//! Full run (as root, after `scripts/setup.sh`):
//! `cargo build --release -p demos && cargo bench -p waxell-tests --bench suite`.
//! Quick run (CI, seconds per case): add `-- --quick` (or set `WAXELL_BENCH_QUICK=1`).
//! One case only: `WAXELL_BENCH_ONLY=run_code,demo` (comma-separated case names; also `exit`: the one-agent
//! CLI and the demo as whole processes, collector down vs healthy).
//! The demo binary is `WAXELL_DEMO_BIN`, else `target/release/demos`, else `target/debug/demos`.
//!
//! The machine is shared and noisy, so the two sides of every comparison run in alternating rounds
//! (order flipped each round) and the suite reports medians and their ratio; a markdown table of all
//! figures is printed at the end, with the load average before and after.

use std::hint::black_box;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use opentelemetry::trace::{Span as _, SpanKind, TraceContextExt as _, Tracer as _, TracerProvider as _};
use opentelemetry::KeyValue;
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider};
use waxell::e2b::{E2bBackend, E2bConfig};
use waxell::sandbox::{RunOptions, Sandbox, SandboxOptions};
use waxell::{agent, tool};
use waxell_sandbox::server::{router, serve, ServerConfig};
use waxell_sandbox::{LocalBackend, LocalConfig};
use waxell_tests::OtlpReceiver;

/// How much of each case to run.
struct Mode {
    quick: bool,
    only: Option<Vec<String>>,
}

impl Mode {
    fn from_env() -> Self {
        let quick = std::env::args().any(|a| a == "--quick")
            || std::env::var("WAXELL_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0");
        let only = std::env::var("WAXELL_BENCH_ONLY")
            .ok()
            .filter(|v| !v.is_empty())
            .map(|v| v.split(',').map(|s| s.trim().to_owned()).collect());
        Self { quick, only }
    }

    fn runs(&self, case: &str) -> bool {
        self.only.as_ref().is_none_or(|o| o.iter().any(|c| c == case))
    }

    /// `quick` in quick mode, else `full`.
    fn pick<T>(&self, quick: T, full: T) -> T {
        if self.quick {
            quick
        } else {
            full
        }
    }
}

/// One row of the summary table.
struct Row {
    figure: String,
    measured: String,
    anchor: String,
    ratio: String,
    target: String,
}

fn median(samples: &[Duration]) -> Duration {
    quantile(samples, 0.5)
}

fn quantile(samples: &[Duration], q: f64) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort();
    sorted[((sorted.len() as f64 - 1.0) * q).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

fn describe(name: &str, samples: &[Duration]) {
    println!(
        "{name}: median {}, p90 {}, n = {}",
        ms(median(samples)),
        ms(quantile(samples, 0.9)),
        samples.len()
    );
}

fn verdict(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "MISSED"
    }
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// Two workers, like the 2-core machines the targets are stated for.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

fn local_backend(pool_size: usize) -> Arc<LocalBackend> {
    Arc::new(
        LocalBackend::new(LocalConfig::default().with_pool_size(pool_size))
            .expect("local sandbox backend (run scripts/setup.sh as root)"),
    )
}

// ---------------------------------------------------------------------------------------------
// run_code: in process vs over the E2B-compatible HTTP server

fn bench_run_code(mode: &Mode, rows: &mut Vec<Row>) {
    let rounds = mode.pick(20, 400);
    let rt = runtime();
    let (local, http, url, created) = rt.block_on(async {
        let backend = local_backend(0);
        // The server in this process, on loopback, over the same backend; the client talks real HTTP.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let config = ServerConfig::new();
        let api_key = config.api_key().expect("closed by default").to_owned();
        let app = router(backend.clone(), config.clone());
        // Served exactly as the `waxell-sandbox serve` binary serves it.
        tokio::spawn(async move { serve(listener, app, &config, std::future::pending()).await });
        let client = E2bBackend::new(
            E2bConfig::new()
                .with_api_key(&api_key)
                .with_api_url(&url)
                .with_sandbox_url(&url),
        )
        .expect("e2b client");
        let local = Sandbox::create(&*backend, &SandboxOptions::default())
            .await
            .expect("local sandbox");
        let http = Sandbox::create(&client, &SandboxOptions::default())
            .await
            .expect("sandbox over HTTP");
        // The raw client's own sandbox, with the data-plane tokens every sandbox requires.
        let created: serde_json::Value = reqwest::Client::new()
            .post(format!("{url}/v2/sandboxes"))
            .header("X-API-KEY", &api_key)
            .json(&serde_json::json!({}))
            .send()
            .await
            .expect("create over HTTP")
            .json()
            .await
            .expect("create response");
        (local, http, url, created)
    });
    // The server's own floor: the same POST /execute with a client built once, still one fresh
    // unpooled HTTP/1.1 connection per request like `waxell::e2b`.
    let raw_client = reqwest::Client::builder()
        .http1_only()
        .pool_max_idle_per_host(0)
        .build()
        .expect("reqwest client");
    let execute_url = format!("{url}/execute");
    let token = |field: &str| created[field].as_str().expect("a token").to_owned();
    let (sandbox_id, envd_token, traffic_token) = (
        token("sandboxID"),
        token("envdAccessToken"),
        token("trafficAccessToken"),
    );
    let options = RunOptions::default();
    let time_one = |sandbox: &Sandbox| {
        rt.block_on(async {
            let start = Instant::now();
            let execution = sandbox.run_code("1+1", &options).await.expect("run_code");
            let took = start.elapsed();
            assert_eq!(execution.text(), Some("2"));
            took
        })
    };
    let time_raw = || {
        rt.block_on(async {
            let start = Instant::now();
            let body = raw_client
                .post(&execute_url)
                .header("E2b-Sandbox-Id", &sandbox_id)
                .header("E2b-Sandbox-Port", "49999")
                .header("X-Access-Token", &envd_token)
                .header("E2B-Traffic-Access-Token", &traffic_token)
                .json(&serde_json::json!({ "code": "1+1" }))
                .send()
                .await
                .expect("POST /execute")
                .text()
                .await
                .expect("body");
            let took = start.elapsed();
            assert!(body.contains("\"text\":\"2\""), "{body}");
            took
        })
    };
    // Warm-up: first runs pay for imports, connection set-up and page faults.
    for _ in 0..10 {
        time_one(&local);
        time_one(&http);
        time_raw();
    }
    let (mut in_process, mut over_http, mut raw_http) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        // Rotate the order so no side always runs first.
        for side in 0..3 {
            match (round + side) % 3 {
                0 => in_process.push(time_one(&local)),
                1 => over_http.push(time_one(&http)),
                _ => raw_http.push(time_raw()),
            }
        }
    }
    rt.block_on(async {
        let _ = http.kill().await;
        let _ = local.kill().await;
    });
    // Guards a regression: `waxell::e2b` once built a reqwest client per execution (loading the TLS
    // root store even for http://), which cost more than the whole round trip; it now builds it once.
    let client_builds: Vec<Duration> = (0..20)
        .map(|_| {
            let start = Instant::now();
            let client = reqwest::Client::builder()
                .http1_only()
                .pool_max_idle_per_host(0)
                .build()
                .expect("reqwest client");
            let took = start.elapsed();
            drop(client);
            took
        })
        .collect();
    describe("run_code/reqwest_client_build", &client_builds);
    describe("run_code/raw_http_reused_client", &raw_http);
    describe("run_code/in_process", &in_process);
    describe("run_code/e2b_http", &over_http);
    let (a, b) = (median(&in_process), median(&over_http));
    let ratio = b.as_secs_f64() / a.as_secs_f64();
    println!(
        "run_code: over HTTP / in process = {ratio:.2}x; over HTTP adds {}",
        ms(b.saturating_sub(a))
    );
    rows.push(Row {
        figure: "`run_code(\"1+1\")` over the E2B-compatible HTTP server (Rust client, 127.0.0.1)".into(),
        measured: format!("{} (p90 {})", ms(b), ms(quantile(&over_http, 0.9))),
        anchor: format!("in process: {} (p90 {})", ms(a), ms(quantile(&in_process, 0.9))),
        ratio: format!("{ratio:.2}x (+{})", ms(b.saturating_sub(a))),
        target: format!("<= 3 ms: {}", verdict(b <= Duration::from_millis(3))),
    });
    let r = median(&raw_http);
    rows.push(Row {
        figure: "same POST `/execute` with a reqwest client built once (fresh connection per request)".into(),
        measured: format!("{} (p90 {})", ms(r), ms(quantile(&raw_http, 0.9))),
        anchor: format!("in process: {}", ms(a)),
        ratio: format!(
            "{:.2}x (+{})",
            r.as_secs_f64() / a.as_secs_f64(),
            ms(r.saturating_sub(a))
        ),
        target: format!("<= 3 ms: {}", verdict(r <= Duration::from_millis(3))),
    });
    let c = median(&client_builds);
    rows.push(Row {
        figure: "building one reqwest `Client` (`waxell::e2b` did it per execution until 8701135)".into(),
        measured: ms(c),
        anchor: format!("the whole E2B-client round trip: {}", ms(b)),
        ratio: format!("{:.1}x the round trip", c.as_secs_f64() / b.as_secs_f64()),
        target: "— (regression guard)".into(),
    });
}

// ---------------------------------------------------------------------------------------------
// concurrent: N sandboxes at once vs one

/// Create a sandbox (no warm pool: each pays the cold start), run a small cell, kill it.
async fn one_sandbox_cell(backend: Arc<LocalBackend>) {
    let sandbox = Sandbox::create(&*backend, &SandboxOptions::default())
        .await
        .expect("create");
    let execution = sandbox
        .run_code("sum(i * i for i in range(10_000))", &RunOptions::default())
        .await
        .expect("run_code");
    assert_eq!(execution.text(), Some("333283335000"));
    sandbox.kill().await.expect("kill");
}

fn bench_concurrent(mode: &Mode, rows: &mut Vec<Row>) {
    let sizes: &[usize] = mode.pick(&[4][..], &[8, 16][..]);
    let rounds = mode.pick(1, 5);
    let rt = runtime();
    let backend = rt.block_on(async { local_backend(0) });
    let run_one = || {
        rt.block_on(async {
            let start = Instant::now();
            one_sandbox_cell(backend.clone()).await;
            start.elapsed()
        })
    };
    let run_many = |n: usize| {
        rt.block_on(async {
            let start = Instant::now();
            let tasks: Vec<_> = (0..n)
                .map(|_| tokio::spawn(one_sandbox_cell(backend.clone())))
                .collect();
            for task in tasks {
                task.await.expect("sandbox task");
            }
            start.elapsed()
        })
    };
    // Teardown's asynchronous kernel clean-up (namespaces, cgroups) would otherwise land in the next
    // measurement.
    let settle = || std::thread::sleep(Duration::from_millis(300));
    run_one();
    settle();
    for &n in sizes {
        let (mut alone, mut together) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            if round % 2 == 0 {
                alone.push(run_one());
                settle();
                together.push(run_many(n));
            } else {
                together.push(run_many(n));
                settle();
                alone.push(run_one());
            }
            settle();
        }
        describe("concurrent/one", &alone);
        describe(&format!("concurrent/{n}_at_once"), &together);
        let (one, all) = (median(&alone), median(&together));
        let per_sandbox = all / n as u32;
        let ratio = all.as_secs_f64() / one.as_secs_f64();
        println!(
            "concurrent: {n} at once take {ratio:.2}x one alone ({} per sandbox, {:.2}x the throughput)",
            ms(per_sandbox),
            n as f64 / ratio
        );
        rows.push(Row {
            figure: format!("{n} sandboxes at once, each create (cold) + one small cell + kill, 2 cores"),
            measured: format!("{} total, {} per sandbox", ms(all), ms(per_sandbox)),
            anchor: format!("one alone: {}", ms(one)),
            ratio: format!(
                "{ratio:.2}x the wall time of one; {:.2}x its throughput",
                n as f64 / ratio
            ),
            target: "— (no target; shows scaling)".into(),
        });
    }
}

// ---------------------------------------------------------------------------------------------
// export: spans/s into an OTLP/HTTP receiver on loopback, none dropped

const TOOLS_PER_RUN: u64 = 99;
/// Spans per agent run: the tools and the agent span.
const SPANS_PER_RUN: u64 = TOOLS_PER_RUN + 1;
/// Spans emitted before waiting for them to be exported: half the SDK's queue (8,192), so the
/// throughput figure is one without drops by construction, and the count check proves it.
const BURST_RUNS: u64 = 40;

#[tool]
fn export_step(i: u64) -> u64 {
    black_box(i.wrapping_mul(3))
}

#[agent(name = "bench-export-agent")]
fn export_run() -> u64 {
    (0..TOOLS_PER_RUN).map(export_step).sum()
}

/// The anchor's spans: roughly the attributes `#[tool]` sets, by hand on a plain SDK tracer.
fn anchor_run(tracer: &opentelemetry_sdk::trace::SdkTracer) -> u64 {
    let parent = tracer
        .span_builder("invoke_agent bench-export-agent")
        .with_kind(SpanKind::Internal)
        .with_attributes([
            KeyValue::new("gen_ai.operation.name", "invoke_agent"),
            KeyValue::new("gen_ai.agent.name", "bench-export-agent"),
            KeyValue::new("openinference.span.kind", "AGENT"),
        ])
        .start(tracer);
    let cx = opentelemetry::Context::current_with_span(parent);
    let _attached = cx.clone().attach();
    let mut sum = 0;
    for i in 0..TOOLS_PER_RUN {
        let mut span = tracer
            .span_builder("execute_tool export_step")
            .with_kind(SpanKind::Internal)
            .with_attributes([
                KeyValue::new("gen_ai.operation.name", "execute_tool"),
                KeyValue::new("openinference.span.kind", "TOOL"),
                KeyValue::new("waxell.span_type", "tool"),
                KeyValue::new("gen_ai.tool.name", "export_step"),
                KeyValue::new("gen_ai.tool.type", "function"),
                KeyValue::new("tool.name", "export_step"),
            ])
            .start(tracer);
        let args = serde_json::json!({ "i": i }).to_string();
        span.set_attribute(KeyValue::new("gen_ai.tool.call.arguments", args.clone()));
        span.set_attribute(KeyValue::new("input.value", args));
        span.set_attribute(KeyValue::new("input.mime_type", "application/json"));
        let out = black_box(i.wrapping_mul(3));
        span.set_attribute(KeyValue::new("gen_ai.tool.call.result", out.to_string()));
        span.set_attribute(KeyValue::new("output.value", out.to_string()));
        span.end();
        sum += out;
    }
    cx.span().end();
    sum
}

/// Emit `bursts` bursts of agent runs through waxell's default OTLP/HTTP pipeline, flushing after
/// each; returns the elapsed time, after checking every span arrived and none was dropped.
fn export_waxell(bursts: u64) -> Duration {
    let receiver = OtlpReceiver::start_http();
    let guard = waxell::builder()
        .with_service_name("bench-export")
        .with_otlp_endpoint(receiver.traces_url())
        .init()
        .expect("waxell init");
    let start = Instant::now();
    for _ in 0..bursts {
        for _ in 0..BURST_RUNS {
            black_box(export_run());
        }
        guard.force_flush().expect("flush");
    }
    let took = start.elapsed();
    let expected = (bursts * BURST_RUNS * SPANS_PER_RUN) as usize;
    let arrived = receiver.wait_for_spans(expected, Duration::from_secs(10)).len();
    let counter = guard.drop_counter();
    guard.shutdown().expect("shutdown");
    let dropped = counter.dropped();
    assert_eq!(
        arrived, expected,
        "spans lost on the way to the receiver ({dropped})"
    );
    assert_eq!(dropped.total(), 0, "{dropped}");
    took
}

/// The same bursts through the plain OpenTelemetry SDK (same batch settings) and OTLP/HTTP exporter.
fn export_plain_sdk(bursts: u64) -> Duration {
    let receiver = OtlpReceiver::start_http();
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_endpoint(receiver.traces_url())
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
    let provider = SdkTracerProvider::builder().with_span_processor(batch).build();
    let tracer = provider.tracer("bench-anchor");
    let start = Instant::now();
    for _ in 0..bursts {
        for _ in 0..BURST_RUNS {
            black_box(anchor_run(&tracer));
        }
        provider.force_flush().expect("flush");
    }
    let took = start.elapsed();
    let expected = (bursts * BURST_RUNS * SPANS_PER_RUN) as usize;
    let arrived = receiver.wait_for_spans(expected, Duration::from_secs(10)).len();
    let _ = provider.shutdown();
    assert_eq!(arrived, expected, "anchor: spans lost on the way to the receiver");
    took
}

fn bench_export(mode: &Mode, rows: &mut Vec<Row>) {
    let bursts = mode.pick(2, 20);
    let rounds = mode.pick(1, 5);
    let spans = (bursts * BURST_RUNS * SPANS_PER_RUN) as f64;
    let (mut waxell_times, mut plain_times) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        if round % 2 == 0 {
            waxell_times.push(export_waxell(bursts));
            plain_times.push(export_plain_sdk(bursts));
        } else {
            plain_times.push(export_plain_sdk(bursts));
            waxell_times.push(export_waxell(bursts));
        }
    }
    let rate = |d: Duration| spans / d.as_secs_f64();
    let (w, p) = (rate(median(&waxell_times)), rate(median(&plain_times)));
    println!("export/waxell: {w:.0} spans/s ({spans} spans per round, all arrived, 0 dropped)");
    println!("export/plain_sdk: {p:.0} spans/s");
    println!("export: waxell / plain SDK = {:.2}", w / p);
    rows.push(Row {
        figure: format!(
            "export throughput, OTLP/HTTP to a receiver on 127.0.0.1 ({spans} spans/round, all arrived, 0 dropped)"
        ),
        measured: format!("{w:.0} spans/s"),
        anchor: format!("plain OpenTelemetry SDK + OTLP exporter, same batching: {p:.0} spans/s"),
        ratio: format!("{:.2}x the anchor's rate", w / p),
        target: "no drops: met (counted)".into(),
    });
}

// ---------------------------------------------------------------------------------------------
// collector_down: agent wall time with nothing listening vs a healthy receiver

const AGENT_TOOLS: u64 = 50;

/// A tool doing some real work (~100 µs here; real tools call APIs and take milliseconds), so the
/// spans come at a rate a healthy exporter keeps up with and neither side drops for a full queue.
#[tool]
fn agent_step(seed: u64) -> u64 {
    (0..100_000u64).fold(seed, |acc, x| black_box(acc.wrapping_mul(31).wrapping_add(x)))
}

#[agent(name = "bench-agent")]
fn agent_workload(seed: u64) -> u64 {
    (0..AGENT_TOOLS)
        .map(|i| agent_step(seed + i))
        .fold(0, u64::wrapping_add)
}

/// A URL on 127.0.0.1 where nothing listens (the port was bound, then released).
fn nothing_listening_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = listener.local_addr().expect("addr");
    drop(listener);
    format!("http://{address}/v1/traces")
}

/// Time `runs` agent runs with telemetry exporting to `endpoint`; set-up and shutdown are untimed.
/// Returns the wall time and the spans dropped.
fn agent_wall_time(endpoint: String, runs: u64) -> (Duration, u64) {
    let guard = waxell::builder()
        .with_service_name("bench-agent")
        .with_otlp_endpoint(endpoint)
        .with_shutdown_timeout(Duration::from_secs(2))
        .init()
        .expect("waxell init");
    let start = Instant::now();
    for run in 0..runs {
        black_box(agent_workload(run));
    }
    let took = start.elapsed();
    // Read after shutdown: it also counts the spans still unsent when shutdown gave up.
    let counter = guard.drop_counter();
    let _ = guard.shutdown();
    (took, counter.dropped().total())
}

fn bench_collector_down(mode: &Mode, rows: &mut Vec<Row>) {
    let runs = mode.pick(10, 100);
    let rounds = mode.pick(2, 10);
    let receiver = OtlpReceiver::start_http();
    let (mut healthy, mut down) = (Vec::new(), Vec::new());
    let (mut dropped_healthy, mut dropped_down) = (0, 0);
    for round in 0..rounds {
        let mut healthy_round = || {
            let (t, d) = agent_wall_time(receiver.traces_url(), runs);
            healthy.push(t);
            dropped_healthy += d;
        };
        if round % 2 == 0 {
            healthy_round();
            let (t, d) = agent_wall_time(nothing_listening_url(), runs);
            down.push(t);
            dropped_down += d;
        } else {
            let (t, d) = agent_wall_time(nothing_listening_url(), runs);
            down.push(t);
            dropped_down += d;
            healthy_round();
        }
    }
    describe("collector/healthy", &healthy);
    describe("collector/down", &down);
    let (h, d) = (median(&healthy), median(&down));
    let ratio = d.as_secs_f64() / h.as_secs_f64();
    let spans = rounds as u64 * runs * (AGENT_TOOLS + 1);
    println!(
        "collector_down: down / healthy = {ratio:.3} ({:+.1} %); spans dropped: healthy {dropped_healthy} of {spans}, down {dropped_down} of {spans}",
        (ratio - 1.0) * 100.0
    );
    rows.push(Row {
        figure: format!(
            "agent wall time, collector down (nothing listening), {runs} runs x {} spans",
            AGENT_TOOLS + 1
        ),
        measured: ms(d),
        anchor: format!("healthy receiver on 127.0.0.1: {}", ms(h)),
        ratio: format!("{ratio:.3} ({:+.1} %)", (ratio - 1.0) * 100.0),
        target: format!("<= 1.05: {}", verdict(ratio <= 1.05)),
    });
}

// ---------------------------------------------------------------------------------------------
// demo: the built `demos --dry-run --quiet`, whole process

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"))
}

fn demo_binary() -> Option<(PathBuf, String)> {
    if let Some(explicit) = std::env::var_os("WAXELL_DEMO_BIN") {
        return Some((PathBuf::from(explicit), "WAXELL_DEMO_BIN".into()));
    }
    ["release", "debug"].iter().find_map(|profile| {
        let path = target_dir().join(profile).join("demos");
        path.exists().then(|| (path, format!("{profile} build")))
    })
}

/// Wall time of one process run to completion, checked to succeed.
fn time_process(command: &mut Command) -> Duration {
    let start = Instant::now();
    let status = command
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("spawn");
    let took = start.elapsed();
    assert!(status.success(), "{command:?} failed: {status}");
    took
}

fn bench_demo(mode: &Mode, rows: &mut Vec<Row>) {
    let Some((demo, which)) = demo_binary() else {
        println!("demo: skipped, no built demo (run `cargo build --release -p demos` first)");
        return;
    };
    let python = std::env::var_os("WAXELL_SANDBOX_PYTHON")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .map(|home| PathBuf::from(home).join(".local/share/waxell/sandbox-venv/bin/python3"))
        })
        .filter(|p| p.exists());
    // The demo writes its embedded trace file under the working directory; keep that out of the repo.
    let work_dir = std::env::temp_dir().join("waxell-bench-demo");
    std::fs::create_dir_all(&work_dir).expect("work dir");
    let runs = mode.pick(1, 7);
    let run_demo = || {
        time_process(
            Command::new(&demo)
                .args(["--dry-run", "--quiet"])
                .current_dir(&work_dir)
                .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
                .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
        )
    };
    // The floor the demo cannot go under: its analysis script imports pandas and matplotlib.
    let run_floor = |python: &PathBuf| {
        time_process(Command::new(python).args([
            "-c",
            "import pandas, matplotlib; matplotlib.use('Agg'); import matplotlib.pyplot",
        ]))
    };
    let (mut demo_times, mut floor_times) = (Vec::new(), Vec::new());
    for round in 0..runs {
        if round % 2 == 1 {
            if let Some(p) = &python {
                floor_times.push(run_floor(p));
            }
        }
        demo_times.push(run_demo());
        if round % 2 == 0 {
            if let Some(p) = &python {
                floor_times.push(run_floor(p));
            }
        }
    }
    describe(&format!("demo/dry_run ({which})"), &demo_times);
    let d = median(&demo_times);
    let (anchor, ratio) = if floor_times.is_empty() {
        ("— (sandbox venv not found)".to_owned(), "—".to_owned())
    } else {
        describe("demo/python_imports_floor", &floor_times);
        let f = median(&floor_times);
        (
            format!(
                "`python -c 'import pandas, matplotlib.pyplot'` (sandbox venv): {}",
                ms(f)
            ),
            format!("{:.2}x", d.as_secs_f64() / f.as_secs_f64()),
        )
    };
    rows.push(Row {
        figure: format!("`demos --dry-run --quiet`, whole process ({which}), median of {runs}"),
        measured: ms(d),
        anchor,
        ratio,
        target: format!("<= 3 s: {}", verdict(d <= Duration::from_secs(3))),
    });
}

// ---------------------------------------------------------------------------------------------
// exit: whole processes (start to exit, flush and shutdown included) with a healthy collector and with the
// collector down (connection refused), side by side

/// A binary of this workspace, release build first.
fn workspace_binary(name: &str) -> Option<(PathBuf, String)> {
    ["release", "debug"].iter().find_map(|profile| {
        let path = target_dir().join(profile).join(name);
        path.exists().then(|| (path, format!("{profile} build")))
    })
}

fn bench_exit(mode: &Mode, rows: &mut Vec<Row>) {
    let receiver = OtlpReceiver::start_http();
    let work_dir = std::env::temp_dir().join("waxell-bench-exit");
    std::fs::create_dir_all(&work_dir).expect("work dir");
    let mut programs: Vec<(String, PathBuf, String, Vec<&str>, usize)> = Vec::new();
    match workspace_binary("one-agent") {
        Some((path, which)) => programs.push(("one-agent CLI".into(), path, which, vec![], mode.pick(2, 15))),
        None => {
            println!("exit: one-agent skipped (run `cargo build --release -p waxell-tests --bins` first)")
        }
    }
    match demo_binary() {
        Some((path, which)) => programs.push((
            "`demos --dry-run --quiet`".into(),
            path,
            which,
            vec!["--dry-run", "--quiet"],
            mode.pick(1, 7),
        )),
        None => println!("exit: demo skipped (run `cargo build --release -p demos` first)"),
    }
    for (name, path, which, args, runs) in programs {
        let run = |endpoint: &str| {
            time_process(
                Command::new(&path)
                    .args(&args)
                    .current_dir(&work_dir)
                    .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
                    .env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
                    // Unsent spans are saved here when the collector is down.
                    .env("WAXELL_TRACE_FILE", work_dir.join("unsent.jsonl")),
            )
        };
        let (mut healthy, mut down) = (Vec::new(), Vec::new());
        for round in 0..runs {
            let dead = nothing_listening_url().replace("/v1/traces", "");
            if round % 2 == 0 {
                healthy.push(run(&receiver.base_url()));
                down.push(run(&dead));
            } else {
                down.push(run(&dead));
                healthy.push(run(&receiver.base_url()));
            }
        }
        describe(&format!("exit/{name}/healthy ({which})"), &healthy);
        describe(&format!("exit/{name}/collector_down ({which})"), &down);
        let (h, d) = (median(&healthy), median(&down));
        let ratio = d.as_secs_f64() / h.as_secs_f64();
        let extra_ms = (d.as_secs_f64() - h.as_secs_f64()) * 1000.0;
        rows.push(Row {
            figure: format!(
                "{name}, whole process with the collector down (connection refused), {which}, median of {runs}"
            ),
            measured: ms(d),
            anchor: format!("healthy OTLP/HTTP receiver on 127.0.0.1: {}", ms(h)),
            ratio: format!("{ratio:.3} ({extra_ms:+.0} ms)"),
            target: format!(
                "<= 1.05x and <= +100 ms: {}",
                verdict(ratio <= 1.05 && extra_ms <= 100.0)
            ),
        });
    }
    let _ = std::fs::remove_dir_all(&work_dir);
}

// ---------------------------------------------------------------------------------------------

fn main() {
    let mode = Mode::from_env();
    let load_before = load_average();
    println!(
        "waxell-tests suite ({} mode); load average before: {load_before}",
        if mode.quick { "quick" } else { "full" }
    );
    let mut rows = Vec::new();
    type Case = fn(&Mode, &mut Vec<Row>);
    let cases: [(&str, Case); 6] = [
        ("run_code", bench_run_code),
        ("concurrent", bench_concurrent),
        ("export", bench_export),
        ("collector_down", bench_collector_down),
        ("demo", bench_demo),
        ("exit", bench_exit),
    ];
    for (name, case) in cases {
        if mode.runs(name) {
            let start = Instant::now();
            println!("\n== {name} (load {})", load_average());
            case(&mode, &mut rows);
            println!("== {name} took {:.1} s", start.elapsed().as_secs_f64());
        }
    }
    println!(
        "\nload average before: {load_before}, after: {}\n",
        load_average()
    );
    println!("| figure | measured (median) | anchor (same run) | ratio | target |");
    println!("| --- | --- | --- | --- | --- |");
    for r in rows {
        println!(
            "| {} | {} | {} | {} | {} |",
            r.figure, r.measured, r.anchor, r.ratio, r.target
        );
    }
}
