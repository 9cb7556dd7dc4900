//! Renders docs/performance.md's table from the rows the benches wrote (see `scripts/bench-all.sh`).
//!
//! `bench-table render <rows dir> <doc> [--write]`: merges `<rows dir>/*.json` into the table of `<doc>`
//! (rows of the selectors in `<rows dir>/ran.txt` that were not measured, and those of the selectors in
//! `<rows dir>/skipped.tsv` (`selector<TAB>why`), are marked not rerun) and prints it, or with `--write`
//! rewrites `<doc>`. `bench-table check <doc>`: the table parses back into rows.

use std::path::Path;
use std::process::ExitCode;

use waxell_tests::bench_table::{merge, parse_table, read_rows, render, rewrite, Run, Selector};

fn run_of(dir: &Path) -> Result<Run, String> {
    let read = |name: &str| match std::fs::read_to_string(dir.join(name)) {
        Ok(text) => Ok(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        Err(e) => Err(format!("{}: {e}", dir.join(name).display())),
    };
    let ran = read("ran.txt")?
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| Selector::parse(l.trim()))
        .collect();
    let skipped = read("skipped.tsv")?
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let (selector, why) = l.split_once('\t').unwrap_or((l, "prerequisite missing"));
            (Selector::parse(selector.trim()), why.trim().to_owned())
        })
        .collect();
    Ok(Run { ran, skipped })
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["check", doc] => std::fs::read_to_string(doc)
            .map_err(|e| format!("{doc}: {e}"))
            .and_then(|text| parse_table(&text).map_err(|e| format!("{doc}: {e}")))
            .map(|rows| println!("{doc}: {} rows parse", rows.len())),
        ["render", dir, doc, ref rest @ ..] if rest.is_empty() || rest == ["--write"] => (|| {
            let text = std::fs::read_to_string(doc).map_err(|e| format!("{doc}: {e}"))?;
            let old = parse_table(&text).map_err(|e| format!("{doc}: {e}"))?;
            let new = read_rows(Path::new(dir))?;
            let rows = merge(&old, &new, &run_of(Path::new(dir))?);
            let stale = rows.iter().filter(|r| r.not_rerun.is_some()).count();
            if rest.is_empty() {
                print!("{}", render(&rows));
            } else {
                std::fs::write(doc, rewrite(&text, &rows)?).map_err(|e| format!("{doc}: {e}"))?;
            }
            eprintln!(
                "bench-table: {} rows ({} measured by this run, {stale} marked not rerun){}",
                rows.len(),
                new.len(),
                if rest.is_empty() {
                    String::new()
                } else {
                    format!("; {doc} rewritten")
                }
            );
            Ok(())
        })(),
        _ => Err("usage: bench-table render <rows dir> <doc> [--write] | bench-table check <doc>".into()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench-table: {e}");
            ExitCode::FAILURE
        }
    }
}
