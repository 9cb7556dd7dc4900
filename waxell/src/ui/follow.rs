//! Importing the embedded default's trace files (`.waxell/traces/*.jsonl`, one OTLP JSON
//! `ExportTraceServiceRequest` per line) and following them as they grow. How far each file was read is
//! stored with the spans it gave, so a restart goes on where it stopped.

use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;

use super::store::{FilePos, Store, StoreError};

/// Reads the trace files of some directories (and single files) into the store.
#[derive(Debug)]
pub(crate) struct Follower {
    sources: Vec<PathBuf>,
    known: HashMap<PathBuf, FilePos>,
    warned: HashMap<PathBuf, u64>,
}

impl Follower {
    pub(crate) fn new(sources: Vec<PathBuf>) -> Self {
        Self {
            sources,
            known: HashMap::new(),
            warned: HashMap::new(),
        }
    }

    fn files(&self) -> Vec<PathBuf> {
        let mut files = Vec::new();
        for source in &self.sources {
            if source.is_dir() {
                if let Ok(entries) = std::fs::read_dir(source) {
                    files.extend(
                        entries
                            .filter_map(|e| e.ok().map(|e| e.path()))
                            .filter(|p| p.extension().is_some_and(|x| x == "jsonl")),
                    );
                }
            } else if source.is_file() {
                files.push(source.clone());
            }
        }
        files.sort();
        files
    }

    /// Read what was added to every file since the last call; returns the spans stored.
    pub(crate) fn poll(&mut self, store: &Store) -> Result<usize, StoreError> {
        let mut stored = 0;
        for file in self.files() {
            let path = std::fs::canonicalize(&file).unwrap_or(file);
            let key = path.display().to_string();
            let pos = match self.known.get(&path) {
                Some(pos) => *pos,
                None => store.file_pos(&key)?.unwrap_or_default(),
            };
            let Ok(len) = std::fs::metadata(&path).map(|m| m.len()) else {
                continue;
            };
            // A file cut shorter than what was read is a new file under the same name.
            let pos = if len < pos.offset { FilePos::default() } else { pos };
            if len == pos.offset {
                self.known.insert(path, pos);
                continue;
            }
            let Ok((requests, next, bad)) = read_from(&path, pos) else {
                continue;
            };
            if bad > 0 && self.warned.get(&path) != Some(&next.line) {
                crate::console::current().message(format_args!(
                    "ui: {}: skipped {bad} lines that are not OTLP JSON trace requests",
                    path.display()
                ));
                self.warned.insert(path.clone(), next.line);
            }
            if next != pos {
                stored += store.ingest_otlp(&requests, Some((&key, next)))?;
            }
            self.known.insert(path, next);
        }
        Ok(stored)
    }
}

/// The trace requests of the complete lines after `pos`, the position after them, and how many lines were not
/// trace requests. A last line without its newline is left for later: it may still be being written.
fn read_from(path: &Path, pos: FilePos) -> std::io::Result<(Vec<ExportTraceServiceRequest>, FilePos, u64)> {
    let mut file = std::fs::File::open(path)?;
    file.seek(SeekFrom::Start(pos.offset))?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    let complete = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let mut requests = Vec::new();
    let mut line = pos.line;
    let mut bad = 0;
    for text in bytes[..complete].split(|&b| b == b'\n') {
        if text.is_empty() {
            continue;
        }
        line += 1;
        match serde_json::from_slice::<ExportTraceServiceRequest>(text) {
            Ok(request) => requests.push(request),
            Err(_) => bad += 1,
        }
    }
    let next = FilePos {
        offset: pos.offset + complete as u64,
        line,
    };
    Ok((requests, next, bad))
}
