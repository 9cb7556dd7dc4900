//! `waxell-sandbox serve`: the local sandbox over E2B's protocol (see `docs/e2b.md`).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};
use waxell::sandbox::SandboxBackend;
use waxell_sandbox::server::{self, ServerConfig, CODE_INTERPRETER_PORT, ENVD_PORT};
use waxell_sandbox::{Limits, LocalBackend, LocalConfig};

#[derive(Parser)]
#[command(name = "waxell-sandbox", version, about = "Local isolated Python sandbox")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
#[allow(clippy::large_enum_variant, reason = "parsed once per process")]
enum Command {
    /// Serve the local sandbox over E2B's protocol (control plane and data plane on one port).
    Serve(Box<ServeArgs>),
    /// Report which isolation layers and limits a backend has on this host, and the fix for each
    /// missing piece (exit status 1 when it cannot run here at all).
    Doctor(BackendChoice),
}

/// Which backend, for `serve` and `doctor`.
#[derive(clap::Args)]
struct BackendChoice {
    /// Which sandboxes: `local` (bubblewrap) or `docker` (containers of the engine at
    /// DOCKER_HOST; needs the `container` feature).
    #[arg(long, default_value = "local", value_parser = ["local", "docker"])]
    backend: String,
    /// Image for `--backend docker`.
    #[arg(long, default_value = "waxell-sandbox:latest")]
    image: String,
    /// OCI runtime for `--backend docker`, e.g. `runsc` (gVisor); default: the engine's.
    #[arg(long)]
    container_runtime: Option<String>,
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Address to listen on (port 0: any free port; the address is printed).
    #[arg(long, default_value = "127.0.0.1:3000", env = "WAXELL_SANDBOX_LISTEN")]
    listen: SocketAddr,
    /// Required `X-API-KEY` (prefer the environment variable: a command line is visible to other
    /// users). Without it a random key is made up and printed at start.
    #[arg(long, env = "WAXELL_SANDBOX_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// Accept any API key or none (tests; loopback only). Sandboxes still get data-plane tokens.
    #[arg(long, conflicts_with = "api_key")]
    no_auth: bool,
    /// Another `Host` the server answers to, as `name` (any port) or `name:port` (repeatable).
    /// Loopback names on the listening ports are always accepted; anything else is refused (DNS
    /// rebinding).
    #[arg(long = "allowed-host", value_name = "HOST")]
    allowed_hosts: Vec<String>,
    /// A browser origin allowed to call the server, e.g. `http://localhost:8888` (repeatable).
    /// Requests from any other page are refused.
    #[arg(long = "allowed-origin", value_name = "ORIGIN")]
    allowed_origins: Vec<String>,
    /// Open connections at most (503 past it).
    #[arg(long, default_value_t = 256)]
    max_connections: usize,
    /// Seconds a client has to send request headers (also how long an idle connection is kept).
    #[arg(long, default_value_t = 30)]
    header_timeout: u64,
    /// Seconds a client has to send a request body (408 past it).
    #[arg(long, default_value_t = 60)]
    body_timeout: u64,
    /// Seconds a write to a client may stay blocked before the connection is dropped.
    #[arg(long, default_value_t = 30)]
    write_timeout: u64,
    /// Live sandboxes at most (429 past it). Default: as many as the host's memory holds at
    /// --memory-mib each, and at least 16.
    #[arg(long)]
    max_sandboxes: Option<usize>,
    /// Largest request body in bytes (413 past it).
    #[arg(long, default_value_t = 64 * 1024 * 1024)]
    max_body_bytes: usize,
    /// Sandbox lifetime in seconds when create does not give one.
    #[arg(long, default_value_t = 300)]
    default_timeout: u64,
    /// Longest lifetime in seconds create or set-timeout may ask for.
    #[arg(long, default_value_t = 24 * 3600)]
    max_timeout: u64,
    /// Seconds of silence before `/execute` sends a keepalive (how a gone client is noticed).
    #[arg(long, default_value_t = 5)]
    keepalive: u64,
    /// Also serve the SDKs' debug mode (E2B_DEBUG=true): listen on localhost:49999 and :49983 and
    /// create sandbox `debug_sandbox_id` on first use. Debug mode sends no key or token, so this
    /// needs --no-auth.
    #[arg(long, requires = "no_auth")]
    debug_ports: bool,
    /// Pre-started interpreters kept ready.
    #[arg(long, default_value_t = 1)]
    pool_size: usize,
    /// Longest a single run may take before the sandbox interrupts it (E2B has no server-side
    /// limit; its SDKs default to 300 s on the client side).
    #[arg(long, default_value_t = 300)]
    max_run_seconds: u64,
    /// Memory cap of each sandbox, in MiB (its cgroup; all its contexts together).
    #[arg(long, default_value_t = 512)]
    memory_mib: u64,
    /// CPU quota of each sandbox, in cores.
    #[arg(long, default_value_t = 1.0)]
    cpus: f64,
    /// Processes and threads per sandbox.
    #[arg(long, default_value_t = 128)]
    max_processes: u64,
    /// Size of each sandbox's home directory (`/home/user`, a tmpfs), in MiB.
    #[arg(long, default_value_t = 256)]
    scratch_mib: u64,
    /// Largest file the code may write or the files API may move, in MiB.
    #[arg(long, default_value_t = 64)]
    max_file_mib: u64,
    #[command(flatten)]
    choice: BackendChoice,
    /// Python modules imported before an interpreter is pooled (comma-separated, e.g.
    /// `numpy,pandas,matplotlib.pyplot`): slower pool refills, faster first cells.
    #[arg(long, value_delimiter = ',')]
    preload: Vec<String>,
    /// Keep paused sandboxes and snapshots in this directory, so they survive a restart of the
    /// server. Without it they are kept in a temporary directory removed when the server stops.
    #[arg(long, env = "WAXELL_SANDBOX_STATE_DIR")]
    state_dir: Option<std::path::PathBuf>,
    /// Largest `/home/user` one pause, snapshot or fork saves, in MiB (507 past it).
    #[arg(long, default_value_t = 256)]
    max_saved_mib: u64,
    /// Paused sandboxes kept at most.
    #[arg(long, default_value_t = 64)]
    max_paused: usize,
    /// Snapshots kept at most.
    #[arg(long, default_value_t = 64)]
    max_snapshots: usize,
    /// Refuse (501) a pause that asks to keep memory (E2B's default) when the backend cannot keep
    /// it, instead of keeping the files only (gVisor on Docker Engine keeps it: see `doctor`).
    #[arg(long)]
    refuse_memory_pause: bool,
}

fn limits(args: &ServeArgs) -> Limits {
    const MIB: u64 = 1 << 20;
    Limits::default()
        .with_memory_bytes(args.memory_mib.saturating_mul(MIB))
        .with_cpus(args.cpus)
        .with_max_processes(args.max_processes)
        .with_scratch_bytes(args.scratch_mib.saturating_mul(MIB))
        .with_max_file_bytes(args.max_file_mib.saturating_mul(MIB))
}

/// The local backend's settings from the command line; `LocalBackend::new` validates them.
fn local_config(args: &ServeArgs) -> LocalConfig {
    LocalConfig::default()
        .with_limits(limits(args))
        .with_pool_size(args.pool_size)
        .with_preload(args.preload.iter().cloned())
        .with_run_timeout(Duration::from_secs(args.max_run_seconds.max(1)))
}

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = match Cli::parse().command {
        Command::Serve(args) => *args,
        Command::Doctor(choice) => std::process::exit(doctor(&choice).await),
    };
    if let Err(message) = serve(args).await {
        eprintln!("waxell-sandbox serve: {message}");
        std::process::exit(1);
    }
}

/// Print the chosen backend's report; the exit status.
async fn doctor(choice: &BackendChoice) -> i32 {
    match choice.backend.as_str() {
        #[cfg(feature = "container")]
        "docker" => {
            let mut config = waxell_sandbox::ContainerConfig::default()
                .with_image(choice.image.clone())
                .with_pool_size(0);
            if let Some(runtime) = &choice.container_runtime {
                config = config.with_runtime(runtime.clone());
            }
            match waxell_sandbox::ContainerBackend::new(config).await {
                Ok(backend) => {
                    print!("{}", backend.report());
                    0
                }
                Err(e) => {
                    println!("container sandbox: UNAVAILABLE\n  {e}");
                    1
                }
            }
        }
        #[cfg(not(feature = "container"))]
        "docker" => {
            println!("--backend docker needs waxell-sandbox built with the `container` feature");
            1
        }
        _ => {
            let report = LocalBackend::host_report(&LocalConfig::default());
            print!("{report}");
            if report.mode.is_some() {
                0
            } else {
                1
            }
        }
    }
}

/// The backend `--backend` names, with the same limits, pool and timeouts.
async fn backend(args: &ServeArgs) -> Result<Arc<dyn SandboxBackend>, String> {
    match args.choice.backend.as_str() {
        #[cfg(feature = "container")]
        "docker" => {
            let mut config = waxell_sandbox::ContainerConfig::default()
                .with_image(args.choice.image.clone())
                .with_limits(limits(args))
                .with_pool_size(args.pool_size)
                .with_preload(args.preload.iter().cloned())
                .with_run_timeout(Duration::from_secs(args.max_run_seconds.max(1)));
            if let Some(runtime) = &args.choice.container_runtime {
                config = config.with_runtime(runtime.clone());
            }
            let backend = waxell_sandbox::ContainerBackend::new(config)
                .await
                .map_err(|e| e.to_string())?;
            report_languages(&args.choice.image, backend.languages());
            tracing::info!("{}", backend.report().summary());
            Ok(Arc::new(backend))
        }
        #[cfg(not(feature = "container"))]
        "docker" => Err("--backend docker needs waxell-sandbox built with the `container` feature".into()),
        _ => Ok(Arc::new(
            LocalBackend::new(local_config(args)).map_err(|e| e.to_string())?,
        )),
    }
}

/// Which languages the image runs, and why not the others (the container backend's counterpart
/// of `doctor`'s languages line).
#[cfg(feature = "container")]
fn report_languages(image: &str, languages: &waxell_sandbox::Languages) {
    let available: Vec<&str> = languages.available().iter().map(|l| l.name()).collect();
    tracing::info!("image {image:?} runs: {}", available.join(", "));
    for (language, why) in languages.limited() {
        tracing::warn!("{language} is limited: {why}");
    }
    for (language, why) in languages.missing() {
        tracing::info!("{language} is not available: {why}");
    }
}

/// Resolves on Ctrl-C or SIGTERM: both end the server the same way, sandboxes cleaned up.
async fn shutdown_signal() {
    let mut sigterm = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(signal) => signal,
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch SIGTERM; only Ctrl-C stops the server cleanly");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => tracing::info!("Ctrl-C: shutting down"),
        _ = sigterm.recv() => tracing::info!("SIGTERM: shutting down"),
    }
}

/// How to point E2B's SDKs at the server, as Jupyter prints its token.
fn banner(url: &str, api_key: Option<&str>, key_is_generated: bool) -> String {
    let key = match (api_key, key_is_generated) {
        (Some(key), true) => key.to_owned(),
        (Some(_), false) => "<the key you gave>".to_owned(),
        (None, _) => "e2b_0 (any value: --no-auth)".to_owned(),
    };
    format!(
        "waxell-sandbox serve: E2B's protocol on {url}\n\
         Point E2B's SDKs (or waxell's E2B client) at it with:\n\
         \x20   export E2B_API_URL={url}\n\
         \x20   export E2B_SANDBOX_URL={url}\n\
         \x20   export E2B_API_KEY={key}\n"
    )
}

/// The default of `--max-sandboxes`: the host's memory over each sandbox's cap, so that every
/// sandbox can reach its cap at once (idle ones hold far less), and at least 16. A fixed figure
/// either refused creates on a large host or promised memory a small one does not have.
fn sandboxes_the_memory_holds(memory_cap: u64) -> usize {
    let total = std::fs::read_to_string("/proc/meminfo").ok().and_then(|text| {
        let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib.saturating_mul(1024))
    });
    match total {
        Some(total) if memory_cap > 0 => ((total / memory_cap) as usize).max(16),
        _ => 16,
    }
}

/// Raise this process's open-file limit to its hard limit. Each live local sandbox holds about 7 descriptors
/// here (its kernel's pipes, pidfds, cgroup and namespace fds), so the usual soft limit of 1,024 would refuse
/// creates at about 140 live sandboxes; sandboxes set their own limit (`Limits::open_files`), so theirs stays.
fn raise_open_file_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        let raised = Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        };
        if let Err(e) = setrlimit(Resource::Nofile, raised) {
            tracing::warn!("could not raise the open-file limit to its hard limit: {e}");
        }
    }
}

async fn serve(args: ServeArgs) -> Result<(), String> {
    if args.no_auth && !args.listen.ip().is_loopback() {
        return Err(format!(
            "refusing to listen on {} with --no-auth: drop --no-auth (a key is then made up and printed) \
             or listen on a loopback address",
            args.listen
        ));
    }
    if args.api_key.is_some() && std::env::var_os("WAXELL_SANDBOX_API_KEY").is_none() {
        tracing::warn!(
            "--api-key on the command line is visible to other local users (ps); prefer WAXELL_SANDBOX_API_KEY"
        );
    }
    raise_open_file_limit();
    let backend = backend(&args).await?;
    let max_sandboxes = args
        .max_sandboxes
        .unwrap_or_else(|| sandboxes_the_memory_holds(args.memory_mib.saturating_mul(1 << 20)));
    tracing::info!("at most {max_sandboxes} live sandboxes (--max-sandboxes)");
    let mut config = ServerConfig::new()
        .with_max_sandboxes(max_sandboxes)
        .with_max_body_bytes(args.max_body_bytes)
        .with_max_connections(args.max_connections)
        .with_header_timeout(Duration::from_secs(args.header_timeout.max(1)))
        .with_body_timeout(Duration::from_secs(args.body_timeout.max(1)))
        .with_write_timeout(Duration::from_secs(args.write_timeout.max(1)))
        .with_default_timeout(Duration::from_secs(args.default_timeout))
        .with_max_timeout(Duration::from_secs(args.max_timeout))
        .with_keepalive_interval(Duration::from_secs(args.keepalive.max(1)))
        .with_debug_sandbox(args.debug_ports)
        .with_max_saved_bytes(args.max_saved_mib.saturating_mul(1 << 20))
        .with_max_paused(args.max_paused)
        .with_max_snapshots(args.max_snapshots)
        .with_refuse_memory_pause(args.refuse_memory_pause);
    if let Some(dir) = &args.state_dir {
        config = config.with_state_dir(dir.clone());
    }
    let key_is_generated = args.api_key.is_none();
    config = match (&args.api_key, args.no_auth) {
        (_, true) => config.without_auth(),
        (Some(key), false) => config.with_api_key(key.clone()),
        (None, false) => config,
    };
    for origin in &args.allowed_origins {
        config = config.allow_origin(origin.clone());
    }

    let mut addresses = vec![args.listen];
    if args.debug_ports {
        // The SDKs' debug mode dials localhost, which may resolve to either family.
        for ip in [
            IpAddr::from([127, 0, 0, 1]),
            IpAddr::from(std::net::Ipv6Addr::LOCALHOST),
        ] {
            for port in [CODE_INTERPRETER_PORT, ENVD_PORT] {
                addresses.push(SocketAddr::new(ip, port));
            }
        }
    }
    let mut listeners = Vec::new();
    for address in addresses {
        match tokio::net::TcpListener::bind(address).await {
            Ok(listener) => listeners.push(listener),
            // IPv6 may be off on this host; the IPv4 debug ports still work then.
            Err(e) if address.is_ipv6() && address != args.listen => {
                tracing::warn!(%address, error = %e, "not listening on the IPv6 debug port");
            }
            Err(e) => return Err(format!("cannot listen on {address}: {e}")),
        }
    }
    // The Host names the server answers to: loopback names on the ports it listens on, the listen
    // address itself, and what --allowed-host adds. Nothing else (DNS rebinding).
    let mut hosts = Vec::new();
    let mut bound = Vec::new();
    for listener in &listeners {
        let local = listener
            .local_addr()
            .map_err(|e| format!("cannot read the listening address: {e}"))?;
        for name in ["127.0.0.1", "localhost", "[::1]"] {
            hosts.push(format!("{name}:{}", local.port()));
        }
        hosts.push(local.to_string());
        bound.push(local);
    }
    hosts.extend(args.allowed_hosts.iter().cloned());
    config = config.with_allowed_hosts(hosts);

    let url = format!("http://{}", bound[0]);
    {
        use std::io::Write;
        let mut stdout = std::io::stdout().lock();
        let _ = stdout.write_all(banner(&url, config.api_key(), key_is_generated).as_bytes());
        let _ = stdout.flush();
    }

    // What a pause gives on this server, said once at start (the pause answers say it again).
    let keeps = if server::pause_keeps_memory(&*backend) {
        "pause keeps memory and files (a checkpoint)"
    } else {
        "pause keeps files only (this backend cannot checkpoint memory: see `waxell-sandbox doctor`)"
    };
    match &config.state_dir {
        Some(dir) => tracing::info!(
            state_dir = %dir.display(),
            "{keeps}; paused sandboxes and snapshots survive a restart"
        ),
        None => tracing::info!(
            "{keeps}; paused sandboxes and snapshots are lost when the server stops (--state-dir keeps them)"
        ),
    }
    let router = server::try_router(backend, config.clone())?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut servers = tokio::task::JoinSet::new();
    for (listener, address) in listeners.into_iter().zip(bound) {
        tracing::info!(%address, "serving E2B's protocol");
        let (router, config, mut stop) = (router.clone(), config.clone(), stop_rx.clone());
        servers.spawn(async move {
            let shutdown = async move {
                let _ = stop.changed().await;
            };
            server::serve(listener, router, &config, shutdown).await
        });
    }
    tokio::select! {
        () = shutdown_signal() => {}
        // A listener failed: stop the others too.
        Some(result) = servers.join_next() => {
            let _ = stop_tx.send(true);
            check(result)?;
        }
    }
    let _ = stop_tx.send(true);
    while let Some(result) = servers.join_next().await {
        check(result)?;
    }
    // Dropping the last router drops the registry and the backend: live sandboxes are killed and
    // the pool's interpreters, scratch mounts and cgroups removed, before the process exits.
    drop(router);
    #[cfg(feature = "container")]
    waxell_sandbox::removals_settled(Duration::from_secs(30)).await;
    tracing::info!("stopped; sandboxes cleaned up");
    Ok(())
}

fn check(result: Result<std::io::Result<()>, tokio::task::JoinError>) -> Result<(), String> {
    match result {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(format!("server failed: {e}")),
        Err(e) => Err(format!("server task failed: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn refuses_a_non_loopback_address_without_auth() {
        let cli =
            Cli::try_parse_from(["waxell-sandbox", "serve", "--listen", "0.0.0.0:0", "--no-auth"]).unwrap();
        let Command::Serve(args) = cli.command else {
            unreachable!()
        };
        let error = serve(*args).await.unwrap_err();
        assert!(error.contains("with --no-auth"), "{error}");
    }

    #[test]
    fn debug_ports_need_no_auth() {
        let error = Cli::try_parse_from(["waxell-sandbox", "serve", "--debug-ports"])
            .err()
            .expect("refused");
        assert!(error.to_string().contains("--no-auth"), "{error}");
        assert!(Cli::try_parse_from(["waxell-sandbox", "serve", "--debug-ports", "--no-auth"]).is_ok());
    }

    fn serve_args(flags: &[&str]) -> ServeArgs {
        let cli = Cli::try_parse_from(["waxell-sandbox", "serve"].iter().chain(flags)).unwrap();
        let Command::Serve(args) = cli.command else {
            unreachable!()
        };
        *args
    }

    #[tokio::test]
    async fn a_bad_limit_is_refused_naming_it() {
        let error = serve(serve_args(&["--memory-mib", "8"])).await.unwrap_err();
        assert!(
            error.contains("memory_bytes") && error.contains("32 MiB"),
            "{error}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn limit_flags_reach_the_sandboxes() {
        use waxell::sandbox::{RunOptions, SandboxOptions, SandboxSession};
        let args = serve_args(&["--scratch-mib", "5", "--max-file-mib", "2", "--pool-size", "0"]);
        let backend = LocalBackend::new(local_config(&args)).unwrap();
        let sandbox = backend.create_sandbox(&SandboxOptions::default()).await.unwrap();
        let code = r#"
import errno
def fill(path, mib):
    try:
        with open(path, "wb") as f:
            for _ in range(mib):
                f.write(b"x" * (1 << 20))
                f.flush()
        return "OK"
    except OSError as e:
        return errno.errorcode[e.errno]
(fill("one", 3), fill("two", 2), fill("three", 2))"#;
        let execution = sandbox.run_code(code, &RunOptions::default()).await.unwrap();
        // One file stops at 2 MiB (EFBIG); the 5 MiB home (2 + 2 MiB used) fills on the third (ENOSPC).
        assert_eq!(
            execution.text(),
            Some("('EFBIG', 'OK', 'ENOSPC')"),
            "{execution:?}"
        );
    }
}
