//! The Code Sandbox Agent: an orchestrator coordinating a `sandbox-runner` (runs code in a sandbox, handles
//! errors, and lets the LLM write and debug a complete analysis script) and a `sandbox-evaluator`
//! (interprets the results with the LLM, reasons, decides and scores), traced end to end.
//!
//! ```text
//! bash scripts/setup.sh && cargo run -p demos -- --dry-run          # no key needed; code really runs
//! OPENAI_API_KEY=sk-... cargo run -p demos                          # live LLM (OPENAI_BASE_URL, --model)
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
mod progress;
mod script;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use waxell::llm::Client;
use waxell::sandbox::SandboxBackend;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum SandboxKind {
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
    #[arg(long, value_enum, default_value = "local")]
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
    /// How many scripts the code agent may run before giving up.
    #[arg(long, default_value_t = 3)]
    max_attempts: u32,
    /// Where the chart is written.
    #[arg(long, default_value = ".waxell/demo")]
    output_dir: PathBuf,
    /// No progress lines.
    #[arg(long)]
    quiet: bool,
}

type DemoResult<T> = agents::DemoResult<T>;

fn llm_client(args: &Args) -> DemoResult<Client> {
    if args.dry_run {
        return Ok(Client::builder()
            .with_transport(script::dry_run_transport())
            .with_model(args.model.clone())
            .build()?);
    }
    if std::env::var("OPENAI_API_KEY").map_or(true, |k| k.trim().is_empty()) {
        return Err(
            "OPENAI_API_KEY is not set: export it for a live run, or pass --dry-run to script the LLM".into(),
        );
    }
    Ok(Client::builder().with_model(args.model.clone()).build()?)
}

async fn sandbox_backend(args: &Args) -> DemoResult<Box<dyn SandboxBackend>> {
    Ok(match (&args.sandbox_url, args.sandbox) {
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
        (None, SandboxKind::Local) => Box::new(waxell_sandbox::LocalBackend::new(
            waxell_sandbox::LocalConfig::default(),
        )?),
    })
}

fn print_summary(outcome: &agents::Outcome, guard: &waxell::Guard) {
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
        if guard.otlp_endpoint().is_some() {
            let ui = std::env::var("JAEGER_UI_URL").unwrap_or_else(|_| "http://localhost:16686".to_owned());
            println!("jaeger: {}/trace/{trace}", ui.trim_end_matches('/'));
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
            SandboxKind::Local => "local",
            SandboxKind::E2b => "e2b",
            SandboxKind::Docker => "docker",
        })
    ));
    let llm = llm_client(&args)?;
    let backend = sandbox_backend(&args).await?;
    let env = agents::Env {
        llm: &llm,
        model: args.model.clone(),
        max_attempts: args.max_attempts,
        progress: &progress,
        output_dir: args.output_dir.clone(),
    };
    let outcome = agents::orchestrator(&env, backend.as_ref()).await?;
    // Flush before printing the summary, so the trace tree (embedded default) comes first.
    let _ = guard.force_flush();
    print_summary(&outcome, &guard);
    drop(guard);
    if !outcome.report.analysis.succeeded {
        return Err("the code agent did not produce a working analysis".into());
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: could not start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
