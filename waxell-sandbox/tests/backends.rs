//! The shared functional and abuse bodies (tests/common/suite.rs) against every backend: the local
//! sandbox, containers under runc (the engine's default) and under gVisor's runsc. The container
//! runs need a Docker-compatible engine at `DOCKER_HOST` with the sandbox image, and runsc
//! registered: scripts/setup-container.sh provides all three (scripts/test.sh runs it).

mod common;

use std::time::Duration;

use common::suite::{BoxFut, Harness, Kind};
use waxell::sandbox::SandboxBackend;
use waxell_sandbox::{Limits, LocalConfig};

struct Local;

impl Harness for Local {
    fn kind(&self) -> Kind {
        Kind::Local
    }
    fn backend(&self, limits: Limits, lifetime: Option<Duration>) -> BoxFut<'_, Box<dyn SandboxBackend>> {
        Box::pin(async move {
            let mut config = common::config().with_limits(limits);
            if let Some(lifetime) = lifetime {
                config = config.with_lifetime(lifetime);
            }
            Box::new(common::backend_with(config)) as Box<dyn SandboxBackend>
        })
    }
    fn is_gone<'a>(&'a self, id: &'a str) -> BoxFut<'a, bool> {
        Box::pin(async move {
            let cgroups_gone = ["memory", "pids", "cpu"]
                .iter()
                .all(|c| !waxell_sandbox::cgroup_subtree_dir(c).join(id).exists());
            let _ = LocalConfig::default();
            cgroups_gone && !std::env::temp_dir().join("waxell-sandbox").join(id).exists()
        })
    }
}

backend_suite!(local, Local);

#[cfg(feature = "container")]
mod containers {
    use super::*;
    use waxell_sandbox::{ContainerBackend, ContainerConfig};

    struct Container {
        runtime: Option<&'static str>,
    }

    impl Container {
        fn config(&self) -> ContainerConfig {
            let mut config = ContainerConfig::default()
                .with_run_timeout(Duration::from_secs(20))
                .with_interrupt_grace(Duration::from_millis(1500));
            if let Some(runtime) = self.runtime {
                config = config.with_runtime(runtime);
                // Podman serves one runtime per service: the set-up script runs a second one for runsc.
                if let Ok(host) = std::env::var("WAXELL_RUNSC_DOCKER_HOST") {
                    config = config.with_docker_host(host);
                }
            }
            config
        }
    }

    impl Harness for Container {
        fn kind(&self) -> Kind {
            if self.runtime == Some("runsc") {
                Kind::Runsc
            } else {
                Kind::Runc
            }
        }
        fn backend(&self, limits: Limits, lifetime: Option<Duration>) -> BoxFut<'_, Box<dyn SandboxBackend>> {
            Box::pin(async move {
                let mut config = self.config().with_limits(limits);
                if let Some(lifetime) = lifetime {
                    config = config.with_lifetime(lifetime);
                }
                let backend = ContainerBackend::new(config).await.expect(
                    "the container backend must be available: run scripts/setup-container.sh and export the \
                     DOCKER_HOST it prints",
                );
                Box::new(backend) as Box<dyn SandboxBackend>
            })
        }
        fn unavailable(&self) -> Option<String> {
            common::container_engine_missing("DOCKER_HOST").or_else(|| {
                (self.runtime == Some("runsc"))
                    .then(|| common::container_engine_missing("WAXELL_RUNSC_DOCKER_HOST"))
                    .flatten()
            })
        }
        fn is_gone<'a>(&'a self, id: &'a str) -> BoxFut<'a, bool> {
            Box::pin(async move {
                let backend = ContainerBackend::new(self.config()).await.expect("engine");
                // An error (e.g. the container is being removed) counts as not gone yet.
                matches!(backend.container_exists(id).await, Ok(false))
            })
        }
    }

    backend_suite!(runc, Container { runtime: None });
    backend_suite!(
        runsc,
        Container {
            runtime: Some("runsc")
        }
    );

    /// Spans record which runtime isolated the code; the kernel under runsc sees gVisor's kernel.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn runtime_is_recorded_and_real() {
        if let Some(why) = (Container {
            runtime: Some("runsc"),
        })
        .unavailable()
        {
            return eprintln!("skipped: {why}");
        }
        for (runtime, expected) in [(None, "runc"), (Some("runsc"), "runsc")] {
            let backend = Container { runtime }.backend(Limits::default(), None).await;
            let sandbox = waxell::sandbox::Sandbox::create(backend.as_ref(), &Default::default())
                .await
                .unwrap();
            assert_eq!(sandbox.session().runtime(), Some(expected));
            let release = common::suite::eval(sandbox.session(), "import os; os.uname().release").await;
            // gVisor reports its own (old) kernel version; runc shares the host's.
            assert_eq!(release == "4.4.0", expected == "runsc", "{expected}: {release}");
        }
    }

    /// Errors name the missing piece.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn missing_pieces_are_named() {
        if let Some(why) = (Container { runtime: None }).unavailable() {
            return eprintln!("skipped: {why}");
        }
        let missing_socket = ContainerBackend::new(
            ContainerConfig::default().with_docker_host("unix:///nonexistent/docker.sock"),
        )
        .await
        .unwrap_err()
        .to_string();
        assert!(
            missing_socket.contains("no container engine socket at /nonexistent/docker.sock"),
            "{missing_socket}"
        );
        let missing_image = ContainerBackend::new(
            Container { runtime: None }
                .config()
                .with_image("waxell-no-such-image:1"),
        )
        .await
        .unwrap_err()
        .to_string();
        assert!(
            missing_image.contains("not found") && missing_image.contains("docker build"),
            "{missing_image}"
        );
        let error = ContainerBackend::new(
            Container { runtime: None }
                .config()
                .with_runtime("no-such-runtime"),
        )
        .await
        .unwrap_err()
        .to_string();
        assert!(error.contains("runtime \"no-such-runtime\""), "{error}");
        // Permission denied on the socket: a socket this (root) test makes unreadable for a plain user is
        // covered by the error mapping; root bypasses file modes, so it is checked only when not root.
    }
}
