//! A sandbox's own log, as E2B serves it (`GET /sandboxes/{id}/logs`, `GET /v2/sandboxes/{id}/logs`):
//! what happened to the sandbox — created, paused (and what the pause kept), resumed, forked,
//! snapshotted, its lifetime ended — with the reasons the answers' headers give. It lives with the
//! sandbox: carried across a pause and a restart of the server in the paused record, gone when the
//! sandbox is killed. Bounded: the newest [`MAX_ENTRIES`] are kept.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::error::ApiError;
use super::store::{from_ms, to_ms};

/// Entries one sandbox keeps (E2B answers at most 1000 a page).
pub(crate) const MAX_ENTRIES: usize = 1000;

/// E2B's `LogLevel`, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Level {
    Debug,
    Info,
    Warn,
    Error,
}

impl Level {
    fn parse(text: &str) -> Result<Self, ApiError> {
        match text {
            "debug" => Ok(Self::Debug),
            "info" => Ok(Self::Info),
            "warn" => Ok(Self::Warn),
            "error" => Ok(Self::Error),
            other => Err(ApiError::bad_request(format!(
                "level {other:?}: expected debug, info, warn or error"
            ))),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Debug => "debug",
            Self::Info => "info",
            Self::Warn => "warn",
            Self::Error => "error",
        }
    }
}

/// One entry (E2B's `SandboxLogEntry`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct LogEntry {
    pub(crate) at_ms: u64,
    pub(crate) level: Level,
    pub(crate) message: String,
    #[serde(default)]
    pub(crate) fields: BTreeMap<String, String>,
}

/// A live sandbox's log.
#[derive(Debug, Default)]
pub(crate) struct SandboxLog {
    entries: Mutex<VecDeque<LogEntry>>,
}

impl SandboxLog {
    /// A log that goes on from `history` (a resumed sandbox's).
    pub(crate) fn continuing(history: Vec<LogEntry>) -> Self {
        let log = Self::default();
        for entry in history {
            log.push(entry);
        }
        log
    }

    fn push(&self, entry: LogEntry) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if entries.len() >= MAX_ENTRIES {
            entries.pop_front();
        }
        entries.push_back(entry);
    }

    /// Add an entry stamped now.
    pub(crate) fn add<const N: usize>(
        &self,
        level: Level,
        message: impl Into<String>,
        fields: [(&str, String); N],
    ) {
        self.add_all(level, message, fields.into())
    }

    /// Add an entry stamped now, with any number of fields.
    pub(crate) fn add_all(&self, level: Level, message: impl Into<String>, fields: Vec<(&str, String)>) {
        self.push(LogEntry {
            at_ms: to_ms(SystemTime::now()),
            level,
            message: message.into(),
            fields: fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect(),
        });
    }

    /// Every entry, oldest first.
    pub(crate) fn entries(&self) -> Vec<LogEntry> {
        self.entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .cloned()
            .collect()
    }
}

/// What a logs request asks for: both routes' query parameters.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct LogsQuery {
    /// The first route's start, milliseconds since the epoch.
    start: Option<u64>,
    /// The second route's start (or end, going backward), likewise.
    cursor: Option<u64>,
    limit: Option<usize>,
    direction: Option<String>,
    level: Option<String>,
    search: Option<String>,
}

/// The entries `query` selects, in the order it asks for.
fn select(entries: Vec<LogEntry>, query: &LogsQuery) -> Result<Vec<LogEntry>, ApiError> {
    let backward = match query.direction.as_deref() {
        None | Some("forward") => false,
        Some("backward") => true,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "direction {other:?}: expected forward or backward"
            )))
        }
    };
    let min_level = query.level.as_deref().map(Level::parse).transpose()?;
    if query.search.as_ref().is_some_and(|s| s.len() > 256) {
        return Err(ApiError::bad_request("search: at most 256 characters"));
    }
    let limit = query.limit.unwrap_or(MAX_ENTRIES).min(MAX_ENTRIES);
    let bound = query.cursor.or(query.start);
    let mut selected: Vec<LogEntry> = entries
        .into_iter()
        .filter(|e| match (bound, backward) {
            (Some(at), false) => e.at_ms >= at,
            (Some(at), true) => e.at_ms <= at,
            (None, _) => true,
        })
        .filter(|e| min_level.is_none_or(|min| e.level >= min))
        .filter(|e| {
            query
                .search
                .as_ref()
                .is_none_or(|s| e.message.contains(s.as_str()))
        })
        .collect();
    if backward {
        selected.reverse();
    }
    selected.truncate(limit);
    Ok(selected)
}

fn timestamp(at_ms: u64) -> String {
    humantime::format_rfc3339_millis(from_ms(at_ms)).to_string()
}

fn entry_json(entry: &LogEntry) -> Value {
    json!({
        "timestamp": timestamp(entry.at_ms),
        "level": entry.level.name(),
        "message": entry.message,
        "fields": entry.fields,
    })
}

/// The first route's `SandboxLogs`: lines and structured entries.
pub(crate) fn logs_json(entries: Vec<LogEntry>, query: &LogsQuery) -> Result<Value, ApiError> {
    let selected = select(entries, query)?;
    let lines: Vec<Value> = selected
        .iter()
        .map(|e| {
            let mut line = format!("[{}] {}", e.level.name(), e.message);
            for (k, v) in &e.fields {
                line.push_str(&format!(" {k}={v}"));
            }
            json!({"timestamp": timestamp(e.at_ms), "line": line})
        })
        .collect();
    let structured: Vec<Value> = selected.iter().map(entry_json).collect();
    Ok(json!({"logs": lines, "logEntries": structured}))
}

/// The second route's `SandboxLogsV2Response`.
pub(crate) fn logs_v2_json(entries: Vec<LogEntry>, query: &LogsQuery) -> Result<Value, ApiError> {
    let selected = select(entries, query)?;
    Ok(json!({"logs": selected.iter().map(entry_json).collect::<Vec<_>>()}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(at_ms: u64, level: Level, message: &str) -> LogEntry {
        LogEntry {
            at_ms,
            level,
            message: message.to_owned(),
            fields: BTreeMap::new(),
        }
    }

    fn messages(entries: &[LogEntry]) -> Vec<&str> {
        entries.iter().map(|e| e.message.as_str()).collect()
    }

    #[test]
    fn a_query_selects_by_time_level_and_text_in_either_direction() {
        let all = vec![
            entry(1_000, Level::Info, "created"),
            entry(2_000, Level::Warn, "paused, memory not kept"),
            entry(3_000, Level::Info, "resumed"),
        ];
        let query = |q: &str| serde_urlencoded::from_str::<LogsQuery>(q).unwrap();
        assert_eq!(
            messages(&select(all.clone(), &query("")).unwrap()),
            ["created", "paused, memory not kept", "resumed"]
        );
        assert_eq!(
            messages(&select(all.clone(), &query("cursor=2000")).unwrap()),
            ["paused, memory not kept", "resumed"]
        );
        assert_eq!(
            messages(&select(all.clone(), &query("start=2500")).unwrap()),
            ["resumed"]
        );
        assert_eq!(
            messages(&select(all.clone(), &query("direction=backward&cursor=2000")).unwrap()),
            ["paused, memory not kept", "created"]
        );
        assert_eq!(
            messages(&select(all.clone(), &query("direction=backward&limit=1")).unwrap()),
            ["resumed"]
        );
        assert_eq!(
            messages(&select(all.clone(), &query("level=warn")).unwrap()),
            ["paused, memory not kept"]
        );
        assert_eq!(
            messages(&select(all.clone(), &query("search=sumed")).unwrap()),
            ["resumed"]
        );
        let bad = select(all.clone(), &query("level=loud")).unwrap_err();
        assert!(bad.message().contains("level \"loud\""), "{}", bad.message());
        assert!(select(all, &query("direction=sideways")).is_err());
    }

    #[test]
    fn a_log_keeps_its_newest_entries_and_goes_on_across_a_pause() {
        let log = SandboxLog::default();
        for i in 0..MAX_ENTRIES + 5 {
            log.add(Level::Info, format!("event {i}"), []);
        }
        let entries = log.entries();
        assert_eq!(entries.len(), MAX_ENTRIES);
        assert_eq!(entries[0].message, "event 5");
        let resumed = SandboxLog::continuing(entries);
        resumed.add(Level::Info, "resumed", [("from", "memory".to_owned())]);
        let after = resumed.entries();
        assert_eq!(after.len(), MAX_ENTRIES);
        assert_eq!(after.last().unwrap().fields["from"], "memory");
        let json = logs_json(after, &LogsQuery::default()).unwrap();
        assert_eq!(
            json["logs"].as_array().unwrap().last().unwrap()["line"],
            "[info] resumed from=memory"
        );
        assert_eq!(
            json["logEntries"].as_array().unwrap().last().unwrap()["level"],
            "info"
        );
    }
}
