//! The kernel's JSON-lines messages, the size-capped line reader, and how a kernel's answers map
//! onto E2B's result shapes.

use std::io;

use serde::Deserialize;
use tokio::io::AsyncReadExt;
use waxell::sandbox::{ExecutionError, ExecutionResult};

use std::pin::Pin;

use tokio::io::{AsyncRead, AsyncWrite};

/// Protocol input of a kernel (its stdin).
pub(crate) type KernelWriter = Pin<Box<dyn AsyncWrite + Send>>;
/// Protocol output of a kernel (its stdout).
pub(crate) type KernelReader = Pin<Box<dyn AsyncRead + Send>>;

#[derive(Debug, Clone, Deserialize)]
pub(crate) struct ReadyInfo {
    pub(crate) pid: u32,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) prefix: String,
    /// The kernel's fd of the request pipe. Trusted: `ready` comes before any cell code runs.
    pub(crate) request_fd: i32,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum KernelMessage {
    Ready(ReadyInfo),
    /// The answer to `setenv` or `language`: `error` says why the directory or runtime failed.
    Configured {
        error: Option<String>,
    },
    /// The kernel began running the cell: from now on an interrupt ends it with a `done`.
    Started {
        id: Option<u64>,
    },
    Stream {
        id: Option<u64>,
        name: String,
        text: String,
    },
    Result {
        id: Option<u64>,
        is_main: bool,
        data: serde_json::Map<String, serde_json::Value>,
    },
    Error {
        id: Option<u64>,
        name: String,
        value: String,
        traceback: String,
    },
    Done {
        id: Option<u64>,
        execution_count: u64,
        #[serde(default)]
        truncated: bool,
    },
}

/// Reads newline-terminated lines with a size cap, cancel-safely (state lives in `self`).
pub(super) struct LineReader {
    pipe: KernelReader,
    buf: Vec<u8>,
    scanned: usize,
}

impl LineReader {
    pub(super) fn new(pipe: KernelReader) -> Self {
        Self {
            pipe,
            buf: Vec::new(),
            scanned: 0,
        }
    }

    pub(super) async fn next_line(&mut self, limit: usize) -> io::Result<Option<Vec<u8>>> {
        loop {
            if let Some(pos) = self.buf[self.scanned..].iter().position(|&b| b == b'\n') {
                let end = self.scanned + pos;
                let line = self.buf[..end].to_vec();
                self.buf.drain(..=end);
                self.scanned = 0;
                return Ok(Some(line));
            }
            self.scanned = self.buf.len();
            if self.buf.len() > limit {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("protocol line over {limit} bytes"),
                ));
            }
            let mut chunk = [0u8; 64 << 10];
            let n = self.pipe.read(&mut chunk).await?;
            if n == 0 {
                return Ok(None);
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

/// A fresh 63-bit run id nobody can predict: SipHash, keyed randomly per process, over a counter.
/// Both ends parse JSON integers exactly, so the full width is safe.
pub(super) fn unguessable_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    static KEYS: std::sync::OnceLock<std::collections::hash_map::RandomState> = std::sync::OnceLock::new();
    let mut hasher = KEYS.get_or_init(Default::default).build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    hasher.finish() >> 1
}

pub(super) fn report(name: &str, value: String, traceback: String) -> ExecutionError {
    ExecutionError {
        name: name.into(),
        value,
        traceback,
    }
}

pub(super) fn non_empty(text: String, fallback: &str) -> String {
    if text.is_empty() {
        fallback.to_owned()
    } else {
        text
    }
}

/// E2B's server strips the quotes around a string's repr (`'hi'` -> `hi`); do the same so agents see
/// the same `text` on both backends.
fn strip_surrounding_quotes(text: String) -> String {
    let bytes = text.as_bytes();
    match (bytes.first(), bytes.last()) {
        (Some(&first), Some(&last))
            if bytes.len() >= 2 && first == last && (first == b'\'' || first == b'"') =>
        {
            text[1..text.len() - 1].to_owned()
        }
        _ => text,
    }
}

/// Map a kernel MIME bundle onto E2B's result fields.
pub(super) fn to_execution_result(data: serde_json::Map<String, serde_json::Value>, is_main: bool) -> ExecutionResult {
    let mut result = ExecutionResult::default();
    result.is_main_result = is_main;
    for (mime, value) in data {
        let text = || value.as_str().map(str::to_owned);
        match mime.as_str() {
            "text/plain" => result.text = text().map(strip_surrounding_quotes),
            "text/html" => result.html = text(),
            "text/markdown" => result.markdown = text(),
            "image/svg+xml" => result.svg = text(),
            "image/png" => result.png = text(),
            "image/jpeg" => result.jpeg = text(),
            "application/pdf" => result.pdf = text(),
            "text/latex" => result.latex = text(),
            "application/json" => result.json = Some(value),
            "application/javascript" => result.javascript = text(),
            "e2b/data" => result.data = Some(value),
            "e2b/chart" => result.chart = Some(value),
            _ => {
                result.extra.insert(mime, value);
            }
        }
    }
    result
}

