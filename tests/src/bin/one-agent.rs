//! A minimal one-agent command-line program, the shape of most short-lived agents (CLIs, jobs, tests):
//! `init()`, one agent run with a few tool calls, exit. The bench suite times it as a whole process with a
//! healthy collector and with the collector down (`exit` case).

use waxell::{agent, tool};

#[tool]
fn word_count(text: &str) -> usize {
    text.split_whitespace().count()
}

#[tool]
fn shout(text: &str) -> String {
    text.to_uppercase()
}

#[agent(name = "one-agent")]
fn summarise(text: &str) -> String {
    let words = word_count(text);
    waxell::score("words", words as f64);
    format!("{} ({words} words)", shout(text))
}

fn main() -> Result<(), waxell::InitError> {
    let _telemetry = waxell::builder()
        .with_service_name("one-agent")
        .with_console(false)
        .init()?;
    let text = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "a dead collector must not slow the exit".into());
    println!("{}", summarise(&text));
    Ok(())
}
