//! Non-Linux stand-in for the local backend: it needs Linux namespaces, seccomp and cgroups, so
//! here it only reports `Unavailable`, pointing at the backends that do work (the rest of the
//! crate, e.g. the E2B-protocol server types, still builds).

use async_trait::async_trait;
use waxell::sandbox::{SandboxBackend, SandboxError, SandboxOptions, SandboxSession};

use crate::local::capabilities::HostReport;
use crate::local::config::LocalConfig;

/// Id of the context every sandbox starts with.
pub const DEFAULT_CONTEXT_ID: &str = "default";

const UNAVAILABLE: &str = "the local sandbox needs Linux (bubblewrap namespaces, seccomp, cgroups); on this system \
                           use `--sandbox e2b` (E2B's cloud, E2B_API_KEY), a `waxell-sandbox serve` on a Linux \
                           machine (`--sandbox-url`), or a container backend";

/// The local backend; on this system [`LocalBackend::new`] always fails with `Unavailable`.
#[derive(Debug, Clone)]
pub struct LocalBackend {
    never: std::convert::Infallible,
}

/// A local sandbox; none can exist on this system.
#[derive(Debug)]
pub enum LocalSandbox {}

impl LocalBackend {
    pub fn new(_config: LocalConfig) -> Result<Self, SandboxError> {
        Err(SandboxError::Unavailable(UNAVAILABLE.into()))
    }

    pub fn host_report(_config: &LocalConfig) -> HostReport {
        HostReport::unavailable(UNAVAILABLE.into())
    }

    pub fn capabilities(&self) -> &HostReport {
        match self.never {}
    }

    pub async fn create_sandbox(&self, _options: &SandboxOptions) -> Result<LocalSandbox, SandboxError> {
        match self.never {}
    }
}

#[async_trait]
impl SandboxBackend for LocalBackend {
    fn name(&self) -> &'static str {
        "local"
    }

    async fn create(&self, _options: &SandboxOptions) -> Result<Box<dyn SandboxSession>, SandboxError> {
        match self.never {}
    }
}
