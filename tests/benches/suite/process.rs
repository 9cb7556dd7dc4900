//! `demo` and `exit`: whole processes, timed from outside.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use waxell_tests::OtlpReceiver;

use super::export::nothing_listening_url;

use super::*;

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

pub(super) fn bench_demo(mode: &Mode, rows: &mut Vec<Row>) {
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
    // The second anchor: the dry run's cells themselves, one plain Python program (the demo prints it), run by
    // the same Python without the sandbox, the agents, the spans or the LLM.
    let cells = work_dir.join("cells.py");
    let printed = Command::new(&demo)
        .arg("--print-cells-as-python")
        .output()
        .expect("spawn the demo");
    assert!(printed.status.success(), "demos --print-cells-as-python failed");
    std::fs::write(&cells, &printed.stdout).expect("write the cells");
    let run_cells = |python: &PathBuf| time_process(Command::new(python).arg(&cells).current_dir(&work_dir));
    let (mut demo_times, mut floor_times, mut cells_times) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..runs {
        // The order turns each round, so neither side always runs first.
        for turn in 0..3 {
            match ((round + turn) % 3, &python) {
                (0, _) => demo_times.push(run_demo()),
                (1, Some(p)) => floor_times.push(run_floor(p)),
                (2, Some(p)) => cells_times.push(run_cells(p)),
                _ => {}
            }
        }
    }
    describe(&format!("demo/dry_run ({which})"), &demo_times);
    let d = median(&demo_times);
    let target = 1.2;
    let (anchor, ratio, verdict) = if floor_times.is_empty() {
        (
            "none (sandbox venv not found)".to_owned(),
            "none".to_owned(),
            None,
        )
    } else {
        describe("demo/python_imports_floor", &floor_times);
        describe("demo/cells_as_plain_python", &cells_times);
        let (f, c) = (median(&floor_times), median(&cells_times));
        let over_floor = d.as_secs_f64() / f.as_secs_f64();
        (
            format!(
                "its floor, the sandbox venv's Python importing pandas and matplotlib (`python -c 'import pandas, \
                 matplotlib.pyplot'`): {}; the dry run's cells as one plain Python program (`demos \
                 --print-cells-as-python`) in that Python: {} (the demo is {:.2}x that)",
                ms(f),
                ms(c),
                d.as_secs_f64() / c.as_secs_f64()
            ),
            format!("**{over_floor:.2}x**"),
            Some(over_floor <= target),
        )
    };
    rows.push(Row {
        id: "suite.demo".into(),
        what: format!("the built demo, `demos --dry-run --quiet`, whole process ({which}), median of {runs}"),
        measured: format!("**{}** (p90 {})", ms(d), ms(quantile(&demo_times, 0.9))),
        anchor,
        ratio,
        target: format!("<= {target}x the import floor"),
        verdict,
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

/// A program timed by `exit`: its row id, its name, the binary, which build it is, its arguments, the runs.
type Program = (
    &'static str,
    &'static str,
    PathBuf,
    String,
    Vec<&'static str>,
    usize,
);

pub(super) fn bench_exit(mode: &Mode, rows: &mut Vec<Row>) {
    let receiver = OtlpReceiver::start_http();
    let work_dir = std::env::temp_dir().join("waxell-bench-exit");
    std::fs::create_dir_all(&work_dir).expect("work dir");
    let mut programs: Vec<Program> = Vec::new();
    match workspace_binary("one-agent") {
        Some((path, which)) => programs.push((
            "one-agent",
            "a minimal one-agent CLI (`tests/src/bin/one-agent.rs`: init, one agent, two tools, a score)",
            path,
            which,
            vec![],
            mode.pick(2, 15),
        )),
        None => {
            println!("exit: one-agent skipped (run `cargo build --release -p waxell-tests --bins` first)")
        }
    }
    match demo_binary() {
        Some((path, which)) => programs.push((
            "demo",
            "`demos --dry-run --quiet`",
            path,
            which,
            vec!["--dry-run", "--quiet"],
            mode.pick(1, 7),
        )),
        None => println!("exit: demo skipped (run `cargo build --release -p demos` first)"),
    }
    for (id, name, path, which, args, runs) in programs {
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
            id: format!("suite.exit.{id}"),
            what: format!(
                "**whole process, start to exit (flush and shutdown included)**, {name}, collector down (connection refused), {which}, median of {runs}, interleaved"
            ),
            measured: format!("**{}** (p90 {})", ms(d), ms(quantile(&down, 0.9))),
            anchor: format!(
                "same binary, healthy OTLP/HTTP receiver on 127.0.0.1: {} (p90 {})",
                ms(h),
                ms(quantile(&healthy, 0.9))
            ),
            ratio: format!("**{ratio:.2}** ({extra_ms:+.0} ms)"),
            target: "<= 1.05x and <= +100 ms".into(),
            verdict: Some(ratio <= 1.05 && extra_ms <= 100.0),
        });
    }
    let _ = std::fs::remove_dir_all(&work_dir);
}
