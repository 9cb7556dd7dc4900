//! The rows of docs/performance.md's table, as a bench writes them: one JSON file per row (`<id>.json`) in
//! `WAXELL_BENCH_ROWS_DIR`, else `<target dir>/bench-rows/`. `scripts/bench-all.sh` runs the benches and
//! renders the table from these files (`bench-table`, `tests/src/bench_table.rs`).
//!
//! The one shared place for the Rust benches: `waxell-tests` has it as `waxell_tests::bench_row`, and the
//! benches of `waxell` and `waxell-sandbox` include this file with `#[path]` (it needs only `std` and
//! `serde_json`). The Python and shell benches use `scripts/bench_rows.py`, which writes the same fields.
// Included with `#[path]`, its items are private to each bench, which uses part of them.
#![allow(dead_code, unreachable_pub)]

use std::path::PathBuf;

/// One figure beside its anchor. Every field is required: "none" says that a row has no anchor or ratio.
#[derive(Debug, Clone, Default)]
pub struct Row {
    /// Stable id, `[a-z0-9._-]`: the file name and the table's first column.
    pub id: String,
    pub what: String,
    pub measured: String,
    pub anchor: String,
    pub ratio: String,
    /// The target without its verdict, e.g. `<= 1.2x`; "none" when the row has none.
    pub target: String,
    /// `Some(true)`: met, `Some(false)`: missed, `None`: no verdict (no target, or a regression guard).
    pub verdict: Option<bool>,
}

/// The rows of one bench run: the 1-minute load average is read when it starts and when it writes.
pub struct Rows {
    reproduce: String,
    load_start: String,
    quick: bool,
    rows: Vec<Row>,
}

/// The 1-minute load average from `/proc/loadavg`, or "unknown".
pub fn load_1min() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "unknown".into())
}

/// `v` rounded to a whole number, with thousands separators: 1,160.
pub fn grouped(v: f64) -> String {
    let digits = format!("{:.0}", v.abs());
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if v.round() < 0.0 {
        out.insert(0, '-');
    }
    out
}

/// Today's date (UTC), `YYYY-MM-DD`.
pub fn today() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    // Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
    let z = (secs / 86_400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

/// Where rows are written: `WAXELL_BENCH_ROWS_DIR`, else `$CARGO_TARGET_DIR/bench-rows`, else the
/// workspace's `target/bench-rows` (every crate including this file is a direct child of the workspace).
pub fn rows_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("WAXELL_BENCH_ROWS_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"));
    target.join("bench-rows")
}

impl Rows {
    /// Rows reproduced by `reproduce` (the table's last column, e.g. ``"[T] `run_code`"``); reads the load now.
    pub fn start(reproduce: &str, quick: bool) -> Self {
        Self {
            reproduce: reproduce.to_owned(),
            load_start: load_1min(),
            quick,
            rows: Vec::new(),
        }
    }

    pub fn push(&mut self, row: Row) {
        self.rows.push(row);
    }

    /// Writes every row (with the load now and at the start) and says where.
    pub fn finish(self) {
        if self.rows.is_empty() {
            return;
        }
        let load = format!("{}-{}", self.load_start, load_1min());
        let dir = rows_dir();
        if let Err(e) = std::fs::create_dir_all(&dir) {
            eprintln!("bench rows: cannot create {}: {e}", dir.display());
            return;
        }
        let date = today();
        for row in &self.rows {
            assert!(
                !row.id.is_empty()
                    && row
                        .id
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b)),
                "bench row id {:?}: expected [a-z0-9._-]+",
                row.id
            );
            let json = serde_json::json!({
                "id": row.id,
                "what": row.what,
                "measured": row.measured,
                "anchor": row.anchor,
                "ratio": row.ratio,
                "target": row.target,
                "verdict": match row.verdict { Some(true) => "met", Some(false) => "missed", None => "none" },
                "load": load,
                "date": date,
                "reproduce": self.reproduce,
                "quick": self.quick,
            });
            let path = dir.join(format!("{}.json", row.id));
            if let Err(e) = std::fs::write(&path, format!("{json:#}\n")) {
                eprintln!("bench rows: cannot write {}: {e}", path.display());
            }
        }
        println!(
            "bench rows: {} row(s) of {} written to {} (load {load})",
            self.rows.len(),
            self.reproduce,
            dir.display()
        );
    }
}
