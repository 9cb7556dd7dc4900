//! `waxell-sandbox serve` closed by default and bounded: the API key, the `Host` and origin checks,
//! per-sandbox tokens, and every resource a client controls (connections, header and body time,
//! JSON size, listings, a client that never reads its stream). Each test would pass against an
//! open or unbounded server only if the server were fixed.

mod e2b_support;

use std::time::{Duration, Instant};

use e2b_support::start_server;
use reqwest::{Client, StatusCode};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use waxell_sandbox::server::ServerConfig;

/// A sandbox created over the control plane, with its tokens.
struct Created {
    id: String,
    envd_token: String,
    traffic_token: String,
}

async fn create(http: &Client, url: &str, key: Option<&str>) -> Created {
    let mut request = http
        .post(format!("{url}/v2/sandboxes"))
        .json(&json!({"templateID": "code-interpreter-v1", "timeout": 120}));
    if let Some(key) = key {
        request = request.header("X-API-KEY", key);
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let body: Value = response.json().await.unwrap();
    Created {
        id: body["sandboxID"].as_str().unwrap().into(),
        envd_token: body["envdAccessToken"].as_str().expect("an envd token").into(),
        traffic_token: body["trafficAccessToken"]
            .as_str()
            .expect("a traffic token")
            .into(),
    }
}

fn data(
    http: &Client,
    url: &str,
    id: &str,
    port: u16,
    method: reqwest::Method,
    path: &str,
) -> reqwest::RequestBuilder {
    http.request(method, format!("{url}{path}"))
        .header("E2b-Sandbox-Id", id)
        .header("E2b-Sandbox-Port", port.to_string())
}

fn host_port(url: &str) -> String {
    url.trim_start_matches("http://").to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_config_requires_the_key_it_made_up() {
    let config = ServerConfig::new();
    let key = config.api_key().expect("a key by default").to_owned();
    assert!(
        key.starts_with("e2b_") && key.len() == 44 && key[4..].chars().all(|c| c.is_ascii_hexdigit()),
        "{key}"
    );
    assert_ne!(
        ServerConfig::new().api_key(),
        Some(key.as_str()),
        "random per config"
    );
    let url = start_server(config).await;
    let http = Client::new();
    for request in [
        http.post(format!("{url}/v2/sandboxes")).json(&json!({})),
        http.get(format!("{url}/v2/sandboxes")),
        http.get(format!("{url}/v2/sandboxes"))
            .header("X-API-KEY", "e2b_0"),
    ] {
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    }
    let list = http
        .get(format!("{url}/v2/sandboxes"))
        .header("X-API-KEY", &key)
        .send()
        .await
        .unwrap();
    assert_eq!(list.status(), StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_host_names_and_browser_origins_are_refused() {
    let config = ServerConfig::new()
        .without_auth()
        .allow_origin("http://localhost:8888");
    let url = start_server(config).await;
    let port = url.rsplit(':').next().unwrap().to_owned();
    let http = Client::new();
    let list = |host: &str| {
        http.get(format!("{url}/v2/sandboxes"))
            .header("Host", host.to_owned())
    };
    // DNS rebinding: a page at evil.example whose name now resolves to 127.0.0.1.
    for host in [
        format!("evil.example:{port}"),
        "evil.example".to_owned(),
        format!("127.0.0.1.nip.io:{port}"),
    ] {
        let response = list(&host).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::FORBIDDEN, "Host {host}");
        let body: Value = response.json().await.unwrap();
        assert!(
            body["message"].as_str().unwrap().contains("--allowed-host"),
            "{body}"
        );
    }
    for host in [
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        format!("[::1]:{port}"),
    ] {
        assert_eq!(
            list(&host).send().await.unwrap().status(),
            StatusCode::OK,
            "Host {host}"
        );
    }
    // A page on another site: with its Origin, or only the browser's Sec-Fetch-Site.
    let from_page = http
        .post(format!("{url}/v2/sandboxes"))
        .header("Origin", "https://evil.example")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(from_page.status(), StatusCode::FORBIDDEN);
    let no_cors = http
        .get(format!("{url}/v2/sandboxes"))
        .header("Sec-Fetch-Site", "cross-site")
        .send()
        .await
        .unwrap();
    assert_eq!(no_cors.status(), StatusCode::FORBIDDEN);
    let null_origin = http
        .get(format!("{url}/v2/sandboxes"))
        .header("Origin", "null")
        .send()
        .await
        .unwrap();
    assert_eq!(null_origin.status(), StatusCode::FORBIDDEN);
    // The one allowed origin passes.
    let allowed = http
        .get(format!("{url}/v2/sandboxes"))
        .header("Origin", "http://localhost:8888")
        .header("Sec-Fetch-Site", "same-site")
        .send()
        .await
        .unwrap();
    assert_eq!(allowed.status(), StatusCode::OK);
    // Data-plane routes are behind the same checks.
    let health = http
        .get(format!("{url}/health"))
        .header("Host", format!("evil.example:{port}"))
        .header("E2b-Sandbox-Id", "x")
        .header("E2b-Sandbox-Port", "49983")
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), StatusCode::FORBIDDEN);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_sandboxs_tokens_do_not_drive_another() {
    // Even without auth on the control plane, each sandbox has its own data-plane tokens.
    let url = start_server(ServerConfig::new().without_auth()).await;
    let http = Client::new();
    let a = create(&http, &url, None).await;
    let b = create(&http, &url, None).await;
    assert_ne!(a.envd_token, b.envd_token);
    let execute = |target: &Created, with: &Created, envd: bool| {
        let mut request = data(&http, &url, &target.id, 49999, reqwest::Method::POST, "/execute")
            .header("E2B-Traffic-Access-Token", &with.traffic_token)
            .json(&json!({"code": "1 + 1"}));
        if envd {
            request = request.header("X-Access-Token", &with.envd_token);
        }
        request
    };
    // A's tokens on B: refused on /execute, files and contexts.
    assert_eq!(
        execute(&b, &a, true).send().await.unwrap().status(),
        StatusCode::UNAUTHORIZED
    );
    let file = data(&http, &url, &b.id, 49983, reqwest::Method::GET, "/files?path=x")
        .header("X-Access-Token", &a.envd_token)
        .send()
        .await
        .unwrap();
    assert_eq!(file.status(), StatusCode::UNAUTHORIZED);
    let contexts = data(&http, &url, &b.id, 49999, reqwest::Method::GET, "/contexts")
        .header("E2B-Traffic-Access-Token", &a.traffic_token)
        .send()
        .await
        .unwrap();
    assert_eq!(contexts.status(), StatusCode::UNAUTHORIZED);
    // /execute runs code: the traffic token alone is not enough, it needs the envd token too.
    let without_envd = execute(&b, &b, false).send().await.unwrap();
    assert_eq!(without_envd.status(), StatusCode::UNAUTHORIZED);
    let message = without_envd.text().await.unwrap();
    assert!(message.contains("x-access-token"), "{message}");
    // B's own tokens work.
    let text = execute(&b, &b, true).send().await.unwrap().text().await.unwrap();
    assert!(
        text.contains("end_of_execution") && text.contains("\"2\""),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_debug_sandbox_is_not_served_with_auth_on() {
    let url = start_server(ServerConfig::new().with_debug_sandbox(true)).await;
    let response = data(
        &Client::new(),
        &url,
        "debug_sandbox_id",
        49999,
        reqwest::Method::POST,
        "/execute",
    )
    .json(&json!({"code": "1"}))
    .send()
    .await
    .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert!(response.text().await.unwrap().contains("--no-auth"));
}

/// Read until the server closes the connection (or `limit` passes); returns what arrived.
async fn read_until_closed(stream: &mut TcpStream, limit: Duration) -> Option<Vec<u8>> {
    let mut received = Vec::new();
    let mut buf = [0u8; 65536];
    let deadline = Instant::now() + limit;
    loop {
        let left = deadline.checked_duration_since(Instant::now())?;
        match tokio::time::timeout(left, stream.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(received),
            Ok(Ok(n)) => received.extend_from_slice(&buf[..n]),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_headers_and_idle_connections_are_cut() {
    let config = ServerConfig::new()
        .with_header_timeout(Duration::from_millis(500))
        .with_body_timeout(Duration::from_millis(500));
    let url = start_server(config).await;
    let address = host_port(&url);

    // Headers that never end: closed.
    let mut slow = TcpStream::connect(&address).await.unwrap();
    slow.write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\n")
        .await
        .unwrap();
    let started = Instant::now();
    assert!(
        read_until_closed(&mut slow, Duration::from_secs(10))
            .await
            .is_some(),
        "a connection that never finishes its headers is closed"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );

    // A connection that never sends anything: closed too.
    let mut idle = TcpStream::connect(&address).await.unwrap();
    assert!(read_until_closed(&mut idle, Duration::from_secs(10))
        .await
        .is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_body_gets_408() {
    let config = ServerConfig::new()
        .without_auth()
        .with_body_timeout(Duration::from_millis(500));
    let url = start_server(config).await;
    let mut stalled = TcpStream::connect(host_port(&url)).await.unwrap();
    stalled
        .write_all(
            b"POST /v2/sandboxes HTTP/1.1\r\nHost: localhost\r\ncontent-type: application/json\r\n\
              content-length: 100\r\n\r\n{\"templateID\":",
        )
        .await
        .unwrap();
    let answer = read_until_closed(&mut stalled, Duration::from_secs(10))
        .await
        .expect("answered and closed");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("did not arrive within"), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_cap_are_told_503() {
    let url = start_server(ServerConfig::new().with_max_connections(2)).await;
    let address = host_port(&url);
    let _first = TcpStream::connect(&address).await.unwrap();
    let _second = TcpStream::connect(&address).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut third = TcpStream::connect(&address).await.unwrap();
    let answer = read_until_closed(&mut third, Duration::from_secs(10))
        .await
        .expect("closed at once");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("too many open connections"), "{answer}");
    drop((_first, _second));
    // Slots free up when connections close.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let health = Client::new().get(format!("{url}/health")).send().await.unwrap();
    assert_eq!(health.status(), StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_bodies_are_capped_below_uploads() {
    let url = start_server(ServerConfig::new().without_auth().with_max_json_bytes(1024)).await;
    let http = Client::new();
    let sandbox = create(&http, &url, None).await;
    let big_code = json!({"code": format!("x = '{}'", "a".repeat(4096))});
    let response = data(&http, &url, &sandbox.id, 49999, reqwest::Method::POST, "/execute")
        .header("X-Access-Token", &sandbox.envd_token)
        .header("E2B-Traffic-Access-Token", &sandbox.traffic_token)
        .json(&big_code)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    // An upload of the same size is fine: uploads have their own, larger cap.
    let upload = data(
        &http,
        &url,
        &sandbox.id,
        49983,
        reqwest::Method::POST,
        "/files?path=big.txt",
    )
    .header("X-Access-Token", &sandbox.envd_token)
    .header("content-type", "application/octet-stream")
    .body(vec![b'a'; 4096])
    .send()
    .await
    .unwrap();
    assert_eq!(upload.status(), StatusCode::OK);
    // A multipart upload over the upload cap is refused while it streams in.
    let url2 = start_server(ServerConfig::new().without_auth().with_max_body_bytes(8192)).await;
    let sandbox2 = create(&http, &url2, None).await;
    let mut body = b"--XX\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f\"\r\n\r\n".to_vec();
    body.extend_from_slice(&vec![b'x'; 20_000]);
    body.extend_from_slice(b"\r\n--XX--\r\n");
    let response = data(
        &http,
        &url2,
        &sandbox2.id,
        49983,
        reqwest::Method::POST,
        "/files?path=f",
    )
    .header("X-Access-Token", &sandbox2.envd_token)
    .header("content-type", "multipart/form-data; boundary=XX")
    .body(body)
    .send()
    .await
    .unwrap();
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listings_and_stat_are_capped() {
    let url = start_server(ServerConfig::new().without_auth().with_max_list_entries(50)).await;
    let http = Client::new();
    let sandbox = create(&http, &url, None).await;
    let run = data(&http, &url, &sandbox.id, 49999, reqwest::Method::POST, "/execute")
        .header("X-Access-Token", &sandbox.envd_token)
        .header("E2B-Traffic-Access-Token", &sandbox.traffic_token)
        .json(&json!({"code": "import os\nos.makedirs('many/sub')\nfor i in range(100):\n    open(f'many/f{i}', 'w').close()\nopen('many/sub/x', 'w').close()"}))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(!run.contains("\"error\""), "{run}");
    let rpc = |method: &str, body: Value| {
        data(
            &http,
            &url,
            &sandbox.id,
            49983,
            reqwest::Method::POST,
            &format!("/filesystem.Filesystem/{method}"),
        )
        .header("X-Access-Token", &sandbox.envd_token)
        .header("Connect-Protocol-Version", "1")
        .json(&body)
        .send()
    };
    for (method, body) in [
        ("ListDir", json!({"path": "many", "depth": 1})),
        ("ListDir", json!({"path": "/home/user", "depth": 8})),
        ("Stat", json!({"path": "many/f1"})),
    ] {
        let response = rpc(method, body.clone()).await.unwrap();
        assert_eq!(
            response.status(),
            StatusCode::PAYLOAD_TOO_LARGE,
            "{method} {body}"
        );
        let error: Value = response.json().await.unwrap();
        assert_eq!(error["code"], "resource_exhausted", "{error}");
        assert!(
            error["message"]
                .as_str()
                .unwrap()
                .contains("more than 50 entries"),
            "{error}"
        );
    }
    // Small listings still work.
    let small = rpc("ListDir", json!({"path": "many/sub", "depth": 1}))
        .await
        .unwrap();
    assert_eq!(small.status(), StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_is_dropped() {
    let config = ServerConfig::new()
        .without_auth()
        .with_write_timeout(Duration::from_secs(1));
    let url = start_server(config).await;
    let http = Client::new();
    let sandbox = create(&http, &url, None).await;
    // 48 MiB: more than the loopback socket buffers of both ends hold.
    const SIZE: usize = 48 << 20;
    let made = data(&http, &url, &sandbox.id, 49999, reqwest::Method::POST, "/execute")
        .header("X-Access-Token", &sandbox.envd_token)
        .header("E2B-Traffic-Access-Token", &sandbox.traffic_token)
        .json(&json!({"code": format!("open('big.bin', 'wb').write(b'x' * {SIZE})")}))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(made.contains(&SIZE.to_string()), "{made}");
    // Ask for it by hand and read nothing for a while.
    let mut stream = TcpStream::connect(host_port(&url)).await.unwrap();
    let request = format!(
        "GET /files?path=big.bin HTTP/1.1\r\nHost: localhost\r\ne2b-sandbox-id: {}\r\n\
         e2b-sandbox-port: 49983\r\nx-access-token: {}\r\n\r\n",
        sandbox.id, sandbox.envd_token
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_secs(4)).await;
    // The server gave up on it: the socket holds part of the file, then the connection ends.
    let received = read_until_closed(&mut stream, Duration::from_secs(20))
        .await
        .expect("the server closed the connection");
    let text = String::from_utf8_lossy(&received[..received.len().min(64)]);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(
        received.len() < SIZE,
        "{} bytes arrived: the transfer was cut",
        received.len()
    );
    // The server still serves others.
    let health = http.get(format!("{url}/health")).send().await.unwrap();
    assert_eq!(health.status(), StatusCode::OK);
}
