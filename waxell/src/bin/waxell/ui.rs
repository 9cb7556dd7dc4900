//! `waxell ui` (feature `ui`): the options, then [`waxell::ui::UiServer`] until Ctrl-C.

use std::ffi::OsString;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

/// See agent runs in a browser: a local web app that is also an OTLP/HTTP receiver and follows the
/// embedded default's trace files. Loopback only unless told otherwise; any other address needs a token.
#[derive(Debug, Parser)]
#[command(name = "waxell ui")]
struct UiArgs {
    /// Where the web app listens. An address that is not loopback requires a token.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:4320")]
    listen: SocketAddr,
    /// Where the OTLP/HTTP receiver listens (point OTEL_EXPORTER_OTLP_ENDPOINT at it).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:4318")]
    otlp: SocketAddr,
    /// Run no OTLP/HTTP receiver.
    #[arg(long, conflicts_with = "otlp")]
    no_otlp: bool,
    /// Where the OTLP/gRPC receiver listens (only in a waxell built with the `grpc` feature).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:4317")]
    otlp_grpc: SocketAddr,
    /// Run no OTLP/gRPC receiver.
    #[arg(long, conflicts_with = "otlp_grpc")]
    no_otlp_grpc: bool,
    /// A trace directory (its *.jsonl files) or file to import and follow; repeatable.
    /// Default: .waxell/traces.
    #[arg(long = "follow", value_name = "PATH")]
    follow: Vec<PathBuf>,
    /// The store's file.
    #[arg(long, value_name = "FILE", default_value = ".waxell/ui/store.redb")]
    store: PathBuf,
    /// Delete runs that started longer ago than this (`30d`, `12h`, `90m`, `600s`; `forever` keeps all).
    #[arg(long, value_name = "AGE", default_value = "30d", value_parser = parse_retention)]
    retention: Retention,
    /// The access token (default: generated when an address is not loopback; none on loopback).
    #[arg(long, env = "WAXELL_UI_TOKEN", value_name = "TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// A host name requests may use in their Host header besides localhost and IP addresses; repeatable.
    #[arg(long = "allow-host", value_name = "NAME")]
    allowed_hosts: Vec<String>,
}

#[derive(Debug, Clone, Copy)]
struct Retention(Option<Duration>);

fn parse_retention(s: &str) -> Result<Retention, String> {
    let s = s.trim();
    if s.eq_ignore_ascii_case("forever") || s == "0" {
        return Ok(Retention(None));
    }
    let (number, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = number
        .parse()
        .map_err(|_| format!("expected a number and a unit (30d, 12h, 90m, 600s), got {s:?}"))?;
    let secs = match unit {
        "d" => n * 86_400,
        "h" => n * 3_600,
        "m" => n * 60,
        "s" | "" => n,
        _ => return Err(format!("unknown unit {unit:?} in {s:?}: use d, h, m or s")),
    };
    Ok(Retention(Some(Duration::from_secs(secs))))
}

/// Run `waxell ui` with `args` (those after `ui`).
pub(crate) fn run(args: &[OsString], out: &mut dyn Write, err: &mut dyn Write) -> u8 {
    let parsed =
        UiArgs::try_parse_from(std::iter::once(OsString::from("waxell ui")).chain(args.iter().cloned()));
    let args = match parsed {
        Ok(a) => a,
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
    let options = waxell::ui::UiOptions {
        listen: args.listen,
        otlp: (!args.no_otlp).then_some(args.otlp),
        otlp_grpc: (!args.no_otlp_grpc).then_some(args.otlp_grpc),
        store: args.store,
        follow: if args.follow.is_empty() {
            vec![PathBuf::from(".waxell/traces")]
        } else {
            args.follow
        },
        retention: args.retention.0,
        token: args.token,
        allowed_hosts: args.allowed_hosts,
        ..waxell::ui::UiOptions::default()
    };
    let follow = options.follow.clone();
    let ui = match waxell::ui::UiServer::start(options) {
        Ok(ui) => ui,
        Err(e) => {
            let _ = writeln!(err, "waxell ui: {e}");
            return 1;
        }
    };
    let _ = writeln!(out, "waxell ui: {}", ui.url());
    if let Some(endpoint) = ui.otlp_endpoint() {
        let _ = writeln!(
            out,
            "  OTLP/HTTP receiver: OTEL_EXPORTER_OTLP_ENDPOINT={endpoint}"
        );
    }
    if let Some(endpoint) = ui.otlp_grpc_endpoint() {
        let _ = writeln!(
            out,
            "  OTLP/gRPC receiver: OTEL_EXPORTER_OTLP_ENDPOINT={endpoint} OTEL_EXPORTER_OTLP_PROTOCOL=grpc"
        );
    }
    let receives = ui.otlp_endpoint().is_some() || ui.otlp_grpc_endpoint().is_some();
    if receives && ui.token().is_some() {
        let _ = writeln!(
            out,
            "  (with OTEL_EXPORTER_OTLP_HEADERS=authorization=Bearer%20<the token above>)"
        );
    }
    let shown: Vec<String> = follow.iter().map(|p| p.display().to_string()).collect();
    let _ = writeln!(out, "  following: {}", shown.join(", "));
    let _ = writeln!(out, "  Ctrl-C to stop");
    let _ = out.flush();
    ui.run_until_ctrl_c();
    0
}
