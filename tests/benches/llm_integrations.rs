//! Added latency of the LLM-crate integrations, each next to the bare crate in the same run, against
//! a fake OpenAI server on 127.0.0.1 that answers after 1 ms:
//!
//! - `async-openai chat`: `client.chat().create(..)` with the default client vs with
//!   `waxell::integrations::async_openai::service()`. Target: < 5 % of the 1 ms round trip (< 50 µs).
//! - `async-openai stream first chunk`: `create_stream(..)` until the first chunk reaches the caller,
//!   bare vs recorded, with chunks 1 ms apart (as a model streams tokens) and all at once. Target:
//!   delayed < 50 µs.
//! - `genai chat`: `exec_chat(..)` under a `tracing` subscriber at INFO vs the same subscriber with
//!   `waxell::tracing_layer()` added (the rig/genai path). Target: < 5 % of the round trip.
//! - `rig chat`: rig-core's `Model::call(..)` (OpenAI provider, bundled reqwest transport) the same way.
//!   Target: < 5 % of the round trip.
//!
//! `cargo bench -p waxell-tests --bench llm_integrations` (`-- --quick` for fewer rounds). The two sides
//! run in alternating rounds (order flipped each round); medians and their difference are printed.

use std::time::{Duration, Instant};

use async_openai::config::OpenAIConfig;
use async_openai::types::chat::CreateChatCompletionRequest;
use futures_util::StreamExt;
use genai::adapter::AdapterKind;
use genai::resolver::{AuthData, Endpoint, ServiceTargetResolver};
use genai::{ModelIden, ServiceTarget};
use serde_json::json;
use tracing_subscriber::layer::SubscriberExt as _;
use waxell_tests::bench_row::{Row, Rows};
use waxell_tests::fake_llm::{chat_chunks, chat_completion, FakeLlm, LlmReply};

const ROUND_TRIP: Duration = Duration::from_millis(1);

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// Run `a` and `b` `rounds` times each, alternating which goes first; medians of both.
fn compare(
    rounds: usize,
    mut a: impl FnMut() -> Duration,
    mut b: impl FnMut() -> Duration,
) -> (Duration, Duration) {
    for _ in 0..rounds / 10 + 5 {
        a();
        b();
    }
    let (mut xs, mut ys) = (Vec::with_capacity(rounds), Vec::with_capacity(rounds));
    for round in 0..rounds {
        if round % 2 == 0 {
            xs.push(a());
            ys.push(b());
        } else {
            ys.push(b());
            xs.push(a());
        }
    }
    (median(xs), median(ys))
}

/// Prints the comparison and returns its row of docs/performance.md (`id`, `what`; `bare_name`: the anchor).
fn row(
    name: &str,
    bare: Duration,
    recorded: Duration,
    target: &str,
    [id, what, bare_name]: [&str; 3],
) -> Row {
    let added = recorded.as_secs_f64() - bare.as_secs_f64();
    println!(
        "| {name} | {:.1} µs | {:.1} µs | {:+.1} µs ({:+.1} % of the 1 ms round trip) | {target} |",
        bare.as_secs_f64() * 1e6,
        recorded.as_secs_f64() * 1e6,
        added * 1e6,
        added / ROUND_TRIP.as_secs_f64() * 100.0,
    );
    let us = |d: Duration| format!("{} µs", waxell_tests::bench_row::grouped(d.as_secs_f64() * 1e6));
    Row {
        id: id.into(),
        what: what.into(),
        measured: us(recorded),
        anchor: format!("{bare_name}: {}", us(bare)),
        ratio: format!("**{:+.1} µs**", added * 1e6),
        target: "< 50 µs".into(),
        verdict: Some(added < 50e-6),
    }
}

/// The CPU the recording itself takes, no I/O: what each part of one call costs, to see where an
/// added latency above comes from.
fn recording_alone(rounds: usize) {
    use waxell::llm::record::{LlmCall, Provider};
    use waxell::llm::{ChatRequest, ChatResponse, Message, PriceTable};
    let time = |mut f: Box<dyn FnMut()>| {
        let started = Instant::now();
        for _ in 0..rounds * 10 {
            f();
        }
        started.elapsed() / (rounds as u32 * 10)
    };
    let request = ChatRequest::new([Message::user("Weather in Paris?")]).model("gpt-4o-mini");
    let response: ChatResponse =
        serde_json::from_value(chat_completion("gpt-4o-mini", Some("Sunny."), &[], (20, 5))).unwrap();
    let provider = Provider::new("openai").with_server("127.0.0.1", 8080);
    let parts = [
        (
            "PriceTable::defaults()",
            time(Box::new(|| drop(std::hint::black_box(PriceTable::defaults())))),
        ),
        (
            "Provider::new",
            time(Box::new(|| drop(std::hint::black_box(Provider::new("openai"))))),
        ),
        (
            "LlmCall start + finish",
            time(Box::new(|| {
                let mut call = LlmCall::start(&provider, &request);
                call.finish(&response);
            })),
        ),
    ];
    for (name, took) in parts {
        println!(
            "| recording alone: {name} | | {:.1} µs | | |",
            took.as_secs_f64() * 1e6
        );
    }
}

/// An async-openai client for `server` as it comes (bare) and one recorded by waxell's layer.
fn openai_clients(
    server: &FakeLlm,
) -> (
    async_openai::Client<OpenAIConfig>,
    async_openai::Client<OpenAIConfig>,
) {
    let config = OpenAIConfig::new()
        .with_api_base(server.base_url())
        .with_api_key("bench");
    let bare = async_openai::Client::with_config(config.clone());
    let recorded = async_openai::Client::with_config(config)
        .with_http_service(waxell::integrations::async_openai::service());
    (bare, recorded)
}

fn chat_request(stream: bool) -> CreateChatCompletionRequest {
    serde_json::from_value(json!({"model": "gpt-4o-mini", "stream": stream,
        "messages": [{"role": "user", "content": "Weather in Paris?"}]}))
    .unwrap()
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick") || std::env::var_os("WAXELL_BENCH_QUICK").is_some();
    let rounds = if quick { 200 } else { 2000 };
    let mut rows = Rows::start("[L]", quick);
    // Recorded as a user records: `waxell::init` exporting OTLP to a collector on 127.0.0.1 (batched, in
    // the background), so the figures include what the SDK does on the caller's path and nothing else.
    let collector = waxell_tests::OtlpReceiver::start_http();
    let _waxell = waxell::builder()
        .with_otlp_endpoint(collector.traces_url())
        .with_console(false)
        .with_trace_file(None)
        .init()
        .unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();

    let reply = LlmReply::Json(200, chat_completion("gpt-4o-mini", Some("Sunny."), &[], (20, 5)));
    let server = FakeLlm::repeating(reply, ROUND_TRIP);
    let (bare, recorded) = openai_clients(&server);
    let time_chat = |client: &async_openai::Client<OpenAIConfig>| {
        let started = Instant::now();
        rt.block_on(client.chat().create(chat_request(false))).unwrap();
        started.elapsed()
    };

    println!("| case | bare crate | with waxell | added | target |");
    println!("| --- | ---: | ---: | ---: | --- |");
    recording_alone(rounds);
    let (a, b) = compare(rounds, || time_chat(&bare), || time_chat(&recorded));
    rows.push(row(
        "async-openai chat",
        a,
        b,
        "< 5 % (50 µs)",
        [
            "llm.async-openai.chat",
            &format!("async-openai `chat().create` through waxell's layer, fake OpenAI server on 127.0.0.1 answering after 1 ms, {rounds} rounds per side"),
            "bare async-openai",
        ],
    ));

    // Two streams: chunks 1 ms apart, as a model streams tokens (the target's case), and a burst with
    // every chunk at once, where the end of the stream comes while the caller is still being woken for
    // the first chunk.
    for (case, gap, id, what) in [
        (
            "async-openai stream, first chunk (chunks 1 ms apart)",
            Duration::from_millis(1),
            "llm.async-openai.stream-gapped",
            "async-openai stream, time to the first chunk, chunks 1 ms apart",
        ),
        (
            "async-openai stream, first chunk (all chunks at once)",
            Duration::ZERO,
            "llm.async-openai.stream-burst",
            "async-openai stream, time to the first chunk, all chunks at once",
        ),
    ] {
        let stream_reply = LlmReply::Sse {
            events: chat_chunks("gpt-4o-mini", Some("Sunny in Paris today."), None, (20, 5)),
            done: true,
            gap,
        };
        let stream_server = FakeLlm::repeating(stream_reply, ROUND_TRIP);
        let (bare, recorded) = openai_clients(&stream_server);
        let first_chunk = |client: &async_openai::Client<OpenAIConfig>| {
            let started = Instant::now();
            rt.block_on(async {
                let mut stream = client.chat().create_stream(chat_request(true)).await.unwrap();
                stream.next().await.unwrap().unwrap();
                let elapsed = started.elapsed();
                while stream.next().await.is_some() {}
                elapsed
            })
        };
        let (a, b) = compare(rounds, || first_chunk(&bare), || first_chunk(&recorded));
        rows.push(row(case, a, b, "< 50 µs", [id, what, "bare"]));
    }

    let endpoint = format!("{}/", server.base_url());
    let resolver = ServiceTargetResolver::from_resolver_fn(move |target: ServiceTarget| {
        Ok(ServiceTarget {
            endpoint: Endpoint::from_owned(endpoint.clone()),
            auth: AuthData::from_single("bench"),
            model: ModelIden::new(AdapterKind::OpenAI, target.model.model_name),
        })
    });
    let genai_client = genai::Client::builder()
        .with_service_target_resolver(resolver)
        .build()
        .unwrap();
    let plain = tracing_subscriber::registry().with(tracing_subscriber::filter::LevelFilter::INFO);
    let plain = tracing::Dispatch::new(plain);
    // The same subscriber with waxell's layer added: what an application's `tracing` setup becomes.
    let waxell_dispatch = tracing::Dispatch::new(
        tracing_subscriber::registry()
            .with(tracing_subscriber::filter::LevelFilter::INFO)
            .with(waxell::tracing_layer()),
    );
    let time_genai = |dispatch: &tracing::Dispatch| {
        let request =
            genai::chat::ChatRequest::new(vec![genai::chat::ChatMessage::user("Weather in Paris?")]);
        let started = Instant::now();
        let _guard = tracing::dispatcher::set_default(dispatch);
        rt.block_on(genai_client.exec_chat("gpt-4o-mini", request, None))
            .unwrap();
        started.elapsed()
    };
    let (a, b) = compare(rounds, || time_genai(&plain), || time_genai(&waxell_dispatch));
    rows.push(row(
        "genai chat (the rig/genai tracing path)",
        a,
        b,
        "< 5 % (50 µs)",
        [
            "llm.genai.chat",
            "genai `exec_chat` under `tracing_layer()`",
            "bare genai",
        ],
    ));

    let rig_model = rig_core::providers::openai::OpenAIConfig::new("bench")
        .with_base_url(server.base_url())
        .client()
        .chat("gpt-4o-mini");
    let time_rig = |dispatch: &tracing::Dispatch| {
        let request = rig_core::completion::CompletionRequest::new("Weather in Paris?");
        let started = Instant::now();
        let _guard = tracing::dispatcher::set_default(dispatch);
        rt.block_on(rig_model.call(request)).unwrap();
        started.elapsed()
    };
    let (a, b) = compare(rounds, || time_rig(&plain), || time_rig(&waxell_dispatch));
    rows.push(row(
        "rig chat (tracing_layer)",
        a,
        b,
        "< 5 % (50 µs)",
        [
            "llm.rig.chat",
            "rig-core `Model::call` under `tracing_layer()`",
            "bare rig-core",
        ],
    ));
    drop(_waxell);
    eprintln!("the collector received {} spans", collector.spans().len());
    rows.finish();
}
