//! Debian's chromium, headless, for the tests of `waxell ui`'s pages: [`chromium`] finds it (or says why the
//! test cannot run, failing instead when `WAXELL_REQUIRE_BROWSER_TESTS=1`), [`dump_dom`] loads a page and
//! returns the DOM its scripts built.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Profiles made so far by this process (each load gets a fresh one).
static PROFILES: AtomicUsize = AtomicUsize::new(0);

/// The browser, or why these tests cannot run here.
pub fn chromium() -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .flat_map(|dir| ["chromium", "chromium-browser"].map(|name| dir.join(name)))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        let why = "chromium is not installed: run scripts/setup.sh (apt-get install chromium)";
        assert!(
            std::env::var("WAXELL_REQUIRE_BROWSER_TESTS").as_deref() != Ok("1"),
            "WAXELL_REQUIRE_BROWSER_TESTS=1 but {why}"
        );
        eprintln!("skipped: {why}");
    }
    found
}

/// Load `url` in headless chromium (fresh profile, no background traffic) and return the DOM after the
/// page's scripts ran.
pub fn dump_dom(browser: &Path, url: &str) -> String {
    let profile = std::env::temp_dir().join(format!(
        "waxell-chromium-profile-{}-{}",
        std::process::id(),
        PROFILES.fetch_add(1, Ordering::Relaxed)
    ));
    let mut child = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--disable-dev-shm-usage",
            "--virtual-time-budget=8000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--dump-dom")
        .arg(url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromium starts");
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut dom = String::new();
        let _ = stdout.read_to_string(&mut dom);
        dom
    });
    let deadline = Instant::now() + Duration::from_secs(90);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("chromium did not finish loading {url}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let dom = reader.join().unwrap();
    let _ = std::fs::remove_dir_all(profile);
    assert!(dom.contains("</html>"), "no DOM for {url}: {dom}");
    dom
}

/// [`dump_dom`] until `rendered` holds for the DOM (at most five loads), for pages that fill
/// themselves from the server: on a loaded machine a headless load can end before the app's
/// fetches have drawn the page. Returns the last DOM either way, for the caller's assertions.
pub fn dump_rendered_dom(browser: &Path, url: &str, rendered: impl Fn(&str) -> bool) -> String {
    let mut dom = dump_dom(browser, url);
    for _ in 0..4 {
        if rendered(&dom) {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
        dom = dump_dom(browser, url);
    }
    dom
}
