//! `waxell ui` in a real browser: Debian's chromium, headless, loads the pages and the test reads the DOM it
//! built (`--dump-dom`). The demo's dry run shows its agents, tools, chart and scores; span content planted
//! with `<script>`, an `onerror` image and a `javascript:` link is shown as text and runs nothing; a run's
//! page open in chromium (driven through chromedriver's WebDriver API) shows spans as they arrive.
//!
//! Needs `chromium` and `chromedriver` (`scripts/setup.sh` installs both). Without it these tests are skipped with the reason,
//! unless `WAXELL_REQUIRE_BROWSER_TESTS=1` (set by `scripts/test.sh` as root) makes that a failure.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use waxell::ui::{RunFilter, UiOptions, UiServer};
use waxell_tests::browser::{chromium, dump_dom, dump_rendered_dom};

fn temp_dir(name: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let dir = std::env::temp_dir().join(format!("waxell-ui-browser-{name}-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn options(dir: &Path, follow: Vec<PathBuf>) -> UiOptions {
    UiOptions {
        listen: "127.0.0.1:0".parse().unwrap(),
        otlp: Some("127.0.0.1:0".parse().unwrap()),
        otlp_grpc: None,
        store: dir.join("store.redb"),
        follow,
        poll: Duration::from_millis(50),
        // The planted runs carry fixed timestamps of 2023: no retention sweep may delete them
        // while a slow test still reads them.
        retention: None,
        ..UiOptions::default()
    }
}

fn wait_for_root(ui: &UiServer) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (runs, _) = ui.store().runs(&RunFilter::default()).unwrap();
        if let Some(run) = runs.iter().find(|r| r.root_seen) {
            return run.trace_id.clone();
        }
        assert!(Instant::now() < deadline, "no complete run arrived");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn the_demo_run_shows_its_agents_tools_chart_and_scores() {
    let Some(browser) = chromium() else { return };
    let dir = temp_dir("demo");
    let traces = dir.join("traces");
    let output = Command::new(waxell_tests::bin_exe!("demos"))
        .args(["--dry-run", "--quiet", "--output-dir"])
        .arg(dir.join("out"))
        .current_dir(&dir)
        .env("WAXELL_TRACE_FILE", traces.join("demo.jsonl"))
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env_remove("WAXELL_OTEL_ENDPOINT")
        .env_remove("WAXELL_API_URL")
        .env_remove("WAXELL_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .output()
        .expect("the demo runs");
    assert!(
        output.status.success(),
        "demo failed\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );

    let ui = UiServer::start(options(&dir, vec![traces])).unwrap();
    let trace = wait_for_root(&ui);
    let (run, spans) = ui.store().run(&trace).unwrap().unwrap();
    assert_eq!(run.agent, "code-sandbox-agent");
    let chart_cell = spans
        .iter()
        .find(|s| {
            s.attributes
                .keys()
                .any(|k| k.starts_with("waxell.sandbox.result.") && k.ends_with(".png"))
        })
        .expect("a sandbox cell with the chart");

    // The run list: the run, its agents (the agent filter lists them), tokens and scores.
    let list = dump_dom(&browser, &format!("{}/", ui.base_url()));
    for text in [
        "invoke_agent code-sandbox-agent",
        ">code-sandbox-agent<",
        ">sandbox-runner<",
        ">sandbox-evaluator<",
        "execution_reliability: 1",
        "output_quality: 1",
        &format!("/runs/{trace}"),
    ] {
        assert!(list.contains(text), "run list lacks {text:?}\n{list}");
    }

    // The run page with the chart's cell open: the tree has the three agents and four tools, the header
    // the scores with their comments, the detail the code, its output and the chart as a PNG picture.
    let page = dump_dom(
        &browser,
        &format!("{}#span={}", ui.run_url(&trace), chart_cell.span_id),
    );
    for text in [
        "invoke_agent code-sandbox-agent",
        "invoke_agent sandbox-runner",
        "invoke_agent sandbox-evaluator",
        "execute_tool run_basic_code",
        "execute_tool run_statistics",
        "execute_tool run_error_test",
        "execute_tool analyze_sales",
        "chat gpt-4o-mini",
        "decide output_format",
        "reasoning execution_quality_assessment",
        "execution_reliability",
        "4/4 tasks behaved as intended",
        "first_attempt_success",
        "matplotlib",
        "Monthly sales analysis",
        "Charts and images",
    ] {
        assert!(page.contains(text), "run page lacks {text:?}\n{page}");
    }
    let rows = page.matches("role=\"treeitem\"").count();
    assert_eq!(rows, spans.len(), "one tree row per span");
    assert!(
        page.contains("<img class=\"picture\" alt=\"waxell.sandbox.result.1.png\" src=\"data:image/png;base64,iVBORw0KGgo")
            || page.contains("src=\"data:image/png;base64,iVBORw0KGgo"),
        "the chart is shown as a PNG picture\n{page}"
    );

    // The failed cell shows its error and traceback.
    let failed = spans
        .iter()
        .find(|s| {
            s.attributes
                .get("waxell.sandbox.error.name")
                .and_then(|v| v.as_str())
                == Some("KeyError")
        })
        .expect("the cell that raised KeyError");
    let page = dump_dom(
        &browser,
        &format!("{}#span={}", ui.run_url(&trace), failed.span_id),
    );
    assert!(
        page.contains("KeyError: 'Sales'") && page.contains("Traceback (most recent call last)"),
        "{page}"
    );

    // An LLM call shows its chat: roles, the tool call and the model, tokens and cost.
    let chat = spans
        .iter()
        .find(|s| s.name.starts_with("chat ") && s.attributes.contains_key("gen_ai.output.messages"))
        .unwrap();
    let page = dump_dom(&browser, &format!("{}#span={}", ui.run_url(&trace), chat.span_id));
    for text in [
        "Chat",
        ">system",
        ">user<",
        ">assistant",
        "gpt-4o-mini",
        " in / ",
        "$0.000",
    ] {
        assert!(page.contains(text), "chat view lacks {text:?}\n{page}");
    }
    ui.shutdown();
    let _ = std::fs::remove_dir_all(dir);
}

/// A loopback listener that counts every connection: where the planted payloads would report to.
fn canary() -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            counted.fetch_add(1, Ordering::SeqCst);
            let mut stream = stream;
            let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
            let mut buf = [0u8; 1024];
            let _ = stream.read(&mut buf);
            let _ = stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok");
        }
    });
    (url, hits)
}

fn post_json(endpoint: &str, body: &str) -> u16 {
    let addr = endpoint.trim_start_matches("http://");
    let mut stream = TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "POST /v1/traces HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

#[test]
fn planted_script_onerror_image_and_javascript_link_are_shown_as_text_and_never_run() {
    let Some(browser) = chromium() else { return };
    let (canary_url, hits) = canary();
    // Positive control: this browser does reach the canary when asked to.
    let _ = dump_dom(&browser, &format!("{canary_url}/control"));
    assert!(
        hits.load(Ordering::SeqCst) >= 1,
        "the canary is reachable from chromium"
    );
    hits.store(0, Ordering::SeqCst);

    let script = format!("<script>document.title='PWNED';fetch('{canary_url}/script')</script>");
    let img = format!("<img src=x onerror=\"document.title='PWNED';fetch('{canary_url}/img')\">");
    let link = format!("javascript:fetch('{canary_url}/link')");
    let svg = "PHN2ZyB4bWxucz0iaHR0cDovL3d3dy53My5vcmcvMjAwMC9zdmciIG9ubG9hZD0iYWxlcnQoMSkiLz4=";
    let s = |v: &str| serde_json::json!({ "stringValue": v });
    let kv = |k: &str, v: serde_json::Value| serde_json::json!({ "key": k, "value": v });
    let messages = serde_json::json!([
        { "role": "user", "parts": [{ "type": "text", "content": script }, { "type": "uri", "uri": link, "modality": "image" }] },
        { "role": "assistant", "parts": [
            { "type": "tool_call", "id": img, "name": script, "arguments": { "x": img } },
            { "type": "blob", "modality": "image", "mime_type": "image/svg+xml", "content": svg },
            { "type": "blob", "modality": "image", "mime_type": "image/png", "content": img },
        ] }
    ])
    .to_string();
    let trace = "5c".repeat(16);
    let span =
        |id: &str, parent: &str, name: &str, attributes: Vec<serde_json::Value>, extra: serde_json::Value| {
            let mut span = serde_json::json!({
                "traceId": trace, "spanId": id.repeat(8), "parentSpanId": parent, "name": name, "kind": 1,
                "startTimeUnixNano": "1700000000000000000", "endTimeUnixNano": "1700000001000000000",
                "attributes": attributes,
            });
            if let (Some(span), Some(extra)) = (span.as_object_mut(), extra.as_object()) {
                span.extend(extra.clone());
            }
            span
        };
    let root = "a1".repeat(8);
    let spans = vec![
        span(
            "a1",
            "",
            &format!("invoke_agent {script}"),
            vec![
                kv("gen_ai.operation.name", s("invoke_agent")),
                kv("gen_ai.agent.name", s(&script)),
                kv("openinference.span.kind", s("AGENT")),
                kv("input.value", s(&script)),
                kv("output.value", s(&img)),
                kv("session.id", s(&link)),
                kv("waxell.tag.link", s(&link)),
            ],
            serde_json::json!({ "events": [{ "name": "gen_ai.evaluation.result", "timeUnixNano": "1700000000500000000",
                "attributes": [kv("gen_ai.evaluation.name", s(&script)), kv("gen_ai.evaluation.score.value", serde_json::json!({ "doubleValue": 0.5 })),
                    kv("gen_ai.evaluation.explanation", s(&img))] }] }),
        ),
        span(
            "b2",
            &root,
            "chat evil",
            vec![
                kv("gen_ai.operation.name", s("chat")),
                kv("gen_ai.request.model", s(&img)),
                kv("gen_ai.input.messages", s(&messages)),
                kv("gen_ai.output.messages", s(&messages)),
                kv(
                    "gen_ai.system_instructions",
                    s(&serde_json::json!([{ "type": "text", "content": script }]).to_string()),
                ),
            ],
            serde_json::json!({}),
        ),
        span(
            "c3",
            &root,
            "execute_tool local.run_code",
            vec![
                kv("gen_ai.operation.name", s("execute_tool")),
                kv("waxell.sandbox.code_preview", s(&script)),
                kv("waxell.sandbox.stdout", s(&img)),
                kv("waxell.sandbox.stderr", s(&link)),
                kv("waxell.sandbox.error.name", s(&script)),
                kv("waxell.sandbox.error.traceback", s(&img)),
                kv(
                    "waxell.sandbox.result.0.png",
                    s(&format!("x\" onerror=\"fetch('{canary_url}/png')")),
                ),
                kv(
                    "gen_ai.tool.call.result",
                    s(&serde_json::json!({ "png": img, "image/svg+xml": svg }).to_string()),
                ),
            ],
            serde_json::json!({ "status": { "code": 2, "message": img } }),
        ),
        span(
            "d4",
            &root,
            "decide evil",
            vec![
                kv("gen_ai.operation.name", s("decide")),
                kv("waxell.decision.name", s(&script)),
                kv(
                    "waxell.decision.options",
                    serde_json::json!({ "arrayValue": { "values": [s(&script), s(&link)] } }),
                ),
                kv("waxell.decision.chosen", s(&link)),
                kv("waxell.decision.reasoning", s(&img)),
            ],
            serde_json::json!({}),
        ),
        span(
            "e5",
            &root,
            &img,
            vec![kv("url.full", s(&link)), kv(&script, s(&img))],
            serde_json::json!({ "events": [{ "name": "exception", "timeUnixNano": "1700000000600000000",
                "attributes": [kv("exception.type", s(&script)), kv("exception.message", s(&img)), kv("exception.stacktrace", s(&link))] }] }),
        ),
    ];
    let request = serde_json::json!({ "resourceSpans": [{ "resource": { "attributes": [kv("service.name", s(&script))] },
        "scopeSpans": [{ "scope": { "name": img }, "spans": spans }] }] })
    .to_string();

    let dir = temp_dir("xss");
    let ui = UiServer::start(options(&dir, Vec::new())).unwrap();
    assert_eq!(post_json(&ui.otlp_endpoint().unwrap(), &request), 200);
    assert_eq!(wait_for_root(&ui), trace);

    let mut pages = vec![
        format!("{}/", ui.base_url()),
        format!("{}/?q=script", ui.base_url()),
    ];
    for id in ["a1", "b2", "c3", "d4", "e5"] {
        pages.push(format!("{}#span={}", ui.run_url(&trace), id.repeat(8)));
    }
    for url in &pages {
        let dom = dump_rendered_dom(&browser, url, |dom| {
            dom.contains("&lt;script&gt;document.title='PWNED'")
        });
        let title = dom
            .split("<title>")
            .nth(1)
            .and_then(|t| t.split("</title>").next())
            .unwrap_or_default();
        assert_ne!(title.trim(), "PWNED", "a planted script ran on {url}");
        // The one script element is the app's own; no element got an event handler or a javascript: link.
        assert_eq!(dom.matches("<script").count(), 1, "{url}\n{dom}");
        // A parsed element is serialised with quoted attributes; the payloads' own text has `src=x`.
        assert!(
            !dom.contains("<img src=\"x\""),
            "an element with onerror on {url}\n{dom}"
        );
        assert!(
            !dom.contains("href=\"javascript:"),
            "a javascript: link on {url}\n{dom}"
        );
        assert!(
            !dom.contains("class=\"picture\""),
            "an image from untrusted data on {url}\n{dom}"
        );
        assert!(!dom.contains("data:image/svg"), "an SVG data URL on {url}\n{dom}");
        for href in dom.split("href=\"").skip(1) {
            assert!(
                href.starts_with('/'),
                "a link off the app on {url}: {}",
                &href[..href.len().min(60)]
            );
        }
        // And the payloads are there, as text.
        assert!(
            dom.contains("&lt;script&gt;document.title='PWNED'"),
            "{url}\n{dom}"
        );
    }
    let run_page = dump_dom(
        &browser,
        &format!("{}#span={}", ui.run_url(&trace), "b2".repeat(8)),
    );
    assert!(
        run_page.contains("&lt;img src=x onerror=\"document.title"),
        "{run_page}"
    );
    assert!(
        run_page.contains(&format!("javascript:fetch('{canary_url}/link')")),
        "{run_page}"
    );

    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "a planted payload reached the canary"
    );
    ui.shutdown();
    let _ = std::fs::remove_dir_all(dir);
}

/// A minimal HTTP/1.1 exchange on loopback (chromedriver's WebDriver API); the answer's JSON body.
fn http_json(addr: &str, method: &str, path: &str, body: Option<&serde_json::Value>) -> serde_json::Value {
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let mut stream = TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    // chromedriver may keep the connection open: read the head, then exactly the body it announces.
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut response = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let n = stream.read(&mut buf).unwrap_or(0);
        if n == 0 {
            break;
        }
        response.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&response);
        if let Some((head, rest)) = text.split_once("\r\n\r\n") {
            let length = head.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.trim()
                    .eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse::<usize>().ok())?
            });
            if length.is_some_and(|len| rest.len() >= len) {
                break;
            }
        }
    }
    let text = String::from_utf8_lossy(&response);
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let body = if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        let mut out = String::new();
        let mut rest = rest;
        while let Some((size, tail)) = rest.split_once("\r\n") {
            let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
            if n == 0 {
                break;
            }
            out.push_str(&tail[..n]);
            rest = &tail[n + 2..];
        }
        out
    } else {
        rest.to_owned()
    };
    serde_json::from_str(&body).unwrap_or(serde_json::Value::Null)
}

fn otlp_line(trace: &str, spans: &[(&str, &str, &str)]) -> String {
    let spans: Vec<serde_json::Value> = spans
        .iter()
        .map(|(id, parent, name)| {
            serde_json::json!({ "traceId": trace, "spanId": id.repeat(8), "parentSpanId": parent, "name": name, "kind": 1,
                "startTimeUnixNano": "1700000000000000000", "endTimeUnixNano": "1700000001000000000" })
        })
        .collect();
    serde_json::json!({ "resourceSpans": [{ "scopeSpans": [{ "spans": spans }] }] }).to_string()
}

#[test]
fn a_run_page_shows_spans_as_they_arrive() {
    let Some(browser) = chromium() else { return };
    let Some(driver) = browser
        .parent()
        .map(|d| d.join("chromedriver"))
        .filter(|p| p.is_file())
    else {
        let why = "chromedriver is not installed: run scripts/setup.sh (apt-get install chromium-driver)";
        assert!(
            std::env::var("WAXELL_REQUIRE_BROWSER_TESTS").as_deref() != Ok("1"),
            "WAXELL_REQUIRE_BROWSER_TESTS=1 but {why}"
        );
        eprintln!("skipped: {why}");
        return;
    };
    let dir = temp_dir("live");
    let ui = UiServer::start(options(&dir, Vec::new())).unwrap();
    let endpoint = ui.otlp_endpoint().unwrap();
    let trace = "1e".repeat(16);

    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut chromedriver = Command::new(&driver)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromedriver starts");
    let addr = format!("127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(&addr).is_err() {
        assert!(Instant::now() < deadline, "chromedriver did not listen");
        std::thread::sleep(Duration::from_millis(100));
    }
    let profile = temp_dir("live-profile");
    let session = http_json(
        &addr,
        "POST",
        "/session",
        Some(
            &serde_json::json!({ "capabilities": { "alwaysMatch": { "goog:chromeOptions": {
            "binary": browser,
            "args": ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
                format!("--user-data-dir={}", profile.display())],
        } } } }),
        ),
    );
    let id = session["value"]["sessionId"]
        .as_str()
        .expect("a WebDriver session")
        .to_owned();
    let rows = || {
        http_json(
            &addr,
            "POST",
            &format!("/session/{id}/execute/sync"),
            Some(&serde_json::json!({ "script": "return document.querySelectorAll('[role=treeitem]').length", "args": [] })),
        )["value"]
            .as_u64()
            .unwrap_or(0)
    };
    let wait_rows = |n: u64| {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let now = rows();
            if now == n {
                return;
            }
            assert!(Instant::now() < deadline, "the page shows {now} spans, not {n}");
            std::thread::sleep(Duration::from_millis(200));
        }
    };

    // The page is open before the run exists; the spans of a running agent then arrive in two batches.
    http_json(
        &addr,
        "POST",
        &format!("/session/{id}/url"),
        Some(&serde_json::json!({ "url": ui.run_url(&trace) })),
    );
    assert_eq!(rows(), 0);
    assert_eq!(
        post_json(
            &endpoint,
            &otlp_line(&trace, &[("b1", &"a1".repeat(8), "execute_tool first")])
        ),
        200
    );
    wait_rows(1);
    assert_eq!(
        post_json(
            &endpoint,
            &otlp_line(
                &trace,
                &[
                    ("c1", &"a1".repeat(8), "execute_tool second"),
                    ("a1", "", "invoke_agent live")
                ]
            )
        ),
        200
    );
    wait_rows(3);
    let text = http_json(
        &addr,
        "POST",
        &format!("/session/{id}/execute/sync"),
        Some(&serde_json::json!({ "script": "return document.body.innerText", "args": [] })),
    )["value"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        text.contains("invoke_agent live") && text.contains("execute_tool second"),
        "{text}"
    );

    http_json(&addr, "DELETE", &format!("/session/{id}"), None);
    let _ = chromedriver.kill();
    let _ = chromedriver.wait();
    ui.shutdown();
    let _ = std::fs::remove_dir_all(dir);
    let _ = std::fs::remove_dir_all(profile);
}
