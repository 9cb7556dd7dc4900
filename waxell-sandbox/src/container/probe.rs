//! Which languages a backend's image runs, and the kernel compiled by its Python: one throwaway
//! sandbox container per image (same isolation as a sandbox's) runs `probe.py`, which says which
//! runtime files the image has (symlinks resolved) and whether Python has IPython and E2B's chart
//! extractor, and compiles the kernel, so each kernel start loads code instead of compiling 50 KB
//! of source. Remembered per image id for the process, so later backends over the same image ask
//! nothing.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use serde::Deserialize;
use waxell::sandbox::SandboxError;

use super::engine::run_helper;
use super::spec::USER;
use super::Container;
use crate::kernel::{Language, Languages, KERNEL_SOURCE};

const PROBE_SOURCE: &str = include_str!("probe.py");
/// The longest kernel argument taken from a probe (one exec argument may hold 128 KiB).
const KERNEL_ARGUMENT_LIMIT: usize = 120 << 10;

/// What a backend learns of its image.
#[derive(Clone)]
pub(super) struct ImageProbe {
    pub(super) languages: Languages,
    /// The kernel as `KERNEL_BOOT` takes it: its code from the image's Python, or its source when
    /// that Python could not compile it.
    pub(super) kernel: Arc<str>,
}

/// Probed images, by image id.
static PROBED: Mutex<Vec<(String, ImageProbe)>> = Mutex::new(Vec::new());

#[derive(Deserialize)]
struct Probe {
    files: HashMap<String, Option<String>>,
    modules: HashMap<String, bool>,
    kernel: Option<String>,
}

/// The image `image_id` (the backend's image), probed once per process.
pub(super) async fn image(backend: &Container, image_id: &str) -> Result<ImageProbe, SandboxError> {
    let known = {
        let probed = PROBED.lock().unwrap_or_else(|e| e.into_inner());
        probed.iter().find(|(id, _)| id == image_id).map(|(_, found)| found.clone())
    };
    if let Some(found) = known {
        return Ok(found);
    }
    let found = probe(backend).await?;
    let mut probed = PROBED.lock().unwrap_or_else(|e| e.into_inner());
    if !probed.iter().any(|(id, _)| id == image_id) {
        probed.push((image_id.to_owned(), found.clone()));
    }
    Ok(found)
}

async fn probe(backend: &Container) -> Result<ImageProbe, SandboxError> {
    let image = &backend.config.image;
    let began = std::time::Instant::now();
    let (container, _, _) = backend.create_started(None).await?;
    let mut cmd = ["python3", "-I", "-c", PROBE_SOURCE, KERNEL_SOURCE].map(str::to_owned).to_vec();
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
    Ok(ImageProbe { languages: from_probe(&probe, image), kernel: kernel_argument(probe.kernel).into() })
}

/// The probe's compiled kernel when it looks like one (it comes from the image: at worst a kernel
/// that does not start, as a broken Python in the image would be), else the source.
fn kernel_argument(compiled: Option<String>) -> String {
    compiled
        .filter(|code| {
            code.len() <= KERNEL_ARGUMENT_LIMIT
                && code.strip_prefix('@').is_some_and(|b64| {
                    b64.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='))
                })
        })
        .unwrap_or_else(|| KERNEL_SOURCE.to_owned())
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

    /// What the image's Python sends back is used only when it looks like compiled code that fits
    /// in one exec argument; anything else starts the kernel from its source.
    #[test]
    fn only_a_well_formed_compiled_kernel_is_taken_from_the_image() {
        assert_eq!(kernel_argument(Some("@eNrLSM3JyVcozy/KSQEAGgQEXQ==".into())), "@eNrLSM3JyVcozy/KSQEAGgQEXQ==");
        let too_long = format!("@{}", "A".repeat(KERNEL_ARGUMENT_LIMIT));
        for rejected in [None, Some("eNrLSM3J".into()), Some("@not base64; rm -rf /".into()), Some(too_long)] {
            assert_eq!(kernel_argument(rejected), KERNEL_SOURCE);
        }
    }

    #[test]
    fn an_image_without_runtimes_reports_what_it_lacks() {
        let probe: Probe = serde_json::from_str(
            r#"{"files": {"/usr/bin/node": "/usr/bin/node", "/bin/bash": "/usr/bin/bash"},
                "modules": {"IPython": false, "e2b_charts": false}, "kernel": null}"#,
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
