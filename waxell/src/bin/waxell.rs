//! `waxell replay FILE`: send a trace file written by the embedded default to an OTLP endpoint.
//!
//! ```text
//! cargo run -p waxell --bin waxell -- replay .waxell/traces/1700000000000-42.jsonl \
//!     [--endpoint http://127.0.0.1:4318/v1/traces] [--protocol http/protobuf|http/json|grpc] [--header k=v]...
//! ```
//! Without `--endpoint`, the standard `OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT` variables apply, then
//! `http://127.0.0.1:4318/v1/traces` (or `http://127.0.0.1:4317` for gRPC).

use std::path::PathBuf;
use std::process::ExitCode;

use waxell::Protocol;

const USAGE: &str = "usage: waxell replay FILE [--endpoint URL] [--protocol http/protobuf|http/json|grpc] [--header key=value]...";

fn main() -> ExitCode {
    match run(std::env::args().skip(1).collect()) {
        Ok(message) => {
            println!("{message}");
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("waxell: {message}");
            ExitCode::from(2)
        }
    }
}

fn run(args: Vec<String>) -> Result<String, String> {
    let mut args = args.into_iter();
    match args.next().as_deref() {
        Some("replay") => {}
        Some("-h" | "--help") | None => return Ok(USAGE.to_owned()),
        Some(other) => return Err(format!("unknown command {other:?}\n{USAGE}")),
    }
    let mut file: Option<PathBuf> = None;
    let mut endpoint: Option<String> = None;
    let mut protocol: Option<Protocol> = None;
    let mut headers = Vec::new();
    while let Some(arg) = args.next() {
        let mut value = |flag: &str| {
            args.next()
                .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))
        };
        match arg.as_str() {
            "--endpoint" => endpoint = Some(value("--endpoint")?),
            "--protocol" => protocol = Some(value("--protocol")?.parse().map_err(|e| format!("{e}"))?),
            "--header" => {
                let pair = value("--header")?;
                let (k, v) = pair
                    .split_once('=')
                    .ok_or_else(|| format!("--header expects key=value, got {pair:?}"))?;
                headers.push((k.to_owned(), v.to_owned()));
            }
            flag if flag.starts_with("--") => return Err(format!("unknown option {flag}\n{USAGE}")),
            path if file.is_none() => file = Some(PathBuf::from(path)),
            extra => return Err(format!("unexpected argument {extra:?}\n{USAGE}")),
        }
    }
    let file = file.ok_or_else(|| format!("no trace file given\n{USAGE}"))?;
    let protocol = protocol.unwrap_or(Protocol::HttpProtobuf);
    let endpoint = endpoint
        .or_else(|| waxell::export::traces_endpoint_from_env(protocol))
        .unwrap_or_else(|| match protocol {
            Protocol::Grpc => "http://127.0.0.1:4317".to_owned(),
            _ => "http://127.0.0.1:4318/v1/traces".to_owned(),
        });
    let sent = waxell::export::replay(&file, &endpoint, protocol, &headers).map_err(|e| e.to_string())?;
    Ok(format!(
        "sent {} spans in {} requests from {} to {endpoint}",
        sent.spans,
        sent.requests,
        file.display()
    ))
}
