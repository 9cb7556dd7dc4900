//! Sandbox latency: create to ready (cold, and from the warm pool) and the `run_code("1+1")` round
//! trip. Besides criterion's estimates, each benchmark prints the median and p90 of every individual
//! iteration it timed. Run with `cargo bench -p waxell-sandbox --bench sandbox` (as root, after
//! `scripts/setup-sandbox.sh`).
//!
//! With `--features container` it also measures, side by side in the same run, the container backend
//! under runc (engine at `DOCKER_HOST`) and under gVisor's runsc (`WAXELL_RUNSC_DOCKER_HOST`, else
//! `DOCKER_HOST` with runtime `runsc`): create to ready (cold) and the warm `run_code("1+1")`, then
//! prints the ratios to the local backend. `eval "$(bash scripts/setup-container.sh)"` first.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use waxell::sandbox::{RunOptions, SandboxOptions, SandboxSession};
use waxell_sandbox::{LocalBackend, LocalConfig};

/// Every timed iteration, for the median/p90 printed after each benchmark.
#[derive(Clone, Default)]
struct Samples(Arc<Mutex<Vec<Duration>>>);

impl Samples {
    fn push(&self, d: Duration) {
        self.0.lock().unwrap().push(d);
    }

    fn report(&self, name: &str) {
        let mut all = self.0.lock().unwrap().clone();
        all.sort();
        if all.is_empty() {
            return;
        }
        let at = |q: f64| all[((all.len() as f64 - 1.0) * q).round() as usize];
        println!(
            "{name}: median {:.3} ms, p90 {:.3} ms, n = {}",
            at(0.5).as_secs_f64() * 1e3,
            at(0.9).as_secs_f64() * 1e3,
            all.len()
        );
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn create_cold(c: &mut Criterion) {
    let rt = runtime();
    let backend =
        rt.block_on(async { LocalBackend::new(LocalConfig::default()).expect("sandbox available") });
    let samples = Samples::default();
    let mut group = c.benchmark_group("create");
    group.sample_size(20).measurement_time(Duration::from_secs(8));
    group.bench_function("cold", |b| {
        b.to_async(&rt).iter_custom(|iters| {
            let (backend, samples) = (backend.clone(), samples.clone());
            async move {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let start = Instant::now();
                    let sandbox = backend.create_sandbox(&SandboxOptions::default()).await.unwrap();
                    let took = start.elapsed();
                    samples.push(took);
                    total += took;
                    // Teardown is not part of create, nor is the kernel's asynchronous namespace
                    // cleanup it triggers, which would compete with the next create for 2 cores.
                    drop(sandbox);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                total
            }
        })
    });
    group.finish();
    samples.report("create/cold");
}

fn create_warm(c: &mut Criterion) {
    let rt = runtime();
    let backend = rt.block_on(async {
        let backend = LocalBackend::new(LocalConfig::default().with_pool_size(2)).expect("sandbox available");
        backend.warm_up().await.unwrap();
        backend
    });
    let samples = Samples::default();
    let mut group = c.benchmark_group("create");
    group.sample_size(20).measurement_time(Duration::from_secs(8));
    group.bench_function("warm_pool", |b| {
        b.to_async(&rt).iter_custom(|iters| {
            let (backend, samples) = (backend.clone(), samples.clone());
            async move {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    // Untimed: let the background refill top the pool up, as between real requests.
                    backend.warm_up().await.unwrap();
                    let start = Instant::now();
                    let sandbox = backend.create_sandbox(&SandboxOptions::default()).await.unwrap();
                    let took = start.elapsed();
                    samples.push(took);
                    total += took;
                    drop(sandbox);
                }
                total
            }
        })
    });
    group.finish();
    samples.report("create/warm_pool");
}

fn run_code_round_trip(c: &mut Criterion) {
    let rt = runtime();
    let backend = LocalBackend::new(LocalConfig::default()).expect("sandbox available");
    let sandbox = rt
        .block_on(backend.create_sandbox(&SandboxOptions::default()))
        .unwrap();
    let sandbox = Arc::new(sandbox);
    let samples = Samples::default();
    let options = RunOptions::default();
    c.bench_function("run_code/1+1", |b| {
        b.to_async(&rt).iter_custom(|iters| {
            let (sandbox, samples, options) = (sandbox.clone(), samples.clone(), options.clone());
            async move {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let start = Instant::now();
                    let execution = sandbox.run_code("1+1", &options).await.unwrap();
                    let took = start.elapsed();
                    assert_eq!(execution.text(), Some("2"));
                    samples.push(took);
                    total += took;
                }
                total
            }
        })
    });
    samples.report("run_code/1+1");
}

/// Median create-to-ready and warm `run_code("1+1")` of one backend, measured in one interleaved loop.
#[cfg(feature = "container")]
mod side_by_side {
    use super::*;
    use waxell::sandbox::SandboxBackend;
    use waxell_sandbox::{ContainerBackend, ContainerConfig};

    fn median(mut all: Vec<Duration>) -> Duration {
        all.sort();
        all[all.len() / 2]
    }

    async fn measure(backend: &dyn SandboxBackend, creates: usize, runs: usize) -> (Duration, Duration) {
        let mut create = Vec::new();
        let mut run = Vec::new();
        for _ in 0..creates {
            let start = Instant::now();
            let sandbox = backend.create(&SandboxOptions::default()).await.unwrap();
            create.push(start.elapsed());
            for _ in 0..runs {
                let start = Instant::now();
                let execution = sandbox.run_code("1+1", &RunOptions::default()).await.unwrap();
                run.push(start.elapsed());
                assert_eq!(execution.text(), Some("2"));
            }
            sandbox.kill().await.unwrap();
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        (median(create), median(run))
    }

    pub fn backends(_c: &mut Criterion) {
        let rt = runtime();
        rt.block_on(async {
            let local = LocalBackend::new(LocalConfig::default()).expect("local sandbox");
            let runc = ContainerBackend::new(ContainerConfig::default()).await.expect("container engine at DOCKER_HOST");
            let mut gvisor = ContainerConfig::default().with_runtime("runsc");
            if let Ok(host) = std::env::var("WAXELL_RUNSC_DOCKER_HOST") {
                gvisor = gvisor.with_docker_host(host);
            }
            let runsc = ContainerBackend::new(gvisor).await.expect("runsc engine");
            let (creates, runs) = (9, 200);
            let rows = [
                ("local (bubblewrap)", measure(&local, creates, runs).await),
                ("container (runc)", measure(&runc, creates, runs).await),
                ("container (runsc)", measure(&runsc, creates, runs).await),
            ];
            let (local_create, local_run) = rows[0].1;
            println!("backend              create median   run_code(1+1) median   create / local   run_code - local");
            for (name, (create, run)) in rows {
                println!(
                    "{name:<20} {:>10.1} ms {:>18.3} ms {:>15.1}x {:>15.3} ms",
                    create.as_secs_f64() * 1e3,
                    run.as_secs_f64() * 1e3,
                    create.as_secs_f64() / local_create.as_secs_f64(),
                    (run.as_secs_f64() - local_run.as_secs_f64()) * 1e3
                );
            }
        });
    }
}

#[cfg(feature = "container")]
criterion_group!(
    benches,
    create_cold,
    create_warm,
    run_code_round_trip,
    side_by_side::backends
);
#[cfg(not(feature = "container"))]
criterion_group!(benches, create_cold, create_warm, run_code_round_trip);
criterion_main!(benches);
