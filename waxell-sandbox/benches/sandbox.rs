//! Sandbox latency: create to ready (cold, and from the warm pool) and the `run_code("1+1")` round
//! trip. Besides criterion's estimates, each benchmark prints the median and p90 of every individual
//! iteration it timed. Run with `cargo bench -p waxell-sandbox --bench sandbox` (as root, after
//! `scripts/setup-sandbox.sh`).
//!
//! Then root mode against rootless mode, side by side in the same run: cold create and a warm
//! `run_code("1+1")`, both with the system `/usr/bin/python3` so only the mode differs. Run as root
//! with `WAXELL_BENCH_ROOTLESS_USER=<an unprivileged user>`: the rootless half is this binary
//! re-run as that user (`setpriv`), reporting its figures back as JSON.
//!
//! With `--features container` it also measures, side by side in the same run, the container backend
//! under runc (engine at `DOCKER_HOST`) and under gVisor's runsc (`WAXELL_RUNSC_DOCKER_HOST`, else
//! `DOCKER_HOST` with runtime `runsc`): create to ready (cold) and the warm `run_code("1+1")`, then
//! prints the ratios to the local backend. `eval "$(bash scripts/setup-container.sh)"` first.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use criterion::{criterion_group, Criterion};
use waxell::sandbox::{RunOptions, SandboxOptions, SandboxSession};
use waxell_sandbox::{LocalBackend, LocalConfig};

#[path = "../../tests/src/bench_row.rs"]
mod bench_row;
use bench_row::Row;

/// Median and p90 (ms) of each benchmark that ran, for the rows of docs/performance.md.
static FIGURES: Mutex<Vec<(&str, [f64; 2])>> = Mutex::new(Vec::new());

fn figure(name: &str) -> Option<[f64; 2]> {
    FIGURES
        .lock()
        .unwrap()
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, f)| *f)
}

fn quick() -> bool {
    std::env::args().any(|a| a == "--quick")
}

/// Every timed iteration, for the median/p90 printed after each benchmark.
#[derive(Clone, Default)]
struct Samples(Arc<Mutex<Vec<Duration>>>);

impl Samples {
    fn push(&self, d: Duration) {
        self.0.lock().unwrap().push(d);
    }

    fn report(&self, name: &'static str) {
        let mut all = self.0.lock().unwrap().clone();
        all.sort();
        if all.is_empty() {
            return;
        }
        let at = |q: f64| all[((all.len() as f64 - 1.0) * q).round() as usize];
        FIGURES
            .lock()
            .unwrap()
            .push((name, [at(0.5).as_secs_f64() * 1e3, at(0.9).as_secs_f64() * 1e3]));
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

    /// Median time to get a sandbox from a full warm pool (refilled, untimed, between takes).
    async fn acquire<F, Fut>(creates: usize, take: F) -> Duration
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Duration>,
    {
        let mut all = Vec::new();
        for _ in 0..creates {
            all.push(take().await);
        }
        median(all)
    }

    /// The rows of docs/performance.md: `WAXELL_BENCH_ENGINE=docker-engine` when `DOCKER_HOST` is Docker
    /// Engine's (default: Podman).
    fn emit_backends(rows: &[(&str, (Duration, Duration)); 3], acquired: &[Duration; 3]) {
        let docker_engine = std::env::var("WAXELL_BENCH_ENGINE").is_ok_and(|e| e == "docker-engine");
        let (engine, name, case) = if docker_engine {
            ("docker-engine", "Docker Engine", "[S] `docker-engine`")
        } else {
            ("podman", "Podman", "[S] `containers`")
        };
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let [(_, (lc, lr)), (_, (cc, cr)), (_, (sc, sr))] = *rows;
        let mut out = bench_row::Rows::start(case, quick());
        out.push(Row {
            id: format!("containers.{engine}.create"),
            what: format!("container backend on {name}'s Docker API, create to ready, cold, median of 9"),
            measured: format!("runc **{:.1} ms**, runsc (gVisor) **{:.1} ms**", ms(cc), ms(sc)),
            anchor: format!("local backend, same run: {:.1} ms", ms(lc)),
            ratio: format!(
                "runc **{:.1}x**, runsc **{:.1}x**",
                ms(cc) / ms(lc),
                ms(sc) / ms(lc)
            ),
            // Docker Engine is what most hosts run: runc there has the tighter target.
            target: if engine == "docker-engine" {
                "runc <= 150 ms, runsc <= 1 s"
            } else {
                "<= 1 s"
            }
            .into(),
            verdict: Some(
                cc.max(sc) <= Duration::from_secs(1)
                    && (engine != "docker-engine" || cc <= Duration::from_millis(150)),
            ),
        });
        out.push(Row {
            id: format!("containers.{engine}.run-code"),
            what: format!(
                "container backend on {name}, warm `run_code(\"1+1\")`, median of 1,800 (9 sandboxes x 200)"
            ),
            measured: format!("runc {:.3} ms, runsc {:.3} ms", ms(cr), ms(sr)),
            anchor: format!("local, same run: {:.3} ms", ms(lr)),
            ratio: format!(
                "runc **{:+.3} ms**, runsc **{:+.3} ms**",
                ms(cr) - ms(lr),
                ms(sr) - ms(lr)
            ),
            target: "<= local + 3 ms".into(),
            verdict: Some(ms(cr).max(ms(sr)) - ms(lr) <= 3.0),
        });
        out.push(Row {
            id: format!("containers.{engine}.pool"),
            what: format!(
                "warm pool acquire on {name} (pool size 1, refilled untimed between takes), median of 9"
            ),
            measured: format!("runc {:.3} ms, runsc {:.3} ms", ms(acquired[1]), ms(acquired[2])),
            anchor: format!("local pool, same run: {:.3} ms", ms(acquired[0])),
            ratio: format!(
                "{:.1}x / {:.1}x",
                ms(acquired[1]) / ms(acquired[0]),
                ms(acquired[2]) / ms(acquired[0])
            ),
            target: "the warm pool works for every backend".into(),
            verdict: Some(true),
        });
        out.finish();
    }

    pub(crate) fn backends(_c: &mut Criterion) {
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
            // Warm pools (size 1): a sandbox is a queue pop plus applying its options.
            let local_pool = LocalBackend::new(LocalConfig::default().with_pool_size(1)).expect("local sandbox");
            let pooled = |config: ContainerConfig| async move {
                ContainerBackend::new(config.with_pool_size(1)).await.expect("container engine")
            };
            let runc_pool = pooled(ContainerConfig::default()).await;
            let mut gvisor_pool = ContainerConfig::default().with_runtime("runsc");
            if let Ok(host) = std::env::var("WAXELL_RUNSC_DOCKER_HOST") {
                gvisor_pool = gvisor_pool.with_docker_host(host);
            }
            let runsc_pool = pooled(gvisor_pool).await;
            let local_acquire = acquire(creates, || async {
                local_pool.warm_up().await.unwrap();
                let start = Instant::now();
                let sandbox = local_pool.create_sandbox(&SandboxOptions::default()).await.unwrap();
                let took = start.elapsed();
                drop(sandbox);
                took
            })
            .await;
            let container_acquire = |backend: &ContainerBackend| {
                let backend = backend.clone();
                acquire(creates, move || {
                    let backend = backend.clone();
                    async move {
                        backend.warm_up().await.unwrap();
                        let start = Instant::now();
                        let sandbox = backend.create_sandbox(&SandboxOptions::default()).await.unwrap();
                        let took = start.elapsed();
                        drop(sandbox);
                        took
                    }
                })
            };
            let acquired = [
                local_acquire,
                container_acquire(&runc_pool).await,
                container_acquire(&runsc_pool).await,
            ];
            let (local_create, local_run) = rows[0].1;
            emit_backends(&rows, &acquired);
            println!(
                "backend              create median   run_code(1+1) median   create / local   run_code - local   pool acquire median"
            );
            for ((name, (create, run)), acquired) in rows.into_iter().zip(acquired) {
                println!(
                    "{name:<20} {:>10.1} ms {:>18.3} ms {:>15.1}x {:>15.3} ms {:>17.3} ms",
                    create.as_secs_f64() * 1e3,
                    run.as_secs_f64() * 1e3,
                    create.as_secs_f64() / local_create.as_secs_f64(),
                    (run.as_secs_f64() - local_run.as_secs_f64()) * 1e3,
                    acquired.as_secs_f64() * 1e3
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

/// Set in the re-run child that measures rootless mode.
const CHILD_ENV: &str = "WAXELL_BENCH_MODE_CHILD";
const USER_ENV: &str = "WAXELL_BENCH_ROOTLESS_USER";
const COLD_N: usize = 30;
const WARM_N: usize = 300;

fn median_p90(mut all: Vec<Duration>) -> [f64; 2] {
    all.sort();
    let at = |q: f64| all[((all.len() as f64 - 1.0) * q).round() as usize].as_secs_f64() * 1e3;
    [at(0.5), at(0.9)]
}

/// Cold creates and warm `1+1` runs in this process's mode: `[cold median, cold p90, warm
/// median, warm p90]` in ms.
fn measure_mode() -> [f64; 4] {
    let rt = runtime();
    rt.block_on(async {
        let config = LocalConfig::default().with_python("/usr/bin/python3");
        let backend = LocalBackend::new(config).expect("sandbox available");
        let mut cold = Vec::new();
        for _ in 0..COLD_N {
            let start = Instant::now();
            let sandbox = backend.create_sandbox(&SandboxOptions::default()).await.unwrap();
            cold.push(start.elapsed());
            drop(sandbox);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let sandbox = backend.create_sandbox(&SandboxOptions::default()).await.unwrap();
        let options = RunOptions::default();
        let mut warm = Vec::new();
        for i in 0..WARM_N + 20 {
            let start = Instant::now();
            let execution = sandbox.run_code("1+1", &options).await.unwrap();
            if i >= 20 {
                warm.push(start.elapsed());
            }
            assert_eq!(execution.text(), Some("2"));
        }
        let [cm, cp] = median_p90(cold);
        let [wm, wp] = median_p90(warm);
        [cm, cp, wm, wp]
    })
}

/// Rootless figures from this binary re-run as `user`.
fn measure_rootless_as(user: &str) -> Result<[f64; 4], String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    // A copy the user can execute, wherever the build tree is.
    let copy = std::env::temp_dir().join(format!("waxell-bench-{}", std::process::id()));
    std::fs::copy(&exe, &copy).map_err(|e| format!("copying the bench binary: {e}"))?;
    let output = std::process::Command::new("setpriv")
        .args([
            &format!("--reuid={user}"),
            &format!("--regid={user}"),
            "--init-groups",
            "env",
            "-i",
        ])
        .arg("PATH=/usr/local/bin:/usr/bin:/bin")
        .arg("TMPDIR=/tmp")
        .arg(format!("{CHILD_ENV}=1"))
        .arg(&copy)
        .output()
        .map_err(|e| format!("running setpriv: {e}"));
    let _ = std::fs::remove_file(&copy);
    let output = output?;
    if !output.status.success() {
        return Err(format!(
            "the rootless run failed: {}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    serde_json::from_slice(&output.stdout).map_err(|e| format!("unexpected child output: {e}"))
}

fn compare_modes() {
    let euid = rustix::process::geteuid();
    if !euid.is_root() {
        println!("mode comparison: skipped (run as root with {USER_ENV}=<user> to compare with rootless)");
        return;
    }
    let Some(user) = std::env::var(USER_ENV).ok().filter(|u| !u.is_empty()) else {
        println!("mode comparison: skipped (set {USER_ENV}=<an unprivileged user>)");
        return;
    };
    let root = measure_mode();
    let rootless = match measure_rootless_as(&user) {
        Ok(figures) => figures,
        Err(e) => {
            println!("mode comparison: {e}");
            return;
        }
    };
    let mut rows = bench_row::Rows::start("[S] `modes`", quick());
    rows.push(Row {
        id: "sandbox.modes.create-cold".into(),
        what: format!("sandbox create, cold, **rootless** (user namespace, watchdog limits) vs root mode, both with `/usr/bin/python3`, {COLD_N} creates per mode"),
        measured: format!("{:.1} ms (p90 {:.1})", rootless[0], rootless[1]),
        anchor: format!("root mode, same run: {:.1} ms (p90 {:.1})", root[0], root[1]),
        ratio: format!("**{:.2}**", rootless[0] / root[0]),
        target: "rootless <= 1.2x root".into(),
        verdict: Some(rootless[0] / root[0] <= 1.2),
    });
    rows.push(Row {
        id: "sandbox.modes.run-code".into(),
        what: format!("warm `run_code(\"1+1\")`, rootless vs root mode, same run ({WARM_N} runs per mode)"),
        measured: format!("{:.3} ms (p90 {:.3})", rootless[2], rootless[3]),
        anchor: format!("root mode: {:.3} ms (p90 {:.3})", root[2], root[3]),
        ratio: format!("{:.2}", rootless[2] / root[2]),
        target: "none (sub-millisecond, noise-dominated)".into(),
        verdict: None,
    });
    rows.finish();
    println!("mode comparison (python /usr/bin/python3; cold n = {COLD_N}, warm n = {WARM_N}; ms):");
    println!(
        "{:<16} {:>18} {:>18} {:>8}",
        "", "root median/p90", "rootless median/p90", "ratio"
    );
    for (name, i) in [("create/cold", 0), ("run_code/1+1", 2)] {
        println!(
            "{name:<16} {:>9.3} / {:<7.3} {:>9.3} / {:<8.3} {:>7.2}x",
            root[i],
            root[i + 1],
            rootless[i],
            rootless[i + 1],
            rootless[i] / root[i]
        );
    }
}

fn main() {
    if std::env::var_os(CHILD_ENV).is_some() {
        println!("{}", serde_json::to_string(&measure_mode()).unwrap());
        return;
    }
    let mut rows = bench_row::Rows::start("[S] `local`", quick());
    benches();
    Criterion::default().configure_from_args().final_summary();
    if let (Some(cold), Some(warm), Some(run)) = (
        figure("create/cold"),
        figure("create/warm_pool"),
        figure("run_code/1+1"),
    ) {
        rows.push(Row {
            id: "sandbox.create-cold".into(),
            what: "sandbox create, cold (cgroups, bwrap + seccomp, setpriv, Python, kernel `ready`)".into(),
            measured: format!("{:.1} ms (p90 {:.1})", cold[0], cold[1]),
            anchor: "E2B ~150 ms (third party, not this run); Daytona < 90 ms (vendor)".into(),
            ratio: format!("{:.2}x E2B", cold[0] / 150.0),
            target: "<= 50 ms".into(),
            verdict: Some(cold[0] <= 50.0),
        });
        rows.push(Row {
            id: "sandbox.create-warm-pool".into(),
            what: "sandbox create, from the warm pool".into(),
            measured: format!("{:.3} ms (p90 {:.2})", warm[0], warm[1]),
            anchor: format!("cold create: {:.1} ms", cold[0]),
            ratio: format!("{:.3}x", warm[0] / cold[0]),
            target: "<= 5 ms".into(),
            verdict: Some(warm[0] <= 5.0),
        });
        rows.push(Row {
            id: "sandbox.run-code".into(),
            what: "`run_code(\"1+1\")` round trip, in process".into(),
            measured: format!("{:.2} ms (p90 {:.2})", run[0], run[1]),
            anchor: "none".into(),
            ratio: "none".into(),
            target: "<= 1 ms".into(),
            verdict: Some(run[0] <= 1.0),
        });
    }
    rows.finish();
    compare_modes();
}
