//! `waxell ui` (feature `ui`) with its real parts on loopback: spans sent by the OpenTelemetry OTLP exporter
//! (protobuf and JSON) and trace files written as the embedded default writes them arrive in the store and
//! come back from the app's JSON API; a restart keeps them; the request checks refuse what they must.

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use opentelemetry::trace::{Span as _, TraceContextExt, Tracer, TracerProvider as _};
use opentelemetry::KeyValue;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue as PKeyValue};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use opentelemetry_sdk::trace::SdkTracerProvider;
use serde_json::Value;
use waxell::ui::{UiOptions, UiServer};

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "waxell-web-ui-{name}-{}-{}",
        std::process::id(),
        waxell_ui_nanos()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn waxell_ui_nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

fn options(dir: &Path) -> UiOptions {
    UiOptions {
        listen: "127.0.0.1:0".parse().unwrap(),
        otlp: Some("127.0.0.1:0".parse().unwrap()),
        otlp_grpc: Some("127.0.0.1:0".parse().unwrap()),
        store: dir.join("store.redb"),
        follow: Vec::new(),
        poll: Duration::from_millis(50),
        ..UiOptions::default()
    }
}

fn client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

fn get_json(url: &str) -> Value {
    let response = client().get(url).send().unwrap();
    assert_eq!(response.status(), 200, "GET {url}");
    serde_json::from_str(&response.text().unwrap()).unwrap()
}

/// Poll `check` until it returns `Some`, for up to 10 s.
fn eventually<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn runs(ui: &UiServer, query: &str) -> Vec<Value> {
    get_json(&format!("{}/api/runs{query}", ui.base_url()))["runs"]
        .as_array()
        .unwrap()
        .clone()
}

/// An agent run sent through the OpenTelemetry SDK and its OTLP/HTTP exporter: agent → chat → tool.
fn send_agent_run(endpoint: &str, protocol: opentelemetry_otlp::Protocol, agent: &str) {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(protocol)
        .with_endpoint(format!("{endpoint}/v1/traces"))
        .build()
        .unwrap();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter)
        .build();
    let tracer = provider.tracer("web-ui-test");
    let root = tracer
        .span_builder(format!("invoke_agent {agent}"))
        .with_attributes(vec![
            KeyValue::new("gen_ai.operation.name", "invoke_agent"),
            KeyValue::new("gen_ai.agent.name", agent.to_owned()),
            KeyValue::new("openinference.span.kind", "AGENT"),
            KeyValue::new("session.id", "session-7"),
            KeyValue::new("user.id", "ada"),
            KeyValue::new("input.value", "what were the sales in March?"),
        ])
        .start(&tracer);
    let cx = opentelemetry::Context::current_with_span(root);
    {
        let mut chat = tracer
            .span_builder("chat gpt-4o-mini")
            .with_attributes(vec![
                KeyValue::new("gen_ai.operation.name", "chat"),
                KeyValue::new("gen_ai.request.model", "gpt-4o-mini"),
                KeyValue::new("gen_ai.usage.input_tokens", 120),
                KeyValue::new("gen_ai.usage.output_tokens", 30),
                KeyValue::new("waxell.llm.cost", 0.25),
            ])
            .start_with_context(&tracer, &cx);
        chat.end();
        let mut tool = tracer
            .span_builder("execute_tool lookup")
            .with_attributes(vec![
                KeyValue::new("gen_ai.operation.name", "execute_tool"),
                KeyValue::new("gen_ai.tool.name", "lookup"),
            ])
            .start_with_context(&tracer, &cx);
        tool.end();
    }
    let span = cx.span();
    span.add_event(
        "gen_ai.evaluation.result",
        vec![
            KeyValue::new("gen_ai.evaluation.name", "helpfulness"),
            KeyValue::new("gen_ai.evaluation.score.value", 0.75),
            KeyValue::new("gen_ai.evaluation.explanation", "answered with the figure"),
        ],
    );
    span.set_attribute(KeyValue::new("output.value", "March: 12,800"));
    span.end();
    provider.shutdown().unwrap();
}

#[test]
fn otlp_protobuf_and_json_arrive_and_come_back_from_the_api() {
    let dir = temp_dir("otlp");
    let ui = UiServer::start(options(&dir)).unwrap();
    let endpoint = ui.otlp_endpoint().unwrap();
    send_agent_run(&endpoint, opentelemetry_otlp::Protocol::HttpBinary, "proto-agent");
    send_agent_run(&endpoint, opentelemetry_otlp::Protocol::HttpJson, "json-agent");

    let all = runs(&ui, "");
    assert_eq!(all.len(), 2, "{all:#?}");
    for agent in ["proto-agent", "json-agent"] {
        let run = all.iter().find(|r| r["agent"] == agent).expect(agent);
        assert_eq!(run["status"], "ok");
        assert_eq!(run["spans"], 3);
        assert_eq!(run["input_tokens"], 120);
        assert_eq!(run["output_tokens"], 30);
        assert_eq!(run["cost"], 0.25);
        assert_eq!(run["session"], "session-7");
        assert_eq!(run["user"], "ada");
        assert_eq!(run["scores"]["helpfulness"]["value"], 0.75);
        assert_eq!(
            run["scores"]["helpfulness"]["comment"],
            "answered with the figure"
        );

        let id = run["trace_id"].as_str().unwrap();
        let page = get_json(&format!("{}/api/runs/{id}", ui.base_url()));
        let spans = page["spans"].as_array().unwrap();
        let names: Vec<&str> = spans.iter().map(|s| s["name"].as_str().unwrap()).collect();
        assert!(
            names.contains(&"chat gpt-4o-mini") && names.contains(&"execute_tool lookup"),
            "{names:?}"
        );
        let root = spans.iter().find(|s| s["parent_id"] == "").unwrap();
        assert_eq!(root["attributes"]["input.value"], "what were the sales in March?");
        for child in spans.iter().filter(|s| s["parent_id"] != "") {
            assert_eq!(child["parent_id"], root["span_id"]);
        }
    }

    // Filters and search.
    assert_eq!(runs(&ui, "?agent=json-agent").len(), 1);
    assert_eq!(runs(&ui, "?q=SALES%20in%20march").len(), 2);
    assert_eq!(runs(&ui, "?q=no-such-text").len(), 0);
    assert_eq!(runs(&ui, "?status=error").len(), 0);
    assert_eq!(runs(&ui, "?user=ada&session=session-7").len(), 2);
    let future = (std::time::SystemTime::now() + Duration::from_secs(3600))
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    assert_eq!(runs(&ui, &format!("?since_ms={future}")).len(), 0);

    // The receiver answers what it cannot read with an error, not a silent drop.
    let bad = client()
        .post(format!("{endpoint}/v1/traces"))
        .header("content-type", "application/x-protobuf")
        .body(vec![0xff, 0xff, 0xff])
        .send()
        .unwrap();
    assert_eq!(bad.status(), 400);
    let plain = client()
        .post(format!("{endpoint}/v1/traces"))
        .header("content-type", "text/plain")
        .body("{}")
        .send()
        .unwrap();
    assert_eq!(plain.status(), 415);
    ui.shutdown();
    let _ = std::fs::remove_dir_all(dir);
}

fn s(v: &str) -> Option<AnyValue> {
    Some(AnyValue {
        value: Some(any_value::Value::StringValue(v.to_owned())),
    })
}

/// One OTLP JSON line of a trace file with `spans` (name, span id byte, parent id byte or 0).
fn line(trace: u8, spans: &[(&str, u8, u8)]) -> String {
    line_at(trace, spans, waxell_ui_nanos() as u64)
}

fn line_at(trace: u8, spans: &[(&str, u8, u8)], now: u64) -> String {
    let request = ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans: spans
                    .iter()
                    .map(|(name, id, parent)| Span {
                        trace_id: vec![trace; 16],
                        span_id: vec![*id; 8],
                        parent_span_id: if *parent == 0 {
                            Vec::new()
                        } else {
                            vec![*parent; 8]
                        },
                        name: (*name).to_owned(),
                        start_time_unix_nano: now,
                        end_time_unix_nano: now + 1_000_000,
                        attributes: vec![PKeyValue {
                            key: "gen_ai.agent.name".into(),
                            value: s("file-agent"),
                            ..Default::default()
                        }],
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    serde_json::to_string(&request).unwrap() + "\n"
}

fn span_count(ui: &UiServer, trace: u8) -> Option<u64> {
    let id: String = std::iter::repeat_n(format!("{trace:02x}"), 16).collect();
    let response = client()
        .get(format!("{}/api/runs/{id}", ui.base_url()))
        .send()
        .unwrap();
    if response.status() == 404 {
        return None;
    }
    serde_json::from_str::<Value>(&response.text().unwrap()).unwrap()["run"]["spans"].as_u64()
}

#[test]
fn trace_files_are_imported_followed_and_kept_across_a_restart() {
    let dir = temp_dir("follow");
    let traces = dir.join("traces");
    std::fs::create_dir_all(&traces).unwrap();
    let file = traces.join("1-1.jsonl");
    std::fs::write(&file, line(0xa1, &[("step one", 2, 1)])).unwrap();

    let mut opts = options(&dir);
    opts.follow = vec![traces.clone()];
    opts.otlp = None;
    let ui = UiServer::start(opts.clone()).unwrap();
    assert!(ui.otlp_endpoint().is_none());
    eventually("the file's first span", || {
        span_count(&ui, 0xa1).filter(|n| *n == 1)
    });

    // Lines appended later are followed; a line still being written (no newline yet) waits.
    let mut f = std::fs::OpenOptions::new().append(true).open(&file).unwrap();
    let root = line(0xa1, &[("invoke_agent file-agent", 1, 0)]);
    f.write_all(root.as_bytes()).unwrap();
    let partial = line(0xa1, &[("step two", 3, 1)]);
    let (head, tail) = partial.split_at(partial.len() / 2);
    f.write_all(head.as_bytes()).unwrap();
    f.flush().unwrap();
    eventually("the appended root", || span_count(&ui, 0xa1).filter(|n| *n == 2));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(span_count(&ui, 0xa1), Some(2), "half a line is not read");
    f.write_all(tail.as_bytes()).unwrap();
    f.flush().unwrap();
    eventually("the completed line", || span_count(&ui, 0xa1).filter(|n| *n == 3));
    // A new file in the directory.
    std::fs::write(
        traces.join("2-2.jsonl"),
        line(0xb2, &[("invoke_agent other", 1, 0)]),
    )
    .unwrap();
    eventually("the second file", || span_count(&ui, 0xb2));
    let run = get_json(&format!("{}/api/runs/{}", ui.base_url(), "a1".repeat(16)));
    assert_eq!(run["run"]["status"], "ok");
    assert_eq!(run["run"]["name"], "invoke_agent file-agent");
    ui.shutdown();

    // Restarted on the same store and files: everything is there, nothing twice.
    let ui = UiServer::start(opts.clone()).unwrap();
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(span_count(&ui, 0xa1), Some(3));
    assert_eq!(span_count(&ui, 0xb2), Some(1));
    assert_eq!(runs(&ui, "").len(), 2);
    // Followed again after the restart.
    std::fs::OpenOptions::new()
        .append(true)
        .open(&file)
        .unwrap()
        .write_all(line(0xa1, &[("step three", 4, 1)]).as_bytes())
        .unwrap();
    eventually("a line written after the restart", || {
        span_count(&ui, 0xa1).filter(|n| *n == 4)
    });
    ui.shutdown();

    // Restarted without the files: the store alone still has them.
    opts.follow = Vec::new();
    let ui = UiServer::start(opts).unwrap();
    assert_eq!(span_count(&ui, 0xa1), Some(4));
    ui.shutdown();
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn runs_older_than_the_retention_are_deleted() {
    let dir = temp_dir("retention");
    let two_days_ago = waxell_ui_nanos() as u64 - 2 * 86_400 * 1_000_000_000;
    let old = line_at(0xc3, &[("invoke_agent old", 1, 0)], two_days_ago);
    std::fs::write(
        dir.join("old.jsonl"),
        old + &line(0xd4, &[("invoke_agent new", 1, 0)]),
    )
    .unwrap();
    let mut opts = options(&dir);
    opts.follow = vec![dir.join("old.jsonl")];
    opts.retention = Some(Duration::from_secs(86_400));
    let ui = UiServer::start(opts.clone()).unwrap();
    eventually("the recent run", || span_count(&ui, 0xd4));
    ui.shutdown();
    // The sweep runs when the UI starts (then every minute).
    let ui = UiServer::start(opts).unwrap();
    eventually("the old run deleted", || {
        span_count(&ui, 0xc3).is_none().then_some(())
    });
    assert_eq!(span_count(&ui, 0xd4), Some(1));
    ui.shutdown();
    let _ = std::fs::remove_dir_all(dir);
}

fn status(request: reqwest::blocking::RequestBuilder) -> u16 {
    request.send().unwrap().status().as_u16()
}

#[test]
fn loopback_needs_no_token_but_refuses_foreign_hosts_and_cross_site_requests() {
    let dir = temp_dir("loopback");
    let ui = UiServer::start(options(&dir)).unwrap();
    assert!(ui.token().is_none());
    let c = client();
    let api = format!("{}/api/runs", ui.base_url());
    assert_eq!(status(c.get(&api)), 200);
    assert_eq!(
        status(
            c.get(&api)
                .header("host", format!("localhost:{}", ui.addr().port()))
        ),
        200
    );
    // DNS rebinding: a page of another site that resolves its own name to 127.0.0.1.
    assert_eq!(status(c.get(&api).header("host", "evil.example:4320")), 403);
    assert_eq!(status(c.get(&api).header("sec-fetch-site", "cross-site")), 403);
    assert_eq!(status(c.get(&api).header("origin", "http://evil.example")), 403);
    assert_eq!(status(c.get(&api).header("sec-fetch-site", "same-origin")), 200);
    // A link from elsewhere may open a page, not call the API.
    let page = format!("{}/", ui.base_url());
    assert_eq!(
        status(
            c.get(&page)
                .header("sec-fetch-site", "cross-site")
                .header("sec-fetch-mode", "navigate")
        ),
        200
    );
    let response = c.get(&page).send().unwrap();
    let csp = response.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"),
        "{csp}"
    );

    // The receiver: exporters send neither Origin nor Sec-Fetch-Site; a web page does.
    let traces = format!("{}/v1/traces", ui.otlp_endpoint().unwrap());
    let json = |b: reqwest::blocking::RequestBuilder| b.header("content-type", "application/json").body("{}");
    assert_eq!(status(json(c.post(&traces))), 200);
    assert_eq!(
        status(json(c.post(&traces)).header("origin", "http://evil.example")),
        403
    );
    assert_eq!(
        status(json(c.post(&traces)).header("sec-fetch-site", "cross-site")),
        403
    );
    assert_eq!(status(json(c.post(&traces)).header("host", "evil.example")), 403);
    ui.shutdown();
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn any_other_address_needs_the_token_from_the_printed_url_then_a_cookie() {
    let dir = temp_dir("token");
    let mut opts = options(&dir);
    opts.listen = "0.0.0.0:0".parse().unwrap();
    opts.allowed_hosts = vec!["ui.example".into()];
    let ui = UiServer::start(opts).unwrap();
    let token = ui
        .token()
        .expect("a token is generated for a non-loopback address")
        .to_owned();
    assert!(token.len() >= 32);
    assert!(ui.url().ends_with(&format!("/?token={token}")), "{}", ui.url());
    let c = client();
    let base = ui.base_url();
    let api = format!("{base}/api/runs");
    assert_eq!(status(c.get(&api)), 401);
    assert_eq!(status(c.get(format!("{base}/"))), 401);
    assert_eq!(status(c.get(format!("{base}/?token=wrong"))), 401);

    let login = c.get(ui.url()).send().unwrap();
    assert_eq!(login.status(), 303);
    assert_eq!(login.headers()["location"], "/");
    let cookie = login.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let pair = cookie.split(';').next().unwrap().to_owned();
    assert_eq!(status(c.get(&api).header("cookie", &pair)), 200);
    assert_eq!(
        status(c.get(&api).header("authorization", format!("Bearer {token}"))),
        200
    );
    assert_eq!(
        status(c.get(&api).header("cookie", &pair).header("host", "ui.example")),
        200
    );
    assert_eq!(
        status(c.get(&api).header("cookie", &pair).header("host", "evil.example")),
        403
    );
    assert_eq!(
        status(
            c.get(&api)
                .header("cookie", &pair)
                .header("sec-fetch-site", "cross-site")
        ),
        403
    );

    // The receiver takes the token as a bearer header (OTEL_EXPORTER_OTLP_HEADERS).
    let traces = format!("{}/v1/traces", ui.otlp_endpoint().unwrap());
    let json = |b: reqwest::blocking::RequestBuilder| b.header("content-type", "application/json").body("{}");
    assert_eq!(status(json(c.post(&traces))), 401);
    assert_eq!(
        status(json(c.post(&traces)).header("authorization", format!("Bearer {token}"))),
        200
    );
    ui.shutdown();
    let _ = std::fs::remove_dir_all(dir);
}

#[cfg(feature = "grpc")]
#[test]
fn otlp_grpc_arrives_too() {
    use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
    let dir = temp_dir("grpc");
    let ui = UiServer::start(options(&dir)).unwrap();
    let endpoint = ui
        .otlp_grpc_endpoint()
        .expect("the gRPC receiver runs with the grpc feature");
    let request: ExportTraceServiceRequest = serde_json::from_str(&line(
        0xe5,
        &[("invoke_agent grpc-agent", 1, 0), ("chat m", 2, 1)],
    ))
    .unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut client = TraceServiceClient::connect(endpoint).await.unwrap();
        client.export(request).await.unwrap();
    });
    assert_eq!(span_count(&ui, 0xe5), Some(2));
    let run = get_json(&format!("{}/api/runs/{}", ui.base_url(), "e5".repeat(16)));
    assert_eq!(run["run"]["name"], "invoke_agent grpc-agent");
    ui.shutdown();
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_running_ui_is_found_for_links_to_its_runs() {
    let dir = temp_dir("links");
    let url_file = dir.join("url");
    let ui = UiServer::start(options(&dir)).unwrap();
    let trace = "ab".repeat(16);
    assert_eq!(
        waxell::export::ui_run_url_in(&url_file, &trace),
        Some(format!("{}/runs/{trace}", ui.base_url()))
    );
    ui.shutdown();
    assert!(!url_file.exists(), "the URL file goes when the UI stops");
    assert_eq!(waxell::export::ui_run_url_in(&url_file, &trace), None);
    // A stale file (a UI that died) names an address nobody listens on: no link.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = dead.local_addr().unwrap();
    drop(dead);
    std::fs::write(&url_file, format!("http://{addr}\n")).unwrap();
    assert_eq!(waxell::export::ui_run_url_in(&url_file, &trace), None);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_batch_sent_twice_is_stored_once_and_summed_once() {
    let dir = temp_dir("retry");
    let ui = UiServer::start(options(&dir)).unwrap();
    let traces = format!("{}/v1/traces", ui.otlp_endpoint().unwrap());
    let mut request: Value =
        serde_json::from_str(&line(0xf6, &[("invoke_agent retry", 1, 0), ("chat m", 2, 1)])).unwrap();
    // The chat span is a model call with tokens and cost.
    request["resourceSpans"][0]["scopeSpans"][0]["spans"][1]["attributes"] = serde_json::json!([
        { "key": "gen_ai.operation.name", "value": { "stringValue": "chat" } },
        { "key": "gen_ai.usage.input_tokens", "value": { "intValue": "7" } },
        { "key": "waxell.llm.cost", "value": { "doubleValue": 0.5 } },
    ]);
    for _ in 0..2 {
        let response = client()
            .post(&traces)
            .header("content-type", "application/json")
            .body(request.to_string())
            .send()
            .unwrap();
        assert_eq!(response.status(), 200);
    }
    let run = get_json(&format!("{}/api/runs/{}", ui.base_url(), "f6".repeat(16)));
    assert_eq!(run["run"]["spans"], 2);
    assert_eq!(run["run"]["input_tokens"], 7);
    assert_eq!(run["run"]["cost"], 0.5);
    assert_eq!(run["spans"].as_array().unwrap().len(), 2);
    ui.shutdown();
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn gzip_compressed_otlp_is_accepted_and_other_encodings_refused() {
    use std::io::Write as _;
    let dir = temp_dir("gzip");
    let ui = UiServer::start(options(&dir)).unwrap();
    let traces = format!("{}/v1/traces", ui.otlp_endpoint().unwrap());
    let body = line(0x97, &[("invoke_agent zipped", 1, 0)]);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(body.as_bytes()).unwrap();
    let zipped = gz.finish().unwrap();
    let post = |encoding: &str, bytes: Vec<u8>| {
        client()
            .post(&traces)
            .header("content-type", "application/json")
            .header("content-encoding", encoding)
            .body(bytes)
            .send()
            .unwrap()
            .status()
            .as_u16()
    };
    assert_eq!(post("gzip", zipped), 200);
    assert_eq!(span_count(&ui, 0x97), Some(1));
    assert_eq!(post("br", body.clone().into_bytes()), 415);
    assert_eq!(post("gzip", body.into_bytes()), 400, "a body that is not gzip");
    ui.shutdown();
    let _ = std::fs::remove_dir_all(dir);
}

/// OTLP spans stored straight from the decoded request come back exactly as when they are first turned into
/// `SpanRecord`s, with the same run summary: every value kind, events with a score, links, an error status,
/// a key given twice (the last wins).
#[test]
fn spans_stored_straight_from_otlp_match_their_records() {
    use opentelemetry_proto::tonic::common::v1::{ArrayValue, KeyValueList};
    use opentelemetry_proto::tonic::trace::v1::{span, Status};
    use prost::Message as _;
    let v = |value: any_value::Value| Some(AnyValue { value: Some(value) });
    let kv = |key: &str, value: Option<AnyValue>| PKeyValue {
        key: key.into(),
        value,
        ..Default::default()
    };
    let str_kv = |key: &str, s: &str| kv(key, v(any_value::Value::StringValue(s.into())));
    let root = Span {
        trace_id: vec![0xa7; 16],
        span_id: vec![1; 8],
        name: "invoke_agent both".into(),
        kind: 3,
        start_time_unix_nano: 1_700_000_000_000_000_000,
        end_time_unix_nano: 1_700_000_000_500_000_000,
        attributes: vec![
            str_kv("gen_ai.operation.name", "invoke_agent"),
            str_kv("gen_ai.agent.name", "first"),
            str_kv("gen_ai.agent.name", "both"),
            str_kv("input.value", "<b>Question?</b>"),
            str_kv("session.id", "s-1"),
            kv("flag", v(any_value::Value::BoolValue(true))),
            kv("ratio", v(any_value::Value::DoubleValue(0.25))),
            kv("nan", v(any_value::Value::DoubleValue(f64::NAN))),
            kv("raw", v(any_value::Value::BytesValue(b"bytes here".to_vec()))),
            kv("none", None),
            kv(
                "list",
                v(any_value::Value::ArrayValue(ArrayValue {
                    values: vec![
                        AnyValue {
                            value: Some(any_value::Value::IntValue(3)),
                        },
                        AnyValue {
                            value: Some(any_value::Value::StringValue("x".into())),
                        },
                    ],
                })),
            ),
            kv(
                "map",
                v(any_value::Value::KvlistValue(KeyValueList {
                    values: vec![str_kv("b", "2"), str_kv("a", "1"), str_kv("b", "3")],
                })),
            ),
        ],
        events: vec![span::Event {
            name: "gen_ai.evaluation.result".into(),
            time_unix_nano: 1_700_000_000_400_000_000,
            attributes: vec![
                str_kv("gen_ai.evaluation.name", "relevance"),
                kv(
                    "gen_ai.evaluation.score.value",
                    v(any_value::Value::DoubleValue(0.75)),
                ),
                str_kv("gen_ai.evaluation.score.label", "good"),
            ],
            ..Default::default()
        }],
        links: vec![span::Link {
            trace_id: vec![0xb8; 16],
            span_id: vec![2; 8],
            ..Default::default()
        }],
        status: Some(Status {
            message: "it failed".into(),
            code: 2,
        }),
        ..Default::default()
    };
    let chat = Span {
        trace_id: vec![0xa7; 16],
        span_id: vec![3; 8],
        parent_span_id: vec![1; 8],
        name: "chat m".into(),
        start_time_unix_nano: 1_700_000_000_100_000_000,
        end_time_unix_nano: 1_700_000_000_050_000_000,
        attributes: vec![
            str_kv("gen_ai.operation.name", "chat"),
            kv("gen_ai.usage.input_tokens", v(any_value::Value::IntValue(11))),
            kv("gen_ai.usage.output_tokens", v(any_value::Value::IntValue(4))),
            kv("waxell.llm.cost", v(any_value::Value::DoubleValue(0.125))),
            str_kv("output.value", "Answer"),
        ],
        ..Default::default()
    };
    let request = ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(opentelemetry_proto::tonic::resource::v1::Resource {
                attributes: vec![str_kv("service.name", "svc")],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                scope: Some(opentelemetry_proto::tonic::common::v1::InstrumentationScope {
                    name: "scope".into(),
                    ..Default::default()
                }),
                spans: vec![chat, root],
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    let dir = temp_dir("straight");
    let direct = waxell::ui::Store::open(&dir.join("direct.redb")).unwrap();
    let records = waxell::ui::Store::open(&dir.join("records.redb")).unwrap();
    assert_eq!(
        direct.ingest_otlp(std::slice::from_ref(&request), None).unwrap(),
        2
    );
    assert_eq!(
        records
            .ingest(&waxell::ui::model::spans_of(&request), None)
            .unwrap(),
        2
    );
    let trace = "a7".repeat(16);
    let (direct_run, direct_spans) = direct.run(&trace).unwrap().unwrap();
    let (record_run, record_spans) = records.run(&trace).unwrap().unwrap();
    assert_eq!(direct_spans, record_spans);
    assert_eq!(direct_run, record_run);
    assert_eq!(direct_run.agent, "both");
    assert_eq!(direct_run.status, "error");
    assert_eq!(direct_run.input_tokens, 11);
    assert_eq!(direct_run.cost, Some(0.125));
    assert_eq!(direct_run.scores["relevance"].value, Some(0.75));
    assert_eq!(
        direct_spans[0].attributes["map"],
        serde_json::json!({"a": "1", "b": "3"})
    );
    assert_eq!(direct_spans[0].attributes["nan"], "NaN");
    // The page's answer carries the stored spans as they are, in start order.
    let (_, json) = direct.run_json(&trace).unwrap().unwrap();
    let served: Vec<waxell::ui::SpanRecord> = serde_json::from_slice(&json).unwrap();
    assert_eq!(served, direct_spans);
    // A body that is not a trace request is refused whole, naming why.
    let cut = request.encode_to_vec();
    let refused = direct.ingest_protobuf(&cut[..cut.len() - 3]).unwrap_err();
    assert!(
        refused.to_string().contains("not an OTLP trace request"),
        "{refused}"
    );
    assert_eq!(direct.counts().unwrap()["spans"], 2);
    drop((direct, records));
    let _ = std::fs::remove_dir_all(dir);
}

/// An OTLP/HTTP protobuf body with `spans` (of one resource and scope).
fn protobuf_request(spans: Vec<Span>) -> Vec<u8> {
    use prost::Message as _;
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
    .encode_to_vec()
}

#[test]
fn a_run_sent_in_many_requests_among_other_runs_shows_every_span_in_order() {
    // Recent, so the retention the UI applies when it starts again keeps them.
    let base = waxell_ui_nanos() as u64 - 1_000_000_000;
    let span = |trace: u8, id: u64| Span {
        trace_id: vec![trace; 16],
        span_id: id.to_be_bytes().to_vec(),
        parent_span_id: if id == 1 {
            Vec::new()
        } else {
            1u64.to_be_bytes().to_vec()
        },
        name: format!("span {id}"),
        start_time_unix_nano: base + id * 1_000,
        end_time_unix_nano: base + id * 1_000 + 500,
        ..Default::default()
    };
    let body = protobuf_request;
    // Run c3's 60 spans in 6 requests, out of start order (request k has the ids ≡ k mod 6, last first),
    // each among spans of runs d4 and e5; the third request is sent twice, as a retried export is.
    let mut requests = Vec::new();
    for k in 0..6u64 {
        let mut spans: Vec<Span> = (1..=60)
            .filter(|id| id % 6 == k)
            .rev()
            .map(|id| span(0xc3, id))
            .collect();
        spans.insert(spans.len() / 2, span(0xd4, k + 1));
        spans.push(span(0xe5, k + 1));
        requests.push(body(spans));
    }
    requests.insert(3, requests[2].clone());
    let dir = temp_dir("many-requests");
    let ui = UiServer::start(options(&dir)).unwrap();
    let traces = format!("{}/v1/traces", ui.otlp_endpoint().unwrap());
    for request in requests {
        let response = client()
            .post(&traces)
            .header("content-type", "application/x-protobuf")
            .body(request)
            .send()
            .unwrap();
        assert_eq!(response.status(), 200);
    }
    let run = get_json(&format!("{}/api/runs/{}", ui.base_url(), "c3".repeat(16)));
    assert_eq!(run["run"]["spans"], 60);
    assert_eq!(run["run"]["name"], "span 1");
    let names: Vec<&str> = run["spans"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    let expected: Vec<String> = (1..=60).map(|id| format!("span {id}")).collect();
    assert_eq!(names, expected);
    for other in ["d4", "e5"] {
        let run = get_json(&format!("{}/api/runs/{}", ui.base_url(), other.repeat(16)));
        assert_eq!(run["run"]["spans"], 6, "run {other}");
        assert_eq!(run["spans"].as_array().unwrap().len(), 6, "run {other}");
    }
    let status = get_json(&format!("{}/api/status", ui.base_url()));
    assert_eq!(
        (status["runs"].as_u64(), status["spans"].as_u64()),
        (Some(3), Some(72))
    );
    // After a restart, the same.
    ui.shutdown();
    let ui = UiServer::start(options(&dir)).unwrap();
    let again = get_json(&format!("{}/api/runs/{}", ui.base_url(), "c3".repeat(16)));
    assert_eq!(again["spans"], run["spans"]);
    ui.shutdown();
    let _ = std::fs::remove_dir_all(dir);
}

/// The receiver answers once a request is queued for the store's writer: what it answered is read back at
/// once (a read waits for the writer), and is in the store after a stop that came right after the answers.
#[test]
fn answered_spans_are_read_back_at_once_and_kept_by_a_stop_right_after() {
    let base = waxell_ui_nanos() as u64 - 1_000_000_000;
    // Runs of 2,000 spans: the writer takes a while over each, so a read that did not wait would miss it.
    const SPANS: u64 = 2_000;
    let body = |trace: u8| {
        let spans = (1..=SPANS)
            .map(|id| Span {
                trace_id: vec![trace; 16],
                span_id: id.to_be_bytes().to_vec(),
                parent_span_id: if id == 1 {
                    Vec::new()
                } else {
                    1u64.to_be_bytes().to_vec()
                },
                name: format!("span {id}"),
                start_time_unix_nano: base + id,
                end_time_unix_nano: base + id + 10,
                ..Default::default()
            })
            .collect();
        protobuf_request(spans)
    };
    let dir = temp_dir("queued");
    let ui = UiServer::start(options(&dir)).unwrap();
    let traces = format!("{}/v1/traces", ui.otlp_endpoint().unwrap());
    let base_url = ui.base_url();
    // Four exporters at once, three runs each.
    std::thread::scope(|scope| {
        for exporter in 0..4u8 {
            let (traces, base_url) = (&traces, &base_url);
            scope.spawn(move || {
                let client = client();
                for i in 0..3u8 {
                    let trace = 0x10 + exporter * 10 + i;
                    let response = client
                        .post(traces)
                        .header("content-type", "application/x-protobuf")
                        .body(body(trace))
                        .send()
                        .unwrap();
                    assert_eq!(response.status(), 200);
                    let run = get_json(&format!(
                        "{base_url}/api/runs/{}",
                        format!("{trace:02x}").repeat(16)
                    ));
                    assert_eq!(
                        run["run"]["spans"], SPANS,
                        "run {trace:02x} read right after its answer"
                    );
                }
            });
        }
    });
    // The last ones again, with no read after them, then a stop at once.
    for trace in [0x10u8, 0x11] {
        let response = client()
            .post(&traces)
            .header("content-type", "application/x-protobuf")
            .body(body(trace + 0x80))
            .send()
            .unwrap();
        assert_eq!(response.status(), 200);
    }
    ui.shutdown();
    let ui = UiServer::start(options(&dir)).unwrap();
    let status = get_json(&format!("{}/api/status", ui.base_url()));
    assert_eq!(
        (status["runs"].as_u64(), status["spans"].as_u64()),
        (Some(14), Some(14 * SPANS))
    );
    ui.shutdown();
    let _ = std::fs::remove_dir_all(dir);
}
