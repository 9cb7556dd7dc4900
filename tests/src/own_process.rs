//! Run a test in a child process of its own: for tests of `init()`'s real, process-wide pipeline (the global
//! tracer provider, OTLP export at shutdown). The test binary re-runs itself with only that test selected
//! and a marker variable set; the parent passes when the child passed. Configuration variables are not a
//! reason to use it: give them to `Builder::with_env` (see `waxell_tests::env`).
//!
//! Every other test captures its spans with `waxell::testing` and shares the process.

use std::process::Command;

/// Set in the child to the name of the test it runs.
pub const CHILD_VAR: &str = "WAXELL_TEST_OWN_PROCESS";

/// Run the calling test in a process of its own; put first in the test body.
///
/// ```ignore
/// #[test]
/// fn exports_at_shutdown() {
///     waxell_tests::own_process!();
///     let guard = waxell::init().unwrap();
///     // ...
/// }
/// ```
#[macro_export]
macro_rules! own_process {
    () => {{
        fn __here() {}
        let __test = $crate::own_process::test_name(::std::any::type_name_of_val(&__here));
        if !$crate::own_process::in_child(&__test) {
            $crate::own_process::run_child(&__test);
            return;
        }
    }};
}

/// The libtest name of the test whose body holds `__here` (`crate::module::test::{{closure}}::__here`).
#[doc(hidden)]
pub fn test_name(here: &str) -> String {
    let parts: Vec<&str> = here
        .split("::")
        .skip(1) // the test crate
        .filter(|part| *part != "{{closure}}" && *part != "__here")
        .collect();
    parts.join("::")
}

/// Whether this process is the child running `test`.
#[doc(hidden)]
pub fn in_child(test: &str) -> bool {
    std::env::var(CHILD_VAR).is_ok_and(|running| running == test)
}

/// Run `test` in a child process and fail, showing its output, unless it ran and passed.
#[doc(hidden)]
pub fn run_child(test: &str) {
    let exe = std::env::current_exe().expect("the test binary's path");
    let out = Command::new(exe)
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_VAR, test)
        .output()
        .expect("run the test in a child process");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{test} failed in its own process ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
}
