//! Which languages a backend's image runs: one throwaway sandbox container per image (same
//! isolation as a sandbox's) runs `probe.py`, which says which runtime files the image has (symlinks
//! resolved) and whether Python has IPython and E2B's chart extractor. Remembered per image id for
//! the process, so later backends over the same image ask nothing.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;

use serde::Deserialize;
use waxell::sandbox::SandboxError;

use super::engine::run_helper;
use super::spec::USER;
use super::Container;
use crate::kernel::{Language, Languages};

const PROBE_SOURCE: &str = include_str!("probe.py");

/// Probed images, by image id.
static PROBED: Mutex<Vec<(String, Languages)>> = Mutex::new(Vec::new());

#[derive(Deserialize)]
struct Probe {
    files: HashMap<String, Option<String>>,
    modules: HashMap<String, bool>,
}

/// The languages of the image `image_id` (the backend's image), probed once per process.
pub(super) async fn languages(backend: &Container, image_id: &str) -> Result<Languages, SandboxError> {
    let known = {
        let probed = PROBED.lock().unwrap_or_else(|e| e.into_inner());
        probed.iter().find(|(id, _)| id == image_id).map(|(_, l)| l.clone())
    };
    if let Some(languages) = known {
        return Ok(languages);
    }
    let languages = probe(backend).await?;
    let mut probed = PROBED.lock().unwrap_or_else(|e| e.into_inner());
    if !probed.iter().any(|(id, _)| id == image_id) {
        probed.push((image_id.to_owned(), languages.clone()));
    }
    Ok(languages)
}

async fn probe(backend: &Container) -> Result<Languages, SandboxError> {
    let image = &backend.config.image;
    let began = std::time::Instant::now();
    let (container, _, _) = backend.create_started().await?;
    let mut cmd = vec!["python3".to_owned(), "-I".to_owned(), "-c".to_owned(), PROBE_SOURCE.to_owned()];
    cmd.extend(Languages::runtime_files().into_iter().map(str::to_owned));
    let output = run_helper(&backend.docker, &container.id, USER, cmd, None).await;
    container.remove().await;
    let output = output?;
    let probe: Probe = serde_json::from_slice(&output.stdout)
        .ok()
        .filter(|_| output.exit_code == 0)
        .ok_or_else(|| {
            SandboxError::Unavailable(format!(
                "image {image:?}: cannot list its runtimes (`python3` in it exited {}: {})",
                output.exit_code,
                String::from_utf8_lossy(&output.stderr).trim()
            ))
        })?;
    tracing::debug!(image, probe_ms = began.elapsed().as_secs_f64() * 1e3, "image runtimes probed");
    Ok(from_probe(&probe, image))
}

fn from_probe(probe: &Probe, image: &str) -> Languages {
    let mut languages =
        Languages::detect_with(|file| probe.files.get(file).cloned().flatten().map(PathBuf::from));
    let has = |module: &str| probe.modules.get(module).copied().unwrap_or(false);
    if !has("IPython") {
        languages.limit(
            Language::Python,
            format!(
                "image {image:?} has no IPython: cells run in a plain Python shell (no magics, `!cmd` or \
                 IPython.display); add it to the image (`apt-get install python3-ipython` or `pip install ipython`)"
            ),
        );
    } else if !has("e2b_charts") {
        languages.limit(
            Language::Python,
            format!(
                "image {image:?} has no E2B chart extractor: figures come as images without their `chart` data; \
                 add it to the image (`pip install e2b-charts`)"
            ),
        );
    }
    languages
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_without_runtimes_reports_what_it_lacks() {
        let probe: Probe = serde_json::from_str(
            r#"{"files": {"/usr/bin/node": "/usr/bin/node", "/bin/bash": "/usr/bin/bash"},
                "modules": {"IPython": false, "e2b_charts": false}}"#,
        )
        .unwrap();
        let languages = from_probe(&probe, "custom:1");
        assert_eq!(languages.available(), [Language::Python, Language::JavaScript, Language::Bash]);
        let java = languages.check(Language::Java).unwrap_err().to_string();
        assert!(java.contains("/usr/bin/java and /usr/bin/jshell not found"), "{java}");
        assert!(languages.check(Language::TypeScript).is_err());
        let (language, why) = &languages.limited()[0];
        assert!(*language == Language::Python && why.contains("no IPython"), "{why}");
    }
}
