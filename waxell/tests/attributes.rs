//! Behaviour of every attribute on every function shape, read back from a real SDK pipeline.

mod spans_support;

use std::future::Future;

use opentelemetry::trace::SpanKind;
use opentelemetry::Value;
use serde::Serialize;
use spans_support::*;
use waxell::testing::span_data::*;
use waxell::{agent, decision, reasoning, retrieval, step, tool, Decision, DecisionOptions, Reasoning};

#[derive(Debug)]
struct DebugOnly(#[allow(dead_code, reason = "read through Debug")] u32);
struct Opaque;

#[derive(Debug, thiserror::Error)]
#[error("quota exceeded for {0}")]
struct QuotaError(String);

#[tool(tool_type = "sandbox")]
/// Runs code in the sandbox.
fn run_code(code: &str, attempts: u32) -> Result<String, QuotaError> {
    if code.contains("fail") {
        return Err(QuotaError(format!("attempt {attempts}")));
    }
    Ok(format!("ran {code}"))
}

#[agent(name = "runner", session_id = session, user_id = "user-7")]
fn runner(session: &str) -> usize {
    let a = run_code("print(1)", 1).map(|s| s.len()).unwrap_or(0);
    let _ = run_code("fail", 2);
    a
}

#[test]
fn sync_tool_records_gen_ai_and_openinference_attributes_under_its_agent() {
    let cap = install();
    assert_eq!(runner("sess-1"), "ran print(1)".len());
    let agent = cap.span("invoke_agent runner");
    let tools: Vec<_> = cap
        .spans()
        .into_iter()
        .filter(|s| s.name == "execute_tool run_code")
        .collect();
    assert_eq!(tools.len(), 2);
    let ok = &tools[0];
    assert!(is_child_of(ok, &agent));
    assert_eq!(ok.span_kind, SpanKind::Internal);
    assert_eq!(attr_str(ok, "gen_ai.operation.name"), "execute_tool");
    assert_eq!(attr_str(ok, "gen_ai.tool.name"), "run_code");
    assert_eq!(attr_str(ok, "gen_ai.tool.type"), "extension");
    assert_eq!(attr_str(ok, "waxell.tool.type"), "sandbox");
    assert_eq!(
        attr_str(ok, "gen_ai.tool.description"),
        "Runs code in the sandbox."
    );
    assert_eq!(attr_str(ok, "openinference.span.kind"), "TOOL");
    assert_eq!(
        attr_json(ok, "gen_ai.tool.call.arguments"),
        serde_json::json!({"code": "print(1)", "attempts": 1})
    );
    assert_eq!(attr_str(ok, "gen_ai.tool.call.result"), "ran print(1)");
    assert_eq!(attr_str(ok, "output.value"), "ran print(1)");
    assert!(!is_error(ok));

    let failed = &tools[1];
    assert!(is_error(failed));
    assert_eq!(attr_str(failed, "error.type"), "QuotaError");
    let exception = failed
        .events
        .iter()
        .find(|e| e.name == "exception")
        .expect("exception event");
    assert!(exception
        .attributes
        .iter()
        .any(|kv| kv.key.as_str() == "exception.message"
            && kv.value.as_str() == "quota exceeded for attempt 2"));

    assert_eq!(attr_str(&agent, "gen_ai.operation.name"), "invoke_agent");
    assert_eq!(attr_str(&agent, "gen_ai.agent.name"), "runner");
    assert_eq!(attr_str(&agent, "openinference.span.kind"), "AGENT");
    assert_eq!(attr_str(&agent, "gen_ai.conversation.id"), "sess-1");
    assert_eq!(attr_str(&agent, "session.id"), "sess-1");
    assert_eq!(attr_str(&agent, "user.id"), "user-7");
    assert_eq!(attr_str(&agent, "output.value"), "12");
}

#[agent(name = "orchestrator")]
async fn orchestrator() -> Vec<String> {
    let a = child_agent("sandbox-runner").await;
    let b = child_agent("sandbox-evaluator").await;
    vec![a, b]
}

#[agent]
async fn child_agent(role: &'static str) -> String {
    tokio::task::yield_now().await;
    waxell::score("child_done", true);
    async_tool(role.len()).await
}

#[tool]
async fn async_tool(n: usize) -> String {
    tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    format!("n={n}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_async_agents_nest_across_awaits_and_scores_land_on_the_innermost_run() {
    let cap = install();
    orchestrator().await;
    let root = cap.span("invoke_agent orchestrator");
    let children: Vec<_> = cap
        .spans()
        .into_iter()
        .filter(|s| s.name == "invoke_agent child_agent")
        .collect();
    assert_eq!(children.len(), 2);
    for child in &children {
        assert!(is_child_of(child, &root));
        let tool = cap
            .spans()
            .into_iter()
            .find(|t| t.name == "execute_tool async_tool" && is_child_of(t, child));
        assert!(tool.is_some(), "each child agent has its own tool span");
        let score = child
            .events
            .iter()
            .find(|e| e.name == "gen_ai.evaluation.result")
            .expect("score event");
        assert!(score
            .attributes
            .iter()
            .any(|kv| kv.key.as_str() == "gen_ai.evaluation.name" && kv.value.as_str() == "child_done"));
    }
    assert!(
        root.events.iter().all(|e| e.name != "gen_ai.evaluation.result"),
        "scores attach to the innermost run"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn concurrent_tasks_never_cross_link() {
    let cap = install();
    let handles: Vec<_> = (0..8).map(|_| tokio::spawn(child_agent("x"))).collect();
    for h in handles {
        h.await.unwrap();
    }
    let spans = cap.spans();
    let agents: Vec<_> = spans
        .iter()
        .filter(|s| s.name == "invoke_agent child_agent")
        .collect();
    assert_eq!(agents.len(), 8);
    for tool in spans.iter().filter(|s| s.name == "execute_tool async_tool") {
        let parents = agents.iter().filter(|a| is_child_of(tool, a)).count();
        assert_eq!(parents, 1);
    }
    let traces: std::collections::HashSet<_> = agents.iter().map(|a| a.span_context.trace_id()).collect();
    assert_eq!(traces.len(), 8, "independent tasks are independent traces");
}

struct Calculator {
    offset: i64,
}

impl Calculator {
    #[tool(name = "add")]
    fn add(&self, x: i64) -> i64 {
        x + self.offset
    }

    #[tool]
    async fn add_async(&mut self, x: i64) -> i64 {
        self.offset += 1;
        x + self.offset
    }
}

#[tool]
fn generic_len<T: AsRef<str>>(item: T, extra: impl std::fmt::Debug) -> usize {
    let _ = extra;
    item.as_ref().len()
}

#[tool]
fn longest<'a>(a: &'a str, b: &'a str) -> &'a str {
    if a.len() >= b.len() {
        a
    } else {
        b
    }
}

#[tool]
fn later(x: u32) -> impl Future<Output = u32> {
    let doubled = x * 2;
    async move {
        tokio::task::yield_now().await;
        doubled + 1
    }
}

#[async_trait::async_trait]
trait Fetcher {
    async fn fetch(&self, key: &str) -> String;
}

struct Db;

#[async_trait::async_trait]
impl Fetcher for Db {
    #[tool(tool_type = "database")]
    async fn fetch(&self, key: &str) -> String {
        tokio::task::yield_now().await;
        format!("value-of-{key}")
    }
}

#[tokio::test]
async fn methods_generics_lifetimes_impl_future_and_async_trait_are_instrumented() {
    let cap = install();
    let mut calc = Calculator { offset: 10 };
    assert_eq!(calc.add(1), 11);
    assert_eq!(calc.add_async(1).await, 12);
    assert_eq!(generic_len("four", DebugOnly(3)), 4);
    assert_eq!(longest("ab", "abc"), "abc");
    let fut = later(4);
    assert_eq!(fut.await, 9);
    assert_eq!(Db.fetch("k").await, "value-of-k");

    let add = cap.span("execute_tool add");
    assert_eq!(
        attr_json(&add, "gen_ai.tool.call.arguments"),
        serde_json::json!({"x": 1})
    );
    assert_eq!(attr_str(&add, "gen_ai.tool.call.result"), "11");
    let generic = cap.span("execute_tool generic_len");
    let args = attr_json(&generic, "gen_ai.tool.call.arguments");
    // A generic parameter is captured by what its bounds promise: here neither Serialize nor Debug.
    assert_eq!(args["item"], "<&str>");
    assert_eq!(args["extra"], "DebugOnly(3)");
    assert_eq!(attr_str(&cap.span("execute_tool longest"), "output.value"), "abc");
    assert_eq!(attr_str(&cap.span("execute_tool later"), "output.value"), "9");
    let fetch = cap.span("execute_tool fetch");
    assert_eq!(attr_str(&fetch, "gen_ai.tool.type"), "datastore");
    assert_eq!(attr_str(&fetch, "output.value"), "value-of-k");
    let add_async = cap.span("execute_tool add_async");
    assert_eq!(attr_str(&add_async, "output.value"), "12");
}

#[tool]
async fn slow_tool() -> u32 {
    // Far longer than the 1 ms timeout: on a loaded machine a short sleep may be over by the time the
    // timeout first polls, and the call would complete instead of being cancelled.
    tokio::time::sleep(std::time::Duration::from_secs(60)).await;
    1
}

#[tool]
async fn covers_the_await() -> u32 {
    tokio::time::sleep(std::time::Duration::from_millis(30)).await;
    1
}

#[tool]
fn tail_future_covers_execution() -> impl Future<Output = ()> {
    async move {
        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
    }
}

#[tokio::test]
async fn async_spans_cover_execution_and_dropped_futures_end_cancelled() {
    let cap = install();
    covers_the_await().await;
    let pending = tail_future_covers_execution();
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    pending.await;
    let _ = tokio::time::timeout(std::time::Duration::from_millis(1), slow_tool()).await;

    for name in [
        "execute_tool covers_the_await",
        "execute_tool tail_future_covers_execution",
    ] {
        let s = cap.span(name);
        let took = s.end_time.duration_since(s.start_time).unwrap();
        assert!(
            took >= std::time::Duration::from_millis(25),
            "{name} lasted {took:?}"
        );
    }
    let cancelled = cap.span("execute_tool slow_tool");
    assert_eq!(attr(&cancelled, "waxell.cancelled"), Some(Value::Bool(true)));
    assert!(is_error(&cancelled));
}

#[tool]
fn panics(msg: &str) -> u32 {
    if !msg.is_empty() {
        panic!("boom: {msg}");
    }
    0
}

#[tool]
async fn panics_async() -> u32 {
    tokio::task::yield_now().await;
    panic!("async boom")
}

#[tokio::test]
async fn panics_are_recorded_and_continue() {
    let cap = install();
    let caught = std::panic::catch_unwind(|| panics("x"));
    assert!(caught.is_err(), "the panic continues");
    let joined = tokio::spawn(panics_async()).await;
    assert!(joined.unwrap_err().is_panic());

    let sync = cap.span("execute_tool panics");
    assert!(is_error(&sync));
    assert_eq!(attr(&sync, "waxell.panic"), Some(Value::Bool(true)));
    let event = sync.events.iter().find(|e| e.name == "exception").unwrap();
    assert!(event.attributes.iter().any(|kv| kv.value.as_str() == "boom: x"));
    let asynchronous = cap.span("execute_tool panics_async");
    assert_eq!(attr(&asynchronous, "waxell.panic"), Some(Value::Bool(true)));
}

#[derive(Serialize)]
struct Assessment {
    thought: String,
    evidence: Vec<String>,
    conclusion: String,
    extra: u8,
}

#[reasoning(step = "execution_quality_assessment")]
fn assess(successful: u32, total: u32) -> Assessment {
    Assessment {
        thought: format!("{successful}/{total} completed successfully"),
        evidence: vec![
            format!("successful_runs: {successful}"),
            "errors_caught: 1".into(),
        ],
        conclusion: "reliable".into(),
        extra: 1,
    }
}

#[reasoning(step = "typed")]
async fn assess_typed() -> Reasoning {
    Reasoning::new("thinking").evidence("e1").conclusion("concluded")
}

#[reasoning]
fn plain_thought() -> String {
    "just a thought".into()
}

#[derive(Debug, Clone, Copy, PartialEq, DecisionOptions)]
enum OutputFormat {
    Markdown,
    JsonReport,
}

#[decision(name = "output_format", options = OutputFormat)]
fn choose_format(rich: bool) -> Decision<OutputFormat> {
    let chosen = if rich {
        OutputFormat::Markdown
    } else {
        OutputFormat::JsonReport
    };
    Decision::new(chosen)
        .reasoning("rich output available")
        .confidence(0.87654)
}

#[decision(name = "route", options = ["fast", "careful"])]
fn choose_route() -> serde_json::Value {
    serde_json::json!({"choice": "reckless", "reason": "why not"})
}

#[agent(name = "evaluator")]
async fn evaluator() {
    assess(3, 4);
    assess_typed().await;
    plain_thought();
    choose_format(true);
    choose_route();
    waxell::score_with_comment("execution_reliability", 0.75, "3/4 successful");
    waxell::score("verdict", "good");
    waxell::tag("env", "test");
    waxell::metadata("attempts", 3);
}

#[tokio::test]
async fn reasoning_decisions_scores_tags_and_metadata() {
    let cap = install();
    evaluator().await;
    let r = cap.span("reasoning execution_quality_assessment");
    assert_eq!(
        attr_str(&r, "waxell.reasoning.thought"),
        "3/4 completed successfully"
    );
    assert_eq!(
        attr(&r, "waxell.reasoning.evidence").unwrap().to_string(),
        r#"["successful_runs: 3","errors_caught: 1"]"#
    );
    assert_eq!(attr_str(&r, "waxell.reasoning.conclusion"), "reliable");
    assert_eq!(attr_str(&r, "openinference.span.kind"), "CHAIN");
    assert_eq!(
        attr_json(&r, "gen_ai.output.messages")[0]["parts"][0]["type"],
        "reasoning"
    );
    assert_eq!(
        attr_str(&cap.span("reasoning typed"), "waxell.reasoning.conclusion"),
        "concluded"
    );
    assert_eq!(
        attr_str(&cap.span("reasoning plain_thought"), "waxell.reasoning.thought"),
        "just a thought"
    );

    let d = cap.span("decide output_format");
    assert_eq!(attr_str(&d, "waxell.decision.chosen"), "markdown");
    assert_eq!(
        attr(&d, "waxell.decision.options").unwrap().to_string(),
        r#"["markdown","json_report"]"#
    );
    assert_eq!(attr_str(&d, "waxell.decision.reasoning"), "rich output available");
    assert!(attr(&d, "waxell.decision.invalid_choice").is_none());
    let bad = cap.span("decide route");
    assert_eq!(attr_str(&bad, "waxell.decision.chosen"), "reckless");
    assert_eq!(
        attr(&bad, "waxell.decision.invalid_choice"),
        Some(Value::Bool(true))
    );

    let agent = cap.span("invoke_agent evaluator");
    let scores: Vec<_> = agent
        .events
        .iter()
        .filter(|e| e.name == "gen_ai.evaluation.result")
        .collect();
    let names: Vec<String> = scores
        .iter()
        .filter_map(|e| {
            e.attributes
                .iter()
                .find(|kv| kv.key.as_str() == "gen_ai.evaluation.name")
                .map(|kv| kv.value.to_string())
        })
        .collect();
    assert_eq!(
        names,
        [
            "decision_confidence:output_format",
            "execution_reliability",
            "verdict"
        ]
    );
    assert_eq!(
        attr(&agent, "waxell.score.decision_confidence_output_format"),
        Some(Value::F64(0.8765))
    );
    assert_eq!(
        attr(&agent, "waxell.score.execution_reliability"),
        Some(Value::F64(0.75))
    );
    assert_eq!(attr_str(&agent, "waxell.score.verdict"), "good");
    let reliability = scores[1];
    assert!(reliability.attributes.iter().any(
        |kv| kv.key.as_str() == "gen_ai.evaluation.explanation" && kv.value.as_str() == "3/4 successful"
    ));
    assert_eq!(attr_str(&agent, "waxell.tag.env"), "test");
    assert_eq!(attr(&agent, "waxell.meta.attempts"), Some(Value::I64(3)));
    for child in ["reasoning typed", "decide output_format", "decide route"] {
        assert!(is_child_of(&cap.span(child), &agent), "{child} under the agent");
    }
}

#[test]
fn score_outside_a_run_does_nothing_harmful() {
    let cap = install();
    assert!(!waxell::score("orphan", 1.0));
    assert!(!waxell::tag("k", "v"));
    assert!(cap.spans().is_empty());
}

#[step(name = "prepare")]
fn prepare() -> u8 {
    fetch_docs("growth trend", 2).len() as u8
}

#[derive(Serialize)]
struct Doc {
    id: u32,
    score: f64,
}

#[retrieval(source = "sales_db")]
fn fetch_docs(query: &str, limit: usize) -> Vec<Doc> {
    let _ = query;
    (0..limit as u32)
        .map(|id| Doc {
            id,
            score: 0.9 - f64::from(id) * 0.1,
        })
        .collect()
}

#[test]
fn step_and_retrieval() {
    let cap = install();
    assert_eq!(prepare(), 2);
    let step = cap.span("step prepare");
    let r = cap.span("retrieval sales_db");
    assert!(is_child_of(&r, &step));
    assert_eq!(attr_str(&r, "gen_ai.operation.name"), "retrieval");
    assert_eq!(attr_str(&r, "openinference.span.kind"), "RETRIEVER");
    assert_eq!(attr_str(&r, "waxell.retrieval.query"), "growth trend");
    assert_eq!(attr(&r, "waxell.retrieval.result_count"), Some(Value::I64(2)));
    assert_eq!(
        attr(&r, "waxell.retrieval.scores").unwrap().to_string(),
        "[0.9,0.8]"
    );
}

#[tool(skip(secret_handle))]
fn skipping(visible: u8, secret_handle: &str) -> u8 {
    let _ = secret_handle;
    visible
}

#[tool(skip_all)]
fn skipping_all(a: u8) -> u8 {
    a
}

#[tool(capture = false)]
fn no_capture(a: u8) -> u8 {
    a
}

#[tool]
fn opaque(o: Opaque, api_key: &str, note: String) -> Opaque {
    let _ = (api_key, note);
    o
}

#[test]
fn capture_options_fallbacks_truncation_and_scrubbing() {
    let cap = install_with(|b| b.max_content_chars(60));
    skipping(1, "handle-123");
    skipping_all(2);
    no_capture(3);
    opaque(
        Opaque,
        "plain-value",
        format!("key sk-proj-{} and {}", "a".repeat(30), "x".repeat(100)),
    );

    let s = cap.span("execute_tool skipping");
    assert_eq!(
        attr_json(&s, "gen_ai.tool.call.arguments"),
        serde_json::json!({"visible": 1})
    );
    assert!(attr(
        &cap.span("execute_tool skipping_all"),
        "gen_ai.tool.call.arguments"
    )
    .is_none());
    let n = cap.span("execute_tool no_capture");
    assert!(attr(&n, "gen_ai.tool.call.arguments").is_none());
    assert!(attr(&n, "gen_ai.tool.call.result").is_none());

    let o = cap.span("execute_tool opaque");
    let args = attr_str(&o, "gen_ai.tool.call.arguments");
    assert!(args.contains("[REDACTED:API_KEY]"), "{args}");
    assert!(!args.contains("sk-proj-aaaa"), "{args}");
    assert!(args.contains("truncated"), "{args}");
    assert!(attr_str(&o, "gen_ai.tool.call.result").contains("Opaque"));
}

#[test]
fn content_capture_off_keeps_structure_but_no_content() {
    let cap = install_with(|b| b.capture_content(false));
    runner("s");
    let tool = cap
        .spans()
        .into_iter()
        .find(|s| s.name == "execute_tool run_code")
        .unwrap();
    assert_eq!(attr_str(&tool, "gen_ai.tool.name"), "run_code");
    assert!(attr(&tool, "gen_ai.tool.call.arguments").is_none());
    assert!(attr(&tool, "output.value").is_none());
}
