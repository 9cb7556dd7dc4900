//! `waxell::testing`: a capture sees the spans of its own test (its thread, the threads and tasks its
//! context is handed to) and nothing else, while many tests run at once in one process.

use std::sync::{Arc, Barrier};
use std::time::Duration;

use opentelemetry::trace::FutureExt as _;
use opentelemetry::Context;
use waxell::testing::{self, RecordedDecision};
use waxell::{agent, decision, tool, Decision, ScoreValue};

#[tool(tool_type = "function")]
fn add(a: i64, b: i64) -> i64 {
    a + b
}

#[agent(name = "worker")]
fn worker(id: i64) -> i64 {
    waxell::tag("worker_id", id.to_string());
    waxell::score("id", id);
    add(id, 1)
}

#[tool]
async fn slow_add(a: i64) -> i64 {
    tokio::time::sleep(Duration::from_millis(5)).await;
    a + 1
}

#[agent(name = "async-worker")]
async fn async_worker(id: i64) -> i64 {
    // Tasks on other worker threads: the context (and with it the capture) is handed over explicitly,
    // as it is for the spans' parentage.
    let tasks: Vec<_> = (0..4)
        .map(|i| tokio::spawn(slow_add(id * 10 + i).with_current_context()))
        .collect();
    let mut sum = 0;
    for task in tasks {
        sum += task.await.unwrap();
    }
    sum
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, waxell::DecisionOptions)]
enum Route {
    Search,
    Answer,
}

#[decision(name = "route", options = Route)]
fn route(question: &str) -> Decision<Route> {
    let chosen = if question.ends_with('?') {
        Route::Answer
    } else {
        Route::Search
    };
    Decision::new(chosen).reasoning("a question mark").confidence(0.8)
}

#[agent(name = "router")]
fn router(question: &str) -> Route {
    let chosen = route(question).chosen;
    waxell::decide("tone", &["formal", "casual"], "casual", Some("a chat"), None);
    waxell::score_with_comment("helpful", true, "looked fine");
    waxell::score("quality", 0.75);
    waxell::score("mood", "calm");
    chosen
}

#[test]
fn parallel_tests_on_threads_each_see_only_their_own_spans() {
    const THREADS: usize = 8;
    let outer = testing::capture();
    let start = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS as i64)
        .map(|id| {
            let start = Arc::clone(&start);
            // Plain threads with captures of their own, like the tests of one `cargo test` process.
            std::thread::spawn(move || {
                let capture = testing::capture();
                start.wait();
                for _ in 0..20 {
                    worker(id);
                }
                let agents = capture.spans_named("invoke_agent worker");
                assert_eq!(agents.len(), 20, "{}", capture.tree());
                for agent in &agents {
                    agent.assert_attr("waxell.tag.worker_id", id.to_string());
                }
                assert!(capture
                    .scores()
                    .iter()
                    .all(|s| s.value == ScoreValue::Numeric(id as f64)));
                assert_eq!(capture.spans().len(), 40);
            })
        })
        .collect();
    for handle in handles {
        handle.join().unwrap();
    }
    assert!(
        outer.spans().is_empty(),
        "other threads' spans leaked in:\n{}",
        outer.tree()
    );
}

#[test]
fn a_thread_is_captured_when_it_is_handed_the_context() {
    let capture = testing::capture();
    let cx = capture.context();
    std::thread::spawn(move || {
        let _attached = cx.attach();
        worker(1);
    })
    .join()
    .unwrap();
    // A thread started without the context is not this test's.
    std::thread::spawn(|| worker(2)).join().unwrap();

    let agent = capture.span("invoke_agent worker");
    agent.assert_attr("waxell.tag.worker_id", "1");
    assert_eq!(capture.children_of(&agent)[0].name(), "execute_tool add");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn tasks_on_other_worker_threads_are_captured_with_the_context() {
    let capture = testing::capture();
    let sum = async_worker(1).await;
    assert_eq!(sum, 10 + 11 + 12 + 13 + 4);
    // A task spawned without the context runs on some worker thread: not this test's.
    tokio::spawn(async_worker(2)).await.unwrap();

    let agent = capture.span("invoke_agent async-worker");
    let tools = capture.children_of(&agent);
    assert_eq!(tools.len(), 4, "{}", capture.tree());
    assert!(tools.iter().all(|t| t.name() == "execute_tool slow_add"));
    assert_eq!(capture.spans().len(), 5, "{}", capture.tree());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_async_tests_do_not_see_each_other() {
    // Two "tests" as tasks of one runtime, each with its own capture held in its own task.
    // A task may move between threads, so its capture is a detached one, handed on through the context.
    let a = tokio::spawn(async {
        let capture = testing::builder().detached();
        let x = async_worker(3).with_context(capture.context()).await;
        (x, capture.spans().len())
    });
    let b = tokio::task::spawn_blocking(|| {
        let capture = testing::capture();
        worker(4);
        capture.names()
    });
    let (x, count) = a.await.unwrap();
    assert_eq!(x, 30 + 31 + 32 + 33 + 4);
    assert_eq!(count, 5);
    assert_eq!(b.await.unwrap(), ["execute_tool add", "invoke_agent worker"]);
}

#[test]
fn scores_and_decisions_are_typed() {
    let capture = testing::capture();
    assert_eq!(router("what now?"), Route::Answer);

    assert_eq!(capture.score("helpful").value, ScoreValue::Boolean(true));
    assert_eq!(capture.score("helpful").comment.as_deref(), Some("looked fine"));
    assert_eq!(capture.score("quality").value, ScoreValue::Numeric(0.75));
    assert_eq!(
        capture.score("mood").value,
        ScoreValue::Categorical("calm".into())
    );
    assert_eq!(
        capture.score("decision_confidence:route").value,
        ScoreValue::Numeric(0.8)
    );
    assert!(capture.scores().iter().all(|s| s.span == "invoke_agent router"));

    let route = capture.decision("route");
    assert_eq!(route.options, ["search", "answer"]);
    assert_eq!(route.chosen.as_deref(), Some("answer"));
    assert_eq!(route.reasoning.as_deref(), Some("a question mark"));
    assert_eq!(route.confidence, Some(0.8));
    assert!(!route.invalid_choice);
    let tone: RecordedDecision = capture.decision("tone");
    assert_eq!(tone.chosen.as_deref(), Some("casual"));
    assert_eq!(tone.span, "decide tone");
    assert_eq!(capture.decisions().len(), 2);

    capture.assert_child_of("decide route", "invoke_agent router");
    capture.assert_child_of("decide tone", "invoke_agent router");
    capture.assert_attr("invoke_agent router", "gen_ai.agent.name", "router");
    assert_eq!(
        capture.parent_of(&capture.span("decide tone")).unwrap().name(),
        "invoke_agent router"
    );
}

#[test]
fn the_tree_shows_nesting_and_errors() {
    #[tool]
    fn fails() -> Result<(), String> {
        Err("no".into())
    }
    #[agent(name = "tree")]
    fn tree_agent() {
        add(1, 2);
        let _ = fails();
    }
    let capture = testing::capture();
    tree_agent();
    assert_eq!(
        capture.tree(),
        "  invoke_agent tree\n    execute_tool add\n    execute_tool fails  [error: no]\n"
    );
    capture.clear();
    assert_eq!(capture.tree(), "  (no spans)\n");
}

#[test]
#[should_panic(
    expected = "expected one span \"execute_tool nope\", found 0; captured:\n  invoke_agent worker\n"
)]
fn a_missing_span_fails_with_the_tree() {
    let capture = testing::capture();
    worker(1);
    capture.span("execute_tool nope");
}

#[test]
#[should_panic(expected = "attribute \"gen_ai.tool.name\" is \"add\", expected \"sub\"")]
fn a_wrong_attribute_fails_with_both_values() {
    let capture = testing::capture();
    add(1, 2);
    capture.assert_attr("execute_tool add", "gen_ai.tool.name", "sub");
}

#[test]
fn the_capture_policy_applies_to_captured_spans() {
    let capture = testing::builder().capture_content(false).start();
    add(1, 2);
    capture
        .span("execute_tool add")
        .assert_no_attr("gen_ai.tool.call.arguments")
        .assert_attr("gen_ai.tool.name", "add");

    let capture = testing::builder().max_content_chars(5).start();
    add(123_456, 2);
    let args = capture.span("execute_tool add");
    let args = args.str_attr("gen_ai.tool.call.arguments").unwrap();
    assert!(args.starts_with("{\"a\":...[truncated "), "{args}");
}

#[test]
fn without_a_capture_nothing_is_captured_and_dropping_detaches() {
    let capture = testing::capture();
    drop(capture);
    // No capture is current any more: spans go to the global provider (a no-op here).
    assert!(Context::current().span().span_context().trace_id() == opentelemetry::trace::TraceId::INVALID);
    worker(5);
    let capture = testing::capture();
    assert!(capture.spans().is_empty());
}

use opentelemetry::trace::TraceContextExt as _;
