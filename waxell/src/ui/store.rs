//! The UI's store: one redb file (pure Rust, ACID, crash-safe) with the spans, a summary per run, the runs
//! by start time, and how far each followed trace file was read. A batch of spans, its runs' summaries and
//! the file position it came from are committed in one transaction, so a restart neither loses nor repeats
//! anything.
//!
//! Spans are kept one row per run per batch (schema 2): the spans of a trace that came in one request are
//! one value, so a request costs one insert per run it touched, not one per span. A store written with one
//! row per span (schema 1, before) is rewritten that way when opened.

use std::collections::HashMap;
use std::path::Path;

use redb::{Database, Durability, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};
use serde::{Deserialize, Serialize};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;

use super::model::{RunFilter, RunSummary, SpanFacts, SpanRecord};
use super::wire::{request_spans, WireError, WireSpan};

/// Schema 1 (before): `{trace_id}/{span_id}` → the span's stored form. Read once, when a store of that
/// schema is opened, and deleted.
const SPANS: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("spans");
/// `{trace_id}/{arrival seq, 16 hex digits}` → the spans of that trace that came in that batch (see
/// [`Batch`]).
const BATCHES: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("batches");
/// `{trace_id}` → its [`RunSummary`] as JSON.
const RUNS: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("runs");
/// start (ns, big-endian) + trace id → nothing: the runs in time order.
const RUNS_BY_START: TableDefinition<'_, &[u8], u8> = TableDefinition::new("runs_by_start");
/// A followed file's path → how far it was read ([`FilePos`] as JSON).
const FILES: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("files");
/// An agent's name → the change counter when a run of it first arrived: the run list's agent filter.
const AGENTS: TableDefinition<'_, &str, u64> = TableDefinition::new("agents");
/// `seq` → the change counter; `schema` → the layout's version; `spans` → the spans stored.
const META: TableDefinition<'_, &str, u64> = TableDefinition::new("meta");

/// The layout written: spans in [`BATCHES`]. A store without a `schema` is of schema 1 (spans in [`SPANS`]).
const SCHEMA: u64 = 2;

/// redb's page cache.
const CACHE_BYTES: usize = 64 * 1024 * 1024;

/// One batch row as stored, borrowed from a read transaction.
type StoredBatch = redb::AccessGuard<'static, &'static [u8]>;

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
    /// The trace's and the span's ids, or `None` for a span without both.
    fn ids(&self) -> Option<(&[u8], &[u8])>;
    /// An id as the store writes it (OTLP's bytes as hex), appended to `out`.
    fn id_text(id: &[u8], out: &mut Vec<u8>);
    /// The stored form, appended to `out`.
    fn value(&self, out: &mut Vec<u8>) -> Result<(), StoreError>;
    /// About how many bytes [`Storable::value`] appends (to size the row once).
    fn value_len_hint(&self) -> usize;
}

impl Storable for SpanRecord {
    fn ids(&self) -> Option<(&[u8], &[u8])> {
        (!self.trace_id.is_empty() && !self.span_id.is_empty())
            .then_some((self.trace_id.as_bytes(), self.span_id.as_bytes()))
    }
    fn id_text(id: &[u8], out: &mut Vec<u8>) {
        out.extend_from_slice(id);
    }
    fn value(&self, out: &mut Vec<u8>) -> Result<(), StoreError> {
        serde_json::to_writer(out, self).map_err(err)
    }
    fn value_len_hint(&self) -> usize {
        512
    }
}

impl Storable for WireSpan<'_> {
    fn ids(&self) -> Option<(&[u8], &[u8])> {
        (!self.trace_id.is_empty() && !self.span_id.is_empty()).then_some((self.trace_id, self.span_id))
    }
    fn id_text(id: &[u8], out: &mut Vec<u8>) {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        for b in id {
            out.push(DIGITS[usize::from(b >> 4)]);
            out.push(DIGITS[usize::from(b & 15)]);
        }
    }
    fn value(&self, out: &mut Vec<u8>) -> Result<(), StoreError> {
        self.stored(out);
        Ok(())
    }
    fn value_len_hint(&self) -> usize {
        self.stored_len()
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
    // '/' is followed by '0' in ASCII: every `{trace}/…` key lies in [`{trace}/`, `{trace}0`).
    (format!("{trace}/"), format!("{trace}0"))
}

fn batch_key(trace: &str, seq: u64) -> String {
    format!("{trace}/{seq:016x}")
}

/// A request's spans made ready for the store, without it: grouped by run, each run's batch row written
/// and its spans folded into a summary of their own. The receivers make it on the request's own thread, so
/// the store's writer only merges summaries and inserts rows ([`Store::commit`]).
#[derive(Debug)]
pub(crate) struct Prepared {
    runs: Vec<PreparedRun>,
}

/// Whether equal ids are next to each other.
fn grouped<'a>(ids: impl Iterator<Item = &'a [u8]>) -> bool {
    let mut seen = std::collections::HashSet::new();
    let mut last = None;
    for id in ids {
        if last != Some(id) {
            if !seen.insert(id) {
                return false;
            }
            last = Some(id);
        }
    }
    true
}

#[derive(Debug)]
struct PreparedRun {
    trace: String,
    batch: BatchWriter,
    /// These spans alone, folded from [`RunSummary::new`].
    summary: RunSummary,
    /// An agent's root span was among them (it names the run's agent).
    root_agent: bool,
}

impl Prepared {
    fn new<S: Storable>(spans: &[S]) -> Result<Self, StoreError> {
        // The spans of a run together (in the order they came).
        let mut keyed: Vec<(&[u8], &[u8], &S)> = spans
            .iter()
            .filter_map(|s| s.ids().map(|(trace, span)| (trace, span, s)))
            .collect();
        // An exporter's batch mostly has them together already (a run's spans end together).
        if !grouped(keyed.iter().map(|k| k.0)) {
            keyed.sort_by(|a, b| a.0.cmp(b.0));
        }
        let mut runs = Vec::new();
        let mut trace_text = Vec::new();
        let mut rest = keyed.as_slice();
        while let Some((trace_id, _, _)) = rest.first() {
            let n = rest
                .iter()
                .position(|(t, _, _)| t != trace_id)
                .unwrap_or(rest.len());
            let (group, later) = rest.split_at(n);
            rest = later;
            trace_text.clear();
            S::id_text(trace_id, &mut trace_text);
            let trace = String::from_utf8(trace_text.clone()).map_err(err)?;
            let mut run = PreparedRun {
                summary: RunSummary::new(&trace),
                trace,
                batch: BatchWriter {
                    count: 0,
                    ids: Vec::with_capacity(group.len() * (2 + 2 * 8)),
                    spans: Vec::with_capacity(group.iter().map(|(_, _, s)| 4 + s.value_len_hint()).sum()),
                },
                root_agent: false,
            };
            for (_, id, span) in group {
                run.batch.push(id, *span)?;
                run.summary.fold(*span);
                run.root_agent |= span.is_root() && span.is_agent() && span.agent_name().is_some();
            }
            runs.push(run);
        }
        Ok(Self { runs })
    }

    /// The spans of a protobuf `ExportTraceServiceRequest` (the body of an OTLP/HTTP request), read in place
    /// and checked.
    pub(crate) fn from_protobuf(body: &[u8]) -> Result<Result<Self, StoreError>, WireError> {
        Ok(Self::new(&request_spans(body)?))
    }

    /// The spans of decoded OTLP requests.
    pub(crate) fn from_otlp(requests: &[ExportTraceServiceRequest]) -> Result<Self, StoreError> {
        let bodies: Vec<Vec<u8>> = requests.iter().map(Message::encode_to_vec).collect();
        let mut spans = Vec::new();
        for body in &bodies {
            spans.extend(request_spans(body).map_err(err)?);
        }
        Self::new(&spans)
    }

    /// How many spans it holds.
    pub(crate) fn spans(&self) -> usize {
        self.runs.iter().map(|r| r.batch.count as usize).sum()
    }
}

/// A batch row being written: the number of spans (u32, little-endian), each span's id (u16 length + the
/// id as text), then each span's stored form (u32 length + bytes), in the order they came. The ids come
/// first so a run's ids are read without its spans.
#[derive(Debug, Default)]
struct BatchWriter {
    count: u32,
    ids: Vec<u8>,
    spans: Vec<u8>,
}

impl BatchWriter {
    fn push<S: Storable>(&mut self, id: &[u8], span: &S) -> Result<(), StoreError> {
        let at = self.ids.len();
        self.ids.extend_from_slice(&[0; 2]);
        S::id_text(id, &mut self.ids);
        let id_len = self.ids.len() - at - 2;
        let id_len = u16::try_from(id_len).map_err(|_| StoreError(format!("a span id of {id_len} bytes")))?;
        self.ids[at..at + 2].copy_from_slice(&id_len.to_le_bytes());
        let at = self.spans.len();
        self.spans.extend_from_slice(&[0; 4]);
        span.value(&mut self.spans)?;
        let len =
            u32::try_from(self.spans.len() - at - 4).map_err(|_| StoreError("a span over 4 GiB".into()))?;
        self.spans[at..at + 4].copy_from_slice(&len.to_le_bytes());
        self.count += 1;
        Ok(())
    }

    fn len(&self) -> usize {
        4 + self.ids.len() + self.spans.len()
    }

    /// The row, written into `out` (of [`BatchWriter::len`] bytes).
    fn write(&self, out: &mut [u8]) {
        let (count, rest) = out.split_at_mut(4);
        count.copy_from_slice(&self.count.to_le_bytes());
        let (ids, spans) = rest.split_at_mut(self.ids.len());
        ids.copy_from_slice(&self.ids);
        spans.copy_from_slice(&self.spans);
    }
}

/// A span of a batch row: its id and its stored form.
type Entry<'a> = (&'a [u8], &'a [u8]);

/// The spans of a batch row, appended to `out` in the order they came.
fn batch_entries<'a>(value: &'a [u8], out: &mut Vec<Entry<'a>>) -> Result<(), StoreError> {
    let bad = || StoreError("a stored batch of spans is cut short".into());
    let (count, mut rest) = value.split_first_chunk::<4>().ok_or_else(bad)?;
    let count = u32::from_le_bytes(*count) as usize;
    let first = out.len();
    for _ in 0..count {
        let (len, r) = rest.split_first_chunk::<2>().ok_or_else(bad)?;
        let len = usize::from(u16::from_le_bytes(*len));
        let (id, r) = r.split_at_checked(len).ok_or_else(bad)?;
        out.push((id, &[]));
        rest = r;
    }
    for entry in &mut out[first..] {
        let (len, r) = rest.split_first_chunk::<4>().ok_or_else(bad)?;
        let len = u32::from_le_bytes(*len) as usize;
        let (span, r) = r.split_at_checked(len).ok_or_else(bad)?;
        entry.1 = span;
        rest = r;
    }
    Ok(())
}

/// The ids of a batch row's `count` spans (`ids`: the ids' part and what follows), added to `set`;
/// whether one was there already.
fn insert_ids<'a>(
    count: usize,
    mut ids: &'a [u8],
    set: &mut std::collections::HashSet<&'a [u8]>,
) -> Result<bool, StoreError> {
    let bad = || StoreError("a stored batch of spans is cut short".into());
    let mut again = false;
    for _ in 0..count {
        let (len, r) = ids.split_first_chunk::<2>().ok_or_else(bad)?;
        let (id, r) = r
            .split_at_checked(usize::from(u16::from_le_bytes(*len)))
            .ok_or_else(bad)?;
        again |= !set.insert(id);
        ids = r;
    }
    Ok(again)
}

/// Whether a run's new batch repeats a span of its stored rows or of itself.
fn repeats(stored: &[redb::AccessGuard<'_, &'static [u8]>], batch: &BatchWriter) -> Result<bool, StoreError> {
    if stored.is_empty() {
        // A new run's batch alone: its ids sorted, a repeat is next to itself.
        let mut ids = Vec::with_capacity(batch.count as usize);
        let mut rest = batch.ids.as_slice();
        while let Some((len, r)) = rest.split_first_chunk::<2>() {
            let (id, r) = r.split_at(usize::from(u16::from_le_bytes(*len)));
            ids.push(id);
            rest = r;
        }
        ids.sort_unstable();
        return Ok(ids.windows(2).any(|w| w[0] == w[1]));
    }
    let mut set = std::collections::HashSet::new();
    for v in stored {
        let (count, ids) = v
            .value()
            .split_first_chunk::<4>()
            .ok_or_else(|| StoreError("a stored batch of spans is cut short".into()))?;
        insert_ids(u32::from_le_bytes(*count) as usize, ids, &mut set)?;
    }
    insert_ids(batch.count as usize, &batch.ids, &mut set)
}

/// The spans of a run's batch rows (in arrival order), each once: a span that came again (a retried
/// export, a file read again) is its last arrival, in that arrival's place.
fn live_spans<'a>(values: &'a [redb::AccessGuard<'_, &'static [u8]>]) -> Result<Vec<Entry<'a>>, StoreError> {
    let mut entries = Vec::new();
    for v in values {
        batch_entries(v.value(), &mut entries)?;
    }
    let mut last: HashMap<&[u8], usize> = HashMap::with_capacity(entries.len());
    for (i, (id, _)) in entries.iter().enumerate() {
        last.insert(id, i);
    }
    if last.len() < entries.len() {
        let mut i = 0;
        entries.retain(|(id, _)| {
            i += 1;
            last[id] == i - 1
        });
    }
    Ok(entries)
}

/// A run's batch rows, in arrival order.
fn run_batches<'t>(
    table: &'t impl ReadableTable<&'static str, &'static [u8]>,
    trace: &str,
) -> Result<Vec<redb::AccessGuard<'t, &'static [u8]>>, StoreError> {
    let (from, to) = span_range(trace);
    let mut values = Vec::new();
    for entry in table.range(from.as_str()..to.as_str()).map_err(err)? {
        values.push(entry.map_err(err)?.1);
    }
    Ok(values)
}

/// Rewrite a store of schema 1 (one row per span in [`SPANS`]) as one batch row per run, in the open
/// write transaction. Returns the number of spans.
fn migrate_spans(txn: &redb::WriteTransaction) -> Result<u64, StoreError> {
    let old = txn.open_table(SPANS).map_err(err)?;
    let mut batches = txn.open_table(BATCHES).map_err(err)?;
    let mut count = 0;
    let mut trace = String::new();
    let (mut ids, mut spans, mut n) = (Vec::new(), Vec::new(), 0u32);
    let mut value = Vec::new();
    let mut flush =
        |trace: &str, ids: &mut Vec<u8>, spans: &mut Vec<u8>, n: &mut u32| -> Result<(), StoreError> {
            if *n > 0 {
                value.clear();
                value.extend_from_slice(&n.to_le_bytes());
                value.extend_from_slice(ids);
                value.extend_from_slice(spans);
                batches
                    .insert(batch_key(trace, 0).as_str(), value.as_slice())
                    .map_err(err)?;
            }
            ids.clear();
            spans.clear();
            *n = 0;
            Ok(())
        };
    for entry in old.iter().map_err(err)? {
        let (k, v) = entry.map_err(err)?;
        let key = k.value();
        let (t, id) = key.split_once('/').unwrap_or((key, ""));
        if t != trace {
            flush(&trace, &mut ids, &mut spans, &mut n)?;
            trace = t.to_owned();
        }
        let id_len =
            u16::try_from(id.len()).map_err(|_| StoreError(format!("a span id of {} bytes", id.len())))?;
        ids.extend_from_slice(&id_len.to_le_bytes());
        ids.extend_from_slice(id.as_bytes());
        let len = u32::try_from(v.value().len()).map_err(|_| StoreError("a span over 4 GiB".into()))?;
        spans.extend_from_slice(&len.to_le_bytes());
        spans.extend_from_slice(v.value());
        n += 1;
        count += 1;
    }
    flush(&trace, &mut ids, &mut spans, &mut n)?;
    drop(old);
    txn.delete_table(SPANS).map_err(err)?;
    Ok(count)
}

impl Store {
    /// Open (or create) the store at `path`. A store of the previous layout (one row per span) is rewritten
    /// in the current one first, in one transaction.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| StoreError(format!("creating {}: {e}", dir.display())))?;
        }
        // redb's page cache defaults to 1 GiB and keeps what was written: a UI at rest holding a million
        // spans sat at 530 MiB resident. 64 MiB keeps the run list and recent runs in memory.
        let mut db = Database::builder()
            .set_cache_size(CACHE_BYTES)
            .create(path)
            .map_err(|e| StoreError(format!("opening {}: {e}", path.display())))?;
        let txn = db.begin_write().map_err(err)?;
        let mut migrated = false;
        {
            let mut meta = txn.open_table(META).map_err(err)?;
            let schema = meta.get("schema").map_err(err)?.map(|v| v.value());
            match schema {
                Some(SCHEMA) => {}
                Some(other) => {
                    return Err(StoreError(format!(
                        "{} is of schema {other}, newer than this waxell's ({SCHEMA}): use a newer waxell or \
                         another store file",
                        path.display()
                    )))
                }
                None => {
                    let exists = txn
                        .list_tables()
                        .map_err(err)?
                        .any(|t| redb::TableHandle::name(&t) == "spans");
                    if exists {
                        migrated = true;
                        // Seconds for a large store (about 9 s per million spans): say why nothing answers yet.
                        let console = crate::console::current();
                        console.message(format_args!(
                            "ui: rewriting {} in this version's layout (once; its runs are kept)",
                            path.display()
                        ));
                        let spans = migrate_spans(&txn)?;
                        console.message(format_args!("ui: {spans} spans rewritten"));
                        meta.insert("spans", spans).map_err(err)?;
                    } else {
                        meta.insert("spans", 0).map_err(err)?;
                    }
                    meta.insert("schema", SCHEMA).map_err(err)?;
                }
            }
            txn.open_table(BATCHES).map_err(err)?;
            txn.open_table(RUNS).map_err(err)?;
            txn.open_table(RUNS_BY_START).map_err(err)?;
            txn.open_table(FILES).map_err(err)?;
            txn.open_table(AGENTS).map_err(err)?;
        }
        txn.commit().map_err(err)?;
        if migrated {
            // The rewrite left the old rows' pages free: give them back, so the file is not twice its size.
            db.compact()
                .map_err(|e| StoreError(format!("compacting {} after its rewrite: {e}", path.display())))?;
        }
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
        self.commit(&[Prepared::from_otlp(requests)?], file)
    }

    /// Store the spans of a protobuf `ExportTraceServiceRequest` (the body of an OTLP/HTTP request), read in
    /// place and each kept as its own bytes: no span is turned into a [`SpanRecord`] or JSON on the way in.
    pub fn ingest_protobuf(&self, body: &[u8]) -> Result<usize, StoreError> {
        self.ingest_body(body)
            .map_err(|e| StoreError(format!("not an OTLP trace request: {e}")))?
    }

    /// [`Store::ingest_protobuf`], telling a body that is not a trace request from a failure of the store.
    pub(crate) fn ingest_body(&self, body: &[u8]) -> Result<Result<usize, StoreError>, WireError> {
        Ok(Prepared::from_protobuf(body)?.and_then(|p| self.commit(&[p], None)))
    }

    fn ingest_any<S: Storable>(
        &self,
        spans: &[S],
        file: Option<(&str, FilePos)>,
    ) -> Result<usize, StoreError> {
        self.commit(&[Prepared::new(spans)?], file)
    }

    /// Store requests made ready by [`Prepared`] in one transaction (each one a change of its own, as if
    /// stored one by one); with `file`, record in it how far that file has been read. Returns the number of
    /// spans stored.
    pub(crate) fn commit(
        &self,
        requests: &[Prepared],
        file: Option<(&str, FilePos)>,
    ) -> Result<usize, StoreError> {
        let mut txn = self.db.begin_write().map_err(err)?;
        txn.set_durability(Durability::None).map_err(err)?;
        let mut stored = 0;
        {
            let mut meta = txn.open_table(META).map_err(err)?;
            let mut seq = meta.get("seq").map_err(err)?.map_or(0, |v| v.value());
            let mut span_count = meta.get("spans").map_err(err)?.map_or(0, |v| v.value());
            let mut batches = txn.open_table(BATCHES).map_err(err)?;
            let mut runs = txn.open_table(RUNS).map_err(err)?;
            let mut by_start = txn.open_table(RUNS_BY_START).map_err(err)?;
            let mut agents = txn.open_table(AGENTS).map_err(err)?;
            let mut bytes = Vec::with_capacity(1024);
            for request in requests {
                seq += 1;
                for run in &request.runs {
                    let trace = run.trace.as_str();
                    let old = match runs.get(trace).map_err(err)? {
                        Some(v) => Some(serde_json::from_slice::<RunSummary>(v.value()).map_err(err)?),
                        None => None,
                    };
                    let had_summary = old.as_ref().is_some_and(|o| o.spans > 0);
                    let (old_start, old_spans) = old.as_ref().map_or((u64::MAX, 0), |o| (o.start, o.spans));
                    stored += run.batch.count as usize;
                    // A span that came before (a retried export, a file read again), or twice in this
                    // batch: it is kept once (its last arrival), and the run is folded anew.
                    let replaced = if had_summary || run.batch.count > 1 {
                        let before = if had_summary {
                            run_batches(&batches, trace)?
                        } else {
                            Vec::new()
                        };
                        repeats(&before, &run.batch)?
                    } else {
                        false
                    };
                    run.batch.write(
                        batches
                            .insert_reserve(batch_key(trace, seq).as_str(), run.batch.len())
                            .map_err(err)?
                            .as_mut(),
                    );
                    let mut summary = if replaced {
                        let mut summary = RunSummary::new(trace);
                        let values = run_batches(&batches, trace)?;
                        for (_, v) in live_spans(&values)? {
                            read_stored(v)?.fold_into(&mut summary);
                        }
                        summary
                    } else {
                        match old.filter(|_| had_summary) {
                            Some(mut summary) => {
                                summary.merge(&run.summary, run.root_agent);
                                summary
                            }
                            None => run.summary.clone(),
                        }
                    };
                    span_count = span_count + summary.spans - old_spans;
                    summary.seq = seq;
                    for agent in &summary.agents {
                        if agents.get(agent.as_str()).map_err(err)?.is_none() {
                            agents.insert(agent.as_str(), seq).map_err(err)?;
                        }
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
            }
            if requests.is_empty() {
                seq += 1;
            }
            meta.insert("seq", seq).map_err(err)?;
            meta.insert("spans", span_count).map_err(err)?;
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
        let mut spans = Vec::new();
        for (id, v) in live_spans(&values)? {
            spans.push((id, read_stored(v)?.record()?));
        }
        // In start order; spans that start and end together, by id (as the layout before kept them).
        spans.sort_by(|a, b| (a.1.start, a.1.end, a.0).cmp(&(b.1.start, b.1.end, b.0)));
        Ok(Some((summary, spans.into_iter().map(|(_, s)| s).collect())))
    }

    /// A run's summary and its batch rows (in arrival order), read in one transaction.
    fn stored_run(&self, trace: &str) -> Result<Option<(RunSummary, Vec<StoredBatch>)>, StoreError> {
        let txn = self.db.begin_read().map_err(err)?;
        let runs = txn.open_table(RUNS).map_err(err)?;
        let Some(v) = runs.get(trace).map_err(err)? else {
            return Ok(None);
        };
        let summary: RunSummary = serde_json::from_slice(v.value()).map_err(err)?;
        let batches = txn.open_table(BATCHES).map_err(err)?;
        let (from, to) = span_range(trace);
        let mut values = Vec::new();
        for entry in batches.range(from.as_str()..to.as_str()).map_err(err)? {
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
        let live = live_spans(&values)?;
        let mut spans = Vec::with_capacity(live.len());
        let mut size = 2;
        for (id, raw) in live {
            let span = read_stored(raw)?;
            let (start, end) = span.times();
            size += 2 * raw.len();
            spans.push((start, end, id, span, raw));
        }
        spans.sort_by(|a, b| (a.0, a.1, a.2).cmp(&(b.0, b.1, b.2)));
        let mut out = Vec::with_capacity(size);
        out.push(b'[');
        for (i, (_, _, _, span, raw)) in spans.iter().enumerate() {
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
            let mut batches = txn.open_table(BATCHES).map_err(err)?;
            let mut meta = txn.open_table(META).map_err(err)?;
            let seq = meta.get("seq").map_err(err)?.map_or(0, |v| v.value()) + 1;
            meta.insert("seq", seq).map_err(err)?;
            let mut span_count = meta.get("spans").map_err(err)?.map_or(0, |v| v.value());
            for key in old {
                let trace = String::from_utf8_lossy(&key[8..]).into_owned();
                by_start.remove(key.as_slice()).map_err(err)?;
                if let Some(v) = runs.remove(trace.as_str()).map_err(err)? {
                    let summary: RunSummary = serde_json::from_slice(v.value()).map_err(err)?;
                    span_count = span_count.saturating_sub(summary.spans);
                }
                let (from, to) = span_range(&trace);
                batches
                    .retain_in(from.as_str()..to.as_str(), |_, _| false)
                    .map_err(err)?;
            }
            meta.insert("spans", span_count).map_err(err)?;
        }
        txn.commit().map_err(err)?;
        Ok(removed)
    }

    /// Counts for the status line: runs and spans stored.
    pub fn counts(&self) -> Result<HashMap<&'static str, u64>, StoreError> {
        let txn = self.db.begin_read().map_err(err)?;
        let runs = txn.open_table(RUNS).map_err(err)?.len().map_err(err)?;
        let meta = txn.open_table(META).map_err(err)?;
        let spans = meta.get("spans").map_err(err)?.map_or(0, |v| v.value());
        Ok(HashMap::from([("runs", runs), ("spans", spans)]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};

    fn temp_path(name: &str) -> std::path::PathBuf {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let dir = std::env::temp_dir().join(format!("waxell-store-{name}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join("store.redb")
    }

    fn span(trace: u8, id: u64, parent: u64, start: u64, name: &str) -> Span {
        Span {
            trace_id: vec![trace; 16],
            span_id: id.to_be_bytes().to_vec(),
            parent_span_id: if parent == 0 {
                Vec::new()
            } else {
                parent.to_be_bytes().to_vec()
            },
            name: name.into(),
            start_time_unix_nano: 1_700_000_000_000_000_000 + start,
            end_time_unix_nano: 1_700_000_000_000_000_000 + start + 10,
            attributes: vec![KeyValue {
                key: "gen_ai.agent.name".into(),
                value: Some(AnyValue {
                    value: Some(any_value::Value::StringValue("old".into())),
                }),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    fn request(spans: Vec<Span>) -> ExportTraceServiceRequest {
        ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                scope_spans: vec![ScopeSpans {
                    spans,
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
    }

    /// The writer of schema 1 (one row per span, no `schema` in META), as the store wrote before: a trace of
    /// OTLP spans kept in their protobuf form and one of JSON records.
    fn write_schema_1(path: &Path) {
        let db = Database::create(path).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut spans = txn.open_table(SPANS).unwrap();
            let mut runs = txn.open_table(RUNS).unwrap();
            let mut by_start = txn.open_table(RUNS_BY_START).unwrap();
            let mut agents = txn.open_table(AGENTS).unwrap();
            let mut meta = txn.open_table(META).unwrap();
            txn.open_table(FILES).unwrap();
            let body = request(vec![
                span(0xa1, 2, 1, 5, "tool"),
                span(0xa1, 1, 0, 0, "invoke_agent old"),
            ])
            .encode_to_vec();
            let wire = request_spans(&body).unwrap();
            let records = spans_of_json(0xb2);
            let mut summaries = Vec::new();
            let mut summary = RunSummary::new(&"a1".repeat(16));
            for s in &wire {
                let (trace, id) = s.ids().unwrap();
                let mut key = Vec::new();
                WireSpan::id_text(trace, &mut key);
                key.push(b'/');
                WireSpan::id_text(id, &mut key);
                let key = String::from_utf8(key).unwrap();
                let mut value = Vec::new();
                s.value(&mut value).unwrap();
                spans.insert(key.as_str(), value.as_slice()).unwrap();
                summary.fold(s);
            }
            summaries.push(summary);
            let mut summary = RunSummary::new(&"b2".repeat(16));
            for r in &records {
                let value = serde_json::to_vec(r).unwrap();
                spans
                    .insert(format!("{}/{}", r.trace_id, r.span_id).as_str(), value.as_slice())
                    .unwrap();
                summary.fold(r);
            }
            summaries.push(summary);
            for (i, mut s) in summaries.into_iter().enumerate() {
                s.seq = i as u64 + 1;
                runs.insert(s.trace_id.as_str(), serde_json::to_vec(&s).unwrap().as_slice())
                    .unwrap();
                by_start
                    .insert(time_key(s.start, &s.trace_id).as_slice(), 0)
                    .unwrap();
                agents.insert("old", s.seq).unwrap();
            }
            meta.insert("seq", 2).unwrap();
        }
        txn.commit().unwrap();
    }

    fn spans_of_json(trace: u8) -> Vec<SpanRecord> {
        crate::ui::model::spans_of(&request(vec![
            span(trace, 7, 0, 100, "invoke_agent json"),
            span(trace, 8, 7, 101, "chat"),
        ]))
    }

    #[test]
    fn a_store_of_the_layout_before_opens_with_its_runs_and_takes_more_spans() {
        let path = temp_path("schema1");
        write_schema_1(&path);
        let store = Store::open(&path).unwrap();
        assert_eq!(store.seq().unwrap(), 2);
        let counts = store.counts().unwrap();
        assert_eq!((counts["runs"], counts["spans"]), (2, 4));
        let (runs, agents) = store.runs(&RunFilter::default()).unwrap();
        let names: Vec<&str> = runs.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["invoke_agent json", "invoke_agent old"]);
        assert_eq!(agents, ["old"]);
        let (summary, spans) = store.run(&"a1".repeat(16)).unwrap().unwrap();
        assert_eq!(summary.spans, 2);
        let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["invoke_agent old", "tool"]);
        let (_, json) = store.run_json(&"b2".repeat(16)).unwrap().unwrap();
        let served: Vec<SpanRecord> = serde_json::from_slice(&json).unwrap();
        assert_eq!(served, spans_of_json(0xb2));
        // The old table is gone; the schema is recorded.
        {
            let txn = store.db.begin_read().unwrap();
            assert!(!txn
                .list_tables()
                .unwrap()
                .any(|t| redb::TableHandle::name(&t) == "spans"));
            let meta = txn.open_table(META).unwrap();
            assert_eq!(meta.get("schema").unwrap().unwrap().value(), SCHEMA);
        }
        // A migrated run takes a new span, and one of its old spans sent again is not counted twice.
        let more = request(vec![span(0xa1, 3, 1, 7, "tool 2"), span(0xa1, 2, 1, 5, "tool")]);
        assert_eq!(store.ingest_otlp(&[more], None).unwrap(), 2);
        let (summary, spans) = store.run(&"a1".repeat(16)).unwrap().unwrap();
        assert_eq!(summary.spans, 3);
        let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["invoke_agent old", "tool", "tool 2"]);
        assert_eq!(store.counts().unwrap()["spans"], 5);
        // Reopened (now of schema 2), nothing is rewritten or lost; retention deletes what it covers.
        drop(store);
        let store = Store::open(&path).unwrap();
        assert_eq!(store.counts().unwrap()["spans"], 5);
        assert_eq!(store.delete_before(1_700_000_000_000_000_050).unwrap(), 1);
        let counts = store.counts().unwrap();
        assert_eq!((counts["runs"], counts["spans"]), (1, 2));
        assert!(store.run(&"a1".repeat(16)).unwrap().is_none());
        drop(store);
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[test]
    fn a_store_of_a_newer_schema_is_refused_by_name() {
        let path = temp_path("schema9");
        drop(Store::open(&path).unwrap());
        let db = Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(META).unwrap().insert("schema", 9).unwrap();
        txn.commit().unwrap();
        drop(db);
        let refused = Store::open(&path).unwrap_err().to_string();
        assert!(refused.contains("schema 9"), "{refused}");
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }
}
