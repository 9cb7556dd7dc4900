//! `tracing` spans (through `waxell::tracing_layer()`) and waxell spans share one trace and nest both ways.
#![cfg(feature = "tracing")]

mod spans_support;

use spans_support::*;
use tracing::Instrument as _;
use tracing_subscriber::layer::SubscriberExt as _;
use waxell::{agent, tool};

#[tool]
fn sync_tool(x: u32) -> u32 {
    let inner = tracing::info_span!("tracing_inside_tool");
    let _entered = inner.enter();
    x + 1
}

#[agent(name = "mixed")]
fn sync_agent() -> u32 {
    let span = tracing::info_span!("tracing_step");
    let _entered = span.enter();
    sync_tool(1)
}

#[tool]
async fn async_tool() -> u32 {
    tokio::task::yield_now().await;
    async { 7 }
        .instrument(tracing::info_span!("tracing_inside_async_tool"))
        .await
}

#[agent(name = "mixed-async")]
async fn async_agent() -> u32 {
    async {
        tokio::task::yield_now().await;
        async_tool().await
    }
    .instrument(tracing::info_span!("tracing_async_step"))
    .await
}

#[test]
fn sync_spans_nest_both_ways() {
    let cap = install();
    let subscriber = tracing_subscriber::registry().with(waxell::tracing_layer());
    tracing::subscriber::with_default(subscriber, || {
        let root = tracing::info_span!("tracing_root");
        let _entered = root.enter();
        assert_eq!(sync_agent(), 2);
    });
    let root = cap.span("tracing_root");
    let agent = cap.span("invoke_agent mixed");
    let step = cap.span("tracing_step");
    let tool = cap.span("execute_tool sync_tool");
    let inside = cap.span("tracing_inside_tool");
    assert!(is_child_of(&agent, &root), "waxell agent under a tracing span");
    assert!(is_child_of(&step, &agent), "tracing span under a waxell agent");
    assert!(is_child_of(&tool, &step), "waxell tool under a tracing span");
    assert!(is_child_of(&inside, &tool), "tracing span under a waxell tool");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_spans_nest_both_ways_across_awaits() {
    let cap = install();
    let subscriber = tracing_subscriber::registry().with(waxell::tracing_layer());
    let _default = tracing::subscriber::set_default(subscriber);
    // A multi-thread runtime may poll on another thread: the future carries its own spans.
    let value = async_agent()
        .instrument(tracing::info_span!("tracing_async_root"))
        .await;
    assert_eq!(value, 7);
    let root = cap.span("tracing_async_root");
    let agent = cap.span("invoke_agent mixed-async");
    let step = cap.span("tracing_async_step");
    let tool = cap.span("execute_tool async_tool");
    let inside = cap.span("tracing_inside_async_tool");
    assert!(is_child_of(&agent, &root));
    assert!(is_child_of(&step, &agent));
    assert!(is_child_of(&tool, &step));
    assert!(is_child_of(&inside, &tool));
}
