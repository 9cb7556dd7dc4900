//! The `waxell` command (feature `cli`): send saved trace files to an OTLP endpoint (`replay`), read them as
//! a tree with no backend at all (`show`, `show --follow DIR`), over the library's public `waxell::export`
//! API. It lives with the binary (nothing in the library exists for it); `tests/tests/cli.rs` compiles this
//! file too, to run the command in process against the OTLP receivers.
//!
//! ```text
//! cargo install --path waxell --features cli      # from a checkout of the repository
//! waxell replay .waxell/traces/1700000000000-42.jsonl
//! waxell show .waxell/traces/1700000000000-42.jsonl
//! waxell show --follow .waxell/traces
//! ```

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};

use waxell::export::OtlpSettings;
use waxell::Protocol;

/// Send saved waxell traces to an OpenTelemetry (OTLP) collector, or print them as a tree.
#[derive(Debug, Parser)]
#[command(name = "waxell", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum ProtocolArg {
    #[value(name = "http/protobuf")]
    HttpProtobuf,
    #[value(name = "http/json")]
    HttpJson,
    #[value(name = "grpc")]
    Grpc,
}

impl From<ProtocolArg> for Protocol {
    fn from(p: ProtocolArg) -> Self {
        match p {
            ProtocolArg::HttpProtobuf => Protocol::HttpProtobuf,
            ProtocolArg::HttpJson => Protocol::HttpJson,
            ProtocolArg::Grpc => Protocol::Grpc,
        }
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Send trace files (OTLP JSON lines, as the SDK writes them) to an OTLP endpoint.
    ///
    /// Reads the same variables as the SDK, with the same meaning: OTEL_EXPORTER_OTLP_ENDPOINT is a base URL
    /// (`/v1/traces` is appended for HTTP), OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is used verbatim,
    /// OTEL_EXPORTER_OTLP_HEADERS, OTEL_EXPORTER_OTLP_PROTOCOL and OTEL_EXPORTER_OTLP_TIMEOUT (ms) apply.
    /// Each flag overrides its variable. Without any endpoint, http://127.0.0.1:4318 (gRPC: :4317).
    /// Reports per file how many spans were sent and accepted; exits with 1 if any request failed.
    #[command(
        after_help = "Example (MLflow 3): waxell replay FILE --endpoint http://127.0.0.1:5000 \
                            --header x-mlflow-experiment-id=0"
    )]
    Replay {
        /// Trace files to send.
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
        /// Base URL of the collector, like OTEL_EXPORTER_OTLP_ENDPOINT (`/v1/traces` is appended for HTTP);
        /// overrides both endpoint variables.
        #[arg(long, value_name = "URL", conflicts_with = "traces_endpoint")]
        endpoint: Option<String>,
        /// Full traces URL, used verbatim, like OTEL_EXPORTER_OTLP_TRACES_ENDPOINT; overrides both variables.
        #[arg(long, value_name = "URL")]
        traces_endpoint: Option<String>,
        /// Transport; overrides OTEL_EXPORTER_OTLP_PROTOCOL.
        #[arg(long, value_enum)]
        protocol: Option<ProtocolArg>,
        /// An extra header `key=value` (repeatable); added to OTEL_EXPORTER_OTLP_HEADERS, replacing a header of
        /// the same name.
        #[arg(long = "header", value_name = "KEY=VALUE", value_parser = parse_header)]
        headers: Vec<(String, String)>,
        /// Longest wait per request in milliseconds; overrides OTEL_EXPORTER_OTLP_TIMEOUT.
        #[arg(long, value_name = "MS")]
        timeout_ms: Option<u64>,
    },
    /// Print saved traces as the tree the SDK prints at run time (agents, tools, LLM calls with tokens and
    /// cost, scores).
    Show {
        /// Trace files to print.
        #[arg(value_name = "FILE", required_unless_present = "follow")]
        files: Vec<PathBuf>,
        /// Watch this traces directory (e.g. .waxell/traces) and print each new run as it is written.
        #[arg(long, value_name = "DIR", conflicts_with = "files")]
        follow: Option<PathBuf>,
    },
    /// Serve a local web app that shows runs (chats, sandbox cells with their charts, decisions, scores),
    /// receives OTLP on 127.0.0.1:4318 and follows .waxell/traces (feature `ui`; `waxell ui --help`).
    #[command(disable_help_flag = true)]
    Ui {
        /// The options of `waxell ui` (see `waxell ui --help`).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, value_name = "OPTIONS")]
        args: Vec<std::ffi::OsString>,
    },
}

/// `waxell ui ARGS...`: set by the binary when it is built with the `ui` feature (the web app lives in
/// `bin/waxell/ui.rs`), so this file builds the same without it.
pub(crate) type UiCommand = fn(&[std::ffi::OsString], &mut dyn Write, &mut dyn Write) -> u8;
pub(crate) static UI_COMMAND: std::sync::OnceLock<UiCommand> = std::sync::OnceLock::new();

fn parse_header(s: &str) -> Result<(String, String), String> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("expected key=value, got {s:?}"))?;
    if k.trim().is_empty() {
        return Err(format!("empty header name in {s:?}"));
    }
    Ok((k.trim().to_owned(), v.to_owned()))
}

/// Run the command with `args` (the first is the program name), writing to `out` and `err`; returns the
/// exit code: 0 success, 1 a failed request or unreadable file, 2 bad usage or settings.
pub(crate) fn run<I, T>(args: I, out: &mut dyn Write, err: &mut dyn Write) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let text = e.render().to_string();
            return if e.use_stderr() {
                let _ = write!(err, "{text}");
                2
            } else {
                let _ = write!(out, "{text}");
                0
            };
        }
    };
    match cli.command {
        Command::Ui { args } => match UI_COMMAND.get() {
            Some(ui) => ui(&args, out, err),
            None => {
                let _ = writeln!(
                    err,
                    "waxell: this waxell was built without the `ui` feature: \
                     cargo install --path waxell --features ui (from a checkout of the repository)"
                );
                2
            }
        },
        Command::Replay {
            files,
            endpoint,
            traces_endpoint,
            protocol,
            headers,
            timeout_ms,
        } => {
            let mut settings = match OtlpSettings::from_env() {
                Ok(s) => s,
                Err(e) => {
                    let _ = writeln!(err, "waxell: {e}");
                    return 2;
                }
            };
            if let Some(p) = protocol {
                settings.protocol = p.into();
            }
            if let Some(url) = traces_endpoint {
                settings.traces_endpoint = Some(url);
            } else if let Some(base) = endpoint {
                settings.traces_endpoint = Some(OtlpSettings::traces_url_for_base(&base, settings.protocol));
            } else if settings.traces_endpoint.is_none() {
                let base = match settings.protocol {
                    Protocol::Grpc => "http://127.0.0.1:4317",
                    _ => "http://127.0.0.1:4318",
                };
                settings.traces_endpoint = Some(OtlpSettings::traces_url_for_base(base, settings.protocol));
            }
            for (k, v) in headers {
                settings
                    .headers
                    .retain(|(name, _)| !name.eq_ignore_ascii_case(&k));
                settings.headers.push((k, v));
            }
            if let Some(ms) = timeout_ms {
                settings.timeout = Duration::from_millis(ms);
            }
            replay(&files, &settings, out, err)
        }
        Command::Show { files, follow } => match follow {
            Some(dir) => {
                let result = waxell::export::follow(
                    &dir,
                    Duration::from_millis(300),
                    |tree| {
                        let _ = write!(out, "{tree}");
                        let _ = out.flush();
                    },
                    || true,
                );
                match result {
                    Ok(()) => 0,
                    Err(e) => {
                        let _ = writeln!(err, "waxell: {e}");
                        1
                    }
                }
            }
            None => {
                let mut code = 0;
                for file in files {
                    match waxell::export::render_trace_file(&file) {
                        Ok(tree) => {
                            let _ = write!(out, "{tree}");
                            for url in ui_links(&file) {
                                let _ = writeln!(out, "waxell ui: {url}");
                            }
                        }
                        Err(e) => {
                            let _ = writeln!(err, "waxell: {e}");
                            code = 1;
                        }
                    }
                }
                code
            }
        },
    }
}

/// Links to the file's runs in a `waxell ui` running for this directory (none when no UI is up).
fn ui_links(file: &std::path::Path) -> Vec<String> {
    let Ok(requests) = waxell::export::read_trace_file(file) else {
        return Vec::new();
    };
    let mut traces: Vec<String> = Vec::new();
    for span in requests
        .iter()
        .flat_map(|(_, r)| &r.resource_spans)
        .flat_map(|rs| &rs.scope_spans)
        .flat_map(|ss| &ss.spans)
        .filter(|s| s.parent_span_id.is_empty())
    {
        let id: String = span.trace_id.iter().map(|b| format!("{b:02x}")).collect();
        if !traces.contains(&id) {
            traces.push(id);
        }
    }
    traces
        .iter()
        .map_while(|id| waxell::export::ui_run_url(id))
        .collect()
}

fn replay(files: &[PathBuf], settings: &OtlpSettings, out: &mut dyn Write, err: &mut dyn Write) -> u8 {
    let mut failed = false;
    for file in files {
        match waxell::export::replay_with(file, settings) {
            Ok(report) => {
                let _ = writeln!(
                    out,
                    "{}: sent {} spans in {} requests to {}; accepted {}",
                    file.display(),
                    report.spans_sent,
                    report.requests,
                    report.endpoint,
                    report.spans_accepted
                );
                for failure in &report.failures {
                    let _ = writeln!(err, "waxell: {}: {failure}", file.display());
                }
                failed |= !report.is_success();
            }
            Err(e) => {
                let _ = writeln!(err, "waxell: {e}");
                failed = true;
            }
        }
    }
    u8::from(failed)
}
