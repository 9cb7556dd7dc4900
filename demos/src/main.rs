//! The Code Sandbox Agent: an orchestrator coordinating a `sandbox-runner` (runs code in a sandbox, handles
//! errors, and lets the LLM write and debug a complete analysis script) and a `sandbox-evaluator`
//! (interprets the results with the LLM, reasons, decides and scores), traced end to end.
//!
//! ```text
//! bash scripts/setup.sh && cargo run -p demos -- --dry-run          # no key needed; code really runs
//! OPENAI_API_KEY=sk-... cargo run -p demos                          # live LLM (OPENAI_BASE_URL, --model)
//! cargo run -p demos -- --base-url http://localhost:11434/v1 --model llama3.2  # any OpenAI-compatible server
//! cargo run -p demos -- --dry-run --sandbox e2b                     # E2B's cloud (E2B_API_KEY)
//! cargo run -p demos -- --dry-run --sandbox docker                  # a container (DOCKER_HOST)
//! cargo run -p demos -- --dry-run --sandbox-url http://127.0.0.1:49982  # a `waxell-sandbox serve`
//! ```
//! With `OTEL_EXPORTER_OTLP_ENDPOINT` set, spans go to that collector (e.g. Jaeger, see docs/jaeger.md)
//! and the summary prints the trace's Jaeger link; otherwise the trace tree is printed and written to a file.

#![allow(
    unreachable_pub,
    reason = "a binary crate: `pub` in its modules means crate-wide"
)]

mod agents;
mod preflight;
mod progress;
mod script;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use waxell::llm::{Client, ClientBuilder};
use waxell::sandbox::SandboxBackend;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum SandboxKind {
    /// The best that works here: the local sandbox (root mode, else rootless), else a container
    /// engine's (e.g. Docker Desktop on macOS), else E2B when E2B_API_KEY is set.
    Auto,
    /// The local isolated sandbox (waxell-sandbox).
    Local,
    /// E2B's cloud (needs E2B_API_KEY).
    E2b,
    /// A container of a Docker-compatible engine at DOCKER_HOST (image `waxell-sandbox:latest`;
    /// scripts/setup-container.sh builds it); `--container-runtime runsc` for gVisor.
    Docker,
}

/// The Code Sandbox Agent demo.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// Script the LLM (no API key needed); every line of code still really runs in the sandbox.
    #[arg(long)]
    dry_run: bool,
    /// Which sandbox to use.
    #[arg(long, value_enum, default_value = "auto")]
    sandbox: SandboxKind,
    /// OCI runtime for `--sandbox docker`, e.g. `runsc` (gVisor); default: the engine's.
    #[arg(long, value_name = "NAME")]
    container_runtime: Option<String>,
    /// Use a `waxell-sandbox serve` (E2B protocol) at this URL instead.
    #[arg(long, value_name = "URL")]
    sandbox_url: Option<String>,
    /// Model for live runs.
    #[arg(long, default_value = "gpt-4o-mini", env = "WAXELL_DEMO_MODEL")]
    model: String,
    /// OpenAI-compatible API root for live runs, e.g. `http://localhost:11434/v1` (Ollama); default:
    /// `OPENAI_BASE_URL`, else OpenAI's. The key (`OPENAI_API_KEY`) is optional for such servers.
    #[arg(long, value_name = "URL")]
    base_url: Option<String>,
    /// Stream the LLM's answers (server-sent events) instead of waiting for each whole response.
    #[arg(long)]
    stream: bool,
    /// How many scripts the code agent may run before giving up.
    #[arg(long, default_value_t = 3)]
    max_attempts: u32,
    /// Where the chart is written.
    #[arg(long, default_value = ".waxell/demo")]
    output_dir: PathBuf,
    /// No progress lines.
    #[arg(long)]
    quiet: bool,
    /// Do not check first that the sandbox's Python has pandas, numpy and matplotlib.
    #[arg(long)]
    skip_sandbox_check: bool,
    /// Print the dry run's cells as one plain Python program and exit (the benchmark's anchor: the cells'
    /// own work, run by the sandbox's Python without the sandbox).
    #[arg(long, hide = true)]
    print_cells_as_python: bool,
}

/// The cells a dry run sends to the sandbox, in order: the module check, the runner's three snippets, and the
/// scripted LLM's two analysis scripts.
fn dry_run_cells() -> Vec<String> {
    vec![
        preflight::check_cell(),
        script::BASIC_CODE.to_owned(),
        script::statistics_code(),
        script::ERROR_CODE.to_owned(),
        script::buggy_analysis_script(),
        script::fixed_analysis_script(),
    ]
}

type DemoResult<T> = agents::DemoResult<T>;

fn llm_client(args: &Args) -> DemoResult<Client> {
    if args.dry_run {
        return Ok(Client::builder()
            .with_transport(script::dry_run_transport())
            .with_model(args.model.clone())
            .build()?);
    }
    // `from_env` reads OPENAI_API_KEY and OPENAI_BASE_URL; `--base-url` wins over the variable.
    let mut builder = ClientBuilder::from_env().with_model(args.model.clone());
    if let Some(url) = args.base_url.as_deref().filter(|u| !u.trim().is_empty()) {
        builder = builder.with_base_url(url.trim());
    }
    let key_set = std::env::var("OPENAI_API_KEY").is_ok_and(|k| !k.trim().is_empty());
    let custom_server =
        args.base_url.is_some() || std::env::var("OPENAI_BASE_URL").is_ok_and(|u| !u.trim().is_empty());
    // OpenAI itself needs a key; a local or self-hosted server may not.
    if !key_set && !custom_server {
        return Err("OPENAI_API_KEY is not set: export it for a live run against OpenAI, point --base-url (or \
             OPENAI_BASE_URL) at an OpenAI-compatible server that needs no key, or pass --dry-run to script the LLM"
            .into());
    }
    Ok(builder.build()?)
}

/// The backend and one line saying which it is and why.
async fn sandbox_backend(args: &Args) -> DemoResult<(Box<dyn SandboxBackend>, String)> {
    if args.sandbox_url.is_none() && matches!(args.sandbox, SandboxKind::Auto | SandboxKind::Local) {
        return local_or_fallback(args.sandbox).await;
    }
    let backend: Box<dyn SandboxBackend> = match (&args.sandbox_url, args.sandbox) {
        (Some(url), _) => {
            let config = waxell::e2b::E2bConfig::from_env()
                .with_api_url(url.clone())
                .with_sandbox_url(url.clone());
            Box::new(waxell::e2b::E2bBackend::new(config)?)
        }
        (None, SandboxKind::E2b) => {
            if std::env::var("E2B_API_KEY").map_or(true, |k| k.trim().is_empty()) {
                return Err("--sandbox e2b needs E2B_API_KEY (or use the local sandbox, the default)".into());
            }
            Box::new(waxell::e2b::E2bBackend::from_env()?)
        }
        (None, SandboxKind::Docker) => {
            let mut config = waxell_sandbox::ContainerConfig::default();
            if let Some(runtime) = &args.container_runtime {
                config = config.with_runtime(runtime.clone());
            }
            Box::new(waxell_sandbox::ContainerBackend::new(config).await?)
        }
        (None, _) => unreachable!("handled above"),
    };
    let why = match &args.sandbox_url {
        Some(url) => format!("a waxell-sandbox serve at {url} (--sandbox-url)"),
        None if args.sandbox == SandboxKind::Docker => {
            "a container of the engine at DOCKER_HOST (--sandbox docker)".to_owned()
        }
        None => "E2B's cloud (--sandbox e2b)".to_owned(),
    };
    Ok((backend, why))
}

/// The local sandbox (it runs in root mode when started by root, else rootless), with its host
/// report's summary. When it cannot run here (macOS, Windows, a Linux host without namespaces),
/// `auto` goes on to a container engine (Docker Desktop, Docker, Podman: `DOCKER_HOST` or the usual
/// sockets) and then to E2B if a key is set; the error names why each one could not be used.
async fn local_or_fallback(kind: SandboxKind) -> DemoResult<(Box<dyn SandboxBackend>, String)> {
    // A pool of one: the module check's sandbox starts with the backend, and the agents' sandbox starts
    // while the check runs.
    let config = waxell_sandbox::LocalConfig::default().with_pool_size(1);
    let local_error = match waxell_sandbox::LocalBackend::new(config) {
        Ok(local) => {
            let why = local.capabilities().summary();
            return Ok((Box::new(local), why));
        }
        Err(e) if kind == SandboxKind::Auto => e,
        Err(e) => return Err(e.into()),
    };
    let container_error =
        match waxell_sandbox::ContainerBackend::new(waxell_sandbox::ContainerConfig::default()).await {
            Ok(container) => {
                let why = format!(
                    "a container ({} runtime), because the local sandbox is unavailable here ({local_error})",
                    container.runtime()
                );
                return Ok((Box::new(container), why));
            }
            Err(e) => e,
        };
    if std::env::var("E2B_API_KEY").is_ok_and(|k| !k.trim().is_empty()) {
        let why = format!(
            "E2B's cloud, because the local sandbox is unavailable here ({local_error}) and so is a container \
             ({container_error}), and E2B_API_KEY is set"
        );
        return Ok((Box::new(waxell::e2b::E2bBackend::from_env()?), why));
    }
    Err(format!(
        "no sandbox can run here. The local sandbox: {local_error}. A container: {container_error}. \
         E2B: E2B_API_KEY is not set."
    )
    .into())
}

fn print_summary(outcome: &agents::Outcome) {
    let r = &outcome.report;
    let a = &r.analysis;
    println!("\n══ Code Sandbox Agent ══");
    println!("sandbox: {} ({})", r.basic.sandbox_id, r.backend);
    println!(
        "run_basic_code:  {}",
        r.basic.stdout.lines().next().unwrap_or("(no output)")
    );
    println!(
        "run_statistics:  {}",
        r.statistics.stdout.lines().next().unwrap_or("(no output)")
    );
    println!(
        "run_error_test:  caught {}",
        r.error_test
            .error_type
            .as_deref()
            .unwrap_or("no error (unexpected)")
    );
    println!(
        "analyze_sales:   {} after {} attempt(s)",
        if a.succeeded { "succeeded" } else { "FAILED" },
        a.attempts.len()
    );
    for attempt in &a.attempts {
        println!(
            "  attempt {}: {}",
            attempt.number,
            attempt.error.as_deref().unwrap_or("ok")
        );
    }
    if !a.stdout.is_empty() {
        println!("\n── analysis output ──\n{}", a.stdout.trim_end());
    }
    if !a.summary.is_empty() {
        println!("\n── code agent's summary ──\n{}", a.summary);
    }
    println!("\n── evaluator ──\n{}", outcome.evaluation.interpretation);
    println!("conclusion: {}", outcome.evaluation.conclusion);
    println!("output format: {}", outcome.evaluation.output_format);
    println!("\n── scores ──");
    for (name, value, comment) in &outcome.evaluation.scores {
        println!("{name:<24} {value:.2}  {comment}");
    }
    match (&a.chart_path, a.chart_is_png) {
        (Some(path), true) => println!("\nchart: {path} (PNG)"),
        (Some(path), false) => println!("\nchart: {path} (not a valid PNG)"),
        (None, _) => println!("\nchart: none produced"),
    }
    if !a.files.is_empty() {
        println!("files in the sandbox: {}", a.files.join(", "));
    }
    if let Some(trace) = &outcome.trace_id {
        println!("trace id: {trace}");
    }
}

/// Once the export has ended (the guard shut down, so every figure is final and agrees with the exit report):
/// the link to the trace only when the endpoint took all of it; otherwise why not, where it was saved and the
/// command that sends it, and, when nothing listened, how to start that kind of backend.
fn print_export_outcome(
    trace: &str,
    url: &str,
    export: &waxell::export::DropCounter,
    shutdown: Result<(), String>,
) {
    let kind = waxell::export::EndpointKind::of(url);
    let (saved, dropped) = (export.saved().total(), export.dropped().total());
    if shutdown.is_ok() && export.exported() > 0 && saved == 0 && dropped == 0 {
        // A `waxell ui` running for this directory is where the user looks first.
        if let Some(page) = waxell::export::ui_run_url(trace) {
            println!("waxell ui: {page}");
            return;
        }
        let jaeger_ui = std::env::var("JAEGER_UI_URL").ok();
        match kind.trace_page(url, trace, jaeger_ui.as_deref()) {
            Some((label, page)) => println!("{label}: {page}"),
            None => println!("trace sent to {} at {url}", kind.name()),
        }
        return;
    }
    let why = export
        .last_error()
        .or_else(|| shutdown.err())
        .unwrap_or_else(|| "it did not confirm the spans".to_owned());
    println!("trace export to {} at {url} failed: {why}", kind.name());
    match export.saved_to() {
        Some(file) if saved > 0 => {
            println!("trace saved to {} ({saved} spans)", file.display());
            println!(
                "send it once {} is up: {}",
                kind.name(),
                waxell::export::replay_hint(file)
            );
        }
        _ if dropped > 0 => println!("{dropped} spans were lost (no trace file to save them to)"),
        _ => {}
    }
    if why.contains("refused") {
        match kind {
            waxell::export::EndpointKind::OtlpPort => println!(
                "nothing listens there; start Jaeger: docker compose -f docs/jaeger/docker-compose.yml up -d  (see docs/jaeger.md)"
            ),
            waxell::export::EndpointKind::Other => {}
            other => println!("nothing listens there; is {} running? (see docs/jaeger.md)", other.name()),
        }
    }
}

async fn run(args: Args) -> DemoResult<()> {
    let guard = waxell::builder().with_service_name("code-sandbox-agent").init()?;
    let progress = progress::Progress::new(args.quiet);
    progress.note(&format!(
        "code-sandbox-agent ▸ LLM: {}; sandbox: {}",
        if args.dry_run {
            "scripted (dry run)".to_owned()
        } else {
            args.model.clone()
        },
        args.sandbox_url.as_deref().unwrap_or(match args.sandbox {
            SandboxKind::Auto => "auto",
            SandboxKind::Local => "local",
            SandboxKind::E2b => "e2b",
            SandboxKind::Docker => "docker",
        })
    ));
    let llm = llm_client(&args)?;
    let (backend, why) = sandbox_backend(&args).await?;
    progress.note(&format!("sandbox ▸ {why}"));
    if !args.skip_sandbox_check {
        let target = match (&args.sandbox_url, args.sandbox) {
            (Some(url), _) => preflight::Target::Server(url.clone()),
            (None, SandboxKind::E2b) => preflight::Target::E2bCloud,
            (None, _) => match backend.name() {
                "e2b" => preflight::Target::E2bCloud,
                _ => preflight::Target::Local,
            },
        };
        progress
            .spin(
                "checking the sandbox's Python modules",
                preflight::check_sandbox(backend.as_ref(), &target),
            )
            .await?;
    }
    let env = agents::Env {
        llm: &llm,
        model: args.model.clone(),
        stream: args.stream,
        max_attempts: args.max_attempts,
        progress: &progress,
        output_dir: args.output_dir.clone(),
    };
    let outcome = agents::orchestrator(&env, backend.as_ref()).await?;
    // Flush before printing the summary, so the trace tree (embedded default) comes first. A failed flush
    // is only reported (with why and where the trace went, below): the demo's result stands.
    let flushed = guard.force_flush();
    print_summary(&outcome);
    let (endpoint, export) = (guard.otlp_endpoint().map(str::to_owned), guard.drop_counter());
    // The exit report (stderr) comes from the shutdown; what follows reads the same final figures.
    let shut_down = guard.shutdown().map_err(|e| e.to_string());
    let shutdown = flushed.map_err(|e| e.to_string()).and(shut_down);
    if let (Some(trace), Some(url)) = (&outcome.trace_id, endpoint) {
        print_export_outcome(trace, &url, &export, shutdown);
    }
    if !outcome.report.analysis.succeeded {
        return Err("the code agent did not produce a working analysis".into());
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.print_cells_as_python {
        print!("{}", script::as_plain_python(&dry_run_cells()));
        return ExitCode::SUCCESS;
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: could not start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        let result = run(args).await;
        // Dropped container sandboxes are removed by tasks that must finish before the runtime goes.
        waxell_sandbox::removals_settled(std::time::Duration::from_secs(30)).await;
        result
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
