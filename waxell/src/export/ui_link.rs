//! Links to a run in a running `waxell ui`: the UI writes its base URL to `url` beside its store (by default
//! `.waxell/ui/url`) while it runs, so a command in the same directory can point at the run's page.

use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

/// Where `waxell ui` with its default store writes its URL, relative to the working directory.
pub const UI_URL_FILE: &str = ".waxell/ui/url";

/// The page of run `trace_id` (hex) in the `waxell ui` running for this directory, if one is up: its URL
/// file exists and its address accepts a connection within 100 ms. Costs a file read and, when the file
/// exists, one loopback connection.
pub fn ui_run_url(trace_id: &str) -> Option<String> {
    ui_run_url_in(Path::new(UI_URL_FILE), trace_id)
}

/// [`ui_run_url`] with the URL file given.
pub fn ui_run_url_in(url_file: &Path, trace_id: &str) -> Option<String> {
    let base = std::fs::read_to_string(url_file).ok()?;
    let base = base.trim().trim_end_matches('/');
    let addr: SocketAddr = base.strip_prefix("http://")?.parse().ok()?;
    TcpStream::connect_timeout(&addr, Duration::from_millis(100)).ok()?;
    Some(format!("{base}/runs/{trace_id}"))
}
