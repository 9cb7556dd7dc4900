//! The UI's store: one redb file (pure Rust, ACID, crash-safe) with the spans, a summary per run, the runs
//! by start time, and how far each followed trace file was read. A batch of spans, its runs' summaries and
//! the file position it came from are committed in one transaction, so a restart neither loses nor repeats
//! anything.

use std::collections::HashMap;
use std::path::Path;

use redb::{Database, Durability, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};
use serde::{Deserialize, Serialize};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;

use super::model::{RunFilter, RunSummary, SpanFacts, SpanRecord};
use super::wire::{request_spans, WireError, WireSpan};

/// `{trace_id}/{span_id}` → the span as JSON.
const SPANS: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("spans");
/// `{trace_id}` → its [`RunSummary`] as JSON.
const RUNS: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("runs");
/// start (ns, big-endian) + trace id → nothing: the runs in time order.
const RUNS_BY_START: TableDefinition<'_, &[u8], u8> = TableDefinition::new("runs_by_start");
/// A followed file's path → how far it was read ([`FilePos`] as JSON).
const FILES: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("files");
/// An agent's name → the change counter when a run of it last arrived: the run list's agent filter.
const AGENTS: TableDefinition<'_, &str, u64> = TableDefinition::new("agents");
/// `seq` → the change counter.
const META: TableDefinition<'_, &str, u64> = TableDefinition::new("meta");

/// redb's page cache.
const CACHE_BYTES: usize = 64 * 1024 * 1024;

/// One span as stored, borrowed from a read transaction.
type StoredSpan = redb::AccessGuard<'static, &'static [u8]>;

/// A failure of the store.
#[derive(Debug, thiserror::Error)]
#[error("the UI's store: {0}")]
pub struct StoreError(String);

fn err(e: impl std::fmt::Display) -> StoreError {
    StoreError(e.to_string())
}

/// How far a trace file was read: the byte offset after the last complete line, and that line's number.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilePos {
    /// Bytes read.
    pub offset: u64,
    /// Lines read.
    pub line: u64,
}

/// The store.
///
/// Spans are acknowledged once committed in memory (as an OpenTelemetry Collector acknowledges once a batch
/// is queued) and made durable by [`Store::sync`], which the UI calls a few times a second and at stop: an
/// fsync per OTLP request held the receiver to a tenth of the rate an exporter sends. A crash can lose the
/// spans pushed since the last sync; a trace file's spans are read again, as its read position rolls back
/// with them.
#[derive(Debug)]
pub struct Store {
    db: Database,
    /// A commit since the last [`Store::sync`].
    unsynced: std::sync::atomic::AtomicBool,
}

/// A span the store can keep: its facts for the run's summary, and its stored form. A [`SpanRecord`] is kept
/// as its JSON; an OTLP span as its own protobuf bytes with its service and scope names ([`WireSpan`]). A
/// stored value starting with `{` is JSON (a span's protobuf starts with a field's tag, never `{`).
trait Storable: SpanFacts {
    /// `{trace}/{span}` and the trace id's length, or `None` for a span without both ids.
    fn key(&self) -> Option<(String, usize)>;
    /// The stored form, appended to `out`.
    fn value(&self, out: &mut Vec<u8>) -> Result<(), StoreError>;
}

impl Storable for SpanRecord {
    fn key(&self) -> Option<(String, usize)> {
        (!self.trace_id.is_empty() && !self.span_id.is_empty())
            .then(|| (format!("{}/{}", self.trace_id, self.span_id), self.trace_id.len()))
    }
    fn value(&self, out: &mut Vec<u8>) -> Result<(), StoreError> {
        serde_json::to_writer(out, self).map_err(err)
    }
}

impl Storable for WireSpan<'_> {
    fn key(&self) -> Option<(String, usize)> {
        if self.trace_id.is_empty() || self.span_id.is_empty() {
            return None;
        }
        let mut key = String::with_capacity(2 * (self.trace_id.len() + self.span_id.len()) + 1);
        push_hex(&mut key, self.trace_id);
        key.push('/');
        push_hex(&mut key, self.span_id);
        Some((key, 2 * self.trace_id.len()))
    }
    fn value(&self, out: &mut Vec<u8>) -> Result<(), StoreError> {
        self.stored(out);
        Ok(())
    }
}

fn push_hex(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 15)]));
    }
}

/// A stored span, whichever its form.
enum Stored<'a> {
    Record(SpanRecord),
    Wire(WireSpan<'a>),
}

fn read_stored(value: &[u8]) -> Result<Stored<'_>, StoreError> {
    if value.first() == Some(&b'{') {
        Ok(Stored::Record(serde_json::from_slice(value).map_err(err)?))
    } else {
        Ok(Stored::Wire(WireSpan::from_stored(value).map_err(err)?))
    }
}

impl Stored<'_> {
    fn fold_into(&self, summary: &mut RunSummary) {
        match self {
            Stored::Record(r) => summary.fold(r),
            Stored::Wire(w) => summary.fold(w),
        }
    }

    fn times(&self) -> (u64, u64) {
        match self {
            Stored::Record(r) => (r.start, r.end),
            Stored::Wire(w) => (w.start(), w.end()),
        }
    }

    fn record(self) -> Result<SpanRecord, StoreError> {
        match self {
            Stored::Record(r) => Ok(r),
            Stored::Wire(w) => serde_json::to_vec(&w)
                .and_then(|json| serde_json::from_slice(&json))
                .map_err(err),
        }
    }

    fn write_json(&self, raw: &[u8], out: &mut Vec<u8>) -> Result<(), StoreError> {
        match self {
            Stored::Record(_) => {
                out.extend_from_slice(raw);
                Ok(())
            }
            Stored::Wire(w) => serde_json::to_writer(out, w).map_err(err),
        }
    }
}

fn time_key(start: u64, trace: &str) -> Vec<u8> {
    let start = if start == u64::MAX { 0 } else { start };
    let mut key = start.to_be_bytes().to_vec();
    key.extend_from_slice(trace.as_bytes());
    key
}

fn span_range(trace: &str) -> (String, String) {
    // '/' is followed by '0' in ASCII: every `{trace}/{span}` key lies in [`{trace}/`, `{trace}0`).
    (format!("{trace}/"), format!("{trace}0"))
}

impl Store {
    /// Open (or create) the store at `path`.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| StoreError(format!("creating {}: {e}", dir.display())))?;
        }
        // redb's page cache defaults to 1 GiB and keeps what was written: a UI at rest holding a million
        // spans sat at 530 MiB resident. 64 MiB keeps the run list and recent runs in memory.
        let db = Database::builder()
            .set_cache_size(CACHE_BYTES)
            .create(path)
            .map_err(|e| StoreError(format!("opening {}: {e}", path.display())))?;
        let txn = db.begin_write().map_err(err)?;
        {
            txn.open_table(SPANS).map_err(err)?;
            txn.open_table(RUNS).map_err(err)?;
            txn.open_table(RUNS_BY_START).map_err(err)?;
            txn.open_table(FILES).map_err(err)?;
            txn.open_table(META).map_err(err)?;
            txn.open_table(AGENTS).map_err(err)?;
        }
        txn.commit().map_err(err)?;
        Ok(Self {
            db,
            unsynced: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// The change counter: it grows with every committed batch, so a page knows when to refresh.
    pub fn seq(&self) -> Result<u64, StoreError> {
        let txn = self.db.begin_read().map_err(err)?;
        let meta = txn.open_table(META).map_err(err)?;
        Ok(meta.get("seq").map_err(err)?.map_or(0, |v| v.value()))
    }

    /// Store `spans` (a span already stored is replaced) and update their runs; with `file`, record in the
    /// same transaction how far that file has been read. Returns the number of spans stored.
    pub fn ingest(&self, spans: &[SpanRecord], file: Option<(&str, FilePos)>) -> Result<usize, StoreError> {
        self.ingest_any(spans, file)
    }

    /// Store the spans of decoded OTLP requests, as [`Store::ingest_protobuf`] does.
    pub fn ingest_otlp(
        &self,
        requests: &[ExportTraceServiceRequest],
        file: Option<(&str, FilePos)>,
    ) -> Result<usize, StoreError> {
        let bodies: Vec<Vec<u8>> = requests.iter().map(Message::encode_to_vec).collect();
        let mut spans = Vec::new();
        for body in &bodies {
            spans.extend(request_spans(body).map_err(err)?);
        }
        self.ingest_any(&spans, file)
    }

    /// Store the spans of a protobuf `ExportTraceServiceRequest` (the body of an OTLP/HTTP request), read in
    /// place and each kept as its own bytes: no span is turned into a [`SpanRecord`] or JSON on the way in.
    pub fn ingest_protobuf(&self, body: &[u8]) -> Result<usize, StoreError> {
        self.ingest_body(body)
            .map_err(|e| StoreError(format!("not an OTLP trace request: {e}")))?
    }

    /// [`Store::ingest_protobuf`], telling a body that is not a trace request from a failure of the store.
    pub(crate) fn ingest_body(&self, body: &[u8]) -> Result<Result<usize, StoreError>, WireError> {
        let spans = request_spans(body)?;
        Ok(self.ingest_any(&spans, None))
    }

    fn ingest_any<S: Storable>(
        &self,
        spans: &[S],
        file: Option<(&str, FilePos)>,
    ) -> Result<usize, StoreError> {
        // The spans of a run together (in the order they came), the runs in the tree's order.
        let mut keyed: Vec<(String, usize, &S)> = spans
            .iter()
            .filter_map(|s| s.key().map(|(key, len)| (key, len, s)))
            .collect();
        keyed.sort_by(|a, b| a.0[..a.1].cmp(&b.0[..b.1]));
        let mut txn = self.db.begin_write().map_err(err)?;
        txn.set_durability(Durability::None).map_err(err)?;
        let mut stored = 0;
        {
            let mut meta = txn.open_table(META).map_err(err)?;
            let seq = meta.get("seq").map_err(err)?.map_or(0, |v| v.value()) + 1;
            meta.insert("seq", seq).map_err(err)?;
            let mut span_table = txn.open_table(SPANS).map_err(err)?;
            let mut runs = txn.open_table(RUNS).map_err(err)?;
            let mut by_start = txn.open_table(RUNS_BY_START).map_err(err)?;
            let mut agents = txn.open_table(AGENTS).map_err(err)?;
            let mut bytes = Vec::with_capacity(1024);
            let mut rest = keyed.as_slice();
            while let Some((first, len, _)) = rest.first() {
                let trace = &first[..*len];
                let n = rest
                    .iter()
                    .position(|(k, len, _)| &k[..*len] != trace)
                    .unwrap_or(rest.len());
                let (group, later) = rest.split_at(n);
                rest = later;
                let mut summary = match runs.get(trace).map_err(err)? {
                    Some(v) => serde_json::from_slice(v.value()).map_err(err)?,
                    None => RunSummary::new(trace),
                };
                let old_start = summary.start;
                let had_summary = summary.spans > 0;
                let mut replaced = false;
                for (key, _, span) in group {
                    bytes.clear();
                    span.value(&mut bytes)?;
                    replaced |= span_table
                        .insert(key.as_str(), bytes.as_slice())
                        .map_err(err)?
                        .is_some();
                    if !replaced {
                        summary.fold(*span);
                    }
                    stored += 1;
                }
                if replaced {
                    // A span sent twice (a retried export, a file read again): fold the run anew.
                    summary = RunSummary::new(trace);
                    let (from, to) = span_range(trace);
                    for entry in span_table.range(from.as_str()..to.as_str()).map_err(err)? {
                        let (_, v) = entry.map_err(err)?;
                        read_stored(v.value())?.fold_into(&mut summary);
                    }
                }
                summary.seq = seq;
                for agent in &summary.agents {
                    agents.insert(agent.as_str(), seq).map_err(err)?;
                }
                if !had_summary || old_start != summary.start {
                    if had_summary {
                        by_start
                            .remove(time_key(old_start, trace).as_slice())
                            .map_err(err)?;
                    }
                    by_start
                        .insert(time_key(summary.start, trace).as_slice(), 0)
                        .map_err(err)?;
                }
                bytes.clear();
                serde_json::to_writer(&mut bytes, &summary).map_err(err)?;
                runs.insert(trace, bytes.as_slice()).map_err(err)?;
            }
            if let Some((path, pos)) = file {
                let mut files = txn.open_table(FILES).map_err(err)?;
                let bytes = serde_json::to_vec(&pos).map_err(err)?;
                files.insert(path, bytes.as_slice()).map_err(err)?;
            }
        }
        txn.commit().map_err(err)?;
        self.unsynced.store(true, std::sync::atomic::Ordering::Release);
        Ok(stored)
    }

    /// Make every commit so far durable (one fsync), if there was one since the last sync.
    pub fn sync(&self) -> Result<(), StoreError> {
        if self.unsynced.swap(false, std::sync::atomic::Ordering::AcqRel) {
            // An empty commit at the default durability persists the non-durable ones before it.
            let txn = self.db.begin_write().map_err(err)?;
            txn.commit().map_err(err)?;
        }
        Ok(())
    }

    /// How far `path` was read, if it ever was.
    pub fn file_pos(&self, path: &str) -> Result<Option<FilePos>, StoreError> {
        let txn = self.db.begin_read().map_err(err)?;
        let files = txn.open_table(FILES).map_err(err)?;
        match files.get(path).map_err(err)? {
            Some(v) => Ok(Some(serde_json::from_slice(v.value()).map_err(err)?)),
            None => Ok(None),
        }
    }

    /// Runs passing `filter`, newest first (reading runs only until `limit` matched), and the agent names
    /// seen in the store (for the agent filter; an agent whose runs were all deleted may stay listed).
    pub fn runs(&self, filter: &RunFilter) -> Result<(Vec<RunSummary>, Vec<String>), StoreError> {
        let limit = filter.limit.unwrap_or(200).clamp(1, 5000);
        let txn = self.db.begin_read().map_err(err)?;
        let by_start = txn.open_table(RUNS_BY_START).map_err(err)?;
        let runs = txn.open_table(RUNS).map_err(err)?;
        let mut out = Vec::new();
        for entry in by_start.iter().map_err(err)?.rev() {
            if out.len() >= limit {
                break;
            }
            let (k, _) = entry.map_err(err)?;
            let trace = String::from_utf8_lossy(&k.value()[8..]).into_owned();
            let Some(v) = runs.get(trace.as_str()).map_err(err)? else {
                continue;
            };
            let run: RunSummary = serde_json::from_slice(v.value()).map_err(err)?;
            if filter.matches(&run) {
                out.push(run);
            }
        }
        let agents = txn.open_table(AGENTS).map_err(err)?;
        let names = agents
            .iter()
            .map_err(err)?
            .map(|e| e.map(|(k, _)| k.value().to_owned()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(err)?;
        Ok((out, names))
    }

    /// A run's summary and spans (in start order), if it is stored.
    pub fn run(&self, trace: &str) -> Result<Option<(RunSummary, Vec<SpanRecord>)>, StoreError> {
        let Some((summary, values)) = self.stored_run(trace)? else {
            return Ok(None);
        };
        let mut spans = Vec::with_capacity(values.len());
        for v in &values {
            spans.push(read_stored(v.value())?.record()?);
        }
        spans.sort_by_key(|s| (s.start, s.end));
        Ok(Some((summary, spans)))
    }

    /// A run's summary and its stored spans (in key order), read in one transaction.
    fn stored_run(&self, trace: &str) -> Result<Option<(RunSummary, Vec<StoredSpan>)>, StoreError> {
        let txn = self.db.begin_read().map_err(err)?;
        let runs = txn.open_table(RUNS).map_err(err)?;
        let Some(v) = runs.get(trace).map_err(err)? else {
            return Ok(None);
        };
        let summary: RunSummary = serde_json::from_slice(v.value()).map_err(err)?;
        let span_table = txn.open_table(SPANS).map_err(err)?;
        let (from, to) = span_range(trace);
        let mut values = Vec::new();
        for entry in span_table.range(from.as_str()..to.as_str()).map_err(err)? {
            values.push(entry.map_err(err)?.1);
        }
        Ok(Some((summary, values)))
    }

    /// A run's summary and its spans as a JSON array (in start order), written straight from their stored
    /// form (no [`SpanRecord`] built): what the run's page fetches.
    pub fn run_json(&self, trace: &str) -> Result<Option<(RunSummary, Vec<u8>)>, StoreError> {
        let Some((summary, values)) = self.stored_run(trace)? else {
            return Ok(None);
        };
        let mut spans = Vec::with_capacity(values.len());
        for v in &values {
            let span = read_stored(v.value())?;
            let (start, end) = span.times();
            spans.push((start, end, span, v.value()));
        }
        spans.sort_by_key(|s| (s.0, s.1));
        let mut out = Vec::with_capacity(values.iter().map(|v| 2 * v.value().len()).sum::<usize>() + 2);
        out.push(b'[');
        for (i, (_, _, span, raw)) in spans.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            span.write_json(raw, &mut out)?;
        }
        out.push(b']');
        Ok(Some((summary, out)))
    }

    /// The change counter of one run (when it last changed), if it is stored.
    pub fn run_seq(&self, trace: &str) -> Result<Option<u64>, StoreError> {
        let txn = self.db.begin_read().map_err(err)?;
        let runs = txn.open_table(RUNS).map_err(err)?;
        let Some(v) = runs.get(trace).map_err(err)? else {
            return Ok(None);
        };
        let summary: RunSummary = serde_json::from_slice(v.value()).map_err(err)?;
        Ok(Some(summary.seq))
    }

    /// Delete the runs that started before `cutoff` (ns since the epoch), with their spans. Returns how many.
    pub fn delete_before(&self, cutoff: u64) -> Result<usize, StoreError> {
        let txn = self.db.begin_write().map_err(err)?;
        let removed;
        {
            let mut by_start = txn.open_table(RUNS_BY_START).map_err(err)?;
            let old: Vec<Vec<u8>> = by_start
                .range(..cutoff.to_be_bytes().as_slice())
                .map_err(err)?
                .map(|e| e.map(|(k, _)| k.value().to_vec()))
                .collect::<Result<_, _>>()
                .map_err(err)?;
            removed = old.len();
            if removed == 0 {
                return Ok(0);
            }
            let mut runs = txn.open_table(RUNS).map_err(err)?;
            let mut spans = txn.open_table(SPANS).map_err(err)?;
            let mut meta = txn.open_table(META).map_err(err)?;
            let seq = meta.get("seq").map_err(err)?.map_or(0, |v| v.value()) + 1;
            meta.insert("seq", seq).map_err(err)?;
            for key in old {
                let trace = String::from_utf8_lossy(&key[8..]).into_owned();
                by_start.remove(key.as_slice()).map_err(err)?;
                runs.remove(trace.as_str()).map_err(err)?;
                let (from, to) = span_range(&trace);
                spans
                    .retain_in(from.as_str()..to.as_str(), |_, _| false)
                    .map_err(err)?;
            }
        }
        txn.commit().map_err(err)?;
        Ok(removed)
    }

    /// Counts for the status line: runs and spans stored.
    pub fn counts(&self) -> Result<HashMap<&'static str, u64>, StoreError> {
        let txn = self.db.begin_read().map_err(err)?;
        let runs = txn.open_table(RUNS).map_err(err)?.len().map_err(err)?;
        let spans = txn.open_table(SPANS).map_err(err)?.len().map_err(err)?;
        Ok(HashMap::from([("runs", runs), ("spans", spans)]))
    }
}
