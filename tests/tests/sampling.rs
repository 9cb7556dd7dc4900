//! Sampling (`OTEL_TRACES_SAMPLER` / `OTEL_TRACES_SAMPLER_ARG`, read by the SDK) keeps or drops a whole agent
//! run, and the per-run span cap (`WAXELL_MAX_SPANS_PER_RUN`) keeps the root, agent spans, errors and scores.
//! Exported over OTLP/HTTP to a receiver on 127.0.0.1; every assertion is on what arrived. Each test runs in a
//! child process of its own (`own_process!`), so environment variables are per test.

use std::collections::HashMap;
use std::time::Duration;

use waxell::{agent, tool};
use waxell_tests::{attr_string, OtlpReceiver, Received};

const RUNS: usize = 200;
const TOOLS: u32 = 3;

#[tool]
fn lookup(i: u32) -> u32 {
    i + 1
}

#[agent(name = "sampled-agent")]
fn sampled_run() -> u32 {
    (0..TOOLS).map(lookup).sum()
}

/// Run `RUNS` agent runs under the sampler named by the environment and return the received traces. The
/// sampler is the SDK's to read, from the process environment: these tests set it there, in a process of
/// their own.
fn run_with_sampler(sampler: &str, arg: Option<&str>) -> (OtlpReceiver, HashMap<Vec<u8>, Vec<Received>>) {
    std::env::set_var("OTEL_TRACES_SAMPLER", sampler);
    if let Some(arg) = arg {
        std::env::set_var("OTEL_TRACES_SAMPLER_ARG", arg);
    }
    let rx = OtlpReceiver::start_http();
    let guard = waxell::builder()
        .with_otlp_endpoint(rx.traces_url())
        .init()
        .unwrap();
    for _ in 0..RUNS {
        assert_eq!(sampled_run(), 6, "sampling never changes the result");
    }
    guard.shutdown().unwrap();
    let mut traces: HashMap<Vec<u8>, Vec<Received>> = HashMap::new();
    for span in rx.spans() {
        traces.entry(span.span.trace_id.clone()).or_default().push(span);
    }
    (rx, traces)
}

/// Every trace that arrived is a whole run: the agent and all its tools.
fn assert_whole_runs(traces: &HashMap<Vec<u8>, Vec<Received>>) {
    for spans in traces.values() {
        let agents = spans
            .iter()
            .filter(|s| s.span.name == "invoke_agent sampled-agent")
            .count();
        let tools = spans
            .iter()
            .filter(|s| s.span.name == "execute_tool lookup")
            .count();
        assert_eq!(
            (agents, tools),
            (1, TOOLS as usize),
            "a partial run arrived: {spans:?}"
        );
    }
}

#[test]
fn always_on_keeps_every_run() {
    waxell_tests::own_process!();
    let (_rx, traces) = run_with_sampler("always_on", None);
    assert_eq!(traces.len(), RUNS);
    assert_whole_runs(&traces);
}

#[test]
fn always_off_keeps_nothing() {
    waxell_tests::own_process!();
    let (rx, traces) = run_with_sampler("always_off", None);
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        traces.is_empty() && rx.requests().is_empty(),
        "{} traces arrived",
        traces.len()
    );
}

#[test]
fn parentbased_always_off_keeps_nothing() {
    waxell_tests::own_process!();
    let (_rx, traces) = run_with_sampler("parentbased_always_off", None);
    assert!(traces.is_empty(), "{} traces arrived", traces.len());
}

#[test]
fn traceidratio_keeps_or_drops_whole_runs() {
    waxell_tests::own_process!();
    let (_rx, traces) = run_with_sampler("traceidratio", Some("0.5"));
    // Binomial(200, 0.5): 100 +- 7; the bounds are 7 standard deviations out.
    assert!(
        (50..=150).contains(&traces.len()),
        "{} of {RUNS} runs kept",
        traces.len()
    );
    assert_whole_runs(&traces);
}

#[test]
fn parentbased_traceidratio_keeps_or_drops_whole_runs() {
    waxell_tests::own_process!();
    let (_rx, traces) = run_with_sampler("parentbased_traceidratio", Some("0.25"));
    // Binomial(200, 0.25): 50 +- 6.1.
    assert!(
        (10..=95).contains(&traces.len()),
        "{} of {RUNS} runs kept",
        traces.len()
    );
    assert_whole_runs(&traces);
}

#[tool]
fn step(i: u32) -> Result<u32, String> {
    if i % 50 == 49 {
        Err(format!("step {i} failed"))
    } else {
        Ok(i)
    }
}

#[agent(name = "scorer")]
fn scorer() -> u32 {
    waxell::score("sub_quality", 0.9);
    1
}

#[agent(name = "runaway")]
fn runaway() -> u32 {
    let ok = (0..200).filter(|i| step(*i).is_ok()).count() as u32;
    let sub = scorer();
    waxell::score("complete", true);
    ok + sub
}

#[test]
fn the_span_cap_keeps_the_root_agents_errors_and_scores() {
    waxell_tests::own_process!();
    let rx = OtlpReceiver::start_http();
    let guard = waxell::builder()
        .with_env(waxell_tests::env(&[("WAXELL_MAX_SPANS_PER_RUN", "50")]))
        .with_otlp_endpoint(rx.traces_url())
        .init()
        .unwrap();
    let counter = guard.drop_counter();
    assert_eq!(runaway(), 197, "the cap never changes the result");
    assert_eq!(runaway(), 197);
    guard.shutdown().unwrap();

    let spans = rx.spans();
    let mut traces: HashMap<Vec<u8>, Vec<Received>> = HashMap::new();
    for span in spans {
        traces.entry(span.span.trace_id.clone()).or_default().push(span);
    }
    assert_eq!(traces.len(), 2, "the cap is per run");
    for spans in traces.values() {
        let names: Vec<&str> = spans.iter().map(|s| s.span.name.as_str()).collect();
        let steps: Vec<String> = spans
            .iter()
            .filter(|s| s.span.name == "execute_tool step")
            .filter_map(|s| attr_string(&s.span, "gen_ai.tool.call.arguments"))
            .collect();
        // Steps 0..49 are under the cap (49 failed); over it only the failed 99, 149 and 199 are kept.
        assert_eq!(steps.len(), 53, "{names:?}");
        let errors = spans
            .iter()
            .filter(|s| {
                s.span.name == "execute_tool step" && s.span.status.as_ref().is_some_and(|st| st.code == 2)
            })
            .count();
        assert_eq!(errors, 4, "every failed step is kept");
        let root = spans
            .iter()
            .find(|s| s.span.name == "invoke_agent runaway")
            .expect("the root is kept");
        assert!(
            root.span
                .events
                .iter()
                .any(|e| e.name == "gen_ai.evaluation.result"),
            "its score is kept"
        );
        let sub = spans
            .iter()
            .find(|s| s.span.name == "invoke_agent scorer")
            .expect("the sub-agent is kept");
        assert!(
            sub.span
                .events
                .iter()
                .any(|e| e.name == "gen_ai.evaluation.result"),
            "its score is kept"
        );
        assert_eq!(spans.len(), 55);
    }
    let dropped = counter.dropped();
    assert_eq!(dropped.over_span_cap, 2 * 147, "{dropped}");
    assert_eq!(dropped.total(), dropped.over_span_cap, "{dropped}");
}

/// Runs in a child process (see below), in the directory the parent chose, with the embedded default export.
#[test]
#[ignore = "run by observe_false_writes_no_file_and_prints_nothing in a child process"]
fn child_embedded_default_run() {
    let guard = waxell::init().unwrap();
    assert_eq!(sampled_run(), 6);
    drop(guard);
}

#[test]
fn observe_false_writes_no_file_and_prints_nothing() {
    // The same child with and without the switch: the first shows what "something" looks like.
    for observe in [None, Some("false")] {
        let dir = std::env::temp_dir().join(format!(
            "waxell-observe-{}-{}",
            std::process::id(),
            observe.is_some()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut child = std::process::Command::new(std::env::current_exe().unwrap());
        child
            .args([
                "child_embedded_default_run",
                "--exact",
                "--ignored",
                "--nocapture",
            ])
            .current_dir(&dir)
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .env_remove("WAXELL_TRACE_FILE")
            .env_remove("WAXELL_CONSOLE")
            .env_remove("WAXELL_OBSERVE");
        if let Some(value) = observe {
            child.env("WAXELL_OBSERVE", value);
        }
        let out = child.output().expect("run the child");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        let traces = dir.join(".waxell");
        match observe {
            None => {
                assert!(traces.exists(), "the embedded default wrote its file");
                assert!(stderr.contains("sampled-agent"), "and printed the tree: {stderr}");
            }
            Some(_) => {
                assert!(!traces.exists(), "nothing written with WAXELL_OBSERVE=false");
                assert!(
                    !stderr.contains("sampled-agent") && !stderr.contains("waxell:"),
                    "nothing printed: {stderr}"
                );
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
