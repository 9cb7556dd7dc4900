//! Before the agents start: one small cell in the chosen sandbox checks that its Python can import what the
//! analysis needs, so a sandbox without pandas stops the demo with the fix instead of failing mid-run.
//!
//! It uses the backend's session directly (not the instrumented `Sandbox`): the check is not part of the
//! agents' work, so it records no spans.

use waxell::sandbox::{RunOptions, SandboxBackend, SandboxOptions};

use crate::agents::DemoResult;
use crate::script::REQUIRED_MODULES;

/// Which sandbox the demo runs in, for the message and its fix.
#[derive(Debug, Clone)]
pub enum Target {
    /// The local sandbox (`waxell-sandbox`).
    Local,
    /// E2B's cloud.
    E2bCloud,
    /// An E2B-protocol server at this URL (e.g. `waxell-sandbox serve`).
    Server(String),
}

/// Prints the missing modules (comma-separated) and the interpreter, without importing anything.
pub fn check_cell() -> String {
    format!(
        "import importlib.util, sys\n\
         missing = [m for m in {REQUIRED_MODULES:?} if importlib.util.find_spec(m) is None]\n\
         print(','.join(missing))\n\
         print(sys.executable)\n"
    )
}

/// Check the sandbox; `Err` names the missing modules, the backend and the fix.
pub async fn check_sandbox(backend: &dyn SandboxBackend, target: &Target) -> DemoResult<()> {
    let session = backend
        .create(&SandboxOptions::new().with_timeout(std::time::Duration::from_secs(120)))
        .await
        .map_err(|e| format!("could not start the {} to check it: {e}", describe(target)))?;
    let result = session.run_code(&check_cell(), &RunOptions::default()).await;
    // The check's sandbox is not needed any more, whatever the outcome.
    let _ = session.kill().await;
    let execution =
        result.map_err(|e| format!("could not run the module check in the {}: {e}", describe(target)))?;
    if let Some(error) = &execution.error {
        return Err(format!("the module check failed in the {}: {error}", describe(target)).into());
    }
    let stdout = execution.logs.stdout.concat();
    let mut lines = stdout.lines();
    let missing: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|m| !m.is_empty())
        .collect();
    let python = lines.next().unwrap_or("its python").trim();
    if missing.is_empty() {
        return Ok(());
    }
    Err(missing_message(&missing, python, target).into())
}

fn describe(target: &Target) -> String {
    match target {
        Target::Local => "local sandbox".to_owned(),
        Target::E2bCloud => "E2B sandbox".to_owned(),
        Target::Server(url) => format!("sandbox server at {url}"),
    }
}

/// What is missing, where, and how to fix it for that backend.
pub fn missing_message(missing: &[&str], python: &str, target: &Target) -> String {
    let modules = missing.join(", ");
    let install = format!("python -m pip install {}", REQUIRED_MODULES.join(" "));
    let fix = match target {
        Target::Local => {
            let chosen = if std::env::var_os("WAXELL_SANDBOX_PYTHON").is_some() {
                "WAXELL_SANDBOX_PYTHON chose it: unset it to use that venv, or point it"
            } else {
                "or point WAXELL_SANDBOX_PYTHON"
            };
            format!(
                "run `bash scripts/setup.sh` (it creates the sandbox's venv with {all}, used by default); \
                 {chosen} at a Python that has them (`{install}` in it)",
                all = REQUIRED_MODULES.join(", ")
            )
        }
        Target::E2bCloud => format!(
            "use an E2B template that has them: E2B's default `code-interpreter-v1` does; for a custom template, \
             add `pip install {}` to its Dockerfile and rebuild it",
            REQUIRED_MODULES.join(" ")
        ),
        Target::Server(_) => format!(
            "the server's Python lacks them: for `waxell-sandbox serve`, run `bash scripts/setup.sh` on its host or \
             restart it with WAXELL_SANDBOX_PYTHON pointing at a Python that has them; if it runs in a container, \
             add `{install}` to the image; for another E2B-compatible server, use a template that has them"
        ),
    };
    format!(
        "the {where_} cannot import {modules}, which the demo's analysis needs (its Python: {python}).\nfix: {fix}.\n\
         (--skip-sandbox-check runs the demo anyway.)",
        where_ = describe(target)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_backend_gets_its_own_fix() {
        let e2b = missing_message(&["pandas"], "/usr/bin/python3", &Target::E2bCloud);
        assert!(e2b.starts_with("the E2B sandbox cannot import pandas,"), "{e2b}");
        assert!(
            e2b.contains("template") && e2b.contains("code-interpreter-v1"),
            "{e2b}"
        );
        let server = missing_message(
            &["numpy"],
            "python3",
            &Target::Server("http://127.0.0.1:1".into()),
        );
        assert!(server.contains("image"), "{server}");
    }

    #[test]
    fn the_check_cell_is_python_listing_the_modules() {
        assert!(check_cell().contains(r#"["pandas", "numpy", "matplotlib"]"#));
    }
}
