//! `run_code` and `concurrent`: the sandbox in process and over the E2B-compatible HTTP server.

use std::sync::Arc;
use std::time::{Duration, Instant};

use waxell::e2b::{E2bBackend, E2bConfig};
use waxell::sandbox::{RunOptions, Sandbox, SandboxOptions};
use waxell_sandbox::server::{router, serve, ServerConfig};
use waxell_sandbox::{LocalBackend, LocalConfig};

use super::*;

fn local_backend(pool_size: usize) -> Arc<LocalBackend> {
    Arc::new(
        LocalBackend::new(LocalConfig::default().with_pool_size(pool_size))
            .expect("local sandbox backend (run scripts/setup.sh as root)"),
    )
}

// ---------------------------------------------------------------------------------------------
// run_code: in process vs over the E2B-compatible HTTP server

pub(super) fn bench_run_code(mode: &Mode, rows: &mut Vec<Row>) {
    let rounds = mode.pick(20, 400);
    let rt = runtime();
    let (local, http, url, created) = rt.block_on(async {
        let backend = local_backend(0);
        // The server in this process, on loopback, over the same backend; the client talks real HTTP.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let config = ServerConfig::new();
        let api_key = config.api_key().expect("closed by default").to_owned();
        let app = router(backend.clone(), config.clone());
        // Served exactly as the `waxell-sandbox serve` binary serves it.
        tokio::spawn(async move { serve(listener, app, &config, std::future::pending()).await });
        let client = E2bBackend::new(
            E2bConfig::new()
                .with_api_key(&api_key)
                .with_api_url(&url)
                .with_sandbox_url(&url),
        )
        .expect("e2b client");
        let local = Sandbox::create(&*backend, &SandboxOptions::default())
            .await
            .expect("local sandbox");
        let http = Sandbox::create(&client, &SandboxOptions::default())
            .await
            .expect("sandbox over HTTP");
        // The raw client's own sandbox, with the data-plane tokens every sandbox requires.
        let created: serde_json::Value = reqwest::Client::new()
            .post(format!("{url}/v2/sandboxes"))
            .header("X-API-KEY", &api_key)
            .json(&serde_json::json!({}))
            .send()
            .await
            .expect("create over HTTP")
            .json()
            .await
            .expect("create response");
        (local, http, url, created)
    });
    // The server's own floor: the same POST /execute with a client built once, still one fresh
    // unpooled HTTP/1.1 connection per request like `waxell::e2b`.
    let raw_client = reqwest::Client::builder()
        .http1_only()
        .pool_max_idle_per_host(0)
        .build()
        .expect("reqwest client");
    let execute_url = format!("{url}/execute");
    let token = |field: &str| created[field].as_str().expect("a token").to_owned();
    let (sandbox_id, envd_token, traffic_token) = (
        token("sandboxID"),
        token("envdAccessToken"),
        token("trafficAccessToken"),
    );
    let options = RunOptions::default();
    let time_one = |sandbox: &Sandbox| {
        rt.block_on(async {
            let start = Instant::now();
            let execution = sandbox.run_code("1+1", &options).await.expect("run_code");
            let took = start.elapsed();
            assert_eq!(execution.text(), Some("2"));
            took
        })
    };
    let time_raw = || {
        rt.block_on(async {
            let start = Instant::now();
            let body = raw_client
                .post(&execute_url)
                .header("E2b-Sandbox-Id", &sandbox_id)
                .header("E2b-Sandbox-Port", "49999")
                .header("X-Access-Token", &envd_token)
                .header("E2B-Traffic-Access-Token", &traffic_token)
                .json(&serde_json::json!({ "code": "1+1" }))
                .send()
                .await
                .expect("POST /execute")
                .text()
                .await
                .expect("body");
            let took = start.elapsed();
            assert!(body.contains("\"text\":\"2\""), "{body}");
            took
        })
    };
    // Warm-up: first runs pay for imports, connection set-up and page faults.
    for _ in 0..10 {
        time_one(&local);
        time_one(&http);
        time_raw();
    }
    let (mut in_process, mut over_http, mut raw_http) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        // Rotate the order so no side always runs first.
        for side in 0..3 {
            match (round + side) % 3 {
                0 => in_process.push(time_one(&local)),
                1 => over_http.push(time_one(&http)),
                _ => raw_http.push(time_raw()),
            }
        }
    }
    rt.block_on(async {
        let _ = http.kill().await;
        let _ = local.kill().await;
    });
    // Guards a regression: `waxell::e2b` once built a reqwest client per execution (loading the TLS
    // root store even for http://), which cost more than the whole round trip; it now builds it once.
    let client_builds: Vec<Duration> = (0..20)
        .map(|_| {
            let start = Instant::now();
            let client = reqwest::Client::builder()
                .http1_only()
                .pool_max_idle_per_host(0)
                .build()
                .expect("reqwest client");
            let took = start.elapsed();
            drop(client);
            took
        })
        .collect();
    describe("run_code/reqwest_client_build", &client_builds);
    describe("run_code/raw_http_reused_client", &raw_http);
    describe("run_code/in_process", &in_process);
    describe("run_code/e2b_http", &over_http);
    let (a, b) = (median(&in_process), median(&over_http));
    let ratio = b.as_secs_f64() / a.as_secs_f64();
    println!(
        "run_code: over HTTP / in process = {ratio:.2}x; over HTTP adds {}",
        ms(b.saturating_sub(a))
    );
    rows.push(Row {
        id: "suite.run-code.e2b-http".into(),
        what: "`run_code(\"1+1\")` over the E2B-compatible HTTP server: `waxell::e2b` client to `waxell-sandbox serve`'s router on 127.0.0.1".into(),
        measured: format!("**{}** (p90 {})", ms(b), ms(quantile(&over_http, 0.9))),
        anchor: format!(
            "in process (local backend through `waxell::sandbox::Sandbox`): {} (p90 {})",
            ms(a),
            ms(quantile(&in_process, 0.9))
        ),
        ratio: format!("**{ratio:.2}x** (+{})", ms(b.saturating_sub(a))),
        target: "<= 3 ms".into(),
        verdict: Some(b <= Duration::from_millis(3)),
    });
    let r = median(&raw_http);
    rows.push(Row {
        id: "suite.run-code.raw-http".into(),
        what: "same `POST /execute`, raw, reqwest client built once (one fresh unpooled connection per request, as the client does)".into(),
        measured: format!("{} (p90 {})", ms(r), ms(quantile(&raw_http, 0.9))),
        anchor: format!("in process: {}", ms(a)),
        ratio: format!(
            "{:.2}x (+{})",
            r.as_secs_f64() / a.as_secs_f64(),
            ms(r.saturating_sub(a))
        ),
        target: "<= 3 ms".into(),
        verdict: Some(r <= Duration::from_millis(3)),
    });
    let c = median(&client_builds);
    rows.push(Row {
        id: "suite.run-code.client-build".into(),
        what: "building one reqwest `Client` (guards against building one per execution)".into(),
        measured: ms(c),
        anchor: format!("the E2B-client round trip (`suite.run-code.e2b-http`): {}", ms(b)),
        ratio: format!("{:.1}x the round trip", c.as_secs_f64() / b.as_secs_f64()),
        target: "regression guard".into(),
        verdict: None,
    });
}

// ---------------------------------------------------------------------------------------------
// concurrent: N sandboxes at once vs one

/// Create a sandbox (no warm pool: each pays the cold start), run a small cell, kill it.
async fn one_sandbox_cell(backend: Arc<LocalBackend>) {
    let sandbox = Sandbox::create(&*backend, &SandboxOptions::default())
        .await
        .expect("create");
    let execution = sandbox
        .run_code("sum(i * i for i in range(10_000))", &RunOptions::default())
        .await
        .expect("run_code");
    assert_eq!(execution.text(), Some("333283335000"));
    sandbox.kill().await.expect("kill");
}

pub(super) fn bench_concurrent(mode: &Mode, rows: &mut Vec<Row>) {
    let sizes: &[usize] = mode.pick(&[4][..], &[8, 16][..]);
    let rounds = mode.pick(1, 5);
    let rt = runtime();
    let backend = rt.block_on(async { local_backend(0) });
    let run_one = || {
        rt.block_on(async {
            let start = Instant::now();
            one_sandbox_cell(backend.clone()).await;
            start.elapsed()
        })
    };
    let run_many = |n: usize| {
        rt.block_on(async {
            let start = Instant::now();
            let tasks: Vec<_> = (0..n)
                .map(|_| tokio::spawn(one_sandbox_cell(backend.clone())))
                .collect();
            for task in tasks {
                task.await.expect("sandbox task");
            }
            start.elapsed()
        })
    };
    // Teardown's asynchronous kernel clean-up (namespaces, cgroups) would otherwise land in the next
    // measurement.
    let settle = || std::thread::sleep(Duration::from_millis(300));
    run_one();
    settle();
    for &n in sizes {
        let (mut alone, mut together) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            if round % 2 == 0 {
                alone.push(run_one());
                settle();
                together.push(run_many(n));
            } else {
                together.push(run_many(n));
                settle();
                alone.push(run_one());
            }
            settle();
        }
        describe("concurrent/one", &alone);
        describe(&format!("concurrent/{n}_at_once"), &together);
        let (one, all) = (median(&alone), median(&together));
        let per_sandbox = all / n as u32;
        let ratio = all.as_secs_f64() / one.as_secs_f64();
        println!(
            "concurrent: {n} at once take {ratio:.2}x one alone ({} per sandbox, {:.2}x the throughput)",
            ms(per_sandbox),
            n as f64 / ratio
        );
        rows.push(Row {
            id: format!("suite.concurrent-{n}"),
            what: format!("{n} sandboxes at once, each cold create + one small cell + kill, 2 cores"),
            measured: format!("{} total, **{} per sandbox**", ms(all), ms(per_sandbox)),
            anchor: format!("one alone: {}", ms(one)),
            ratio: format!(
                "{ratio:.2}x the wall time of one; **{:.2}x the throughput**",
                n as f64 / ratio
            ),
            target: "none (scaling)".into(),
            verdict: None,
        });
    }
}
