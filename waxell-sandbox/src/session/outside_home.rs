//! Reading a file outside `/home/user` (`/etc/os-release`, `/proc/sys/kernel/random/boot_id`), as
//! E2B's file API can: a short Python program run inside the sandbox as its user reads it, so the
//! sandbox's own view and permissions decide what is readable, on every backend alike. The host
//! never opens such a path itself (the scratch directory is all it reaches directly), and it caps
//! what it takes back from the program, which the sandbox's code could have replaced.

use std::time::Duration;

use waxell::sandbox::{LimitKind, ProcessEvent, ProcessSignal, ProcessSpec, SandboxError, SandboxSession};

/// Exit codes of [`READER`], one per answer the file API gives.
const NOT_FOUND: i32 = 2;
const DIRECTORY: i32 = 3;
const TOO_LARGE: i32 = 4;
const DENIED: i32 = 5;
const NOT_REGULAR: i32 = 6;

/// Reads `argv[1]`, at most `argv[2]` bytes, to stdout. Opened non-blocking so a fifo cannot hang
/// it; only regular files (procfs and sysfs files are), so `/dev/zero` is refused, not streamed.
const READER: &str = r#"import os, stat, sys
path, cap = sys.argv[1], int(sys.argv[2])
try:
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
except FileNotFoundError:
    sys.exit(2)
except IsADirectoryError:
    sys.exit(3)
except PermissionError:
    sys.exit(5)
except OSError as e:
    sys.stderr.write(e.strerror or str(e))
    sys.exit(1)
mode = os.fstat(fd).st_mode
if stat.S_ISDIR(mode):
    sys.exit(3)
if not stat.S_ISREG(mode):
    sys.exit(6)
chunks, size = [], 0
while size <= cap:
    chunk = os.read(fd, min(1 << 20, cap + 1 - size))
    if not chunk:
        break
    chunks.append(chunk)
    size += len(chunk)
if size > cap:
    sys.exit(4)
sys.stdout.buffer.write(b"".join(chunks))
"#;

/// How long the reader may take (it reads one capped file).
const TIMEOUT: Duration = Duration::from_secs(10);
/// Stderr kept for the error message.
const STDERR_BYTES: usize = 512;

/// The file at `path` (absolute, cleaned, outside the home directory), read inside the sandbox.
pub(crate) async fn read(session: &dyn SandboxSession, path: &str, max_bytes: u64) -> Result<Vec<u8>, SandboxError> {
    let spec = ProcessSpec::new("python3").with_args(["-I", "-S", "-c", READER, path, &max_bytes.to_string()]);
    let process = session.start_process(&spec).await.map_err(|e| match e {
        SandboxError::Unsupported { .. } => invalid(path, "this backend reaches only /home/user through the file API"),
        other => other,
    })?;
    let (mut output, control) = (process.output, process.control);
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    let collect = async {
        while let Some(event) = output.next_event().await {
            match event {
                ProcessEvent::Stdout(bytes) | ProcessEvent::Pty(bytes) => {
                    if (stdout.len() + bytes.len()) as u64 > max_bytes {
                        return Err(too_large(path, max_bytes));
                    }
                    stdout.extend(bytes);
                }
                ProcessEvent::Stderr(bytes) => {
                    let room = STDERR_BYTES.saturating_sub(stderr.len());
                    stderr.extend(&bytes[..bytes.len().min(room)]);
                }
                ProcessEvent::Exit(exit) => return Ok(exit),
            }
        }
        Err(invalid(path, "the reader in the sandbox ended without an exit status"))
    };
    let exit = match tokio::time::timeout(TIMEOUT, collect).await {
        Ok(Ok(exit)) => exit,
        Ok(Err(e)) => {
            let _ = control.signal(ProcessSignal::Kill).await;
            return Err(e);
        }
        Err(_) => {
            let _ = control.signal(ProcessSignal::Kill).await;
            return Err(invalid(path, &format!("reading it took longer than {} s", TIMEOUT.as_secs())));
        }
    };
    match exit.exit_code {
        0 if exit.signal.is_none() && exit.error.is_none() => Ok(stdout),
        NOT_FOUND => Err(SandboxError::FileNotFound { path: path.to_owned() }),
        DIRECTORY => Err(invalid(path, "is a directory")),
        TOO_LARGE => Err(too_large(path, max_bytes)),
        DENIED => Err(invalid(path, "permission denied (the sandbox user cannot read it)")),
        NOT_REGULAR => Err(invalid(path, "not a regular file")),
        _ => {
            let why = String::from_utf8_lossy(&stderr).trim().to_owned();
            let why = if why.is_empty() { exit.error.unwrap_or_else(|| format!("exit code {}", exit.exit_code)) } else { why };
            Err(invalid(path, &format!("cannot be read in the sandbox: {why}")))
        }
    }
}

fn invalid(path: &str, reason: &str) -> SandboxError {
    SandboxError::InvalidPath {
        path: path.to_owned(),
        reason: reason.to_owned(),
    }
}

fn too_large(path: &str, max_bytes: u64) -> SandboxError {
    SandboxError::LimitExceeded {
        limit: LimitKind::FileSize,
        message: format!("{path}: larger than the {max_bytes} byte file limit"),
    }
}
