//! docs/performance.md's table as `scripts/bench-all.sh` renders it (`waxell_tests::bench_table`): rows the
//! benches wrote (JSON) merged into the table, rows not rerun marked, a row without an anchor or ratio refused,
//! and the document's own table parsing back into rows (a hand edit that breaks it fails here).

use waxell_tests::bench_row;
use waxell_tests::bench_table::{
    merge, parse_table, read_rows, render, rewrite, row_from_json, Run, Selector, BEGIN, END,
};

fn json_row(id: &str, reproduce: &str, measured: &str) -> String {
    serde_json::json!({
        "id": id, "what": format!("what {id}"), "measured": measured, "anchor": "anchor: 1 ms",
        "ratio": "**0.50**", "target": "<= 1.2x", "verdict": "met", "load": "1.0-2.0",
        "date": "2026-11-27", "reproduce": reproduce, "quick": false,
    })
    .to_string()
}

fn doc_with(table: &str) -> String {
    format!("# Performance\n\n## All figures\n\n{BEGIN}\n{table}{END}\n\nNotes.\n")
}

const OLD: &str = "\
| id | what | measured (median) | anchor, same run | ratio | target | load | date | reproduce |
| --- | --- | --- | --- | --- | --- | --- | --- | --- |
| `a.one` | first | 1 ms | anchor: 2 ms | 0.50 | <= 1x: **met** | 3 | 2026-11-01 | [O1] |
| `b.cold` | cold create | 60 ms | E2B: 150 ms | 0.40x | <= 80 ms: **met** | 4 | 2026-11-02 | [S] `local` |
| `b.modes` | rootless | 59 ms | root: 60 ms | 0.98 | none (no target) | 5 | 2026-11-03 | [S] `modes` |
| `c.exit` | exit | 24 ms | healthy: 25 ms | 0.96 | <= 1.05x: **missed** | 6 | 2026-11-04 | [T] `exit` |
| `c.demo` | demo \\| dry run | 1.6 s | floor: 1.2 s | 1.34x | <= 3 s: **met** | 7 | 2026-11-05 | [T] `demo` |
";

#[test]
fn the_table_parses_back_into_the_rows_it_was_rendered_from() {
    let rows = parse_table(&doc_with(OLD)).unwrap();
    assert_eq!(
        rows.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        ["a.one", "b.cold", "b.modes", "c.exit", "c.demo"]
    );
    assert_eq!(rows[3].target, "<= 1.05x");
    assert_eq!(rows[3].verdict, "missed");
    assert_eq!(rows[2].verdict, "none");
    assert_eq!(rows[4].what, "demo | dry run");
    assert_eq!(render(&rows), OLD);
}

#[test]
fn a_run_replaces_its_rows_marks_skipped_ones_and_leaves_unselected_ones_alone() {
    let old = parse_table(&doc_with(OLD)).unwrap();
    let new = vec![
        row_from_json(&json_row("c.exit", "[T] `exit`", "20 ms")).unwrap(),
        row_from_json(&json_row("c.new", "[T] `exit`", "5 ms")).unwrap(),
    ];
    let run = Run {
        ran: vec![Selector::parse("T:exit"), Selector::parse("T:demo")],
        skipped: vec![(Selector::parse("S:local"), "needs root".into())],
    };
    let rows = merge(&old, &new, &run);
    let ids: Vec<_> = rows.iter().map(|r| r.id.as_str()).collect();
    // A new id goes after the last row of its tag.
    assert_eq!(ids, ["a.one", "b.cold", "b.modes", "c.exit", "c.demo", "c.new"]);
    // Rerun: the new figures, date and load, no mark.
    assert_eq!(rows[3].measured, "20 ms");
    assert_eq!(rows[3].date, "2026-11-27");
    assert_eq!(rows[3].not_rerun, None);
    // Skipped: the old figures and date, marked with why.
    assert_eq!(rows[1].measured, "60 ms");
    assert_eq!(rows[1].not_rerun.as_deref(), Some("needs root"));
    // Its selector ran but did not produce it: marked too.
    assert_eq!(
        rows[4].not_rerun.as_deref(),
        Some("the last run of [T] did not measure it")
    );
    // Not selected: unchanged.
    assert_eq!(rows[0], old[0]);
    assert_eq!(rows[2], old[2]);

    let table = render(&rows);
    assert!(
        table.contains("| 4 | 2026-11-02, **not rerun** (needs root) | [S] `local` |"),
        "{table}"
    );
    assert!(
        table.contains("| `c.exit` | what c.exit | 20 ms | anchor: 1 ms | **0.50** | <= 1.2x: **met** | 1.0-2.0 | 2026-11-27 | [T] `exit` |"),
        "{table}"
    );
    // The marks survive a round trip through the document, and a later run that measures the row clears it.
    let doc = rewrite(&doc_with(OLD), &rows).unwrap();
    assert!(doc.ends_with(&format!("{END}\n\nNotes.\n")), "{doc}");
    let again = parse_table(&doc).unwrap();
    assert_eq!(again, rows);
    let fresh = row_from_json(&json_row("b.cold", "[S] `local`", "55 ms")).unwrap();
    let after = merge(
        &again,
        &[fresh],
        &Run {
            ran: vec![Selector::parse("S:local")],
            skipped: vec![],
        },
    );
    assert_eq!(after[1].not_rerun, None);
    assert_eq!(after[1].measured, "55 ms");
    assert_eq!(after[4].not_rerun, rows[4].not_rerun, "not selected: kept");
}

#[test]
fn a_row_without_an_anchor_or_a_ratio_is_refused_by_name() {
    for field in ["anchor", "ratio", "measured", "target", "load", "date"] {
        let mut row: serde_json::Value = serde_json::from_str(&json_row("x.y", "[O1]", "1 ms")).unwrap();
        row[field] = serde_json::Value::String(" ".into());
        let err = row_from_json(&row.to_string()).unwrap_err();
        assert!(
            err.contains("\"x.y\"") && err.contains(&format!("no \"{field}\"")),
            "{field}: {err}"
        );
        row.as_object_mut().unwrap().remove(field);
        assert!(row_from_json(&row.to_string()).is_err(), "{field} missing");
    }
    let mut row: serde_json::Value = serde_json::from_str(&json_row("x.y", "[O1]", "1 ms")).unwrap();
    row["verdict"] = "fine".into();
    assert!(row_from_json(&row.to_string())
        .unwrap_err()
        .contains("verdict \"fine\""));
    row["verdict"] = "met".into();
    row["reproduce"] = "cargo bench".into();
    assert!(row_from_json(&row.to_string()).unwrap_err().contains("[TAG]"));
}

#[test]
fn a_broken_table_is_an_error_naming_its_line() {
    let missing_cell = OLD.replace("| 0.50 | <= 1x", "| <= 1x");
    let err = parse_table(&doc_with(&missing_cell)).unwrap_err();
    assert!(err.contains("line 8: 8 cells, expected 9"), "{err}");
    let bad_date = OLD.replace("2026-11-02", "Nov 2");
    assert!(parse_table(&doc_with(&bad_date))
        .unwrap_err()
        .contains("date \"Nov 2\""));
    let empty = OLD.replace("| 1 ms |", "|  |");
    assert!(parse_table(&doc_with(&empty))
        .unwrap_err()
        .contains("empty cell 3"));
    let twice = format!("{OLD}{}", OLD.lines().nth(2).unwrap().to_owned() + "\n");
    assert!(parse_table(&doc_with(&twice))
        .unwrap_err()
        .contains("id \"a.one\" twice"));
    assert!(parse_table(OLD)
        .unwrap_err()
        .contains("no <!-- bench-all:begin -->"));
}

#[test]
fn figures_are_grouped_by_thousands() {
    assert_eq!(bench_row::grouped(2530.4), "2,530");
    assert_eq!(bench_row::grouped(999.6), "1,000");
    assert_eq!(bench_row::grouped(1_234_567.0), "1,234,567");
    assert_eq!(bench_row::grouped(-1500.0), "-1,500");
    assert_eq!(bench_row::grouped(7.0), "7");
}

/// The rows a bench writes through `bench_row` read back as the renderer's rows.
#[test]
fn rows_written_by_a_bench_are_read_back() {
    let dir = tempfile::tempdir().unwrap();
    // The variable is read by `bench_row::rows_dir`; this test binary sets it for itself only.
    std::env::set_var("WAXELL_BENCH_ROWS_DIR", dir.path());
    let mut rows = bench_row::Rows::start("[T] `exit`", true);
    rows.push(bench_row::Row {
        id: "t.written".into(),
        what: "written".into(),
        measured: "1 ms".into(),
        anchor: "none".into(),
        ratio: "none".into(),
        target: "regression guard".into(),
        verdict: None,
    });
    rows.finish();
    let read = read_rows(dir.path()).unwrap();
    assert_eq!(read.len(), 1);
    assert_eq!(read[0].id, "t.written");
    assert_eq!(read[0].verdict, "none");
    assert_eq!(read[0].date, bench_row::today());
    assert!(read[0].quick);
    assert!(read[0].load.contains('-'), "{}", read[0].load);
    // Rendered, a quick row says so.
    assert!(render(&read).contains(", **quick run** |"));
}

/// CI check: the table in docs/performance.md parses back into rows (each with an id, an anchor, a ratio, a
/// date and a reproduce tag), so a hand edit that breaks it is caught here.
#[test]
fn docs_performance_md_table_parses() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/performance.md");
    let doc = std::fs::read_to_string(path).unwrap();
    let rows = parse_table(&doc).unwrap_or_else(|e| panic!("docs/performance.md: {e}"));
    assert!(rows.len() >= 30, "{} rows", rows.len());
    // Rendering it again gives the same table: nothing in it is lost or reordered.
    let start = doc.find(BEGIN).unwrap() + BEGIN.len();
    let end = doc.find(END).unwrap();
    assert_eq!(doc[start..end].trim(), render(&rows).trim());
}
