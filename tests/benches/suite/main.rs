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

mod export;
mod process;
mod sandbox;

use std::time::{Duration, Instant};

use self::export::{bench_collector_down, bench_export};
use self::process::{bench_demo, bench_exit};
use self::sandbox::{bench_concurrent, bench_run_code};

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

/// One row of the summary table and of docs/performance.md's.
use waxell_tests::bench_row::Row;

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

// ---------------------------------------------------------------------------------------------

fn main() {
    let mode = Mode::from_env();
    let load_before = load_average();
    println!(
        "waxell-tests suite ({} mode); load average before: {load_before}",
        if mode.quick { "quick" } else { "full" }
    );
    let mut all = Vec::new();
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
            let mut written = waxell_tests::bench_row::Rows::start(&format!("[T] `{name}`"), mode.quick);
            let mut rows = Vec::new();
            case(&mode, &mut rows);
            for row in &rows {
                written.push(row.clone());
            }
            written.finish();
            all.extend(rows);
            println!("== {name} took {:.1} s", start.elapsed().as_secs_f64());
        }
    }
    println!(
        "\nload average before: {load_before}, after: {}\n",
        load_average()
    );
    println!("| figure | measured (median) | anchor (same run) | ratio | target |");
    println!("| --- | --- | --- | --- | --- |");
    for r in all {
        let verdict = match r.verdict {
            Some(true) => ": met",
            Some(false) => ": MISSED",
            None => "",
        };
        println!(
            "| {} | {} | {} | {} | {}{verdict} |",
            r.what, r.measured, r.anchor, r.ratio, r.target
        );
    }
}
