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

async fn compare(label: &str, config: ContainerConfig, plain_image: &str) {
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
    };
    row("cold create", with.create, without.create);
    row("first run_code(1+1)", with.first, without.first);
    row("warm run_code(1+1)", with.warm, without.warm);
    row("pool create + first 1+1", with.pooled, without.pooled);
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
    rt.block_on(async {
        println!(
            "load before: {}",
            std::fs::read_to_string("/proc/loadavg")
                .unwrap_or_default()
                .trim()
        );
        println!("runtime  case                          IPython      plain   ratio");
        compare("runc", ContainerConfig::default(), &plain_image).await;
        if let Ok(host) = std::env::var("WAXELL_RUNSC_DOCKER_HOST") {
            let config = ContainerConfig::default()
                .with_runtime("runsc")
                .with_docker_host(host);
            compare("runsc", config, &plain_image).await;
        }
        println!(
            "load after: {}",
            std::fs::read_to_string("/proc/loadavg")
                .unwrap_or_default()
                .trim()
        );
    });
}
