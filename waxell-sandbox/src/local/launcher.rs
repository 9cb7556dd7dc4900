//! Builds the bwrap command line and starts one kernel (interpreter) inside a sandbox.
//!
//! Root launcher, no user namespace: bwrap sets up pid/net/ipc/uts/cgroup namespaces and a minimal
//! read-only file system, then `setpriv` drops to the sandbox's own non-zero uid with no capabilities
//! and no-new-privs before Python starts (requirement R1 of the isolation reference: sandboxed code
//! never runs as host uid 0, not even through a user-namespace mapping).

use std::ffi::OsString;
use std::io::{Seek, SeekFrom, Write};
use std::os::fd::{OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::process::Command;

use waxell::sandbox::{ProcessSignal, ProcessSpec, SandboxError};

use crate::local::cgroup::Cgroup;
use crate::config::Limits;
use crate::local::config::LocalConfig;
use crate::local::host::{HostTools, PythonMount, PythonRuntime};
use crate::local::root::SandboxRoot;
use crate::command::{helper_args, HostEnds, Launched, Pty, Signaller};
use crate::kernel::KernelProcess;
use crate::local::child;
use crate::paths::HOME_DIR;
use crate::local::spawn::{self, ChildSetup, Rlimit, Stream, Streams};
use crate::local::zygote::{KernelFds, Zygote, ZygoteStart};
use crate::kernel::ReadyInfo;
use rustix::process::{pidfd_open, PidfdFlags};
use std::io;
use std::os::fd::AsFd;

/// Size of `/dev/shm` (POSIX shared memory and semaphores, e.g. `multiprocessing` locks).
pub(crate) const SHM_BYTES: u64 = 16 << 20;

// Child fd numbers of the data bwrap reads at start-up.
const FD_SECCOMP: [RawFd; 3] = [10, 11, 12];
const FD_PASSWD: RawFd = 13;
const FD_GROUP: RawFd = 14;
const FD_KERNEL: RawFd = 15;
/// The kernel inside the sandbox, as the sandbox's Python's byte code (`host.rs`, `KernelPyc`).
pub(crate) const KERNEL_PYC_PATH: &str = "/opt/waxell/kernel.pyc";
const FD_ARGS: RawFd = 16;
const FD_BOOT_ID: RawFd = 17;
const FD_SUDO: RawFd = 18;

/// The sandbox's `sudo`: runs the command as the sandbox user and says so (there is no root in a
/// sandbox). The container image carries the same file.
const SUDO_SOURCE: &str = include_str!("../../container/sudo");
/// Where it is, last on the sandbox's `PATH`.
const SANDBOX_BIN: &str = "/opt/waxell/bin";

/// Everything needed to start kernels; shared by all sandboxes of a backend.
#[derive(Debug)]
pub(crate) struct Launcher {
    pub(crate) tools: HostTools,
    pub(crate) python: PythonRuntime,
    /// The tree the sandbox sees as `/usr` (root.rs).
    pub(crate) root: SandboxRoot,
    pub(crate) config: LocalConfig,
    seccomp_programs: Vec<Vec<u8>>,
    /// Where kernels are forked from, unless `fork_kernels` is off or unsafe here (`Launcher::new`).
    zygote: Option<Zygote>,
}

/// What a forked kernel's sandbox runs to stay up (from the sandbox root's `/usr`).
const HOLDER: [&str; 2] = ["/usr/bin/sleep", "infinity"];

/// The per-sandbox pieces a kernel is started into.
pub(crate) struct Slot<'a> {
    pub(crate) uid: u32,
    pub(crate) scratch: &'a Path,
    /// The sandbox's tmpfs mounts bound at /tmp and /dev/shm.
    pub(crate) tmp: &'a Path,
    pub(crate) shm: &'a Path,
    /// The mount namespace (rootless, with its user namespace) the tmpfs mounts live in: bwrap
    /// starts inside it. `None` once the sandbox is removed.
    pub(crate) namespace: Option<std::sync::Arc<crate::local::mounts::MountNamespace>>,
    pub(crate) cgroup: &'a Cgroup,
    /// The sandbox's own boot id, bound over the host's.
    pub(crate) boot_id: &'a str,
}

impl Launcher {
    pub(crate) fn new(
        tools: HostTools,
        python: PythonRuntime,
        root: SandboxRoot,
        config: LocalConfig,
    ) -> Result<Self, SandboxError> {
        let missing = python.missing_mount_points(&root);
        if !missing.is_empty() {
            return Err(SandboxError::Unavailable(format!(
                "the sandbox root {} was built for another Python: it has no mount point for {} of {}; run \
                 scripts/setup-sandbox.sh again (with {} set to that interpreter)",
                root.path().display(),
                missing.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "),
                python.executable.display(),
                crate::local::host::PYTHON_ENV_VAR,
            )));
        }
        let seccomp_programs = crate::seccomp_bpf::programs().map_err(SandboxError::Unavailable)?;
        // A sandbox root without the holder (a custom one) starts kernels with bubblewrap.
        let holder_found = root.host_path(Path::new(HOLDER[0])).exists();
        let zygote =
            (config.fork_kernels && holder_found && forking_is_safe(&python, tools.rootless)).then(Zygote::default);
        Ok(Self {
            tools,
            python,
            root,
            config,
            seccomp_programs,
            zygote,
        })
    }

    pub(crate) fn limits(&self) -> &Limits {
        &self.config.limits
    }

    /// Start a kernel in `slot` and wait until it reports ready and passes the identity checks.
    pub(crate) async fn start_kernel(&self, slot: &Slot<'_>) -> Result<KernelProcess, SandboxError> {
        if slot.uid == 0 {
            return Err(SandboxError::InvalidArgument(
                "refusing to run sandboxed code as uid 0".into(),
            ));
        }
        if let Some(zygote) = &self.zygote {
            return self.fork_kernel(zygote, slot).await;
        }
        let (command, options) = self.command(slot, &Program::Kernel);
        let setup = self.child_setup(slot, &options)?;
        let streams = Streams([Stream::Piped, Stream::Piped, Stream::Piped]);
        let child = spawn::spawn(command, streams, setup).await.map_err(|e| {
            SandboxError::Unavailable(format!("cannot start {}: {e}", self.tools.bwrap.display()))
        })?;
        slot.cgroup.add_launcher(child.id());
        let launcher_pid = child.id();
        let mut kernel = child::attach(child)?;
        let ready = kernel.wait_ready(self.config.ready_timeout).await?;
        check_ids(&ready, slot.uid)?;
        let host_pid = verify_host_identity(slot.cgroup, launcher_pid, ready.pid)?;
        kernel.set_inner_pids(host_pid);
        self.check_started(&ready, host_pid[0])?;
        Ok(kernel)
    }

    /// A kernel forked from the zygote into a sandbox bwrap makes as for any process, holding it
    /// open with [`HOLDER`] (zygote.rs).
    async fn fork_kernel(&self, zygote: &Zygote, slot: &Slot<'_>) -> Result<KernelProcess, SandboxError> {
        let timeout = self.config.ready_timeout;
        let (command, options) = self.command(slot, &Program::Holder);
        let setup = self.child_setup(slot, &options)?;
        let seccomp = setup.inherit[..FD_SECCOMP.len()]
            .iter()
            .map(|(fd, _)| fd.try_clone())
            .collect::<Result<Vec<_>, _>>()?;
        let streams = Streams([Stream::Null, Stream::Null, Stream::Piped]);
        let mut holder = spawn::spawn(command, streams, setup).await.map_err(|e| {
            SandboxError::Unavailable(format!("cannot start {}: {e}", self.tools.bwrap.display()))
        })?;
        slot.cgroup.add_launcher(holder.id());
        let fail = |holder: &mut std::process::Child, what: String| {
            use std::io::Read;
            let _ = rustix::process::kill_process_group(
                rustix::process::Pid::from_raw(holder.id() as i32).expect("a child's pid"),
                rustix::process::Signal::KILL,
            );
            let _ = holder.wait();
            let mut stderr = String::new();
            if let Some(mut pipe) = holder.stderr.take() {
                let _ = pipe.read_to_string(&mut stderr);
            }
            let stderr = stderr.lines().next().map(|l| format!(" ({l})")).unwrap_or_default();
            SandboxError::Unavailable(format!("cannot start a kernel: {what}{stderr}"))
        };
        let holder_pid = match crate::local::zygote::holder_pid(&mut holder, HOLDER[0], timeout).await {
            Ok(pid) => pid,
            Err(e) => return Err(fail(&mut holder, e.to_string())),
        };
        drop(holder.stderr.take());
        let prepared = (|| {
            let pipe = || rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(io::Error::from);
            let pipes = [pipe()?, pipe()?, pipe()?];
            let holder_pidfd = rustix::process::Pid::from_raw(holder.id() as i32)
                .ok_or_else(|| io::Error::other("invalid pid"))
                // Our child, not yet waited for: its pid is still its own.
                .and_then(|pid| pidfd_open(pid, PidfdFlags::empty()).map_err(io::Error::from))?;
            io::Result::Ok((pipes, slot.cgroup.open_procs_files()?, holder_pidfd))
        })();
        let (pipes, procs, holder_pidfd) = match prepared {
            Ok(prepared) => prepared,
            Err(e) => return Err(fail(&mut holder, e.to_string())),
        };
        let [(stdin_read, stdin_write), (stdout_read, stdout_write), (stderr_read, stderr_write)] = pipes;
        let mut rlimits = sandbox_rlimits(self.limits());
        if self.tools.rootless {
            rlimits.retain(|r| r.resource != libc::RLIMIT_NPROC);
        }
        let env = self.sandbox_env();
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let start = ZygoteStart {
            python: &self.python.executable,
            kernel_pyc: self.python.kernel_pyc().bytes(),
            env: &env,
        };
        let fds = KernelFds {
            holder: holder_pidfd.as_fd(),
            stdio: [stdin_read.as_fd(), stdout_write.as_fd(), stderr_write.as_fd()],
            cgroup_procs: &procs,
            seccomp: &seccomp,
        };
        let uid = (!self.tools.rootless).then_some(slot.uid);
        let forked = match zygote
            .fork_kernel(&start, holder_pid, uid, &rlimits, fds, timeout)
            .await
        {
            Ok(forked) => forked,
            Err(e) => return Err(fail(&mut holder, e.to_string())),
        };
        drop((stdin_read, stdout_write, stderr_write));
        let kernel_pid = forked.pid;
        // The watchdog (rootless) follows the kernel's tree from here.
        slot.cgroup.add_member(kernel_pid);
        let init = crate::local::zygote::only_child(holder.id());
        let mut kernel = child::attach_forked(holder, forked, [stdin_write, stdout_read, stderr_read])?;
        let ready = kernel.wait_ready(timeout).await?;
        check_ids(&ready, slot.uid)?;
        verify_forked_identity(slot.cgroup, kernel_pid, ready.pid)?;
        kernel.set_inner_pids([kernel_pid, init.unwrap_or(kernel_pid)]);
        self.check_started(&ready, kernel_pid)?;
        Ok(kernel)
    }

    /// What every kernel start checks last: the process cap (rootless) and the interpreter's prefix.
    fn check_started(&self, ready: &ReadyInfo, host_pid: u32) -> Result<(), SandboxError> {
        if self.tools.rootless {
            crate::local::rootless::cap_processes(host_pid, self.limits().max_processes)?;
        }
        if Path::new(&ready.prefix) != self.python.prefix {
            return Err(SandboxError::IsolationCheck(format!(
                "the sandboxed interpreter runs from {} instead of {}: its installation is not readable inside \
                 the sandbox",
                ready.prefix,
                self.python.prefix.display()
            )));
        }
        Ok(())
    }

    /// Start a process (E2B's commands and PTYs) in `slot`: the same bwrap, namespaces, seccomp
    /// filters, cgroups, rlimits and uid as a kernel, running `spec`'s program instead of the
    /// interpreter. With `pty`, its terminal end is the process's stdin, stdout and stderr, and
    /// the in-sandbox helper makes it the controlling terminal.
    pub(crate) async fn start_process(
        &self,
        slot: &Slot<'_>,
        spec: &ProcessSpec,
        pty: Option<Pty>,
    ) -> Result<Launched, SandboxError> {
        if slot.uid == 0 {
            return Err(SandboxError::InvalidArgument(
                "refusing to run sandboxed code as uid 0".into(),
            ));
        }
        let (command, options) = self.command(slot, &Program::Process { spec, pty: pty.is_some() });
        let setup = self.child_setup(slot, &options)?;
        let (ends, streams) = match pty {
            Some(pty) => {
                let [stdin, stdout, stderr] = pty.terminal()?;
                let streams = Streams([Stream::Fd(stdin), Stream::Fd(stdout), Stream::Fd(stderr)]);
                (Some(HostEnds::Pty(pty)), streams)
            }
            None => {
                let stdin = if spec.stdin { Stream::Piped } else { Stream::Null };
                (None, Streams([stdin, Stream::Piped, Stream::Piped]))
            }
        };
        let mut child = spawn::spawn(command, streams, setup).await.map_err(|e| {
            SandboxError::Unavailable(format!("cannot start {}: {e}", self.tools.bwrap.display()))
        })?;
        slot.cgroup.add_launcher(child.id());
        let ends = match ends {
            Some(ends) => ends,
            None => HostEnds::Pipes {
                stdin: child.stdin.take().map(OwnedFd::from),
                stdout: child.stdout.take().expect("stdout piped").into(),
                stderr: child.stderr.take().expect("stderr piped").into(),
            },
        };
        let launcher = child.id();
        Ok(Launched {
            child,
            ends,
            signaller: Box::new(LaunchedSignaller { launcher }),
        })
    }

    /// The bwrap command and its options (see docs/sandbox.md for why each flag is there).
    fn command(&self, slot: &Slot<'_>, program: &Program<'_>) -> (Command, Vec<u8>) {
        let limits = self.limits();
        let mut args: Vec<OsString> = Vec::new();
        if self.tools.rootless {
            args.extend(crate::local::rootless::userns_args(slot.uid).into_iter().map(OsString::from));
        }
        for fd in FD_SECCOMP {
            add(&mut args, &["--add-seccomp-fd", &fd.to_string()]);
        }
        add(&mut args, &["--die-with-parent", "--new-session"]);
        add(
            &mut args,
            &[
                "--unshare-pid",
                "--unshare-net",
                "--unshare-ipc",
                "--unshare-uts",
                "--unshare-cgroup",
            ],
        );
        add(&mut args, &["--hostname", "sandbox"]);
        // The sandbox root's /usr: the files of the packages the sandbox needs, nothing else of the
        // host's (root.rs).
        args.extend(["--ro-bind".into(), self.root.host_path(Path::new("/usr")).into(), "/usr".into()]);
        for (link, target) in [
            ("usr/lib", "/lib"),
            ("usr/lib64", "/lib64"),
            ("usr/bin", "/bin"),
            ("usr/sbin", "/sbin"),
        ] {
            add(&mut args, &["--symlink", link, target]);
        }
        // /tmp and /dev/shm are tmpfs mounts of the sandbox (bwrap's --tmpfs cannot cap nr_inodes),
        // shared by its contexts, in the sandbox's own mount namespace.
        add(&mut args, &["--bind"]);
        args.extend([slot.tmp.into(), "/tmp".into()]);
        // /root exists, empty and read-only (remounted below, after the Python installation, which may
        // live under it, is bound on top): E2B's code runs as root there, and contexts may name it as
        // their directory (paths::check_context_cwd).
        add(&mut args, &["--perms", "0755", "--size", "4096", "--tmpfs", "/root"]);
        // The 0700 pitfall: bwrap creates missing parents of a bind target as root 0700, and the
        // dropped uid then cannot reach the stdlib (Python silently falls back to /usr/lib/python3).
        // Only the pieces the interpreter needs (see `PythonRuntime::mounts`).
        let mut made: Vec<PathBuf> = Vec::new();
        // The setup script left 0755 mount points for the pieces under /usr.
        let mut bound: Vec<PathBuf> = vec![PathBuf::from("/usr")];
        for mount in self.python.mounts(&self.root) {
            let target = match &mount {
                PythonMount::Bind(path) | PythonMount::Hide(path) => path.clone(),
                PythonMount::Symlink { link, .. } => link.clone(),
            };
            for ancestor in target.ancestors().skip(1).collect::<Vec<_>>().into_iter().rev() {
                let inside_bind = bound.iter().any(|b| ancestor.starts_with(b));
                if ancestor == Path::new("/") || inside_bind || made.iter().any(|m| m == ancestor) {
                    continue;
                }
                made.push(ancestor.to_path_buf());
                add(&mut args, &["--perms", "0755", "--dir"]);
                args.push(ancestor.into());
            }
            match mount {
                PythonMount::Bind(path) => {
                    args.extend(["--ro-bind".into(), path.clone().into(), path.clone().into()]);
                    bound.push(path);
                }
                PythonMount::Symlink { link, target } => {
                    args.extend(["--symlink".into(), target.into(), link.into()]);
                }
                PythonMount::Hide(path) => {
                    add(&mut args, &["--perms", "0755", "--size", "4096", "--tmpfs"]);
                    args.push(path.clone().into());
                    args.push("--remount-ro".into());
                    args.push(path.into());
                }
            }
        }
        add(&mut args, &["--remount-ro", "/root"]);
        add(&mut args, &["--perms", "0755", "--dir", "/opt/waxell"]);
        add(&mut args, &["--perms", "0755", "--dir", SANDBOX_BIN]);
        let sudo = format!("{SANDBOX_BIN}/sudo");
        add(&mut args, &["--perms", "0755", "--ro-bind-data", &FD_SUDO.to_string(), &sudo]);
        add(
            &mut args,
            &[
                "--perms",
                "0644",
                "--ro-bind-data",
                &FD_KERNEL.to_string(),
                KERNEL_PYC_PATH,
            ],
        );
        add(&mut args, &["--perms", "0755", "--dir", "/etc"]);
        add(
            &mut args,
            &[
                "--perms",
                "0644",
                "--ro-bind-data",
                &FD_PASSWD.to_string(),
                "/etc/passwd",
            ],
        );
        add(
            &mut args,
            &[
                "--perms",
                "0644",
                "--ro-bind-data",
                &FD_GROUP.to_string(),
                "/etc/group",
            ],
        );
        // Made 0755 first: bwrap would make the parent of /etc/ssl/certs 0700, and Node.js fails
        // to start when it cannot read /etc/ssl/openssl.cnf.
        add(&mut args, &["--perms", "0755", "--dir", "/etc/ssl"]);
        // Fonts, time zone, CA certificates, OpenSSL's configuration, MIME types and the JDK's
        // configuration (jvm.cfg, security) in /etc/java-<version>: from the sandbox root, which
        // has only the packages' own files of these (and the CA links update-ca-certificates made).
        for shared in self.root.etc_entries() {
            let source = self.root.host_path(&shared);
            match std::fs::read_link(&source) {
                // /etc/localtime: a link into /usr/share/zoneinfo, resolved inside.
                Ok(target) => args.extend(["--symlink".into(), target.into(), shared.into()]),
                Err(_) => args.extend(["--ro-bind".into(), source.into(), shared.into()]),
            }
        }
        add(&mut args, &["--proc", "/proc", "--dev", "/dev"]);
        // The sandbox's own boot id over the host's (one host-wide value every sandbox could read).
        add(
            &mut args,
            &["--perms", "0444", "--ro-bind-data", &FD_BOOT_ID.to_string(), "/proc/sys/kernel/random/boot_id"],
        );
        // --dev mounts a devpts instance without `max=`, and pseudo-terminals come from a host-wide
        // pool (kernel.pty.max): hide it under an empty read-only tmpfs, so /dev/ptmx is ENOENT.
        add(
            &mut args,
            &[
                "--perms",
                "0755",
                "--size",
                "4096",
                "--tmpfs",
                "/dev/pts",
                "--remount-ro",
                "/dev/pts",
            ],
        );
        add(&mut args, &["--bind"]);
        args.extend([slot.shm.into(), "/dev/shm".into()]);
        add(&mut args, &["--perms", "0755", "--dir", "/home"]);
        args.push("--bind".into());
        args.push(slot.scratch.into());
        let cwd = match program {
            Program::Process { spec, .. } => spec.cwd.as_deref().unwrap_or(HOME_DIR),
            Program::Kernel | Program::Holder => HOME_DIR,
        };
        add(&mut args, &[HOME_DIR, "--chdir", cwd]);
        if self.tools.rootless {
            add(&mut args, &crate::local::rootless::AFTER_MOUNTS);
        }
        add(&mut args, &["--clearenv"]);
        for (key, value) in self.sandbox_env() {
            add(&mut args, &["--setenv", &key, &value]);
        }
        if let Program::Process { spec, .. } = program {
            // After the sandbox's own: the last --setenv of a name wins.
            for (key, value) in &spec.env {
                add(&mut args, &["--setenv", key, value]);
            }
        }
        // The options reach bwrap through a memfd (`--args`), not its argv: /proc/1/cmdline inside
        // the sandbox is bwrap's argv and would show the host's scratch path and layout.
        let mut options = Vec::new();
        for arg in args {
            options.extend_from_slice(arg.as_encoded_bytes());
            options.push(0);
        }
        let ids = slot.uid.to_string();
        let mut command = Command::new(&self.tools.bwrap);
        command.args(["--args", &FD_ARGS.to_string(), "--"]);
        if !self.tools.rootless {
            // Rootless: already the sandbox's ids inside the user namespace, with no capabilities.
            command.arg(&self.tools.setpriv).args([
                &format!("--reuid={ids}"),
                &format!("--regid={ids}"),
                "--clear-groups",
                "--inh-caps=-all",
                "--bounding-set=-all",
                "--no-new-privs",
            ]);
        }
        match program {
            Program::Kernel => {
                command.arg(&self.python.executable).args(["-I", KERNEL_PYC_PATH]);
            }
            Program::Holder => {
                command.args(HOLDER);
            }
            // Root: the rlimits are all set before bwrap runs; the helper only for a terminal.
            Program::Process { spec, pty: false } if !self.tools.rootless => {
                command.arg(&spec.cmd).args(&spec.args);
            }
            // A terminal, root: util-linux's setsid (beside setpriv) makes it the controlling one,
            // faster than starting Python. It forks (the program leads a session of its own) and
            // waits, passing on the exit status.
            Program::Process { spec, pty: true } if !self.tools.rootless && self.setsid().is_some() => {
                let setsid = self.setsid().unwrap_or_default();
                command.arg(setsid).args(["--wait", "--ctty", &spec.cmd]).args(&spec.args);
            }
            // Rootless: the process cap is set inside (see `PROCESS_HELPER`), as for a kernel.
            Program::Process { spec, pty } => {
                let nproc = if self.tools.rootless { limits.max_processes } else { 0 };
                command
                    .arg(&self.python.executable)
                    .arg("-I")
                    .args(helper_args(nproc, *pty, false))
                    .arg(&spec.cmd)
                    .args(&spec.args);
            }
        }
        command
            .env_clear()
            .env("PATH", "/usr/bin:/bin");
        (command, options)
    }

    /// The environment every sandboxed program starts with (a process's own comes on top).
    fn sandbox_env(&self) -> Vec<(String, String)> {
        let limits = self.limits();
        let venv_bin = self.python.prefix.join("bin");
        let path = format!("{}:/usr/bin:/bin:{SANDBOX_BIN}", venv_bin.display());
        [
            ("PATH", path.as_str()),
            ("HOME", HOME_DIR),
            ("USER", "user"),
            ("TMPDIR", "/tmp"),
            ("LANG", "C.UTF-8"),
            ("MPLBACKEND", "Agg"),
            ("MPLCONFIGDIR", "/tmp/matplotlib"),
            // IPython's profile stays out of the user's home (E2B's lists the home as it is).
            ("IPYTHONDIR", "/tmp/.ipython"),
            ("OPENBLAS_NUM_THREADS", "1"),
            ("OMP_NUM_THREADS", "1"),
            ("PYTHONUNBUFFERED", "1"),
            ("PYTHONDONTWRITEBYTECODE", "1"),
            ("SBX_OUTPUT_LIMIT", &limits.output_chars.to_string()),
            ("SBX_RESULT_LIMIT", &(limits.output_hard_bytes / 2).to_string()),
            ("SBX_PRELOAD", &self.config.preload.join(",")),
        ]
        .into_iter()
        .map(|(key, value)| (key.to_owned(), value.to_owned()))
        .collect()
    }

    /// util-linux's `setsid`, from the package that gives `setpriv`, if the host has it.
    fn setsid(&self) -> Option<PathBuf> {
        Some(self.tools.setpriv.with_file_name("setsid")).filter(|p| p.is_file())
    }

    fn child_setup(&self, slot: &Slot<'_>, options: &[u8]) -> Result<ChildSetup, SandboxError> {
        let limits = self.limits();
        let mut inherit = Vec::new();
        for (program, fd) in self.seccomp_programs.iter().zip(FD_SECCOMP) {
            inherit.push((memfd("waxell-seccomp", program)?, fd));
        }
        let passwd = format!(
            "user:x:{0}:{0}:user:{HOME_DIR}:/bin/sh\nnobody:x:65534:65534:nobody:/:/usr/sbin/nologin\n",
            slot.uid
        );
        let group = format!("user:x:{}:\nnogroup:x:65534:\n", slot.uid);
        inherit.push((memfd("waxell-passwd", passwd.as_bytes())?, FD_PASSWD));
        inherit.push((memfd("waxell-group", group.as_bytes())?, FD_GROUP));
        inherit.push((memfd("waxell-kernel", self.python.kernel_pyc().bytes())?, FD_KERNEL));
        inherit.push((memfd("waxell-bwrap-args", options)?, FD_ARGS));
        inherit.push((memfd("waxell-boot-id", format!("{}\n", slot.boot_id).as_bytes())?, FD_BOOT_ID));
        inherit.push((memfd("waxell-sudo", SUDO_SOURCE.as_bytes())?, FD_SUDO));
        let mut rlimits = sandbox_rlimits(limits);
        if self.tools.rootless {
            // Set on the interpreter once it runs (rootless.rs: counted per user namespace there).
            rlimits.retain(|r| r.resource != libc::RLIMIT_NPROC);
        }
        let join = match &slot.namespace {
            Some(namespace) => namespace.join_fds()?,
            // Never the plain host directories instead of the capped tmpfs mounts.
            None => return Err(SandboxError::NotFound("the sandbox was removed".into())),
        };
        Ok(ChildSetup {
            inherit,
            cgroup_procs: slot.cgroup.open_procs_files()?,
            join,
            rlimits,
        })
    }
}

/// What a bwrap instance runs: the kernel, or a process.
enum Program<'a> {
    Kernel,
    /// [`HOLDER`], for a kernel forked from the zygote.
    Holder,
    Process { spec: &'a ProcessSpec, pty: bool },
}

/// Signals for a process started by [`Launcher::start_process`]: bwrap (`launcher`) -> bwrap's
/// init (pid 1 of the process's pid namespace) -> the program.
struct LaunchedSignaller {
    launcher: u32,
}

#[async_trait::async_trait]
impl Signaller for LaunchedSignaller {
    async fn signal(&self, signal: ProcessSignal) -> std::io::Result<()> {
        use rustix::process::{kill_process, kill_process_group, Pid, Signal};
        let pid = |pid: u32| Pid::from_raw(pid as i32).ok_or_else(|| std::io::Error::other("invalid pid"));
        if signal == ProcessSignal::Kill {
            // bwrap and its init lead one process group: killing the init ends the namespace,
            // so the program and everything it started.
            return kill_process_group(pid(self.launcher)?, Signal::KILL).map_err(Into::into);
        }
        // Just started, bwrap may not have forked the program yet: wait for it while bwrap lives.
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            if let Some(program) = child_of(self.launcher).and_then(child_of) {
                return kill_process(pid(program)?, Signal::TERM).map_err(Into::into);
            }
            let launcher_alive = std::path::Path::new(&format!("/proc/{}", self.launcher)).exists();
            if !launcher_alive || tokio::time::Instant::now() > deadline {
                return Err(std::io::Error::other("the process has exited"));
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }
}

/// A child of host process `parent` (bwrap and its init each have one).
fn child_of(parent: u32) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|entry| {
        let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
        (proc_status(pid)?.parent == parent).then_some(pid)
    })
}

/// Every rlimit, set explicitly: nothing is inherited from the host process (a server started with
/// a raised RTPRIO or MEMLOCK must not hand it to sandboxes).
pub(crate) fn sandbox_rlimits(limits: &Limits) -> Vec<Rlimit> {
    const INFINITY: u64 = libc::RLIM_INFINITY;
    let same = |resource, value: u64| Rlimit {
        resource,
        soft: value,
        hard: value,
    };
    vec![
        Rlimit {
            resource: libc::RLIMIT_CPU,
            soft: limits.cpu_seconds,
            hard: limits.cpu_seconds + 5,
        },
        same(libc::RLIMIT_FSIZE, limits.max_file_bytes),
        same(libc::RLIMIT_NOFILE, limits.open_files),
        same(libc::RLIMIT_CORE, 0),
        // Counted per real uid: bwrap (root) ignores it, the sandbox uid gets it after setpriv.
        same(libc::RLIMIT_NPROC, limits.max_processes),
        // Locked memory, message queues, realtime scheduling and raised priority: none.
        same(libc::RLIMIT_MEMLOCK, 0),
        same(libc::RLIMIT_MSGQUEUE, 0),
        same(libc::RLIMIT_RTPRIO, 0),
        same(libc::RLIMIT_RTTIME, 0),
        same(libc::RLIMIT_NICE, 0),
        same(libc::RLIMIT_SIGPENDING, limits.pending_signals),
        same(libc::RLIMIT_STACK, 8 << 20),
        same(libc::RLIMIT_LOCKS, limits.open_files),
        // Memory is capped by the memory cgroup; AS only when configured.
        same(libc::RLIMIT_AS, limits.address_space_bytes.unwrap_or(INFINITY)),
        same(libc::RLIMIT_DATA, INFINITY),
        same(libc::RLIMIT_RSS, INFINITY),
    ]
}

fn add(args: &mut Vec<OsString>, parts: &[&str]) {
    args.extend(parts.iter().map(OsString::from));
}

/// A sealed-enough memfd holding `data`, rewound so bwrap reads it from the start.
fn memfd(name: &str, data: &[u8]) -> Result<OwnedFd, SandboxError> {
    let fd = rustix::fs::memfd_create(name, rustix::fs::MemfdFlags::CLOEXEC).map_err(std::io::Error::from)?;
    let mut file = std::fs::File::from(fd);
    file.write_all(data)?;
    file.seek(SeekFrom::Start(0))?;
    Ok(file.into())
}

/// The fields of `/proc/<pid>/status` the identity check needs.
struct ProcStatus {
    parent: u32,
    innermost_pid: u32,
    uids: Vec<String>,
    gids: Vec<String>,
}

fn proc_status(pid: u32) -> Option<ProcStatus> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Vec<String> {
        let values = status.lines().find_map(|l| l.strip_prefix(name)).unwrap_or("");
        values.split_whitespace().map(str::to_owned).collect()
    };
    Some(ProcStatus {
        parent: field("PPid:").first()?.parse().ok()?,
        innermost_pid: field("NSpid:").last()?.parse().ok()?,
        uids: field("Uid:"),
        gids: field("Gid:"),
    })
}

/// R1 check from the host side: the kernel's host process runs with no uid or gid 0 in any of its
/// real/effective/saved/fs ids. The process is the one in the sandbox's cgroup that the kernel
/// names (its pid inside the namespace) and whose grandparent is this launcher (bwrap -> bwrap's
/// init -> interpreter). Returns the interpreter's host pid and its parent's.
fn verify_host_identity(cgroup: &Cgroup, launcher: u32, sandbox_pid: u32) -> Result<[u32; 2], SandboxError> {
    for pid in cgroup.pids() {
        let Some(status) = proc_status(pid) else { continue };
        if status.innermost_pid != sandbox_pid {
            continue;
        }
        if proc_status(status.parent).map(|init| init.parent) != Some(launcher) {
            continue; // another context's interpreter
        }
        if status.uids.iter().chain(&status.gids).any(|id| id == "0") || status.uids.len() != 4 {
            return Err(SandboxError::IsolationCheck(format!(
                "host process {pid} has uids {:?} and gids {:?}",
                status.uids, status.gids
            )));
        }
        return Ok([pid, status.parent]);
    }
    Err(SandboxError::IsolationCheck(format!(
        "the kernel (pid {sandbox_pid} inside) was not found in the sandbox's cgroup"
    )))
}

/// The kernel's own report of its ids: the sandbox's, never 0.
fn check_ids(ready: &ReadyInfo, uid: u32) -> Result<(), SandboxError> {
    if ready.uid != uid || ready.gid != uid || ready.uid == 0 {
        return Err(SandboxError::IsolationCheck(format!(
            "kernel reports uid {} gid {}, expected {}",
            ready.uid, ready.gid, uid
        )));
    }
    Ok(())
}

/// R1 check from the host side for a forked kernel: the zygote's `pid` is the process the kernel
/// says it is (its pid inside), in the sandbox's cgroup, with no uid or gid 0.
fn verify_forked_identity(cgroup: &Cgroup, pid: u32, sandbox_pid: u32) -> Result<(), SandboxError> {
    let status = proc_status(pid)
        .ok_or_else(|| SandboxError::IsolationCheck(format!("the forked kernel (host pid {pid}) is gone")))?;
    if status.innermost_pid != sandbox_pid || !cgroup.pids().contains(&pid) {
        return Err(SandboxError::IsolationCheck(format!(
            "host process {pid} is not the kernel (pid {sandbox_pid} inside) in the sandbox's cgroup"
        )));
    }
    if status.uids.iter().chain(&status.gids).any(|id| id == "0") || status.uids.len() != 4 {
        return Err(SandboxError::IsolationCheck(format!(
            "host process {pid} has uids {:?} and gids {:?}",
            status.uids, status.gids
        )));
    }
    Ok(())
}

/// Whether a kernel forked from a zygote on the host is as contained as one bwrap starts.
///
/// Rootless, not yet: there the memory watchdog, not a memory cgroup, holds the socket and pipe
/// buffers a sandbox queues, and with forked kernels it stopped such a flood past the cap more often
/// (`kernel_buffer_floods_are_stopped_at_the_memory_limit`; docs/sandbox.md). The joining itself
/// works rootless (zygote.rs).
///
/// As root: unless the interpreter is world-writable. A forked kernel's `/proc/self/exe` is the
/// interpreter on the host's mounts, not the sandbox's read-only bind of it, and the sandbox's uid
/// is a leased one, so only a world-writable file is its to write.
fn forking_is_safe(python: &PythonRuntime, rootless: bool) -> bool {
    use std::os::unix::fs::MetadataExt;
    if rootless {
        return false;
    }
    let safe = std::fs::canonicalize(&python.executable)
        .and_then(std::fs::metadata)
        .is_ok_and(|m| m.mode() & 0o002 == 0);
    if !safe {
        tracing::info!(
            python = %python.executable.display(),
            "kernels start one by one: the interpreter is world-writable, and a forked kernel could reach it"
        );
    }
    safe
}

