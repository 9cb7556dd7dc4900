//! docs/performance.md's table of figures: parsed from the document, merged with the rows the benches wrote
//! (`bench_row`, `scripts/bench_rows.py`) and rendered back between the markers. Used by the `bench-table`
//! binary that `scripts/bench-all.sh` runs, and checked by `tests/tests/bench_table.rs`.
//!
//! A row of the table that the last run did not measure keeps its figures and date, and its date cell says
//! so: `2026-11-22, **not rerun** (why)`.

use std::fmt::Write as _;

pub const BEGIN: &str = "<!-- bench-all:begin -->";
pub const END: &str = "<!-- bench-all:end -->";
pub const HEADER: &str =
    "| id | what | measured (median) | anchor, same run | ratio | target | load | date | reproduce |";
const NOT_RERUN: &str = ", **not rerun**";
const QUICK: &str = ", **quick run**";

/// One row of the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableRow {
    pub id: String,
    pub what: String,
    pub measured: String,
    pub anchor: String,
    pub ratio: String,
    pub target: String,
    /// "met", "missed", or "none".
    pub verdict: String,
    pub load: String,
    pub date: String,
    pub reproduce: String,
    /// Measured in quick mode (fewer rounds).
    pub quick: bool,
    /// Not measured by the last run that rewrote the table: why.
    pub not_rerun: Option<String>,
}

impl TableRow {
    /// The tag and the case of its reproduce cell: ``"[T] `run_code`"`` is `("T", Some("run_code"))`.
    pub fn tag(&self) -> (String, Option<String>) {
        tag_of(&self.reproduce)
    }
}

fn tag_of(reproduce: &str) -> (String, Option<String>) {
    let tag = reproduce
        .strip_prefix('[')
        .and_then(|r| r.split_once(']'))
        .map(|(t, _)| t.to_owned())
        .unwrap_or_default();
    let case = reproduce
        .split('`')
        .nth(1)
        .filter(|c| !c.is_empty())
        .map(str::to_owned);
    (tag, case)
}

/// A selector of `bench-all --only`: `T` (every case of the tag) or `T:run_code` (one case).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selector {
    pub tag: String,
    pub case: Option<String>,
}

impl Selector {
    pub fn parse(s: &str) -> Self {
        match s.split_once(':') {
            Some((tag, case)) => Self {
                tag: tag.to_owned(),
                case: Some(case.to_owned()),
            },
            None => Self {
                tag: s.to_owned(),
                case: None,
            },
        }
    }

    pub fn matches(&self, row: &TableRow) -> bool {
        let (tag, case) = row.tag();
        tag == self.tag && (self.case.is_none() || self.case == case)
    }
}

fn field(json: &serde_json::Value, name: &str, id: &str) -> Result<String, String> {
    let value = json
        .get(name)
        .and_then(serde_json::Value::as_str)
        .map(str::trim)
        .unwrap_or_default();
    if value.is_empty() {
        return Err(format!(
            "bench row {id:?}: no {name:?} (write \"none\" if the row has none)"
        ));
    }
    if value.contains('\n') {
        return Err(format!("bench row {id:?}: {name:?} has a line break"));
    }
    Ok(value.to_owned())
}

/// A row as a bench wrote it (JSON); every field is required.
pub fn row_from_json(text: &str) -> Result<TableRow, String> {
    let json: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("bench row: not JSON: {e}"))?;
    let id = json
        .get("id")
        .and_then(serde_json::Value::as_str)
        .filter(|id| !id.is_empty())
        .ok_or("bench row without an \"id\"")?
        .to_owned();
    let verdict = field(&json, "verdict", &id)?;
    if !["met", "missed", "none"].contains(&verdict.as_str()) {
        return Err(format!(
            "bench row {id:?}: verdict {verdict:?}, expected met, missed or none"
        ));
    }
    let reproduce = field(&json, "reproduce", &id)?;
    if tag_of(&reproduce).0.is_empty() {
        return Err(format!(
            "bench row {id:?}: reproduce {reproduce:?} does not start with a [TAG]"
        ));
    }
    Ok(TableRow {
        what: field(&json, "what", &id)?,
        measured: field(&json, "measured", &id)?,
        anchor: field(&json, "anchor", &id)?,
        ratio: field(&json, "ratio", &id)?,
        target: field(&json, "target", &id)?,
        verdict,
        load: field(&json, "load", &id)?,
        date: field(&json, "date", &id)?,
        reproduce,
        quick: json
            .get("quick")
            .and_then(serde_json::Value::as_bool)
            .unwrap_or(false),
        not_rerun: None,
        id,
    })
}

/// The cells of a markdown table line (`|` inside a cell is written `\|`).
fn cells(line: &str) -> Option<Vec<String>> {
    let inner = line.trim().strip_prefix('|')?.strip_suffix('|')?;
    let mut out = vec![String::new()];
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                out.last_mut().unwrap().push('|');
                chars.next();
            }
            '|' => out.push(String::new()),
            c => out.last_mut().unwrap().push(c),
        }
    }
    Some(out.into_iter().map(|c| c.trim().to_owned()).collect())
}

fn escape(cell: &str) -> String {
    cell.replace('|', "\\|")
}

/// The table between the markers of `doc`, as rows; an error names the line that does not parse.
pub fn parse_table(doc: &str) -> Result<Vec<TableRow>, String> {
    let start = doc.find(BEGIN).ok_or_else(|| format!("no {BEGIN} marker"))?;
    let end = doc.find(END).ok_or_else(|| format!("no {END} marker"))?;
    if end < start {
        return Err(format!("{END} comes before {BEGIN}"));
    }
    let first_line = doc[..start].lines().count() + 1;
    let mut lines = doc[start + BEGIN.len()..end]
        .lines()
        .enumerate()
        .map(|(i, l)| (first_line + i, l.trim()))
        .filter(|(_, l)| !l.is_empty());
    match lines.next() {
        Some((_, h)) if cells(h) == cells(HEADER) => {}
        other => {
            return Err(format!(
                "line {}: expected the header {HEADER:?}",
                other.map_or(0, |(n, _)| n)
            ))
        }
    }
    match lines.next() {
        Some((_, l)) if cells(l).is_some_and(|c| c.len() == 9 && c.iter().all(|c| c == "---")) => {}
        other => {
            return Err(format!(
                "line {}: expected the separator | --- | x 9",
                other.map_or(0, |(n, _)| n)
            ))
        }
    }
    let mut rows: Vec<TableRow> = Vec::new();
    for (n, line) in lines {
        let c = cells(line).ok_or_else(|| format!("line {n}: not a table row: {line:?}"))?;
        if c.len() != 9 {
            return Err(format!("line {n}: {} cells, expected 9: {line:?}", c.len()));
        }
        if let Some(empty) = c.iter().position(String::is_empty) {
            return Err(format!("line {n}: empty cell {} (write \"none\")", empty + 1));
        }
        let (target, verdict) = match c[5].rsplit_once(": **") {
            Some((t, v)) if ["met**", "missed**"].contains(&v) => {
                (t.to_owned(), v.trim_end_matches("**").to_owned())
            }
            _ => (c[5].clone(), "none".to_owned()),
        };
        let mut date = c[7].as_str();
        let mut not_rerun = None;
        if let Some((d, why)) = date.split_once(NOT_RERUN) {
            let why = why.trim();
            let why = why
                .strip_prefix('(')
                .and_then(|w| w.strip_suffix(')'))
                .unwrap_or(why);
            not_rerun = Some(why.to_owned());
            date = d;
        }
        let quick = date.ends_with(QUICK);
        let date = date.trim_end_matches(QUICK).to_owned();
        if !is_date(&date) {
            return Err(format!("line {n}: date {date:?} is not YYYY-MM-DD"));
        }
        let row = TableRow {
            id: c[0].trim_matches('`').to_owned(),
            what: c[1].clone(),
            measured: c[2].clone(),
            anchor: c[3].clone(),
            ratio: c[4].clone(),
            target,
            verdict,
            load: c[6].clone(),
            date,
            reproduce: c[8].clone(),
            quick,
            not_rerun,
        };
        if row.tag().0.is_empty() {
            return Err(format!(
                "line {n}: reproduce {:?} does not start with a [TAG]",
                row.reproduce
            ));
        }
        if rows.iter().any(|r| r.id == row.id) {
            return Err(format!("line {n}: id {:?} twice", row.id));
        }
        rows.push(row);
    }
    Ok(rows)
}

fn is_date(s: &str) -> bool {
    s.len() == 10
        && s.bytes().enumerate().all(|(i, b)| {
            if i == 4 || i == 7 {
                b == b'-'
            } else {
                b.is_ascii_digit()
            }
        })
}

/// The table (header, separator, one line per row), without the markers.
pub fn render(rows: &[TableRow]) -> String {
    let mut out = format!("{HEADER}\n|{}\n", " --- |".repeat(9));
    for r in rows {
        let target = if r.verdict == "none" {
            r.target.clone()
        } else {
            format!("{}: **{}**", r.target, r.verdict)
        };
        let mut date = r.date.clone();
        if r.quick {
            date.push_str(QUICK);
        }
        if let Some(why) = &r.not_rerun {
            let _ = write!(date, "{NOT_RERUN} ({why})");
        }
        let _ = writeln!(
            out,
            "| `{}` | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.id,
            escape(&r.what),
            escape(&r.measured),
            escape(&r.anchor),
            escape(&r.ratio),
            escape(&target),
            escape(&r.load),
            escape(&date),
            escape(&r.reproduce)
        );
    }
    out
}

/// What the last run did: which selectors ran and which were skipped (with why).
#[derive(Debug, Default)]
pub struct Run {
    pub ran: Vec<Selector>,
    pub skipped: Vec<(Selector, String)>,
}

/// The table after a run: a row the run measured replaces the old one of the same id (a new id goes after
/// the last row of its tag); a row of a skipped selector keeps its figures, marked not rerun with why; a row
/// of a selector that ran but did not produce it is marked too; a row the run did not select is unchanged.
pub fn merge(old: &[TableRow], new: &[TableRow], run: &Run) -> Vec<TableRow> {
    let mut rows: Vec<TableRow> = old
        .iter()
        .map(|row| {
            if let Some(fresh) = new.iter().find(|n| n.id == row.id) {
                return fresh.clone();
            }
            let mut row = row.clone();
            if let Some((_, why)) = run.skipped.iter().find(|(s, _)| s.matches(&row)) {
                row.not_rerun = Some(why.clone());
            } else if run.ran.iter().any(|s| s.matches(&row)) {
                let (tag, _) = row.tag();
                row.not_rerun = Some(format!("the last run of [{tag}] did not measure it"));
            }
            row
        })
        .collect();
    for fresh in new.iter().filter(|n| !old.iter().any(|o| o.id == n.id)) {
        let tag = fresh.tag().0;
        let at = rows
            .iter()
            .rposition(|r| r.tag().0 == tag)
            .map_or(rows.len(), |i| i + 1);
        rows.insert(at, fresh.clone());
    }
    rows
}

/// `doc` with the table between the markers replaced by `rows`.
pub fn rewrite(doc: &str, rows: &[TableRow]) -> Result<String, String> {
    let start = doc.find(BEGIN).ok_or_else(|| format!("no {BEGIN} marker"))? + BEGIN.len();
    let end = doc.find(END).ok_or_else(|| format!("no {END} marker"))?;
    if end < start {
        return Err(format!("{END} comes before {BEGIN}"));
    }
    Ok(format!("{}\n{}{}", &doc[..start], render(rows), &doc[end..]))
}

/// Every `*.json` row in `dir`, sorted by id; the first invalid one is an error naming its file.
pub fn read_rows(dir: &std::path::Path) -> Result<Vec<TableRow>, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut rows = Vec::new();
    for entry in entries {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path.extension().is_some_and(|e| e == "json") {
            let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            rows.push(row_from_json(&text).map_err(|e| format!("{}: {e}", path.display()))?);
        }
    }
    rows.sort_by(|a: &TableRow, b| a.id.cmp(&b.id));
    Ok(rows)
}
