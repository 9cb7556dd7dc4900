//! `export` and `collector_down`: the export pipeline's throughput, and an agent's wall time with the
//! collector down.

use std::hint::black_box;
use std::time::{Duration, Instant};

use opentelemetry::trace::{Span as _, SpanKind, TraceContextExt as _, Tracer as _, TracerProvider as _};
use opentelemetry::KeyValue;
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider};
use waxell::{agent, tool};
use waxell_tests::OtlpReceiver;

use super::*;

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

pub(super) fn bench_export(mode: &Mode, rows: &mut Vec<Row>) {
    let bursts = mode.pick(2, 20);
    let rounds = mode.pick(1, 5);
    let spans = (bursts * BURST_RUNS * SPANS_PER_RUN) as f64;
    // One side alone, to profile it (`perf record`, callgrind): no row.
    if let Ok(side) = std::env::var("WAXELL_BENCH_EXPORT_SIDE") {
        let run = match side.as_str() {
            "waxell" => export_waxell,
            "plain" => export_plain_sdk,
            other => panic!("WAXELL_BENCH_EXPORT_SIDE={other}: expected waxell or plain"),
        };
        let took = median(&(0..rounds).map(|_| run(bursts)).collect::<Vec<_>>());
        println!("export/{side} alone: {:.0} spans/s", spans / took.as_secs_f64());
        return;
    }
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
        id: "suite.export".into(),
        what: format!(
            "export throughput, waxell's default pipeline, OTLP/HTTP protobuf to a receiver on 127.0.0.1 ({spans} spans per round, flushed every {}; every span counted on arrival, none dropped)",
            BURST_RUNS * SPANS_PER_RUN
        ),
        measured: format!("{w:.0} spans/s"),
        anchor: format!(
            "plain OpenTelemetry SDK + OTLP/HTTP exporter, same batching (queue 8,192, batches of 512): {p:.0} spans/s"
        ),
        ratio: format!("**{:.2}** (median of {rounds} runs)", w / p),
        target: ">= 1.0x".into(),
        verdict: Some(w >= p),
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
pub(super) fn nothing_listening_url() -> String {
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

pub(super) fn bench_collector_down(mode: &Mode, rows: &mut Vec<Row>) {
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
        id: "suite.collector-down".into(),
        what: format!(
            "agent wall time, collector down (nothing listening), {runs} runs x {} spans, tools of ~100 µs (flush and shutdown excluded: `suite.exit.*` include them)",
            AGENT_TOOLS + 1
        ),
        measured: format!("{} (p90 {})", ms(d), ms(quantile(&down, 0.9))),
        anchor: format!(
            "healthy receiver on 127.0.0.1: {} (p90 {})",
            ms(h),
            ms(quantile(&healthy, 0.9))
        ),
        ratio: format!("**{ratio:.3}** ({:+.1} %)", (ratio - 1.0) * 100.0),
        target: "<= +5 %".into(),
        verdict: Some(ratio <= 1.05),
    });
}
