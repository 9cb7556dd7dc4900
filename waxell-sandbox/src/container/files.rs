//! File operations in a container sandbox: execs of a helper (`fileop.py`) run as the sandbox
//! user, so the host never resolves a path the code controls.

use waxell::sandbox::{EntryInfo, LimitKind, SandboxError};

use bollard::Docker;

use super::engine::run_helper;
use super::guard::ContainerGuard;
use super::spec::USER;
use crate::paths::{sandbox_path, HOME_DIR};

/// The in-container file helper, after the metadata code it shares with the watch.
const FILEOP_SOURCE: &str = concat!(include_str!("metadata.py"), include_str!("fileop.py"));

/// File operations in one sandbox's container.
pub(super) struct Files<'a> {
    pub(super) docker: &'a Docker,
    pub(super) container: &'a ContainerGuard,
    pub(super) max_file_bytes: u64,
}

impl Files<'_> {
    /// Run the file helper on `path`; its exit status says why it refused.
    async fn fileop(
        &self, args: &[&str],
        stdin: Option<&[u8]>,
        path: &str,
    ) -> Result<Vec<u8>, SandboxError> {
        let mut cmd = vec![
            "python3".to_owned(),
            "-I".to_owned(),
            "-c".to_owned(),
            FILEOP_SOURCE.to_owned(),
        ];
        cmd.extend(args.iter().map(|a| (*a).to_owned()));
        let output = run_helper(self.docker, &self.container.id, USER, cmd, stdin).await?;
        let reason = || {
            serde_json::from_slice::<serde_json::Value>(&output.stderr)
                .ok()
                .and_then(|v| v.get("reason").and_then(|r| r.as_str()).map(str::to_owned))
                .unwrap_or_else(|| String::from_utf8_lossy(&output.stderr).trim().to_owned())
        };
        match output.exit_code {
            0 => Ok(output.stdout),
            2 => Err(SandboxError::InvalidPath {
                path: path.to_owned(),
                reason: reason(),
            }),
            3 => Err(SandboxError::FileNotFound { path: path.to_owned() }),
            4 => Err(SandboxError::LimitExceeded {
                limit: LimitKind::FileSize,
                message: format!("{path}: {}", reason()),
            }),
            code => Err(SandboxError::Io(std::io::Error::other(format!(
                "file operation on {path} failed (exit {code}): {}",
                reason()
            )))),
        }
    }

    async fn fileop_json<T: serde::de::DeserializeOwned>(
        &self, args: &[&str],
        stdin: Option<&[u8]>,
        path: &str,
    ) -> Result<T, SandboxError> {
        let out = self.fileop(args, stdin, path).await?;
        serde_json::from_slice(&out).map_err(|e| SandboxError::Protocol {
            message: format!("file helper: {e}"),
            received: String::from_utf8_lossy(&out).chars().take(200).collect(),
        })
    }

    pub(super) async fn write(
        &self, path: &str,
        data: &[u8],
    ) -> Result<EntryInfo, SandboxError> {
        let max = self.max_file_bytes;
        if data.len() as u64 > max {
            return Err(SandboxError::LimitExceeded {
                limit: LimitKind::FileSize,
                message: format!("{path}: {} bytes is over the {max}-byte file limit", data.len()),
            });
        }
        let target = sandbox_path(path)?;
        let mut stdin = format!("{}\n", data.len()).into_bytes();
        stdin.extend_from_slice(data);
        self.fileop_json(&["write", &target], Some(&stdin), path)
            .await
    }

    pub(super) async fn read(&self, path: &str) -> Result<Vec<u8>, SandboxError> {
        let max = self.max_file_bytes.to_string();
        let target = sandbox_path(path)?;
        self.fileop(&["read", &target, &max], None, path).await
    }

    pub(super) async fn list(
        &self, path: &str,
    ) -> Result<Vec<EntryInfo>, SandboxError> {
        let target = sandbox_path(path)?;
        self.fileop_json(&["list", &target], None, path).await
    }

    pub(super) async fn mkdir(&self, path: &str) -> Result<bool, SandboxError> {
        let target = sandbox_path(path)?;
        self.fileop_json(&["mkdir", &target], None, path).await
    }

    pub(super) async fn rename(
        &self, from: &str,
        to: &str,
    ) -> Result<EntryInfo, SandboxError> {
        let (source, target) = (sandbox_path(from)?, sandbox_path(to)?);
        self.fileop_json(&["rename", &source, &target], None, from)
            .await
    }

    pub(super) async fn set_metadata(
        &self,
        path: &str,
        metadata: &std::collections::BTreeMap<String, String>,
    ) -> Result<EntryInfo, SandboxError> {
        let target = sandbox_path(path)?;
        let json = serde_json::to_vec(metadata).map_err(|e| SandboxError::Other(e.to_string()))?;
        let mut stdin = format!("{}\n", json.len()).into_bytes();
        stdin.extend_from_slice(&json);
        self.fileop_json(&["setmeta", &target], Some(&stdin), path).await
    }

    /// Bytes used on the home's tmpfs.
    pub(super) async fn disk_used(&self) -> Result<u64, SandboxError> {
        self.fileop_json(&["disk", HOME_DIR], None, HOME_DIR).await
    }

    pub(super) async fn remove(&self, path: &str) -> Result<(), SandboxError> {
        let target = sandbox_path(path)?;
        self.fileop(&["remove", &target], None, path).await?;
        Ok(())
    }
}
