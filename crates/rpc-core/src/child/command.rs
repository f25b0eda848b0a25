//! What to run and where its stdio goes: [`ChildCommand`], and the set-up
//! between fork and exec (extra descriptors, a terminal, the group leader).

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use nix::unistd::Pid;
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, watch};

use super::process::{ChildProcess, KillGroupOnDrop, watch_child};
use super::stderr::{LineRing, read_lines};

/// Where the child's stdin comes from.
#[derive(Debug)]
pub enum Stdin {
    Null,
    /// A pipe; take its write end with [`ChildProcess::take_stdin`].
    Piped,
}

/// Where the child's stdout goes.
#[derive(Debug)]
pub enum Stdout {
    Null,
    /// The daemon's own stdout.
    Inherit,
    /// A pipe; take its read end with [`ChildProcess::take_stdout`].
    Piped,
    /// A descriptor of the caller's (a pipe it reads, a log file).
    Fd(OwnedFd),
}

/// Where the child's stderr goes.
#[derive(Debug)]
pub enum Stderr {
    Null,
    /// The daemon's own stderr.
    Inherit,
    /// A descriptor of the caller's.
    Fd(OwnedFd),
    /// Read line by line into `ring`, each line also logged at `log` with the
    /// child's name (as written: escape sequences are left alone).
    Lines {
        ring: LineRing,
        log: tracing::Level,
    },
}

/// A program to start, builder style. Stdio defaults to null.
#[derive(Debug)]
pub struct ChildCommand {
    command: Command,
    name: String,
    stdin: Stdin,
    stdout: Stdout,
    stderr: Stderr,
    fds: Vec<(OwnedFd, RawFd)>,
    terminal: Option<OwnedFd>,
}

impl ChildCommand {
    pub fn new(program: impl AsRef<OsStr>) -> ChildCommand {
        let program = program.as_ref();
        let name = Path::new(program).file_name().unwrap_or(program).to_string_lossy().into_owned();
        ChildCommand {
            command: Command::new(program),
            name,
            stdin: Stdin::Null,
            stdout: Stdout::Null,
            stderr: Stderr::Null,
            fds: Vec::new(),
            terminal: None,
        }
    }

    /// The name logs use for this child (default: the program's file name).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Self {
        self.command.arg(arg);
        self
    }

    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.command.args(args);
        self
    }

    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.command.env(key, value);
        self
    }

    pub fn env_remove(mut self, key: impl AsRef<OsStr>) -> Self {
        self.command.env_remove(key);
        self
    }

    /// Starts from an empty environment (then add what the child needs).
    pub fn env_clear(mut self) -> Self {
        self.command.env_clear();
        self
    }

    pub fn current_dir(mut self, dir: impl AsRef<Path>) -> Self {
        self.command.current_dir(dir);
        self
    }

    pub fn stdin(mut self, stdin: Stdin) -> Self {
        self.stdin = stdin;
        self
    }

    pub fn stdout(mut self, stdout: Stdout) -> Self {
        self.stdout = stdout;
        self
    }

    pub fn stderr(mut self, stderr: Stderr) -> Self {
        self.stderr = stderr;
        self
    }

    /// Gives the child `fd` as descriptor number `target` (3 or more; 0-2 are
    /// stdio), e.g. a private reply pipe on fd 3. Our copy is closed once the
    /// child has started, so the child's end is the only one.
    pub fn fd(mut self, fd: OwnedFd, target: RawFd) -> Self {
        self.fds.push((fd, target));
        self
    }

    /// Runs the program on a pseudo-terminal: `terminal` is its slave side
    /// (from `nix::pty::openpty`; the caller keeps the master to read and
    /// write). It becomes the program's stdin, stdout, stderr and controlling
    /// terminal, in a session the group leader starts (see the module doc), so
    /// stdin, stdout and stderr must be left at their default. Our copy is
    /// closed once the child has started, so the master sees EOF (EIO) when
    /// the last process holding the terminal is gone.
    pub fn terminal(mut self, terminal: OwnedFd) -> Self {
        self.terminal = Some(terminal);
        self
    }

    /// Starts the program in a process group of its own, behind a group leader
    /// on Linux (see the module doc).
    ///
    /// Needs a tokio runtime. Any thread may call it: the parent-death signal
    /// follows the thread that forks, but an early one (that thread ended, the
    /// daemon did not) is ignored by the leader, and the daemon's death sends
    /// it again. Without the leader (other Unixes) there is no such signal.
    pub fn spawn(self) -> io::Result<ChildProcess> {
        let ChildCommand { mut command, name, stdin, stdout, stderr, fds, terminal } = self;
        let fds = ExtraFds::new(fds)?;
        if let Some(terminal) = terminal {
            if !matches!((&stdin, &stdout, &stderr), (Stdin::Null, Stdout::Null, Stderr::Null)) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{name}: a child on a terminal has the terminal as its stdio"),
                ));
            }
            command.stdin(terminal.try_clone()?).stdout(terminal.try_clone()?).stderr(terminal.try_clone()?);
            set_up_child(&mut command, fds.mapping(), Session::OnTerminal);
            return finish_spawn(command, name, fds, Some(terminal), None);
        }
        command.stdin(match stdin {
            Stdin::Null => Stdio::null(),
            Stdin::Piped => Stdio::piped(),
        });
        command.stdout(match stdout {
            Stdout::Null => Stdio::null(),
            Stdout::Inherit => Stdio::inherit(),
            Stdout::Piped => Stdio::piped(),
            Stdout::Fd(fd) => Stdio::from(fd),
        });
        let mut lines = None;
        command.stderr(match stderr {
            Stderr::Null => Stdio::null(),
            Stderr::Inherit => Stdio::inherit(),
            Stderr::Fd(fd) => Stdio::from(fd),
            Stderr::Lines { ring, log } => {
                lines = Some((ring, log));
                Stdio::piped()
            }
        });
        set_up_child(&mut command, fds.mapping(), Session::Inherited);
        finish_spawn(command, name, fds, None, lines)
    }
}

/// Starts the command set up by [`ChildCommand::spawn`] and its watcher.
fn finish_spawn(
    mut command: Command,
    name: String,
    fds: ExtraFds,
    terminal: Option<OwnedFd>,
    lines: Option<(LineRing, tracing::Level)>,
) -> io::Result<ChildProcess> {
    let spawned = command.spawn();
    // The child has its copies now; ours must go, or its readers never see EOF.
    drop(command);
    drop(fds);
    drop(terminal);
    let mut child = spawned?;
    let pid = match program_pid(&child) {
        Ok(pid) => pid,
        Err(e) => {
            // Cannot happen to our own unreaped child; the program dies with its leader.
            let _ = child.start_kill();
            return Err(e);
        }
    };
    tracing::debug!(child = %name, pid, "child process started");

    let stderr = lines.and_then(|(ring, log)| {
        let pipe = child.stderr.take()?;
        tokio::spawn(read_lines(pipe, ring.clone(), name.clone(), log));
        Some(ring)
    });
    let stdin = child.stdin.take();
    let stdout = child.stdout.take();
    let (signals, requests) = mpsc::unbounded_channel();
    let (exit_tx, exit) = watch::channel(None);
    let reaped = Arc::new(AtomicBool::new(false));
    let group = KillGroupOnDrop(Pid::from_raw(i32::try_from(pid).unwrap_or(0)));
    tokio::spawn(watch_child(child, group, name.clone(), requests, (exit_tx, reaped.clone())));
    Ok(ChildProcess { name, pid, stdin, stdout, stderr, signals, exit, reaped })
}

/// The group's id: the program's pid, or on a terminal the leader's (see the
/// module doc). On Linux the daemon's child is the leader; it moved into the
/// program's group (or made its own) before `spawn` returned (spawn waits
/// for the exec, and the leader moves first), and it stays there, reaped or
/// not, until the watcher reaps it.
fn program_pid(child: &Child) -> io::Result<u32> {
    let forked = child.id().ok_or_else(|| io::Error::other("the child was reaped before it was watched"))?;
    let forked = Pid::from_raw(i32::try_from(forked).map_err(io::Error::other)?);
    let group = nix::unistd::getpgid(Some(forked))?;
    Ok(group.as_raw().unsigned_abs())
}

/// The caller's descriptors for fixed numbers in the child, each moved above
/// every target number first, so that putting one in place never overwrites
/// another still waiting to be placed.
struct ExtraFds {
    fds: Vec<(OwnedFd, RawFd)>,
}

impl ExtraFds {
    fn new(fds: Vec<(OwnedFd, RawFd)>) -> io::Result<ExtraFds> {
        let invalid = |why: String| io::Error::new(io::ErrorKind::InvalidInput, why);
        let highest = fds.iter().map(|&(_, target)| target).max().unwrap_or(2);
        let mut moved = Vec::with_capacity(fds.len());
        for (fd, target) in fds {
            if target < 3 {
                return Err(invalid(format!("fd {target} is stdio; set it with stdin/stdout/stderr")));
            }
            if moved.iter().any(|&(_, t)| t == target) {
                return Err(invalid(format!("fd {target} is given to the child twice")));
            }
            let above = nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(highest + 1))?;
            moved.push((owned(above), target));
        }
        Ok(ExtraFds { fds: moved })
    }

    /// (source, target) pairs as plain numbers for the pre-exec hook.
    fn mapping(&self) -> Vec<(RawFd, RawFd)> {
        self.fds.iter().map(|(fd, target)| (fd.as_raw_fd(), *target)).collect()
    }
}

/// Takes ownership of a descriptor `fcntl(F_DUPFD_CLOEXEC)` just returned.
#[allow(unsafe_code)]
fn owned(fd: RawFd) -> OwnedFd {
    use std::os::fd::FromRawFd;
    // SAFETY: `fd` was returned by a successful F_DUPFD_CLOEXEC a moment ago:
    // it is open and no other value owns it.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// Which session the child runs in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Session {
    /// The daemon's: the child leads a new process group in it.
    Inherited,
    /// A new one whose controlling terminal is the child's stdin, started
    /// by the group leader (the program itself where there is no leader).
    OnTerminal,
}

/// Runs in the forked child between fork and exec: puts the caller's extra
/// descriptors in place, starts the session on a terminal, and, on Linux,
/// splits into the group leader and the program (see the module doc).
///
/// std's `do_exec` has by then set up stdio (dup2 onto 0-2), changed
/// directory and called `setpgid(0, 0)` for `process_group(0)` (not on a
/// terminal: `setsid` refuses a process that already leads a group); the
/// hook runs after those and before the environment is set and the program
/// exec'd.
#[allow(unsafe_code)]
fn set_up_child(command: &mut Command, fds: Vec<(RawFd, RawFd)>, session: Session) {
    if session == Session::Inherited {
        command.process_group(0);
    }
    #[cfg(target_os = "linux")]
    let daemon = nix::unistd::getpid();
    // SAFETY: the closure runs in the forked child of a possibly multi-threaded
    // process, where only async-signal-safe operations are allowed. It makes
    // nothing but direct system calls (dup2, setsid, ioctl(TIOCSCTTY), prctl,
    // getppid, getpid, sigprocmask, fork, and in the leader close_range,
    // sigwaitinfo, waitpid, kill, _exit) through nix's thin wrappers or
    // nix::libc: no allocation (the `fds` vector was built before the fork
    // and is only read), no locks, no panics on any path, and errors are
    // io::Error values made from an errno (no allocation either). The source
    // descriptors in `fds` are owned by `ExtraFds` until `spawn` returns, so
    // they are open in the child; on a terminal, fd 0 is the terminal (std
    // put it there), and the ioctl's third argument is a plain integer.
    unsafe {
        command.pre_exec(move || {
            for &(source, target) in &fds {
                // Sources sit above every target (ExtraFds::new), so source !=
                // target and dup2 makes a new descriptor without close-on-exec.
                if nix::libc::dup2(source, target) == -1 {
                    return Err(io::Error::last_os_error());
                }
            }
            if session == Session::OnTerminal {
                nix::unistd::setsid()?;
                // 0: do not steal a terminal that is another session's.
                if nix::libc::ioctl(0, nix::libc::TIOCSCTTY as _, 0) == -1 {
                    return Err(io::Error::last_os_error());
                }
            }
            #[cfg(target_os = "linux")]
            super::leader::split(daemon, session == Session::OnTerminal)?;
            Ok(())
        });
    }
}
