//! What IPython costs in a container sandbox: the image of scripts/setup-container.sh (IPython, E2B's
//! chart extractor, Node.js, a JDK) against an image whose Python has no IPython (the kernel then
//! runs cells in its plain shell), side by side in one run, creates interleaved: cold create to
//! ready, the first `run_code("1+1")` after it (which waits for the kernel's IPython import), the
//! warm `run_code("1+1")`, and a create from a full warm pool plus its first `run_code("1+1")`. Medians and the ratios, under runc (`DOCKER_HOST`) and, when
//! `WAXELL_RUNSC_DOCKER_HOST` is set, under gVisor.
//!
//!   eval "$(bash scripts/setup-container.sh)"
//!   WAXELL_BENCH_PLAIN_IMAGE=<image without IPython> cargo bench -p waxell-sandbox --features container --bench image
//!
//! The plain image: the previous recipe's (Python 3, numpy, pandas, matplotlib; see docs/performance.md).

use std::time::{Duration, Instant};

use waxell::sandbox::{RunOptions, SandboxBackend, SandboxOptions};
use waxell_sandbox::{ContainerBackend, ContainerConfig, Language};

#[path = "../../tests/src/bench_row.rs"]
mod bench_row;

const CREATES: usize = 9;
const WARM_RUNS: usize = 50;

fn median(mut all: Vec<Duration>) -> f64 {
    all.sort();
    all[all.len() / 2].as_secs_f64() * 1e3
}

#[derive(Default)]
struct Figures {
    create: Vec<Duration>,
    first: Vec<Duration>,
    warm: Vec<Duration>,
    /// From a full warm pool (size 1, refilled untimed): create plus the first `run_code("1+1")`.
    pooled: Vec<Duration>,
}

async fn from_pool(backend: &ContainerBackend, figures: &mut Figures) {
    backend.warm_up().await.expect("warm pool");
    // The pooled kernel imports IPython in the background once ready; a pool refilled between
    // requests has had that time.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let start = Instant::now();
    let sandbox = backend.create(&SandboxOptions::default()).await.expect("create");
    let run = sandbox
        .run_code("1+1", &RunOptions::default())
        .await
        .expect("first run");
    figures.pooled.push(start.elapsed());
    assert_eq!(run.text(), Some("2"));
    sandbox.kill().await.expect("kill");
}

async fn once(backend: &ContainerBackend, figures: &mut Figures) {
    let start = Instant::now();
    let sandbox = backend.create(&SandboxOptions::default()).await.expect("create");
    figures.create.push(start.elapsed());
    let options = RunOptions::default();
    let start = Instant::now();
    let first = sandbox.run_code("1+1", &options).await.expect("first run");
    figures.first.push(start.elapsed());
    assert_eq!(first.text(), Some("2"));
    for _ in 0..WARM_RUNS {
        let start = Instant::now();
        let run = sandbox.run_code("1+1", &options).await.expect("run");
        figures.warm.push(start.elapsed());
        assert_eq!(run.text(), Some("2"));
    }
    sandbox.kill().await.expect("kill");
    tokio::time::sleep(Duration::from_millis(200)).await;
}

async fn compare(label: &str, config: ContainerConfig, plain_image: &str) -> bench_row::Row {
    let full = ContainerBackend::new(config.clone())
        .await
        .expect("the set-up script's image");
    let plain = ContainerBackend::new(config.clone().with_image(plain_image))
        .await
        .expect("the plain image");
    let ipython = |b: &ContainerBackend| {
        !b.languages()
            .limited()
            .iter()
            .any(|(l, _)| *l == Language::Python)
    };
    assert!(
        ipython(&full),
        "the full image has no IPython: {:?}",
        full.languages().limited()
    );
    assert!(!ipython(&plain), "{plain_image} has IPython: not a plain image");
    // One untimed round each first (image layers into the page cache).
    let (mut with, mut without) = (Figures::default(), Figures::default());
    once(&full, &mut Figures::default()).await;
    once(&plain, &mut Figures::default()).await;
    for _ in 0..CREATES {
        once(&full, &mut with).await;
        once(&plain, &mut without).await;
    }
    let full_pool = ContainerBackend::new(config.clone().with_pool_size(1))
        .await
        .expect("pool");
    let plain_pool = ContainerBackend::new(config.clone().with_image(plain_image).with_pool_size(1))
        .await
        .expect("pool");
    for _ in 0..CREATES {
        from_pool(&full_pool, &mut with).await;
        from_pool(&plain_pool, &mut without).await;
    }
    let row = |name: &str, a: Vec<Duration>, b: Vec<Duration>| {
        let (a, b) = (median(a), median(b));
        println!("{label:<8} {name:<28} {a:>10.1} ms {b:>10.1} ms {:>7.2}x", a / b);
        (a, b)
    };
    let create = row("cold create", with.create, without.create);
    let first = row("first run_code(1+1)", with.first, without.first);
    let warm = row("warm run_code(1+1)", with.warm, without.warm);
    let pooled = row("pool create + first 1+1", with.pooled, without.pooled);
    let [create_ratio, warm_ratio] = [create.0 / create.1, warm.0 / warm.1];
    bench_row::Row {
        id: format!("image.ipython.{label}"),
        what: format!(
            "IPython's cost in a container (the set-up script's image) against an image whose Python has no IPython (the kernel's plain shell), {label}, interleaved, median of {CREATES} creates / {} warm runs",
            CREATES * WARM_RUNS
        ),
        measured: format!(
            "cold create **{:.1} ms**; first `run_code(\"1+1\")` after it {:.1} ms; warm `run_code` {:.1} ms; create from a full pool + first `1+1` {:.1} ms",
            create.0, first.0, warm.0, pooled.0
        ),
        anchor: format!(
            "plain image, same run: {:.1} ms; {:.1} ms; {:.1} ms; {:.1} ms",
            create.1, first.1, warm.1, pooled.1
        ),
        ratio: format!(
            "create **{create_ratio:.2}x**; create + first cell **{:.2}x**; warm cell **{warm_ratio:.2}x**; pool + first cell {:.1}x",
            (create.0 + first.0) / (create.1 + first.1),
            pooled.0 / pooled.1
        ),
        target: "create <= 1.5x and a warm cell <= 2x".into(),
        verdict: Some(create_ratio <= 1.5 && warm_ratio <= 2.0),
    }
}

fn main() {
    let Ok(plain_image) = std::env::var("WAXELL_BENCH_PLAIN_IMAGE") else {
        eprintln!(
            "image bench skipped: set WAXELL_BENCH_PLAIN_IMAGE to an image whose Python has no IPython"
        );
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let quick = std::env::args().any(|a| a == "--quick");
    let mut rows = bench_row::Rows::start("[I]", quick);
    rt.block_on(async {
        println!(
            "load before: {}",
            std::fs::read_to_string("/proc/loadavg")
                .unwrap_or_default()
                .trim()
        );
        println!("runtime  case                          IPython      plain   ratio");
        rows.push(compare("runc", ContainerConfig::default(), &plain_image).await);
        if let Ok(host) = std::env::var("WAXELL_RUNSC_DOCKER_HOST") {
            let config = ContainerConfig::default()
                .with_runtime("runsc")
                .with_docker_host(host);
            rows.push(compare("runsc", config, &plain_image).await);
        }
        println!(
            "load after: {}",
            std::fs::read_to_string("/proc/loadavg")
                .unwrap_or_default()
                .trim()
        );
    });
    rows.finish();
}
