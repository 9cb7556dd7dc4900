//! `waxell-sandbox serve` at the HTTP level: bad input gets a JSON error with the right status and
//! never takes the server down; routing, tokens, debug mode and the envd APIs.

mod e2b_support;

use std::io::Write;

use e2b_support::{start_server, API_KEY};
use reqwest::{Client, Method, RequestBuilder, StatusCode};
use serde_json::{json, Value};
use waxell_sandbox::server::ServerConfig;

const LIMIT: usize = 64 * 1024;

struct Peer {
    url: String,
    http: Client,
}

/// A sandbox created over the control plane, with its tokens.
struct Created {
    id: String,
    envd_token: String,
    traffic_token: String,
}

impl Peer {
    async fn start(config: ServerConfig) -> Self {
        Self {
            url: start_server(config).await,
            http: Client::new(),
        }
    }

    fn control(&self, method: Method, path: &str) -> RequestBuilder {
        self.http
            .request(method, format!("{}{path}", self.url))
            .header("X-API-KEY", API_KEY)
    }

    fn data(&self, method: Method, sandbox: &Created, port: u16, path: &str) -> RequestBuilder {
        self.http
            .request(method, format!("{}{path}", self.url))
            .header("E2b-Sandbox-Id", &sandbox.id)
            .header("E2b-Sandbox-Port", port.to_string())
            .header("X-Access-Token", &sandbox.envd_token)
            .header("E2B-Traffic-Access-Token", &sandbox.traffic_token)
    }

    async fn create(&self) -> Created {
        let response = self
            .control(Method::POST, "/v2/sandboxes")
            .json(&json!({"templateID": "code-interpreter-v1", "timeout": 120}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::CREATED);
        let body: Value = response.json().await.unwrap();
        for field in ["templateID", "sandboxID", "clientID", "envdVersion"] {
            assert!(
                body.get(field).is_some_and(|v| v.is_string()),
                "{field} in {body}"
            );
        }
        Created {
            id: body["sandboxID"].as_str().unwrap().into(),
            envd_token: body["envdAccessToken"].as_str().unwrap().into(),
            traffic_token: body["trafficAccessToken"].as_str().unwrap().into(),
        }
    }

    async fn alive(&self) {
        let health = self
            .http
            .get(format!("{}/health", self.url))
            .send()
            .await
            .unwrap();
        assert_eq!(health.status(), StatusCode::OK, "the server is still up");
    }
}

/// Send, expect `status` and a JSON error body; returns the body.
async fn expect_error(request: RequestBuilder, status: StatusCode) -> Value {
    let response = request.send().await.unwrap();
    let got = response.status();
    let text = response.text().await.unwrap();
    assert_eq!(got, status, "{text}");
    let body: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    assert!(body.get("message").is_some_and(Value::is_string), "{body}");
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_plane_rejects_bad_input_with_json_errors() {
    let peer = Peer::start(e2b_support::server_config().with_max_body_bytes(LIMIT)).await;
    let body = expect_error(
        peer.control(Method::POST, "/v2/sandboxes").body("{not json"),
        StatusCode::BAD_REQUEST,
    )
    .await;
    assert_eq!(body["code"], 400);
    expect_error(
        peer.control(Method::POST, "/v2/sandboxes")
            .body(vec![b' '; LIMIT + 1]),
        StatusCode::PAYLOAD_TOO_LARGE,
    )
    .await;
    expect_error(
        peer.control(Method::POST, "/sandboxes")
            .json(&json!({"timeout": 0})),
        StatusCode::BAD_REQUEST,
    )
    .await;
    expect_error(
        peer.http
            .post(format!("{}/v2/sandboxes", peer.url))
            .json(&json!({})),
        StatusCode::UNAUTHORIZED,
    )
    .await;
    let missing = expect_error(
        peer.control(Method::GET, "/sandboxes/doesnotexist"),
        StatusCode::NOT_FOUND,
    )
    .await;
    assert!(
        missing["message"].as_str().unwrap().contains("doesn't exist"),
        "{missing}"
    );
    expect_error(
        peer.control(Method::DELETE, "/sandboxes/doesnotexist"),
        StatusCode::NOT_FOUND,
    )
    .await;
    expect_error(
        peer.control(Method::PUT, "/v2/sandboxes"),
        StatusCode::METHOD_NOT_ALLOWED,
    )
    .await;
    expect_error(peer.control(Method::GET, "/nowhere"), StatusCode::NOT_FOUND).await;

    // v1 create, detail, list, timeout, kill.
    let created = peer.create().await;
    let detail: Value = peer
        .control(Method::GET, &format!("/sandboxes/{}", created.id))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    for field in [
        "startedAt",
        "endAt",
        "state",
        "cpuCount",
        "memoryMB",
        "envdVersion",
    ] {
        assert!(detail.get(field).is_some(), "{field} in {detail}");
    }
    let list: Value = peer
        .control(Method::GET, "/v2/sandboxes")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(list
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s["sandboxID"] == created.id.as_str()));
    let timeout = peer
        .control(Method::POST, &format!("/sandboxes/{}/timeout", created.id))
        .json(&json!({"timeout": 30}))
        .send()
        .await
        .unwrap();
    assert_eq!(timeout.status(), StatusCode::NO_CONTENT);
    let kill = peer
        .control(Method::DELETE, &format!("/sandboxes/{}", created.id))
        .send()
        .await
        .unwrap();
    assert_eq!(kill.status(), StatusCode::NO_CONTENT);
    peer.alive().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_plane_routing_tokens_and_bad_input() {
    let peer = Peer::start(e2b_support::server_config().with_max_body_bytes(LIMIT)).await;
    let sandbox = peer.create().await;

    // Unknown sandbox: E2B's proxy answer.
    let ghost = Created {
        id: "ghost".into(),
        envd_token: String::new(),
        traffic_token: String::new(),
    };
    let body = expect_error(
        peer.data(Method::GET, &ghost, 49983, "/health"),
        StatusCode::BAD_GATEWAY,
    )
    .await;
    assert_eq!(body["sandboxId"], "ghost");
    assert!(body["message"].as_str().unwrap().contains("was not found"));
    // Routing headers.
    expect_error(
        peer.http
            .post(format!("{}/execute", peer.url))
            .header("E2b-Sandbox-Port", "49999"),
        StatusCode::BAD_REQUEST,
    )
    .await;
    expect_error(
        peer.http
            .get(format!("{}/health", peer.url))
            .header("E2b-Sandbox-Id", &sandbox.id)
            .header("E2b-Sandbox-Port", "nope"),
        StatusCode::BAD_REQUEST,
    )
    .await;
    expect_error(
        peer.data(Method::GET, &sandbox, 8080, "/"),
        StatusCode::BAD_GATEWAY,
    )
    .await;
    // Tokens.
    let no_token = peer
        .http
        .get(format!("{}/files?path=x", peer.url))
        .header("E2b-Sandbox-Id", &sandbox.id)
        .header("E2b-Sandbox-Port", "49983");
    expect_error(no_token, StatusCode::UNAUTHORIZED).await;
    let no_traffic = peer
        .http
        .get(format!("{}/contexts", peer.url))
        .header("E2b-Sandbox-Id", &sandbox.id)
        .header("E2b-Sandbox-Port", "49999");
    expect_error(no_traffic, StatusCode::UNAUTHORIZED).await;

    // /execute input.
    expect_error(
        peer.data(Method::POST, &sandbox, 49999, "/execute")
            .body("{\"code\": 1"),
        StatusCode::BAD_REQUEST,
    )
    .await;
    expect_error(
        peer.data(Method::POST, &sandbox, 49999, "/execute")
            .json(&json!({"code": "x" .repeat(LIMIT + 1)})),
        StatusCode::PAYLOAD_TOO_LARGE,
    )
    .await;
    let unknown = expect_error(
        peer.data(Method::POST, &sandbox, 49999, "/execute")
            .json(&json!({"code": "1", "context_id": "nope"})),
        StatusCode::NOT_FOUND,
    )
    .await;
    assert_eq!(unknown["message"], "Context nope not found");
    expect_error(
        peer.data(Method::POST, &sandbox, 49999, "/execute")
            .json(&json!({"code": "1", "context_id": "default", "language": "python"})),
        StatusCode::BAD_REQUEST,
    )
    .await;
    expect_error(
        peer.data(Method::POST, &sandbox, 49999, "/contexts/nope/restart"),
        StatusCode::NOT_FOUND,
    )
    .await;
    expect_error(
        peer.data(Method::DELETE, &sandbox, 49999, "/contexts/nope"),
        StatusCode::NOT_FOUND,
    )
    .await;

    // A good /execute: NDJSON, end_of_execution last.
    let text = peer
        .data(Method::POST, &sandbox, 49999, "/execute")
        .json(&json!({"code": "print('a')\n21 * 2"}))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    // Keepalives may come anywhere (a fresh kernel may still be importing IPython).
    let types: Vec<&str> = lines
        .iter()
        .map(|l| l["type"].as_str().unwrap())
        .filter(|t| *t != "keepalive")
        .collect();
    assert_eq!(
        types,
        ["stdout", "result", "number_of_executions", "end_of_execution"],
        "{text}"
    );
    let result = lines.iter().find(|l| l["type"] == "result").unwrap();
    assert_eq!(
        (&result["text"], &result["is_main_result"]),
        (&json!("42"), &json!(true))
    );

    // Files: raw, gzip and multipart uploads; traversal, symlinks, bad parts, gzip bombs.
    let upload = |path: &str| peer.data(Method::POST, &sandbox, 49983, &format!("/files?path={path}"));
    let written: Value = upload("raw.txt")
        .header("content-type", "application/octet-stream")
        .body("raw body")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        written,
        json!([{"path": "/home/user/raw.txt", "name": "raw.txt", "type": "file"}])
    );
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(b"gzipped body").unwrap();
    let gz = gz.finish().unwrap();
    let response = upload("gz.txt")
        .header("content-type", "application/octet-stream")
        .header("content-encoding", "gzip")
        .body(gz)
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.status(),
        StatusCode::OK,
        "{}",
        response.text().await.unwrap()
    );
    let read = |path: &str| peer.data(Method::GET, &sandbox, 49983, &format!("/files?path={path}"));
    assert_eq!(
        read("gz.txt").send().await.unwrap().text().await.unwrap(),
        "gzipped body"
    );
    let multipart = "--XX\r\nContent-Disposition: form-data; name=\"file\"; filename=\"/home/user/mp.txt\"\r\n\r\nmultipart body\r\n--XX--\r\n";
    let response = peer
        .data(Method::POST, &sandbox, 49983, "/files")
        .header("content-type", "multipart/form-data; boundary=XX")
        .body(multipart)
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.status(),
        StatusCode::OK,
        "{}",
        response.text().await.unwrap()
    );
    assert_eq!(
        read("/home/user/mp.txt")
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
        "multipart body"
    );
    expect_error(
        peer.data(Method::POST, &sandbox, 49983, "/files?path=x")
            .header("content-type", "multipart/form-data; boundary=XX")
            .body(multipart.replace("name=\"file\"", "name=\"other\"")),
        StatusCode::BAD_REQUEST,
    )
    .await;
    let mut bomb = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    bomb.write_all(&vec![0u8; LIMIT * 4]).unwrap();
    expect_error(
        upload("bomb.bin")
            .header("content-type", "application/octet-stream")
            .header("content-encoding", "gzip")
            .body(bomb.finish().unwrap()),
        StatusCode::PAYLOAD_TOO_LARGE,
    )
    .await;
    expect_error(
        upload("big.bin").body(vec![0u8; LIMIT + 1]),
        StatusCode::PAYLOAD_TOO_LARGE,
    )
    .await;
    expect_error(read("../../etc/passwd"), StatusCode::BAD_REQUEST).await;
    // Outside the home: read inside the sandbox (its own passwd), never written.
    let passwd = read("/etc/passwd").send().await.unwrap();
    assert_eq!(passwd.status(), StatusCode::OK);
    assert!(passwd.text().await.unwrap().starts_with("user:x:"));
    expect_error(upload("/etc/passwd").body("x"), StatusCode::BAD_REQUEST).await;
    expect_error(read("missing.txt"), StatusCode::NOT_FOUND).await;
    expect_error(upload("../escape.txt").body("x"), StatusCode::BAD_REQUEST).await;
    peer.data(Method::POST, &sandbox, 49999, "/execute")
        .json(&json!({"code": "import os\nos.symlink('/etc/shadow', 'link')"}))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let refused = expect_error(read("link"), StatusCode::BAD_REQUEST).await;
    assert!(
        refused["message"].as_str().unwrap().contains("symlink"),
        "{refused}"
    );

    // Connect RPCs: JSON codec, Connect error codes.
    let rpc = |method: &str| {
        peer.data(
            Method::POST,
            &sandbox,
            49983,
            &format!("/filesystem.Filesystem/{method}"),
        )
        .header("Connect-Protocol-Version", "1")
    };
    let listing: Value = rpc("ListDir")
        .json(&json!({"path": "/home/user", "depth": 1}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let raw = listing["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "raw.txt")
        .unwrap_or_else(|| panic!("{listing}"));
    assert_eq!(
        (raw["type"].as_str(), raw["size"].as_str()),
        (Some("FILE_TYPE_FILE"), Some("8"))
    );
    let stat: Value = rpc("Stat")
        .json(&json!({"path": "raw.txt"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(stat["entry"]["name"], "raw.txt");
    let missing = expect_error(
        rpc("Stat").json(&json!({"path": "nope.txt"})),
        StatusCode::NOT_FOUND,
    )
    .await;
    assert_eq!(missing["code"], "not_found");
    let missing = expect_error(
        rpc("ListDir").json(&json!({"path": "nope"})),
        StatusCode::NOT_FOUND,
    )
    .await;
    assert_eq!(missing["code"], "not_found");
    // WatchDir is server-streaming: a unary JSON request is refused, naming the content type.
    let unary = expect_error(
        rpc("WatchDir").json(&json!({"path": "d"})),
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
    )
    .await;
    assert!(
        unary["message"]
            .as_str()
            .unwrap()
            .contains("application/connect+json"),
        "{unary}"
    );
    // MakeDir answers as envd: the new entry, then Connect `already_exists` for the same path.
    let made = rpc("MakeDir").json(&json!({"path": "d"})).send().await.unwrap();
    assert_eq!(made.status(), StatusCode::OK);
    let made: Value = made.json().await.unwrap();
    assert_eq!(made["entry"]["type"], "FILE_TYPE_DIRECTORY", "{made}");
    let exists = expect_error(rpc("MakeDir").json(&json!({"path": "d"})), StatusCode::CONFLICT).await;
    assert_eq!(exists["code"], "already_exists");
    let removed = rpc("Remove")
        .json(&json!({"path": "/home/user/d"}))
        .send()
        .await
        .unwrap();
    assert_eq!(removed.status(), StatusCode::OK);
    // Removing it again succeeds, as envd's `os.RemoveAll` does.
    let again = rpc("Remove").json(&json!({"path": "d"})).send().await.unwrap();
    assert_eq!(again.status(), StatusCode::OK);
    let escape = expect_error(
        rpc("Move").json(&json!({"source": "x", "destination": "../../tmp/x"})),
        StatusCode::BAD_REQUEST,
    )
    .await;
    assert_eq!(escape["code"], "invalid_argument");
    let traversal = expect_error(
        rpc("Remove").json(&json!({"path": "../etc"})),
        StatusCode::BAD_REQUEST,
    )
    .await;
    assert_eq!(traversal["code"], "invalid_argument");
    expect_error(rpc("ListDir").body("[1,"), StatusCode::BAD_REQUEST).await;

    peer.alive().await;
    let ok = peer
        .data(Method::GET, &sandbox, 49983, "/health")
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), StatusCode::NO_CONTENT);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debug_mode_serves_the_sdks_fixed_sandbox_without_create() {
    let peer = Peer::start(ServerConfig::new().without_auth().with_debug_sandbox(true)).await;
    let debug = Created {
        id: "debug_sandbox_id".into(),
        envd_token: String::new(),
        traffic_token: String::new(),
    };
    let text = peer
        .data(Method::POST, &debug, 49999, "/execute")
        .json(&json!({"code": "1 + 1"}))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        text.contains("\"text\":\"2\"") || text.contains("\"text\": \"2\""),
        "{text}"
    );
    // Without an API key configured, any key (or none) is accepted on the control plane.
    let list = peer
        .http
        .get(format!("{}/v2/sandboxes", peer.url))
        .send()
        .await
        .unwrap();
    assert_eq!(list.status(), StatusCode::OK);
    let list: Value = list.json().await.unwrap();
    assert_eq!(list[0]["sandboxID"], "debug_sandbox_id");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multipart_uploads_above_axums_default_limit_are_accepted() {
    let peer = Peer::start(e2b_support::server_config()).await;
    let sandbox = peer.create().await;
    // 3 MiB: above axum's 2 MiB default body limit, below the server's own.
    let data: Vec<u8> = (0..3 * 1024 * 1024).map(|i| (i % 251) as u8).collect();
    let mut body =
        b"--XX\r\nContent-Disposition: form-data; name=\"file\"; filename=\"big.bin\"\r\n\r\n".to_vec();
    body.extend_from_slice(&data);
    body.extend_from_slice(b"\r\n--XX--\r\n");
    let response = peer
        .data(Method::POST, &sandbox, 49983, "/files?path=big.bin")
        .header("content-type", "multipart/form-data; boundary=XX")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.status(),
        StatusCode::OK,
        "{}",
        response.text().await.unwrap()
    );
    let read = peer
        .data(Method::GET, &sandbox, 49983, "/files?path=big.bin")
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert!(read.as_ref() == data.as_slice(), "read back {} bytes", read.len());
}

/// A server-streaming call whose request body ends after its message (E2B's Python SDK streams the
/// body chunked, and its last chunk can come late) reads the body to its end, so the kept-alive
/// connection serves the client's next request. Left unread, hyper closed the connection after the
/// response and the SDK's next call on it failed with "connection closed before message completed".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streaming_call_keeps_its_connection_for_the_next_request() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let peer = Peer::start(e2b_support::server_config()).await;
    let sandbox = peer.create().await;
    let address = peer.url.trim_start_matches("http://").to_string();
    let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
    let head = format!(
        "POST /process.Process/Start HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/connect+json\r\n\
         Connect-Protocol-Version: 1\r\nTransfer-Encoding: chunked\r\nE2b-Sandbox-Id: {}\r\n\
         E2b-Sandbox-Port: 49983\r\nX-Access-Token: {}\r\nE2B-Traffic-Access-Token: {}\r\n\r\n",
        sandbox.id, sandbox.envd_token, sandbox.traffic_token
    );
    let message = json!({"process": {"cmd": "/bin/echo", "args": ["streamed"]}}).to_string();
    let mut envelope = vec![0u8];
    envelope.extend_from_slice(&(message.len() as u32).to_be_bytes());
    envelope.extend_from_slice(message.as_bytes());
    stream.write_all(head.as_bytes()).await.unwrap();
    stream
        .write_all(format!("{:x}\r\n", envelope.len()).as_bytes())
        .await
        .unwrap();
    stream.write_all(&envelope).await.unwrap();
    stream.write_all(b"\r\n").await.unwrap();
    stream.flush().await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    stream.write_all(b"0\r\n\r\n").await.unwrap();

    // The whole streamed answer: chunked, ending with the zero-length chunk.
    let mut answer = Vec::new();
    let mut buffer = [0u8; 4096];
    let read_all = async {
        while !answer.ends_with(b"\r\n0\r\n\r\n") {
            let n = stream.read(&mut buffer).await.unwrap();
            assert!(
                n > 0,
                "the server closed the stream early: {}",
                String::from_utf8_lossy(&answer)
            );
            answer.extend_from_slice(&buffer[..n]);
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(30), read_all)
        .await
        .expect("the Start stream ended");
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(!text.to_ascii_lowercase().contains("connection: close"), "{text}");
    // "streamed\n" comes back base64-encoded in the stdout event.
    assert!(text.contains("c3RyZWFtZWQK"), "{text}");

    stream
        .write_all(format!("GET /health HTTP/1.1\r\nHost: {address}\r\n\r\n").as_bytes())
        .await
        .expect("the connection is still open for the next request");
    let mut next = Vec::new();
    let read_head = async {
        while !next.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = stream.read(&mut buffer).await.unwrap();
            assert!(n > 0, "the server closed the kept-alive connection");
            next.extend_from_slice(&buffer[..n]);
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(10), read_head)
        .await
        .expect("the next request was answered");
    let next = String::from_utf8_lossy(&next);
    assert!(next.starts_with("HTTP/1.1 200"), "{next}");
}
