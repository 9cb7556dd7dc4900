//! Progress on stderr while the agents work: a line per step with the elapsed time, and a spinner on long
//! waits when stderr is a terminal (plain lines otherwise, so logs and CI output stay readable).

use std::future::Future;
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

pub struct Progress {
    started: Instant,
    interactive: bool,
    quiet: bool,
}

impl Progress {
    pub fn new(quiet: bool) -> Self {
        Self {
            started: Instant::now(),
            interactive: std::io::stderr().is_terminal(),
            quiet,
        }
    }

    fn stamp(&self) -> String {
        format!("[{:>6.2}s]", self.started.elapsed().as_secs_f64())
    }

    /// One line of progress.
    pub fn note(&self, message: &str) {
        if !self.quiet {
            eprintln!("{} {message}", self.stamp());
        }
    }

    /// Await `future`, showing a spinner with `message` meanwhile (on a terminal).
    pub async fn spin<F: Future>(&self, message: &str, future: F) -> F::Output {
        if self.quiet || !self.interactive {
            return future.await;
        }
        const FRAMES: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];
        let mut future = std::pin::pin!(future);
        let mut ticker = tokio::time::interval(Duration::from_millis(90));
        let started = Instant::now();
        let mut frame = 0usize;
        let output = loop {
            tokio::select! {
                out = &mut future => break out,
                _ = ticker.tick() => {
                    frame = (frame + 1) % FRAMES.len();
                    eprint!("\r{} {} {message} ({:.1}s) ", self.stamp(), FRAMES[frame], started.elapsed().as_secs_f64());
                    let _ = std::io::stderr().flush();
                }
            }
        };
        eprint!("\r\x1b[2K");
        output
    }
}
