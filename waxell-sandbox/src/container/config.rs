//! The container backend's own options (on top of [`SandboxConfig`]'s limits, pool and timeouts).

use std::time::Duration;

use crate::config::{BackendOptions, SandboxConfig};

/// Default image (built by `waxell-sandbox/container/Dockerfile` or scripts/setup-container.sh).
pub const DEFAULT_IMAGE: &str = "waxell-sandbox:latest";

/// Configuration of a [`crate::ContainerBackend`]: [`SandboxConfig`] with [`ContainerOptions`].
/// Of the limits, `cpu_seconds` and `address_space_bytes` do not apply: containers have no
/// per-process rlimit set-up.
pub type ContainerConfig = SandboxConfig<ContainerOptions>;

/// What only the container backend has: the image, the OCI runtime and the engine's socket.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ContainerOptions {
    /// Image with `python3` (plus whatever packages the code needs) and a user 1000.
    pub image: String,
    /// OCI runtime registered with the engine, e.g. `runsc` for gVisor; `None` = the engine's default.
    pub runtime: Option<String>,
    /// Engine socket (`unix:///path` or a path); `None` = `DOCKER_HOST`, then the usual sockets.
    pub docker_host: Option<String>,
}

impl Default for ContainerOptions {
    fn default() -> Self {
        Self {
            image: DEFAULT_IMAGE.to_owned(),
            runtime: None,
            docker_host: None,
        }
    }
}

impl BackendOptions for ContainerOptions {
    const READY_TIMEOUT: Duration = Duration::from_secs(60);
}

impl SandboxConfig<ContainerOptions> {
    /// Use this image.
    pub fn with_image(mut self, image: impl Into<String>) -> Self {
        self.backend.image = image.into();
        self
    }
    /// Run under this OCI runtime (`runsc` for gVisor).
    pub fn with_runtime(mut self, runtime: impl Into<String>) -> Self {
        self.backend.runtime = Some(runtime.into());
        self
    }
    /// Use this engine socket (`unix:///path` or a path) instead of `DOCKER_HOST`.
    pub fn with_docker_host(mut self, host: impl Into<String>) -> Self {
        self.backend.docker_host = Some(host.into());
        self
    }
}
