//! Cost of one `#[tool]` call, side by side in one run with its anchors:
//! - `bare`: the same function without instrumentation;
//! - `hand_written`: the same attributes on a hand-written OpenTelemetry span;
//! - `waxell_tool`: `#[tool]` with the SDK on and a no-op exporter behind the batch processor;
//! - `tracing_instrument`: `#[tracing::instrument]` through `tracing-opentelemetry` into the same pipeline;
//! - `waxell_disabled`: `#[tool]` with `WAXELL_OBSERVE=false`.
//!
//! Full run: `cargo bench -p waxell --bench overhead`. Quick run (CI): add `-- --quick`.
//! After criterion, an interleaved A/B loop prints the ratios the targets are stated in.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::Criterion;
use opentelemetry::trace::{Span as _, SpanKind, Tracer as _, TracerProvider as _};
use opentelemetry::KeyValue;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{BatchSpanProcessor, SdkTracerProvider, SpanData, SpanExporter};
use tracing_subscriber::layer::SubscriberExt;

#[path = "../../tests/src/bench_row.rs"]
mod bench_row;
use bench_row::Row;

#[derive(Debug)]
struct NoopExporter;

impl SpanExporter for NoopExporter {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        black_box(batch);
        Ok(())
    }
}

#[inline(never)]
fn bare(code: &str, n: u64) -> u64 {
    black_box(code.len() as u64 + n)
}

#[waxell::tool(tool_type = "sandbox")]
#[inline(never)]
fn instrumented(code: &str, n: u64) -> u64 {
    black_box(code.len() as u64 + n)
}

#[tracing::instrument(
    name = "execute_tool instrumented",
    fields(
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = "instrumented",
        gen_ai.tool.type = "extension",
        openinference.span.kind = "TOOL",
        waxell.span_type = "tool",
        tool.name = "instrumented",
        waxell.tool.name = "instrumented",
        waxell.tool.type = "sandbox",
    ),
    ret
)]
#[inline(never)]
fn traced(code: &str, n: u64) -> u64 {
    black_box(code.len() as u64 + n)
}

/// What `#[tool]` records, written by hand against the OpenTelemetry API.
#[inline(never)]
fn hand_written(tracer: &opentelemetry_sdk::trace::SdkTracer, code: &str, n: u64) -> u64 {
    let mut span = tracer
        .span_builder("execute_tool instrumented")
        .with_kind(SpanKind::Internal)
        .with_attributes([
            KeyValue::new("gen_ai.operation.name", "execute_tool"),
            KeyValue::new("openinference.span.kind", "TOOL"),
            KeyValue::new("waxell.span_type", "tool"),
            KeyValue::new("gen_ai.tool.name", "instrumented"),
            KeyValue::new("gen_ai.tool.type", "extension"),
            KeyValue::new("tool.name", "instrumented"),
            KeyValue::new("waxell.tool.name", "instrumented"),
            KeyValue::new("waxell.tool.type", "sandbox"),
        ])
        .start(tracer);
    let args = serde_json::json!({"code": code, "n": n}).to_string();
    span.set_attribute(KeyValue::new("gen_ai.tool.call.arguments", args.clone()));
    span.set_attribute(KeyValue::new("input.value", args));
    span.set_attribute(KeyValue::new("input.mime_type", "application/json"));
    let cx = opentelemetry::Context::current_with_span(span);
    let result = {
        let _attached = cx.clone().attach();
        black_box(code.len() as u64 + n)
    };
    let out = result.to_string();
    use opentelemetry::trace::TraceContextExt;
    let span = cx.span();
    span.set_attribute(KeyValue::new("gen_ai.tool.call.result", out.clone()));
    span.set_attribute(KeyValue::new("output.mime_type", "application/json"));
    span.set_attribute(KeyValue::new("output.value", out));
    span.end();
    result
}

fn provider() -> SdkTracerProvider {
    SdkTracerProvider::builder()
        .with_span_processor(BatchSpanProcessor::builder(NoopExporter).build())
        .build()
}

/// Median ns per call of each case, measured in interleaved rounds so machine noise hits all alike.
fn interleaved(cases: &mut [(&str, &mut dyn FnMut())], rounds: usize, iters: u32) -> Vec<f64> {
    let mut samples: Vec<Vec<f64>> = vec![Vec::with_capacity(rounds); cases.len()];
    for _ in 0..rounds {
        for (i, (_, f)) in cases.iter_mut().enumerate() {
            let start = Instant::now();
            for _ in 0..iters {
                f();
            }
            samples[i].push(start.elapsed().as_nanos() as f64 / f64::from(iters));
        }
    }
    samples
        .into_iter()
        .map(|mut s| {
            s.sort_by(|a, b| a.total_cmp(b));
            s[s.len() / 2]
        })
        .collect()
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let mut criterion = Criterion::default()
        .configure_from_args()
        .warm_up_time(Duration::from_millis(if quick { 200 } else { 1000 }))
        .measurement_time(Duration::from_millis(if quick { 500 } else { 3000 }));

    // The waxell pipeline: no-op exporter behind the batch processor, content capture on.
    let guard = waxell::builder()
        .with_span_processor(BatchSpanProcessor::builder(NoopExporter).build())
        .with_default_export(false)
        .init()
        .expect("init");
    let hand_provider = provider();
    let hand_tracer = hand_provider.tracer("bench");
    let tracing_provider = provider();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(tracing_provider.tracer("bench-tracing")));
    tracing::subscriber::set_global_default(subscriber).expect("subscriber");

    let code = "print(sum(range(10)))";
    // `WAXELL_BENCH_ONLY=hand|waxell|tracing` runs 100,000 calls (`WAXELL_BENCH_CALLS`) of one case and
    // exits: for instruction counts under `valgrind --tool=callgrind`, which are repeatable on a noisy machine.
    if let Ok(only) = std::env::var("WAXELL_BENCH_ONLY") {
        let calls: u64 = std::env::var("WAXELL_BENCH_CALLS").map_or(100_000, |v| {
            v.parse().expect("WAXELL_BENCH_CALLS: a number of calls")
        });
        for _ in 0..calls {
            match only.as_str() {
                "hand" => drop(hand_written(&hand_tracer, black_box(code), black_box(1))),
                "waxell" => drop(instrumented(black_box(code), black_box(1))),
                "tracing" => drop(traced(black_box(code), black_box(1))),
                other => panic!("WAXELL_BENCH_ONLY={other}: expected hand, waxell or tracing"),
            }
        }
        return;
    }
    {
        let mut group = criterion.benchmark_group("tool_call");
        group.bench_function("bare", |b| b.iter(|| bare(black_box(code), black_box(1))));
        group.bench_function("hand_written", |b| {
            b.iter(|| hand_written(&hand_tracer, black_box(code), black_box(1)))
        });
        group.bench_function("waxell_tool", |b| {
            b.iter(|| instrumented(black_box(code), black_box(1)))
        });
        group.bench_function("tracing_instrument", |b| {
            b.iter(|| traced(black_box(code), black_box(1)))
        });
        group.finish();
    }
    let mut rows = bench_row::Rows::start("[O1]", quick);
    let rounds = if quick { 5 } else { 21 };
    let iters = if quick { 2_000 } else { 20_000 };
    let mut hand = || {
        hand_written(&hand_tracer, black_box(code), black_box(1));
    };
    let mut wax = || {
        instrumented(black_box(code), black_box(1));
    };
    let mut trc = || {
        traced(black_box(code), black_box(1));
    };
    let on = interleaved(
        &mut [
            ("hand_written", &mut hand),
            ("waxell_tool", &mut wax),
            ("tracing", &mut trc),
        ],
        rounds,
        iters,
    );
    drop(guard);

    // Disabled: the same binary, WAXELL_OBSERVE=false.
    std::env::set_var("WAXELL_OBSERVE", "false");
    let off_guard = waxell::init().expect("init disabled");
    {
        let mut group = criterion.benchmark_group("disabled");
        group.bench_function("bare", |b| b.iter(|| bare(black_box(code), black_box(1))));
        group.bench_function("waxell_disabled", |b| {
            b.iter(|| instrumented(black_box(code), black_box(1)))
        });
        group.finish();
    }
    let mut bare_call = || {
        bare(black_box(code), black_box(1));
    };
    let mut disabled = || {
        instrumented(black_box(code), black_box(1));
    };
    let off = interleaved(
        &mut [("bare", &mut bare_call), ("disabled", &mut disabled)],
        rounds,
        iters * 20,
    );
    drop(off_guard);
    criterion.final_summary();

    println!("\n== side by side (interleaved, median of {rounds} rounds) ==");
    println!("hand-written span   {:>8.0} ns/call", on[0]);
    println!(
        "#[tool] (waxell)    {:>8.0} ns/call   ratio to hand-written {:.2} (target <= 1.20)",
        on[1],
        on[1] / on[0]
    );
    println!(
        "tracing::instrument {:>8.0} ns/call   waxell/tracing        {:.2} (target <= 0.60)",
        on[2],
        on[1] / on[2]
    );
    println!("bare call           {:>8.1} ns/call", off[0]);
    println!(
        "#[tool] disabled    {:>8.1} ns/call   overhead {:.1} ns (target <= 20)",
        off[1],
        off[1] - off[0]
    );
    let _ = hand_provider.shutdown();
    let _ = tracing_provider.shutdown();
    let ns = |v: f64| format!("{} ns", bench_row::grouped(v));
    rows.push(Row {
        id: "overhead.tool-vs-hand.wall".into(),
        what: format!("one `#[tool]` call (wall time, interleaved, median of {rounds} rounds)"),
        measured: ns(on[1]),
        anchor: format!("hand-written span: {}", ns(on[0])),
        ratio: format!("**{:.2}**", on[1] / on[0]),
        target: "<= 1.2x".into(),
        verdict: Some(on[1] / on[0] <= 1.2),
    });
    rows.push(Row {
        id: "overhead.tool-vs-tracing.wall".into(),
        what: format!(
            "one `#[tool]` call vs `#[tracing::instrument]` via `tracing-opentelemetry` (wall time, interleaved, median of {rounds} rounds)"
        ),
        measured: ns(on[1]),
        anchor: format!("tracing: {}", ns(on[2])),
        ratio: format!("**{:.2}**", on[1] / on[2]),
        target: "<= 0.6x".into(),
        verdict: Some(on[1] / on[2] <= 0.6),
    });
    rows.push(Row {
        id: "overhead.disabled.wall".into(),
        what: "one `#[tool]` call with `WAXELL_OBSERVE=false`".into(),
        measured: format!("{:.1} ns", off[1]),
        anchor: format!("bare call: {:.1} ns", off[0]),
        ratio: format!("**{:+.1} ns**", off[1] - off[0]),
        target: "<= +20 ns".into(),
        verdict: Some(off[1] - off[0] <= 20.0),
    });
    rows.finish();
}
