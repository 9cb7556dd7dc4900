//! The embedded default, used when no OTLP endpoint is configured: a readable trace tree on the console
//! (stderr unless `Builder::with_console_writer` says otherwise) and the
//! spans as OTLP JSON lines (the OpenTelemetry file-exporter format, one `ExportTraceServiceRequest` per
//! line) in a file that [`replay`] can send to any OTLP endpoint later.

mod console;
mod endpoint;
pub(crate) mod fail_open;
pub(crate) mod jsonl;
#[cfg(feature = "otlp-http")]
pub(crate) mod otlp_http;
mod otlp_proto;
#[cfg(any(feature = "otlp-http", feature = "grpc"))]
mod replay;
mod show;
pub(crate) mod transport;
mod ui_link;

pub use endpoint::EndpointKind;
pub use fail_open::{DropCounter, DroppedSpans, SavedSpans};
#[cfg(any(feature = "otlp-http", feature = "grpc"))]
pub use replay::{replay, replay_with, ReplayError, ReplayReport, ReplaySummary};
pub use show::{follow, read_trace_file, render_trace_file, ShowError};
pub use ui_link::{ui_run_url, ui_run_url_in, UI_URL_FILE};

pub use crate::config::OtlpSettings;

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry::trace::TraceId;
use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use opentelemetry_sdk::Resource;

use jsonl::JsonLinesFile;

/// Where the embedded default writes spans when `WAXELL_TRACE_FILE` is not set:
/// `.waxell/traces/<unix-millis>-<pid>.jsonl` under the working directory.
pub(crate) fn default_trace_file() -> PathBuf {
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or_default();
    PathBuf::from(".waxell")
        .join("traces")
        .join(format!("{millis}-{}.jsonl", std::process::id()))
}

/// The command that sends a saved trace file to the configured OTLP endpoint, as it works from the user's
/// directory on this machine: `waxell replay FILE` when a `waxell` command is on `PATH`; else, inside a checkout
/// of this repository, the `cargo run` line that builds it; else installing the very `waxell` source this
/// program was built from (Cargo's copy of the crate, when it is still there), then the command. Every message
/// that names the replay command gets it from here.
pub fn replay_hint(file: &Path) -> String {
    command_hint(&format!("replay {}", shell_word(&file.display().to_string())))
}

fn command_hint(args: &str) -> String {
    if on_path("waxell") {
        format!("waxell {args}")
    } else if in_source_checkout() {
        format!("cargo run -q -p waxell --features cli --bin waxell -- {args}")
    } else {
        format!(
            "{} && waxell {args}",
            install_command(Path::new(env!("CARGO_MANIFEST_DIR")))
        )
    }
}

/// How to install the `waxell` command of the version this program uses: from `source`, the crate's own
/// directory at build time (Cargo's registry copy, a git checkout or a path dependency), when it still exists;
/// else by name and exact version from the registry.
fn install_command(source: &Path) -> String {
    if source.join("Cargo.toml").is_file() {
        format!(
            "cargo install --path {} --features cli",
            shell_word(&source.display().to_string())
        )
    } else {
        format!(
            "cargo install waxell@{} --features cli",
            env!("CARGO_PKG_VERSION")
        )
    }
}

fn on_path(command: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|paths| {
        std::env::split_paths(&paths).any(|dir| {
            std::fs::metadata(dir.join(command)).is_ok_and(|m| {
                use std::os::unix::fs::PermissionsExt;
                m.is_file() && m.permissions().mode() & 0o111 != 0
            })
        })
    })
}

/// Whether the working directory is inside a checkout of waxell-rs (where `cargo run -p waxell` works).
fn in_source_checkout() -> bool {
    let Ok(cwd) = std::env::current_dir() else {
        return false;
    };
    cwd.ancestors()
        .any(|dir| dir.join("waxell/src/bin/waxell/main.rs").is_file() && dir.join("Cargo.toml").is_file())
}

/// Quote a path for a POSIX shell when it needs it.
fn shell_word(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+:=@,".contains(c))
    {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// `250 ms`, `3 s`, `1.5 s`.
pub(crate) fn human(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        format!("{ms} ms")
    } else if ms.is_multiple_of(1000) {
        format!("{} s", ms / 1000)
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

/// How many runs the exit links to in a running `waxell ui`.
const RUN_LINKS: usize = 5;

/// Console tree + JSON-lines file exporter.
pub(crate) struct EmbeddedExporter {
    console: bool,
    /// Where the tree and the closing line are printed.
    out: crate::console::Console,
    file: Option<Arc<JsonLinesFile>>,
    resource: ResourceAttributesWithSchema,
    /// Spans of traces whose root has not ended yet, printed together when it does.
    pending: Mutex<HashMap<TraceId, Vec<SpanData>>>,
    /// The runs (root spans' traces) this process wrote, for links to them in a running `waxell ui`.
    runs: Mutex<Vec<TraceId>>,
}

impl fmt::Debug for EmbeddedExporter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EmbeddedExporter")
            .field("console", &self.console)
            .field("file", &self.file.as_ref().map(|f| f.path()))
            .finish()
    }
}

impl EmbeddedExporter {
    /// `file` is shared with the fail-open pipeline, which saves what this exporter could not take there.
    pub(crate) fn new(console: bool, file: Option<Arc<JsonLinesFile>>, out: crate::console::Console) -> Self {
        Self {
            console,
            out,
            file,
            resource: (&Resource::builder_empty().build()).into(),
            pending: Mutex::new(HashMap::new()),
            runs: Mutex::new(Vec::new()),
        }
    }

    fn print_finished_traces(&self, batch: Vec<SpanData>) {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        let mut finished = Vec::new();
        for span in batch {
            let trace = span.span_context.trace_id();
            let is_root =
                span.parent_span_id == opentelemetry::trace::SpanId::INVALID || span.parent_span_is_remote;
            pending.entry(trace).or_default().push(span);
            if is_root {
                finished.push(trace);
            }
        }
        for trace in finished {
            if let Some(spans) = pending.remove(&trace) {
                self.out.print(&console::render_sdk_trace(&spans));
            }
        }
    }
}

impl SpanExporter for EmbeddedExporter {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        if self.file.is_some() {
            let mut runs = self.runs.lock().unwrap_or_else(|p| p.into_inner());
            let room = RUN_LINKS.saturating_sub(runs.len());
            runs.extend(
                batch
                    .iter()
                    .filter(|s| {
                        s.parent_span_id == opentelemetry::trace::SpanId::INVALID || s.parent_span_is_remote
                    })
                    .map(|s| s.span_context.trace_id())
                    .take(room),
            );
        }
        let written = match &self.file {
            Some(file) => file.write(batch.clone(), &self.resource).map_err(|e| {
                OTelSdkError::InternalFailure(format!("writing {}: {e}", file.path().display()))
            }),
            None => Ok(()),
        };
        if self.console {
            self.print_finished_traces(batch);
        }
        written
    }

    fn shutdown_with_timeout(&self, _timeout: std::time::Duration) -> OTelSdkResult {
        if self.console {
            let leftovers: Vec<Vec<SpanData>> = self
                .pending
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .drain()
                .map(|(_, v)| v)
                .collect();
            for spans in leftovers {
                self.out.print(&console::render_sdk_trace(&spans));
            }
        }
        if let Some(file) = &self.file {
            let n = file.written();
            if n > 0 {
                self.out.message(format_args!(
                    "wrote {n} spans to {} (send them to any OTLP endpoint with `{}`)",
                    file.path().display(),
                    replay_hint(file.path())
                ));
                // A `waxell ui` running for this directory follows the file: point at each run there.
                let runs = self.runs.lock().unwrap_or_else(|p| p.into_inner());
                for url in runs.iter().map_while(|run| ui_run_url(&run.to_string())) {
                    self.out.message(format_args!("see the run in waxell ui: {url}"));
                }
            }
        }
        Ok(())
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.resource = resource.into();
    }
}

#[cfg(test)]
mod tests {
    /// Tests run in the package directory, inside the checkout: the hint must recognise it (it looks for the
    /// binary's source, which moves if the binary does).
    #[test]
    fn a_checkout_is_recognised_by_the_binarys_source() {
        assert!(super::in_source_checkout());
    }

    /// Outside a checkout and without `waxell` on PATH, the hint installs the very source this program was
    /// built from (it exists here), or the same version by name once that source is gone.
    #[test]
    fn the_install_command_names_the_source_this_program_was_built_from() {
        let here = &std::path::PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap());
        assert_eq!(
            super::install_command(here),
            format!("cargo install --path {} --features cli", here.display())
        );
        assert_eq!(
            super::install_command(&here.join("no-such-directory")),
            format!(
                "cargo install waxell@{} --features cli",
                env!("CARGO_PKG_VERSION")
            )
        );
    }
}
