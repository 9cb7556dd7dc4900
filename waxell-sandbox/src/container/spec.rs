//! What a sandbox's container is: its specification (isolation and limits), its scratch volumes, the
//! runtime that isolates it, what a failed create means, and the sweep of containers and volumes of
//! dead host processes.

use std::collections::HashMap;

use bollard::models::{ContainerCreateBody, HostConfig, Mount, MountType, ResourcesUlimits, VolumeCreateRequest};
use bollard::query_parameters::{ListContainersOptionsBuilder, ListVolumesOptionsBuilder};
use bollard::Docker;
use waxell::sandbox::SandboxError;

use super::engine::api_error;
use super::guard::{remove_container, remove_volume};
use super::host_mounts::HostMounts;
use super::config::ContainerConfig;
use crate::config::MAX_PTYS;
use crate::naming;
use crate::paths::HOME_DIR;

/// pid 1: reaps orphans, and signals kernels for the host (commands on its attached stdin).
const INIT_SOURCE: &str = include_str!("init.py");
/// Label marking our containers; its value is the sandbox id (`<host pid>-...`).
const LABEL: &str = "io.waxell.sandbox";
/// Under gVisor, the container's memory cap above the guest's own limit (enforced by pid 1, see
/// init.py): the sentry's own memory and what a fast allocation adds between two of pid 1's polls.
const GVISOR_HEADROOM: u64 = 128 << 20;
/// The sandbox user inside the container.
pub(super) const USER: &str = "1000:1000";
/// Under gVisor, where file metadata is kept instead of extended attributes (fileop.py): the
/// gofer that serves the scratch volumes to the sandbox refuses `user.*` xattrs.
const METADATA_STORE_DIR: &str = "/var/lib/waxell/metadata";
/// The metadata store's size: one page per file that carries metadata, so 16,384 of them.
const METADATA_STORE_BYTES: u64 = 64 << 20;
/// With Docker Engine and runc, the pseudo-terminals one sandbox may hold: its E2B terminals (at most
/// `MAX_PTYS`, opened through the engine) and as many again opened by its code.
pub(super) const MAX_TERMINALS: usize = 2 * MAX_PTYS;

/// Whether `runtime` (a name as `resolve_runtime` gives it) is gVisor's, which differs in memory
/// accounting, terminals, metadata and boot ids.
pub(super) fn is_gvisor(runtime: &str) -> bool {
    runtime == "runsc"
}

/// Resolve which runtime will isolate the code, or say what is missing. Docker honours the
/// per-container `HostConfig.Runtime` for any runtime it lists in `/info`; Podman's Docker-compatible
/// service (4.x) lists its runtimes but ignores that field, so with Podman the requested runtime must
/// be the service's default (start it with `podman --runtime /usr/bin/runsc system service ...`).
pub(super) async fn resolve_runtime(
    docker: &Docker,
    requested: Option<&str>,
    podman: bool,
) -> Result<String, SandboxError> {
    let info = docker
        .info()
        .await
        .map_err(|e| api_error("asking the engine for its runtimes (/info)", e))?;
    // Podman reports the default runtime as a path; the name is its file name.
    let default = info
        .default_runtime
        .as_deref()
        .map(|d| d.rsplit('/').next().unwrap_or(d).to_owned())
        .unwrap_or_else(|| "runc".to_owned());
    let Some(runtime) = requested else {
        return Ok(default);
    };
    if podman {
        if default == runtime {
            return Ok(default);
        }
        return Err(SandboxError::Unavailable(format!(
            "container runtime {runtime:?} requested, but this Podman service runs {default:?} and its Docker API \
             ignores per-container runtimes: start a Podman service with `podman --runtime /usr/bin/{runtime} \
             system service --time=0 unix:///PATH.sock` and point docker_host (or DOCKER_HOST) at it \
             (scripts/setup-container.sh starts one for runsc){}",
            if runtime == "runsc" && !std::path::Path::new("/usr/bin/runsc").exists() {
                "; runsc is not installed either: `apt-get install runsc`"
            } else {
                ""
            }
        )));
    }
    let known = info.runtimes.map(|r| r.contains_key(runtime)).unwrap_or(false);
    if !known {
        return Err(SandboxError::Unavailable(format!(
            "container runtime {runtime:?} is not available in the engine: install it (Debian: `apt-get install \
             runsc` for gVisor) and register it under \"runtimes\" in /etc/docker/daemon.json, then restart Docker"
        )));
    }
    Ok(runtime.to_owned())
}

/// One of a sandbox's volumes: a named volume of the engine's `local` driver, made before its
/// container and removed after it, which the host mounts with options the engines' own mounts do
/// not take. The writable file systems (`/home/user`, `/tmp`, and under gVisor the metadata
/// store) are tmpfs volumes with a size and an inode cap: Podman's Docker API (4.x) rejects
/// `nr_inodes` on its own tmpfs mounts, and gVisor keeps those in its own memory, ignoring the
/// option; a volume is a tmpfs the host mounts, so every engine and runtime caps it alike (under
/// gVisor it is reached through the gofer). Under Docker Engine with runc `/dev/pts` is a devpts
/// volume with `max=`, so the sandbox's pseudo-terminals are a small share of the host-wide pool
/// (`kernel.pty.max`). Podman mounts its own devpts at `/dev/pts` as well, over or under such a
/// volume in no fixed order, so there the host binds a devpts of its own instead (`host_mounts`).
pub(super) struct SandboxVolume {
    pub(super) name: String,
    pub(super) target: &'static str,
    pub(super) request: VolumeCreateRequest,
}

/// One of a sandbox's writable file systems: a tmpfs with a size and an inode cap (`options`, as
/// tmpfs takes them; always also `nosuid,nodev`).
pub(super) struct Scratch {
    pub(super) suffix: &'static str,
    pub(super) target: &'static str,
    pub(super) options: String,
}

/// The sandbox's writable file systems: `/home/user`, `/tmp`, and under gVisor the metadata store.
pub(super) fn scratch_filesystems(config: &ContainerConfig, gvisor: bool) -> Vec<Scratch> {
    let limits = &config.limits;
    let (uid, gid) = USER.split_once(':').unwrap_or((USER, USER));
    // `nr_blocks` (pages), not `size`: Podman reads `size` in a volume's options as a quota request.
    let pages = |bytes: u64| bytes.div_ceil(4096).max(1);
    let tmpfs = |suffix, target, bytes: u64, inodes: u64, owner: (&str, &str)| Scratch {
        suffix,
        target,
        options: format!(
            "nr_blocks={},nr_inodes={inodes},mode=1777,uid={},gid={}",
            pages(bytes),
            owner.0,
            owner.1
        ),
    };
    let mut all = vec![
        tmpfs("home", HOME_DIR, limits.scratch_bytes, limits.tmpfs_inodes, (uid, gid)),
        tmpfs("tmp", "/tmp", limits.tmp_bytes, limits.tmpfs_inodes, ("0", "0")),
    ];
    if gvisor {
        // Metadata cannot be an extended attribute there (see METADATA_STORE_DIR).
        let entries = limits.tmpfs_inodes.min(pages(METADATA_STORE_BYTES));
        all.push(tmpfs("metadata", METADATA_STORE_DIR, METADATA_STORE_BYTES, entries, (uid, gid)));
    }
    all
}

/// The sandbox `id`'s volumes, named `waxell-<id>-home`, `waxell-<id>-tmp`, and under gVisor
/// `waxell-<id>-metadata` (unless the host makes those file systems itself, `host_scratch`: see
/// `host_mounts`); with Docker Engine and runc `waxell-<id>-pts`.
pub(super) fn sandbox_volumes(
    config: &ContainerConfig,
    id: &str,
    gvisor: bool,
    podman: bool,
    host_scratch: bool,
) -> Vec<SandboxVolume> {
    let volume = |suffix: &str, target: &'static str, fs: &str, options: String| {
        let name = format!("waxell-{id}-{suffix}");
        SandboxVolume {
            request: VolumeCreateRequest {
                name: Some(name.clone()),
            driver: Some("local".into()),
            driver_opts: Some(HashMap::from([
                ("type".to_owned(), fs.to_owned()),
                ("device".to_owned(), fs.to_owned()),
                ("o".to_owned(), options),
            ])),
            labels: Some(HashMap::from([(LABEL.to_owned(), id.to_owned())])),
            ..Default::default()
        },
        name,
        target,
    }
    };
    let mut volumes: Vec<SandboxVolume> = if host_scratch {
        Vec::new()
    } else {
        scratch_filesystems(config, gvisor)
            .into_iter()
            .map(|s| volume(s.suffix, s.target, "tmpfs", format!("nosuid,nodev,{}", s.options)))
            .collect()
    };
    // gVisor's pseudo-terminals are its own, so the host's pool needs no cap.
    if !gvisor && !podman {
        // The engine's own devpts (as runc mounts it: gid 5 is `tty`) with a cap on its terminals.
        let options = format!("nosuid,noexec,newinstance,ptmxmode=0666,mode=0620,gid=5,max={MAX_TERMINALS}");
        volumes.push(volume("pts", "/dev/pts", "devpts", options));
    }
    volumes
}

/// Remove containers and scratch volumes whose host process died (crash, SIGKILL) before it could
/// remove them.
pub(super) async fn sweep_stale(docker: &Docker) {
    sweep_stale_containers(docker).await;
    let filters = HashMap::from([("label".to_owned(), vec![LABEL.to_owned()])]);
    let options = ListVolumesOptionsBuilder::new().filters(&filters).build();
    let Ok(list) = docker.list_volumes(Some(options)).await else {
        return;
    };
    for volume in list.volumes.unwrap_or_default() {
        let owner = volume.labels.get(LABEL).cloned().unwrap_or_default();
        if naming::owner_is_dead(&owner) {
            remove_volume(docker, &volume.name).await;
        }
    }
}

async fn sweep_stale_containers(docker: &Docker) {
    let filters = HashMap::from([("label".to_owned(), vec![LABEL.to_owned()])]);
    let options = ListContainersOptionsBuilder::new()
        .all(true)
        .filters(&filters)
        .build();
    let Ok(containers) = docker.list_containers(Some(options)).await else {
        return;
    };
    for container in containers {
        let owner = container
            .labels
            .as_ref()
            .and_then(|l| l.get(LABEL))
            .cloned()
            .unwrap_or_default();
        if naming::owner_is_dead(&owner) {
            if let Some(id) = container.id {
                remove_container(docker, &id).await;
            }
        }
    }
}

pub(super) fn container_spec(
    config: &ContainerConfig,
    id: &str,
    podman: bool,
    runtime: &str,
    seccomp: &str,
    host: &HostMounts,
) -> ContainerCreateBody {
    let limits = &config.limits;
    let gvisor = is_gvisor(runtime);
    let mut mounts: Vec<Mount> = sandbox_volumes(config, id, gvisor, podman, host.has_scratch())
        .into_iter()
        .map(|volume| Mount {
            target: Some(volume.target.to_owned()),
            source: Some(volume.name),
            typ: Some(MountType::VOLUME),
            ..Default::default()
        })
        .collect();
    mounts.extend(host.mounts());
    let ulimit = |name: &str, value: u64| ResourcesUlimits {
        name: Some(name.to_owned()),
        soft: Some(value as i64),
        hard: Some(value as i64),
    };
    // Under gVisor the host's pids cgroup also counts the sentry's own threads (a few dozen), and
    // hitting it kills the whole sandbox; gVisor enforces RLIMIT_NPROC per sandbox itself, so the
    // process cap goes there and the cgroup keeps headroom. Under runc, RLIMIT_NPROC counts per host
    // uid across containers (all run as 1000): any figure there would be one budget for every
    // container together, so it is as high as the host goes and the pids cgroup is the cap.
    // Under runc the host's OOM killer works inside the container's cap, which also holds the
    // scratch volumes' pages. Under gVisor it could only end the whole sandbox (the sentry holds
    // the guest's memory): pid 1 is the OOM killer at `memory_bytes` of guest memory, and the
    // container's cap leaves room above that for the sentry, the scratch volumes (host tmpfs
    // pages, which the guest's accounting does not see) and pid 1's reaction time.
    let (memory, init_args) = if gvisor {
        let volumes = limits.scratch_bytes + limits.tmp_bytes + METADATA_STORE_BYTES;
        let cap = limits.memory_bytes + volumes + GVISOR_HEADROOM;
        (cap as i64, vec![limits.memory_bytes.to_string()])
    } else {
        (limits.memory_bytes as i64, Vec::new())
    };
    let (pids_limit, nproc) = if gvisor {
        (limits.max_processes.max(64) * 4 + 128, limits.max_processes)
    } else {
        (limits.max_processes, host_wide_nproc())
    };
    ContainerCreateBody {
        image: Some(config.image.clone()),
        user: Some(USER.to_owned()),
        cmd: Some(
            ["python3", "-I", "-c", INIT_SOURCE]
                .into_iter()
                .map(str::to_owned)
                .chain(init_args)
                .collect(),
        ),
        entrypoint: Some(vec![]),
        // pid 1 reads signal requests from its stdin (see `Control`). Its stdin closes when our
        // attach stream does (`stdin_once`), which pid 1 takes as the host process being gone.
        open_stdin: Some(true),
        attach_stdin: Some(true),
        stdin_once: Some(true),
        working_dir: Some(HOME_DIR.to_owned()),
        hostname: Some("sandbox".to_owned()),
        env: Some(vec![
            "PATH=/usr/local/bin:/usr/bin:/bin".into(),
            format!("HOME={HOME_DIR}"),
            "USER=user".into(),
            "TMPDIR=/tmp".into(),
            "LANG=C.UTF-8".into(),
            "MPLBACKEND=Agg".into(),
            "MPLCONFIGDIR=/tmp/matplotlib".into(),
            // IPython's profile stays out of the user's home (E2B's lists the home as it is).
            "IPYTHONDIR=/tmp/.ipython".into(),
            "OPENBLAS_NUM_THREADS=1".into(),
            "OMP_NUM_THREADS=1".into(),
            "PYTHONUNBUFFERED=1".into(),
            "PYTHONDONTWRITEBYTECODE=1".into(),
        ]),
        network_disabled: Some(true),
        labels: Some(HashMap::from([(LABEL.to_owned(), id.to_owned())])),
        host_config: Some(HostConfig {
            network_mode: Some("none".into()),
            readonly_rootfs: Some(true),
            cap_drop: Some(vec!["ALL".into()]),
            security_opt: Some(vec![
                "no-new-privileges".into(),
                seccomp.to_owned(),
            ]),
            memory: Some(memory),
            memory_swap: Some(memory),
            pids_limit: Some(pids_limit as i64),
            nano_cpus: Some((limits.cpus * 1e9) as i64),
            ulimits: Some(vec![
                ulimit("nofile", limits.open_files.max(64)),
                ulimit("nproc", nproc),
                ulimit("core", 0),
                ulimit("fsize", limits.max_file_bytes),
                // No raising of scheduling priority, no real-time scheduling, no POSIX message
                // queues, pending signals as on the local backend: set, not left to the engine.
                ulimit("nice", 0),
                ulimit("rtprio", 0),
                ulimit("msgqueue", 0),
                ulimit("sigpending", limits.pending_signals),
            ]),
            mounts: Some(mounts),
            shm_size: Some(16 << 20),
            ipc_mode: Some("private".into()),
            // Podman ignores it (see `resolve_runtime`); Docker needs it.
            runtime: if podman { None } else { config.runtime.clone() },
            init: Some(false),
            // A container whose host process died without removing it ends itself (see init.py)
            // and is then removed by the engine.
            auto_remove: Some(true),
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub(super) fn create_error(config: &ContainerConfig, e: bollard::errors::Error) -> SandboxError {
    let text = e.to_string();
    let lower = text.to_ascii_lowercase();
    if let Some(runtime) = &config.runtime {
        if lower.contains("runtime")
            && (lower.contains("not found") || lower.contains("unknown") || lower.contains("no such"))
        {
            return SandboxError::Unavailable(format!(
                "container runtime {runtime:?} is not available in the engine ({text}): install it (Debian: \
                 `apt-get install runsc`) and register it with the engine (see scripts/setup-container.sh)"
            ));
        }
    }
    if lower.contains("no such image") || lower.contains("image not known") {
        return SandboxError::Unavailable(format!(
            "container image {:?} not found: build it with `docker build -t {} waxell-sandbox/container`",
            config.image, config.image
        ));
    }
    SandboxError::Unavailable(format!("cannot start the sandbox container: {text}"))
}

/// RLIMIT_NPROC for runc containers: the host's own ceiling on tasks (`pid_max`, and half of
/// `threads-max`, which is what one uid may reach by default), within our own hard limit (a
/// rootless engine's runtime cannot raise it past that), and never below 1024.
fn host_wide_nproc() -> u64 {
    static NPROC: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *NPROC.get_or_init(|| {
    let read = |path: &str| {
        std::fs::read_to_string(path)
            .ok()
            .and_then(|text| text.trim().parse::<u64>().ok())
    };
    let pid_max = read("/proc/sys/kernel/pid_max").unwrap_or(32_768);
    let threads = read("/proc/sys/kernel/threads-max").map_or(u64::MAX, |t| t / 2);
    let own_hard = rustix::process::getrlimit(rustix::process::Resource::Nproc)
        .maximum
        .unwrap_or(u64::MAX);
    pid_max.min(threads).min(own_hard).max(1024)
    })
}

