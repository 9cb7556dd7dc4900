//! `waxell show`: a saved trace file printed as the tree the embedded default prints at run time (the same
//! renderer, [`super::console`]), and `--follow`, which prints each run as it is written to a traces directory.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;

use super::console::{self, View};
pub use super::jsonl::TraceFileError as ShowError;
use super::jsonl::{read_requests, TraceFileError};

/// Every request of a trace file (OTLP JSON lines), with its line number.
pub fn read_trace_file(path: &Path) -> Result<Vec<(usize, ExportTraceServiceRequest)>, TraceFileError> {
    Ok(read_requests(path, 0, 0)?.0)
}

fn views(requests: &[(usize, ExportTraceServiceRequest)]) -> Vec<View> {
    requests
        .iter()
        .flat_map(|(_, r)| &r.resource_spans)
        .flat_map(|rs| &rs.scope_spans)
        .flat_map(|ss| &ss.spans)
        .map(View::from_proto)
        .collect()
}

/// Group spans by trace, traces in the order their first span appears.
fn by_trace(spans: Vec<View>) -> Vec<Vec<View>> {
    let mut order: Vec<String> = Vec::new();
    let mut traces: HashMap<String, Vec<View>> = HashMap::new();
    for span in spans {
        if !traces.contains_key(&span.trace_id) {
            order.push(span.trace_id.clone());
        }
        traces.entry(span.trace_id.clone()).or_default().push(span);
    }
    order.into_iter().filter_map(|t| traces.remove(&t)).collect()
}

/// The trees of every trace in a saved file.
pub fn render_trace_file(path: &Path) -> Result<String, TraceFileError> {
    let requests = read_trace_file(path)?;
    Ok(by_trace(views(&requests))
        .iter()
        .map(|spans| console::render_trace(spans))
        .collect())
}

/// Watch `dir` for trace files (`*.jsonl`) and hand `print` the tree of each run as soon as its root span
/// is written; files and lines already there when it starts are skipped. Runs until `keep_going` says stop
/// (checked every `poll`).
pub fn follow(
    dir: &Path,
    poll: Duration,
    mut print: impl FnMut(&str),
    keep_going: impl Fn() -> bool,
) -> Result<(), TraceFileError> {
    struct Tail {
        offset: u64,
        line: usize,
        pending: HashMap<String, Vec<View>>,
    }
    let list = |dir: &Path| -> Result<Vec<PathBuf>, TraceFileError> {
        let entries = std::fs::read_dir(dir).map_err(|source| TraceFileError::Read {
            path: dir.display().to_string(),
            source,
        })?;
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
            .collect();
        files.sort();
        Ok(files)
    };
    let mut tails: HashMap<PathBuf, Tail> = HashMap::new();
    for file in list(dir)? {
        let offset = std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0);
        tails.insert(
            file,
            Tail {
                offset,
                line: usize::MAX / 2,
                pending: HashMap::new(),
            },
        );
    }
    while keep_going() {
        for file in list(dir)? {
            let tail = tails.entry(file.clone()).or_insert(Tail {
                offset: 0,
                line: 0,
                pending: HashMap::new(),
            });
            let (requests, offset, line) = match read_requests(&file, tail.offset, tail.line) {
                Ok(read) => read,
                // A file removed meanwhile is simply gone.
                Err(TraceFileError::Read { .. }) => continue,
                Err(e) => return Err(e),
            };
            tail.offset = offset;
            tail.line = line;
            for span in views(&requests) {
                let is_root = span.parent.is_empty();
                let trace = span.trace_id.clone();
                tail.pending.entry(trace.clone()).or_default().push(span);
                if is_root {
                    if let Some(spans) = tail.pending.remove(&trace) {
                        print(&console::render_trace(&spans));
                    }
                }
            }
        }
        std::thread::sleep(poll);
    }
    Ok(())
}
