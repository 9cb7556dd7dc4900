//! Checkpoints of a sandbox's memory: gVisor's, through Docker Engine (`--experimental`), as root on
//! the engine's host. What a pause keeps and a resume brings back: every process with its memory
//! (the kernels' variables, what the code started), and the files.
//!
//! gVisor restores a process only if it holds no descriptor of the host's. So, where this backend
//! checkpoints: the kernels talk over FIFOs in the sandbox's own memory through a relay exec
//! (relay.py); the writable file systems are tmpfs mounts the host makes (`host_mounts`), since
//! the engine empties its volumes when the container stops and a restore fails on a missing file
//! a process holds open. Commands and terminals run under keepers in the same way (keeper.py). A
//! checkpoint: pid 1 ends every process holding a host descriptor (the relays of kernels,
//! commands and terminals; watchers and file helpers: `sever` in init.py), the engine checkpoints the container
//! into the given directory and stops it (it is then removed: AutoRemove), and the host copies the
//! writable file systems beside the image (`home/` is a saved `/home/user` as the filesystem-only
//! pause keeps it). A restore makes a new container (a second restore of one container fails in
//! the engine: E2B's e2b-dev/E2B#736), puts the files back, starts it from the image (the engine
//! takes an image only from its own directory: it is linked there) and starts a relay per kernel
//! (the server attaches one to each command and terminal: `Backend::attach_process`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bollard::Docker;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use waxell::sandbox::SandboxError;

use super::engine::api_error;

/// The relay between a kernel's FIFOs and an exec's stdio.
pub(super) const RELAY_SOURCE: &str = include_str!("relay.py");
/// Where the kernels' FIFOs are, one directory per kernel named by its pid: `/dev/shm` is gVisor's
/// own tmpfs, saved with the sandbox's memory.
pub(super) const KERNELS_DIR: &str = "/dev/shm/waxell-kernels";
/// The engine's name for a sandbox's checkpoint.
const CHECKPOINT_ID: &str = "memory";
/// Where in a checkpoint's directory the engine's image is.
const IMAGE_DIR: &str = "image";
/// The key of the restored pid 1's answers in a checkpoint's state.
pub(super) const KEY_STATE: &str = "init_key";
/// The sandbox's boot id in a checkpoint's state: a restore is the same boot.
pub(super) const BOOT_ID_STATE: &str = "boot_id";
/// How long pid 1 may take to end the processes holding host descriptors.
pub(super) const SEVER_LIMIT: Duration = Duration::from_secs(5);
/// How long the engine may take to start a container from its image.
const RESTORE_LIMIT: Duration = Duration::from_secs(120);

/// The engine a backend checkpoints through.
#[derive(Debug, Clone)]
pub(super) struct MemoryEngine {
    /// The engine's socket, for the one call the client has not got (a start from a checkpoint).
    socket: PathBuf,
    /// The engine's data root, where it takes a checkpoint to start from.
    root: PathBuf,
}

/// Whether sandboxes of this engine and runtime can keep their memory, or why not (for the report).
pub(super) async fn detect(
    docker: &Docker,
    socket: &Path,
    podman: bool,
    gvisor: bool,
    can_mount: bool,
) -> Result<MemoryEngine, String> {
    if !gvisor {
        return Err("the runtime is not gVisor (runsc), the one this backend checkpoints".into());
    }
    if podman {
        return Err("Podman checkpoints only with CRIU, even under runsc".into());
    }
    let info = docker.info().await.map_err(|e| format!("the engine's /info: {e}"))?;
    if info.experimental_build != Some(true) {
        return Err("Docker Engine checkpoints only when started with --experimental".into());
    }
    if !can_mount {
        return Err("this process cannot mount the sandboxes' file systems itself (it is not root)".into());
    }
    let root = PathBuf::from(info.docker_root_dir.ok_or("the engine does not say where its data root is")?);
    let containers = root.join("containers");
    if rustix::fs::access(&containers, rustix::fs::Access::WRITE_OK).is_err() {
        return Err(format!(
            "this process cannot write the engine's {} (not on this host, or not root)",
            containers.display()
        ));
    }
    Ok(MemoryEngine {
        socket: socket.to_owned(),
        root,
    })
}

impl MemoryEngine {
    /// Checkpoint container `id` into `dir/image` and stop it.
    pub(super) async fn checkpoint(&self, docker: &Docker, id: &str, dir: &Path) -> Result<(), SandboxError> {
        let options = bollard::container::CreateCheckpointOptions {
            checkpoint_id: CHECKPOINT_ID.to_owned(),
            checkpoint_dir: Some(dir.join(IMAGE_DIR).display().to_string()),
            exit: true,
        };
        docker
            .create_checkpoint(id, options)
            .await
            .map_err(|e| api_error("checkpointing the sandbox (runsc checkpoint)", e))
    }

    /// Start the created container `id` from the image in `dir`.
    pub(super) async fn start_from(&self, id: &str, dir: &Path) -> Result<(), SandboxError> {
        let from = dir.join(IMAGE_DIR).join(CHECKPOINT_ID);
        let to = self.root.join("containers").join(id).join("checkpoints").join(CHECKPOINT_ID);
        // The engine uploads the directory to containerd as one blob, and fails when containerd
        // has that blob already ("already exists", moby/moby#42900): an idle sandbox can make the
        // same image twice. A file of its own makes every upload new.
        let nonce = format!("{:032x}\n", rand::random::<u128>());
        let placed = async {
            link_tree(&from, &to).await?;
            tokio::fs::write(to.join("waxell-restore"), nonce).await
        };
        placed
            .await
            .map_err(|e| SandboxError::Unavailable(format!("handing the checkpoint to the engine: {e}")))?;
        let path = format!("/containers/{id}/start?checkpoint={CHECKPOINT_ID}");
        let started = tokio::time::timeout(RESTORE_LIMIT, self.post(&path))
            .await
            .unwrap_or_else(|_| Err(SandboxError::Timeout(format!("restore not done within {RESTORE_LIMIT:?}"))));
        // The engine has read it; its copy goes with the container anyway.
        let _ = tokio::fs::remove_dir_all(&to).await;
        started
    }

    /// POST `path` (no body) to the engine; Ok on a 2xx answer.
    async fn post(&self, path: &str) -> Result<(), SandboxError> {
        let transport = |e: std::io::Error| SandboxError::Transport(format!("the engine at {}: {e}", self.socket.display()));
        let mut stream = tokio::net::UnixStream::connect(&self.socket).await.map_err(transport)?;
        let request = format!("POST {path} HTTP/1.1\r\nHost: docker\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.map_err(transport)?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await.map_err(transport)?;
        let (status, body) = parse_answer(&answer);
        if (200..300).contains(&status) {
            Ok(())
        } else {
            Err(SandboxError::Unavailable(format!(
                "restoring the sandbox from its checkpoint: the engine answered {status}: {}",
                body.trim()
            )))
        }
    }
}

/// Wait until the engine has seen every exec of container `id` end, at most `limit`; else the
/// programs of those still running.
pub(super) async fn execs_ended(docker: &Docker, id: &str, limit: Duration) -> Result<(), Vec<String>> {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let mut running = Vec::new();
        if let Ok(inspect) = docker.inspect_container(id, None).await {
            for exec in inspect.exec_ids.unwrap_or_default() {
                match docker.inspect_exec(&exec).await {
                    Ok(e) if e.running == Some(true) => {
                        let config = e.process_config.unwrap_or_default();
                        let args = config.arguments.unwrap_or_default();
                        // The shim's arguments first, then the program's source: its first line.
                        let program = args.iter().rev().find(|a| a.starts_with('#')).or(args.last());
                        let first_line = program.and_then(|a| a.lines().next()).unwrap_or_default();
                        running.push(format!("{} {first_line}", config.entrypoint.unwrap_or_default()));
                    }
                    _ => {}
                }
            }
        }
        if running.is_empty() {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(running);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The status and body of an HTTP/1.1 answer (0 when it is not one).
fn parse_answer(answer: &[u8]) -> (u16, String) {
    let text = String::from_utf8_lossy(answer);
    let status = text
        .strip_prefix("HTTP/1.")
        .and_then(|rest| rest.get(2..5))
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map_or("", |(_, body)| body).to_owned();
    (status, body)
}

/// Hard-link the files of `from` into a new directory `to` (copied when on another file system).
async fn link_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    tokio::fs::create_dir_all(to).await?;
    let mut entries = tokio::fs::read_dir(from).await?;
    while let Some(entry) = entries.next_entry().await? {
        let target = to.join(entry.file_name());
        if entry.file_type().await?.is_dir() {
            Box::pin(link_tree(&entry.path(), &target)).await?;
        } else if tokio::fs::hard_link(entry.path(), &target).await.is_err() {
            tokio::fs::copy(entry.path(), &target).await?;
        }
    }
    Ok(())
}

/// A checkpoint's state: what pid 1 signs with, and the boot id.
pub(super) fn state(key: String, boot_id: Option<String>) -> BTreeMap<String, String> {
    let mut state = BTreeMap::from([(KEY_STATE.to_owned(), key)]);
    if let Some(boot_id) = boot_id {
        state.insert(BOOT_ID_STATE.to_owned(), boot_id);
    }
    state
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_engine_answer_gives_its_status_and_message() {
        let ok = b"HTTP/1.1 204 No Content\r\nApi-Version: 1.41\r\n\r\n";
        assert_eq!(parse_answer(ok), (204, String::new()));
        let refused = b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n\r\n{\"message\":\"restore failed\"}\n";
        assert_eq!(parse_answer(refused), (500, "{\"message\":\"restore failed\"}\n".to_owned()));
        assert_eq!(parse_answer(b"garbage").0, 0);
        assert_eq!(parse_answer(b"").0, 0);
    }

    /// relay.py on this host: the kernel outlives its relay (as before a checkpoint) and a new
    /// relay reaches the same kernel, state and all (as after a restore); the kernel's end ends it.
    #[test]
    fn a_kernel_outlives_its_relay_and_a_new_relay_reaches_it() {
        use std::io::{BufRead, BufReader, Write};
        use std::process::{Command, Stdio};
        let root = std::env::temp_dir().join(format!("waxell-relay-test-{}-{}", std::process::id(), rand::random::<u32>()));
        let kernel = "import sys\nn = 0\nfor line in sys.stdin:\n    n += 1\n    print(n, line.strip(), flush=True)";
        let relay = |args: &[&str]| {
            Command::new("python3")
                .args(["-I", "-c", RELAY_SOURCE])
                .args(args)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        };
        let ask = |child: &mut std::process::Child, line: &str| {
            writeln!(child.stdin.as_mut().unwrap(), "{line}").unwrap();
            let mut answer = String::new();
            BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut answer).unwrap();
            answer.trim().to_owned()
        };
        let root_arg = root.display().to_string();
        let mut first = relay(&["start", &root_arg, "python3", "-u", "-c", kernel]);
        assert_eq!(ask(&mut first, "a"), "1 a");
        let pid: u32 = std::fs::read_dir(&root).unwrap().next().unwrap().unwrap().file_name().to_str().unwrap().parse().unwrap();
        first.kill().unwrap();
        first.wait().unwrap();
        assert!(Path::new(&format!("/proc/{pid}")).exists(), "the kernel lives on without its relay");

        let mut second = relay(&["attach", &format!("{root_arg}/{pid}")]);
        assert_eq!(ask(&mut second, "b"), "2 b", "the same kernel, its count kept");
        rustix::process::kill_process(rustix::process::Pid::from_raw(pid as i32).unwrap(), rustix::process::Signal::KILL).unwrap();
        let status = second.wait().unwrap();
        assert!(!status.success(), "the relay ends with its kernel");
        assert!(!root.join(pid.to_string()).exists(), "and removes its FIFOs");
        let mut none = relay(&["attach", &format!("{root_arg}/{pid}")]);
        drop(none.stdin.take());
        assert!(!none.wait().unwrap().success(), "no kernel there: the relay says so");

        // A kernel killed while what it forked still holds its FIFOs (a memory bomb's sleepers):
        // the relay ends with it, as the kernel did (SIGKILL: 137, how an OOM kill is told).
        let forking = format!("import os, time\nif os.fork() == 0:\n    time.sleep(5)\n    os._exit(0)\n{kernel}");
        let mut third = relay(&["start", &root_arg, "python3", "-u", "-c", &forking]);
        assert_eq!(ask(&mut third, "c"), "1 c");
        let pid: u32 = std::fs::read_dir(&root).unwrap().next().unwrap().unwrap().file_name().to_str().unwrap().parse().unwrap();
        let began = std::time::Instant::now();
        rustix::process::kill_process(rustix::process::Pid::from_raw(pid as i32).unwrap(), rustix::process::Signal::KILL).unwrap();
        let status = third.wait().unwrap();
        assert_eq!(std::os::unix::process::ExitStatusExt::into_raw(status) >> 8, 137);
        assert!(began.elapsed() < Duration::from_secs(3), "ended with the kernel, not its fork");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[tokio::test]
    async fn a_checkpoint_is_linked_whole_into_the_engine_s_directory() {
        let root = std::env::temp_dir().join(format!("waxell-link-test-{}-{}", std::process::id(), rand::random::<u32>()));
        let from = root.join("from");
        std::fs::create_dir_all(from.join("sub")).unwrap();
        std::fs::write(from.join("checkpoint.img"), b"image").unwrap();
        std::fs::write(from.join("sub/pages"), b"pages").unwrap();
        let to = root.join("engine/containers/c1/checkpoints/memory");
        link_tree(&from, &to).await.unwrap();
        assert_eq!(std::fs::read(to.join("checkpoint.img")).unwrap(), b"image");
        assert_eq!(std::fs::read(to.join("sub/pages")).unwrap(), b"pages");
        std::fs::remove_dir_all(&root).unwrap();
    }
}
