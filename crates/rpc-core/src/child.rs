//! Child processes: the programs a daemon runs (an interpreter, extensions
//! speaking JSON-RPC over stdio, an agent), started so that none of them and
//! nothing they start outlives the daemon, watched so that their exit is known
//! at once, stopped as a group, and restarted by a policy the daemon chooses.
//!
//! What it owns: [`ChildCommand`] (what to run and where its stdio goes),
//! [`ChildProcess`] (the running group: exit, stop, kill), [`LineRing`] (the
//! last lines a child wrote to stderr), [`connect`] (an rpc-core peer over a
//! child's stdio) and [`CrashPolicy`]/[`CrashHistory`] (when to restart). What
//! it is not: it never restarts anything itself; the daemon owns that loop.
//!
//! # No descendant outlives the daemon
//!
//! Every child leads a process group of its own, so a stop or a kill reaches
//! whatever it started (`system("sleep 100")`), and a Ctrl-C meant for the
//! daemon in a terminal does not reach it directly. A graceful daemon stops its
//! children; the hard case is a daemon that is SIGKILLed (or crashes) and runs
//! no code at all. `PR_SET_PDEATHSIG` alone does not cover it: the kernel then
//! kills the child, but the child's own children are orphaned and keep running,
//! holding files, ports and the daemon's pipes.
//!
//! So on Linux the process the daemon forks is not the program but a tiny
//! **group leader**, a second copy of the fork that never execs:
//!
//! ```text
//! daemon ── leader (PDEATHSIG=SIGTERM) ── program (PDEATHSIG=SIGKILL) ── its children…
//!           └──────── one process group, whose id is the program's pid ────────┘
//! ```
//!
//! - The daemon dies → the kernel sends the leader SIGTERM → the leader sees
//!   its parent is no longer the daemon, leaves the group and SIGKILLs it, so
//!   the program and everything it started go at once, then kills every
//!   descendant that left the group (below) and exits. Without the leader the
//!   program's children would be orphaned.
//! - The leader dies (any way) → the kernel SIGKILLs the program.
//! - The program exits → the leader kills whatever is left (the group, and
//!   every descendant that left it), then exits the same way (same code, or
//!   the same signal re-raised on itself), so the daemon reaps the program's
//!   real status. The leader does it, not the daemon: the daemon may be gone
//!   (the program often exits *because* it died: its stdin closed).
//! - A descendant that leaves the group (`setsid`, `setpgid`, a double fork)
//!   is still caught: the leader is a **child subreaper**
//!   (`PR_SET_CHILD_SUBREAPER`), so when such a process's parent dies it is
//!   handed to the leader rather than to init, and at the end the leader
//!   kills its children, reaps them, and kills the children they leave it,
//!   until it has none.
//! - The daemon's own stop sends SIGTERM to the group; the leader, whose parent
//!   is still the daemon, ignores it and the program handles it.
//!
//! The leader closes every descriptor it inherited: otherwise it would hold the
//! daemon's client sockets, the child's pipes (so their readers never saw EOF)
//! and std's exec-error pipe (so `spawn` would never return). It blocks every
//! signal, so nothing the daemon installed runs in it, and takes them with
//! `sigwait`. The parent-death signal follows the *thread* that forked: the
//! kernel sends it whenever the leader is handed to a new parent, so a
//! spawning thread that ends before the daemon (a blocking-pool thread) sends
//! a SIGTERM the leader ignores, its parent process being alive, and the
//! daemon's death later sends it again. (Without the leader, that early signal
//! would kill the program while the daemon lives: the reason spawning used to
//! be tied to a long-lived thread.)
//!
//! # On a terminal
//!
//! [`ChildCommand::terminal`] runs the program on a pseudo-terminal as its
//! controlling terminal (an agent that wants a TTY). Only a session leader can
//! take a controlling terminal, and a process that calls `setsid` leaves its
//! group, so here the **leader** starts the session: the daemon's child calls
//! `setsid` (a new session and group, both with its pid), takes the terminal
//! with `TIOCSCTTY`, and only then forks the program, which stays in the
//! leader's group:
//!
//! ```text
//! daemon ── leader (session leader, PDEATHSIG=SIGTERM) ── program ── its children…
//!           └──── one session and one process group, whose id is the leader's pid ────┘
//! ```
//!
//! Everything above holds as it is, with the group's id being the leader's pid
//! instead of the program's ([`ChildProcess::pid`]). The terminal's
//! foreground group is that group, so keys such as Ctrl-C typed into the
//! terminal reach the program (and the leader, which ignores them while the
//! daemon lives). The group is orphaned in the POSIX sense (the leader's
//! parent is in another session), so the terminal's stop keys (Ctrl-Z) do not
//! stop it.
//!
//! Costs and limits: the leader is a copy-on-write fork of the daemon that
//! touches almost nothing, but it keeps the daemon's pages as they were at
//! spawn time (memory the daemon later changes is then held twice). A
//! descendant that leaves the group *and* whose parent lives on when the
//! leader acts is found through its parent's death in the next round; one
//! that gets itself reparented elsewhere (only possible with privileges, or
//! under another subreaper below ours) is out of reach: under systemd,
//! `KillMode=control-group` catches that too. On other Unixes there is no
//! leader, no subreaper and no parent-death signal: children lead their own
//! group and are stopped with it, but a SIGKILLed daemon leaves them running.

use parking_lot::Mutex;
use std::collections::VecDeque;
use std::ffi::OsStr;
use std::fmt;
use std::future::Future;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::AsyncReadExt;
use tokio::process::{Child, ChildStderr, Command};
pub use tokio::process::{ChildStdin, ChildStdout};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::codec::Transport;
use crate::peer::{CloseReason, Connection, PeerConfig, PeerHandle};
use crate::router::Router;

// ---------------------------------------------------------------------------
// What to run
// ---------------------------------------------------------------------------

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
    // sigwait, waitpid, kill, _exit) through nix's thin wrappers or
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
            leader::split(daemon, session)?;
            Ok(())
        });
    }
}

#[cfg(target_os = "linux")]
mod leader {
    //! The group leader (see the module doc of `child`). Everything here runs
    //! in a forked child: async-signal-safe system calls only.

    use std::io;

    use nix::errno::Errno;
    use nix::libc;
    use nix::sys::prctl::{set_child_subreaper, set_pdeathsig};
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    use nix::sys::signal::{SigHandler, SigSet, Signal, kill, killpg};
    use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
    use nix::unistd::{ForkResult, Pid, getpgrp, getpid, getppid, setpgid};

    use super::Session;

    /// Returns in the program's process (which std then execs); never returns
    /// in the leader. An error is reported by std as the spawn's error.
    #[allow(unsafe_code)]
    pub(super) fn split(daemon: Pid, session: Session) -> io::Result<()> {
        // Blocked before anything can send them: a death signal then stays
        // pending for `lead` instead of running a handler inherited from the
        // daemon (which would swallow it).
        SigSet::all().thread_set_mask()?;
        set_pdeathsig(Signal::SIGTERM)?;
        // The daemon may have died before the line above: then no signal comes.
        if getppid() != daemon {
            return Err(Errno::ESRCH.into());
        }
        let leader = getpid();
        // Descendants that leave the group are handed to the leader when
        // their parent dies (not inherited by the program: fork clears it).
        set_child_subreaper(true)?;
        // SAFETY: this process is the single-threaded child of a fork, so no
        // other thread can hold a lock that fork's atfork handlers or the
        // child would need; the child below only makes system calls until std
        // execs it, as in any fork-exec.
        match unsafe { nix::unistd::fork() }? {
            ForkResult::Child => {
                set_pdeathsig(Signal::SIGKILL)?;
                if getppid() != leader {
                    return Err(Errno::ESRCH.into());
                }
                // The program's pid becomes the group's id and the leader joins
                // it, so "the child's pid" is the program and its group, as it
                // would be without a leader. On a terminal the program stays
                // in the group of the leader, which leads the session (a
                // session leader cannot move).
                if session == Session::Inherited {
                    setpgid(Pid::from_raw(0), Pid::from_raw(0))?;
                }
                SigSet::empty().thread_set_mask()?;
                Ok(())
            }
            ForkResult::Parent { child } if session == Session::OnTerminal => lead(daemon, child, getpgrp()),
            ForkResult::Parent { child } => {
                // The same from this side, whichever of us runs first (EACCES:
                // the program has exec'd, so it did it itself).
                let _ = setpgid(child, child);
                if let Err(e) = setpgid(Pid::from_raw(0), child) {
                    let _ = kill(child, Signal::SIGKILL);
                    return Err(e.into());
                }
                lead(daemon, child, child)
            }
        }
    }

    /// The leader's whole life: wait for the program to end and end the same
    /// way, or for the daemon to die and end everything (`group`: the
    /// program's pid, or on a terminal the leader's own). Either way nothing
    /// the program started is left: the leader is a child subreaper, so a
    /// descendant that left the group (`setsid`, a double fork) is handed to
    /// it when its parent dies, and [`end_descendants`] kills them all.
    #[allow(unsafe_code)]
    fn lead(daemon: Pid, program: Pid, group: Pid) -> ! {
        close_everything();
        let mut wake = SigSet::empty();
        for signal in [Signal::SIGCHLD, Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
            wake.add(signal);
        }
        loop {
            // Which signal it was does not matter: both checks below run
            // whatever woke us (a SIGCHLD and a SIGTERM may arrive as one).
            let mut signal = 0;
            // SAFETY: `wake` is a valid signal set and `signal` a valid place
            // for the number (nix's `SigSet::wait` would unwrap it).
            unsafe { libc::sigwait(wake.as_ref(), &mut signal) };
            // Orphans handed to us end too; only the program's end matters.
            let ended = reap(program);
            // A SIGTERM while the daemon lives is its graceful stop, sent to the
            // whole group: the program handles it. Only an orphaned leader acts.
            if getppid() != daemon {
                end_everything(program, group);
                exit(1);
            }
            match ended {
                Some(WaitStatus::Exited(_, code)) => {
                    end_everything(program, group);
                    exit(code)
                }
                Some(WaitStatus::Signaled(_, signal, _)) => {
                    end_everything(program, group);
                    die_like(signal)
                }
                _ => {}
            }
        }
    }

    /// Reaps every child that has ended (the program, and orphaned
    /// descendants handed to us); the program's end, if it was among them.
    fn reap(program: Pid) -> Option<WaitStatus> {
        let mut program_ended = None;
        loop {
            match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                Ok(status @ (WaitStatus::Exited(pid, _) | WaitStatus::Signaled(pid, _, _))) => {
                    if pid == program {
                        program_ended = Some(status);
                    }
                }
                Ok(WaitStatus::StillAlive) | Err(_) => return program_ended,
                Ok(_) => {}
            }
        }
    }

    /// The program has ended, or the daemon has died: everything the program
    /// started goes. The rest of the group at once (the leader leaves it
    /// first, to outlive the kill; on a terminal it leads the group and the
    /// session and cannot leave, so there the loop below does it), then every
    /// descendant, whatever group or session it moved to.
    fn end_everything(program: Pid, group: Pid) {
        if group == program && setpgid(Pid::from_raw(0), Pid::from_raw(0)).is_ok() {
            let _ = killpg(group, Signal::SIGKILL);
        }
        end_descendants();
    }

    /// Kills this process's children and reaps them, again and again, until
    /// it has none: a child's own children are handed to us (the subreaper)
    /// when it dies, and go in the next round. Ends when `waitpid` says there
    /// is no child left at all.
    fn end_descendants() {
        let me = getpid();
        loop {
            kill_children_of(me);
            match waitpid(Pid::from_raw(-1), None) {
                Ok(_) | Err(Errno::EINTR) => {}
                Err(_) => return,
            }
        }
    }

    /// SIGKILLs every process whose parent is `parent`, found by reading
    /// `/proc/<pid>/stat` (the `children` file of `/proc` needs a kernel
    /// option many kernels lack). System calls on stack buffers only.
    #[allow(unsafe_code)]
    fn kill_children_of(parent: Pid) {
        // SAFETY: a NUL-terminated path; the descriptor is closed below.
        let dir = unsafe { libc::open(c"/proc".as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC) };
        if dir < 0 {
            return;
        }
        // u64s: getdents64 records are 8-byte aligned.
        let mut buf = [0u64; 1024];
        loop {
            // SAFETY: the buffer is valid for its length in bytes.
            let n = unsafe { libc::syscall(libc::SYS_getdents64, dir, buf.as_mut_ptr(), std::mem::size_of_val(&buf)) };
            if n <= 0 {
                break;
            }
            // SAFETY: the kernel wrote `n` bytes of records into the buffer.
            let bytes = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), n as usize) };
            let mut at = 0;
            // A record: inode (8), offset (8), length (2), type (1), name (NUL-ended).
            while at + 19 < bytes.len() {
                let length = u16::from_ne_bytes([bytes[at + 16], bytes[at + 17]]) as usize;
                if length == 0 {
                    break;
                }
                let name = &bytes[at + 19..(at + length).min(bytes.len())];
                let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
                if let Some(pid) = parse_pid(name)
                    && parent_of(pid) == Some(parent.as_raw())
                {
                    let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
                }
                at += length;
            }
        }
        // SAFETY: our own descriptor, closed once.
        unsafe { libc::close(dir) };
    }

    /// A decimal pid, or `None` for any other name.
    fn parse_pid(digits: &[u8]) -> Option<i32> {
        if digits.is_empty() || digits.len() > 9 {
            return None;
        }
        let mut pid = 0i32;
        for &d in digits {
            if !d.is_ascii_digit() {
                return None;
            }
            pid = pid * 10 + i32::from(d - b'0');
        }
        Some(pid)
    }

    /// The parent of `pid`, from `/proc/<pid>/stat`: `pid (comm) state ppid ...`.
    #[allow(unsafe_code)]
    fn parent_of(pid: i32) -> Option<i32> {
        let mut path = [0u8; 32];
        let mut len = 0;
        let mut put = |bytes: &[u8]| {
            path[len..len + bytes.len()].copy_from_slice(bytes);
            len += bytes.len();
        };
        put(b"/proc/");
        let mut digits = [0u8; 10];
        let mut n = pid;
        let mut start = digits.len();
        loop {
            start -= 1;
            digits[start] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        put(&digits[start..]);
        put(b"/stat\0");
        // SAFETY: `path` is NUL-terminated; the descriptor is closed below.
        let fd = unsafe { libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC) };
        if fd < 0 {
            return None;
        }
        // The command name is at most 16 bytes: the parent's pid is well
        // within the first 128, and no field before it but the name holds ')'.
        let mut stat = [0u8; 128];
        // SAFETY: the buffer is valid for its length; our descriptor, closed once.
        let read = unsafe { libc::read(fd, stat.as_mut_ptr().cast(), stat.len()) };
        unsafe { libc::close(fd) };
        let stat = stat.get(..usize::try_from(read).ok()?)?;
        let after_name = stat.iter().rposition(|&b| b == b')')?;
        // `) S 1234 `: the state, then the parent's pid.
        let rest = stat.get(after_name + 4..)?;
        let end = rest.iter().position(|&b| b == b' ')?;
        parse_pid(&rest[..end])
    }

    /// Closes every descriptor: the leader never reads or writes again, and
    /// nothing in this process closes them later (it never returns, `_exit`
    /// runs no destructors).
    #[allow(unsafe_code)]
    fn close_everything() {
        // SAFETY: close_range takes plain integers and touches no memory.
        let closed = unsafe { libc::syscall(libc::SYS_close_range, 0 as libc::c_uint, libc::c_uint::MAX, 0) };
        if closed == 0 {
            return;
        }
        // Kernels before 5.9 have no close_range.
        let limit = getrlimit(Resource::RLIMIT_NOFILE).map_or(1024, |(soft, _)| soft).min(1 << 20);
        for fd in 0..limit as libc::c_int {
            // SAFETY: as above; a descriptor that is not open gives EBADF.
            unsafe { libc::close(fd) };
        }
    }

    /// Ends the leader by the signal that ended the program, so the daemon's
    /// wait reports `killed by SIGSEGV` and not a made-up exit code.
    #[allow(unsafe_code)]
    fn die_like(signal: Signal) -> ! {
        // The program already dumped its own core, if the signal makes one.
        let _ = setrlimit(Resource::RLIMIT_CORE, 0, 0);
        // SAFETY: installing the default action runs no code of ours.
        let _ = unsafe { nix::sys::signal::signal(signal, SigHandler::SigDfl) };
        let _ = kill(getpid(), signal);
        let mut only = SigSet::empty();
        only.add(signal);
        // The pending signal is delivered as it is unblocked: we end here.
        let _ = only.thread_unblock();
        // A signal whose default action does not terminate cannot have ended
        // the program; the shell's convention, just in case.
        exit(128 + signal as i32)
    }

    #[allow(unsafe_code)]
    fn exit(code: i32) -> ! {
        // SAFETY: _exit runs no atexit handlers and flushes nothing.
        unsafe { libc::_exit(code) }
    }
}

// ---------------------------------------------------------------------------
// The running child
// ---------------------------------------------------------------------------

/// How a child ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Exit {
    /// It exited with this code.
    Code(i32),
    /// A signal killed it.
    Signal(i32),
    /// Its status could not be read (the wait failed, or the runtime that
    /// watched it shut down).
    Unknown(String),
}

impl Exit {
    fn from_wait(status: io::Result<std::process::ExitStatus>) -> Exit {
        use std::os::unix::process::ExitStatusExt;
        match status {
            Ok(status) => match (status.code(), status.signal()) {
                (Some(code), _) => Exit::Code(code),
                (None, Some(signal)) => Exit::Signal(signal),
                _ => Exit::Unknown(status.to_string()),
            },
            Err(e) => Exit::Unknown(format!("could not be waited for: {e}")),
        }
    }
}

impl fmt::Display for Exit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Exit::Code(code) => write!(f, "exit status {code}"),
            Exit::Signal(signal) => match Signal::try_from(*signal) {
                Ok(name) => write!(f, "killed by {name}"),
                Err(_) => write!(f, "killed by signal {signal}"),
            },
            Exit::Unknown(why) => f.write_str(why),
        }
    }
}

/// A started child and its process group. Dropping it kills the group.
#[derive(Debug)]
pub struct ChildProcess {
    name: String,
    pid: u32,
    stdin: Option<ChildStdin>,
    stdout: Option<ChildStdout>,
    stderr: Option<LineRing>,
    /// Signals for the watcher to send to the group; closing it kills the group.
    signals: mpsc::UnboundedSender<Signal>,
    exit: watch::Receiver<Option<Exit>>,
    /// `exit` is set: one load for [`ChildProcess::has_exited`], which health
    /// checks call on every ping, where the watch takes a lock.
    reaped: Arc<AtomicBool>,
}

impl ChildProcess {
    /// The program's pid, which is also its process group's id; on a
    /// terminal (see the module doc), the group's id, which is the pid of
    /// the leader that started its session.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The write end of the child's stdin, if it was piped and not taken yet.
    pub fn take_stdin(&mut self) -> Option<ChildStdin> {
        self.stdin.take()
    }

    /// The read end of the child's stdout, if it was piped and not taken yet.
    pub fn take_stdout(&mut self) -> Option<ChildStdout> {
        self.stdout.take()
    }

    /// The last lines of stderr, if it goes to a ring.
    pub fn stderr_lines(&self) -> Option<&LineRing> {
        self.stderr.as_ref()
    }

    /// Resolves once the child has ended and been reaped, with how it ended.
    /// This comes from waiting on the process, not from its pipes, so a
    /// grandchild that keeps them open does not delay it. The future owns
    /// what it needs: move it into a task to act on the exit.
    pub fn exited(&self) -> impl Future<Output = Exit> + Send + 'static {
        let mut exit = self.exit.clone();
        async move {
            match exit.wait_for(Option::is_some).await {
                Ok(exit) => exit.clone().unwrap_or_else(|| Exit::Unknown("exited".into())),
                Err(_) => Exit::Unknown("the runtime watching it shut down".into()),
            }
        }
    }

    /// Whether the child has ended and been reaped.
    pub fn has_exited(&self) -> bool {
        self.reaped.load(Ordering::Acquire)
    }

    /// SIGKILLs the whole group at once. Does nothing once it has exited.
    /// A program that was just exiting on its own may then be reported
    /// `killed by SIGKILL`: on Linux the kill can reach the leader before it
    /// has passed the program's own status on.
    pub fn kill(&self) {
        let _ = self.signals.send(Signal::SIGKILL);
    }

    /// Stops the whole group: SIGTERM, then SIGKILL if the child has not
    /// exited after `grace`. Returns how it ended.
    pub async fn stop(&self, grace: Duration) -> Exit {
        let exited = self.exited();
        tokio::pin!(exited);
        let _ = self.signals.send(Signal::SIGTERM);
        if let Ok(exit) = tokio::time::timeout(grace, &mut exited).await {
            return exit;
        }
        tracing::debug!(child = %self.name, pid = self.pid, ?grace, "child ignored SIGTERM; killing its group");
        self.kill();
        exited.await
    }
}

/// Reaps the child, signalling its group when asked; then kills whatever is
/// left of the group and publishes the exit. Only this task signals the
/// group, and only until the reap completes, so a signal can never reach a
/// recycled group id: an unreaped leader keeps its pid (and so the group id)
/// reserved, and after the reap any surviving member still does.
///
/// `killer` is an argument, not a local, so that it is dropped (and kills the
/// group) even if the task is dropped before it was ever polled: a runtime
/// shutting down drops its tasks, and a dropped `Child` is not killed.
async fn watch_child(
    mut child: Child,
    killer: KillGroupOnDrop,
    name: String,
    mut requests: mpsc::UnboundedReceiver<Signal>,
    (exit, reaped): (watch::Sender<Option<Exit>>, Arc<AtomicBool>),
) {
    let group = killer.0;
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            request = requests.recv() => match request {
                Some(signal) => {
                    let _ = killpg(group, signal);
                }
                // The ChildProcess was dropped.
                None => {
                    let _ = killpg(group, Signal::SIGKILL);
                    break child.wait().await;
                }
            },
        }
    };
    // What the program started belongs to it and goes with it.
    drop(killer);
    let status = Exit::from_wait(status);
    tracing::debug!(child = %name, pid = group.as_raw(), %status, "child process exited");
    reaped.store(true, Ordering::Release);
    exit.send_replace(Some(status));
}

/// SIGKILLs the group when dropped.
struct KillGroupOnDrop(Pid);

impl Drop for KillGroupOnDrop {
    fn drop(&mut self) {
        if self.0.as_raw() > 0 {
            let _ = killpg(self.0, Signal::SIGKILL);
        }
    }
}

// ---------------------------------------------------------------------------
// Stderr
// ---------------------------------------------------------------------------

/// Longest line a [`LineRing`] keeps whole: a runaway line (a binary blob, a
/// progress bar without newlines) must not push out the lines before it.
pub const LONGEST_LINE: usize = 8 * 1024;

/// The last lines a child wrote, bounded in count and in bytes. A cheap
/// handle: clones share the lines, so a daemon can keep the ring of a child
/// that has gone (to say why it crashed).
#[derive(Clone, Debug)]
pub struct LineRing {
    shared: Arc<Mutex<Ring>>,
}

#[derive(Debug)]
struct Ring {
    lines: VecDeque<String>,
    bytes: usize,
    max_lines: usize,
    max_bytes: usize,
}

impl LineRing {
    /// Keeps at most `max_lines` lines totalling at most `max_bytes` bytes.
    pub fn new(max_lines: usize, max_bytes: usize) -> LineRing {
        let ring = Ring { lines: VecDeque::new(), bytes: 0, max_lines, max_bytes };
        LineRing { shared: Arc::new(Mutex::new(ring)) }
    }

    /// Adds a line (without its newline), dropping the oldest to stay within
    /// both limits. A line longer than [`LONGEST_LINE`] (or `max_bytes`, if
    /// less) is cut and ends in `…`.
    pub fn push(&self, line: &str) {
        let mut ring = self.shared.lock();
        let line = cut(line, ring.longest_line());
        while !ring.lines.is_empty() && (ring.lines.len() >= ring.max_lines || ring.bytes + line.len() > ring.max_bytes)
        {
            let old = ring.lines.pop_front().unwrap_or_default();
            ring.bytes -= old.len();
        }
        if ring.max_lines > 0 {
            ring.bytes += line.len();
            ring.lines.push_back(line);
        }
    }

    /// The last `n` lines, oldest first.
    pub fn tail(&self, n: usize) -> Vec<String> {
        let ring = self.shared.lock();
        ring.lines.iter().skip(ring.lines.len().saturating_sub(n)).cloned().collect()
    }

    /// Bytes held (lines without their newlines).
    pub fn bytes(&self) -> usize {
        self.shared.lock().bytes
    }

    fn longest_line(&self) -> usize {
        self.shared.lock().longest_line()
    }
}

impl Ring {
    fn longest_line(&self) -> usize {
        self.max_bytes.min(LONGEST_LINE)
    }
}

/// `line` within `max` bytes, cut at a character boundary with a `…` mark.
fn cut(line: &str, max: usize) -> String {
    if line.len() <= max {
        return line.to_owned();
    }
    const MARK: &str = "…";
    let mut end = max.saturating_sub(MARK.len());
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    if max < MARK.len() { String::new() } else { format!("{}{MARK}", &line[..end]) }
}

/// Reads stderr until EOF, a line at a time, into the ring and the log. Holds
/// at most one line (up to the ring's longest) in memory: the rest of a longer
/// line is skipped.
async fn read_lines(mut pipe: ChildStderr, ring: LineRing, name: String, level: tracing::Level) {
    // One byte more than a line may hold, so that the ring sees the line is too
    // long and marks it cut.
    let longest = ring.longest_line().saturating_add(1);
    let mut line: Vec<u8> = Vec::new();
    let mut skipping = false;
    let mut buf = vec![0u8; 8192];
    let emit = |line: &[u8]| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let text = String::from_utf8_lossy(line);
        log_line(level, &name, &text);
        ring.push(&text);
    };
    loop {
        let n = match pipe.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) => {
                tracing::debug!(child = %name, error = %e, "reading stderr failed");
                break;
            }
        };
        let mut rest = &buf[..n];
        while !rest.is_empty() {
            let newline = memchr::memchr(b'\n', rest);
            let piece = &rest[..newline.unwrap_or(rest.len())];
            rest = &rest[newline.map_or(rest.len(), |i| i + 1)..];
            if !skipping {
                let room = longest - line.len();
                line.extend_from_slice(&piece[..piece.len().min(room)]);
                if line.len() == longest {
                    emit(&line);
                    line.clear();
                    skipping = true;
                }
            }
            if newline.is_some() {
                if !skipping {
                    emit(&line);
                }
                line.clear();
                skipping = false;
            }
        }
    }
    if !line.is_empty() {
        emit(&line);
    }
}

fn log_line(level: tracing::Level, child: &str, line: &str) {
    use tracing::Level;
    match level {
        Level::ERROR => tracing::error!(child, "{line}"),
        Level::WARN => tracing::warn!(child, "{line}"),
        Level::INFO => tracing::info!(child, "{line}"),
        Level::DEBUG => tracing::debug!(child, "{line}"),
        Level::TRACE => tracing::trace!(child, "{line}"),
    }
}

// ---------------------------------------------------------------------------
// A peer over the child's stdio
// ---------------------------------------------------------------------------

/// How long after the child's exit its stdout may still deliver what it wrote
/// last (a reply sent just before exiting) before the connection is closed.
const EXIT_DRAIN: Duration = Duration::from_millis(100);

/// Runs an rpc-core peer over the child's stdout and stdin (both must be
/// piped and not taken), framed by `frame` (e.g. `Transport::content_length`).
///
/// The connection closes when the child exits even if a grandchild keeps its
/// stdout open, so calls still pending fail at once instead of at their
/// timeouts. Returns the handle and the task serving the connection.
pub fn connect<S: Send + Sync + 'static>(
    child: &mut ChildProcess,
    frame: impl FnOnce(ChildStdout, ChildStdin) -> Transport,
    router: Arc<Router<S>>,
    state: Arc<S>,
    config: PeerConfig,
) -> io::Result<(PeerHandle, JoinHandle<CloseReason>)> {
    let (stdout, stdin) = match (child.stdout.take(), child.stdin.take()) {
        (Some(stdout), Some(stdin)) => (stdout, stdin),
        (stdout, stdin) => {
            (child.stdout, child.stdin) = (stdout, stdin);
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{}: a peer needs the child's stdin and stdout piped and not taken", child.name),
            ));
        }
    };
    let (peer, connection) = Connection::new(frame(stdout, stdin), router, state, config);
    let exited = child.exited();
    let name = child.name.clone();
    let closer = peer.clone();
    tokio::spawn(async move {
        tokio::select! {
            exit = exited => {
                // Usually EOF ends the connection right after the exit; a
                // grandchild holding stdout would keep it open forever.
                if tokio::time::timeout(EXIT_DRAIN, closer.closed()).await.is_err() {
                    tracing::debug!(child = %name, %exit, "child exited; closing its connection");
                    closer.close(1000, &format!("{name} exited ({exit})"));
                }
            }
            _ = closer.closed() => {}
        }
    });
    Ok((peer, tokio::spawn(connection.run())))
}

// ---------------------------------------------------------------------------
// Restarts
// ---------------------------------------------------------------------------

/// When to restart a child that crashed: a delay that doubles from
/// `first_delay` to `max_delay` while it keeps crashing young, and a cut-off
/// for a crash loop.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CrashPolicy {
    pub first_delay: Duration,
    pub max_delay: Duration,
    /// A child that lived at least this long was healthy: the next delay is
    /// `first_delay` again.
    pub healthy_after: Duration,
    /// Stop restarting after this many crashes in this window; `None` restarts
    /// forever.
    pub give_up: Option<CrashLoop>,
}

/// `crashes` crashes within `within` make a crash loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CrashLoop {
    pub crashes: usize,
    pub within: Duration,
}

impl Default for CrashPolicy {
    /// 0.5 s doubling up to 30 s, healthy after a minute, and the spec's
    /// cut-off: 3 crashes within 5 minutes.
    fn default() -> Self {
        CrashPolicy {
            first_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
            healthy_after: Duration::from_secs(60),
            give_up: Some(CrashLoop { crashes: 3, within: Duration::from_secs(5 * 60) }),
        }
    }
}

/// What to do about a crash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Restart {
    After(Duration),
    GiveUp,
}

/// One child's recent crashes, judged by a [`CrashPolicy`]. Pure bookkeeping:
/// the daemon passes the instants, sleeps and restarts.
#[derive(Clone, Debug)]
pub struct CrashHistory {
    policy: CrashPolicy,
    /// Times of the crashes still inside the crash-loop window.
    recent: VecDeque<Instant>,
    next_delay: Duration,
}

impl CrashHistory {
    pub fn new(policy: CrashPolicy) -> CrashHistory {
        let next_delay = policy.first_delay;
        CrashHistory { policy, recent: VecDeque::new(), next_delay }
    }

    pub fn policy(&self) -> &CrashPolicy {
        &self.policy
    }

    /// Records that a child started at `started` crashed at `now`.
    pub fn crashed(&mut self, started: Instant, now: Instant) -> Restart {
        let policy = &self.policy;
        if now.saturating_duration_since(started) >= policy.healthy_after {
            self.next_delay = policy.first_delay;
        }
        let delay = self.next_delay;
        self.next_delay = delay.saturating_mul(2).min(policy.max_delay);
        let Some(limit) = policy.give_up else {
            return Restart::After(delay);
        };
        self.recent.push_back(now);
        while self.recent.front().is_some_and(|&at| now.saturating_duration_since(at) >= limit.within) {
            self.recent.pop_front();
        }
        if self.recent.len() >= limit.crashes { Restart::GiveUp } else { Restart::After(delay) }
    }

    /// Crashes inside the crash-loop window as of the last one recorded.
    pub fn recent_crashes(&self) -> usize {
        self.recent.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> CrashPolicy {
        CrashPolicy {
            first_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(350),
            healthy_after: Duration::from_secs(10),
            give_up: None,
        }
    }

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn quick_crashes_double_the_delay_up_to_the_max() {
        let t0 = Instant::now();
        let mut history = CrashHistory::new(policy());
        let delays: Vec<_> = (0..5).map(|i| history.crashed(t0 + secs(i), t0 + secs(i) + secs(1))).collect();
        let ms = |n| Restart::After(Duration::from_millis(n));
        assert_eq!(delays, [ms(100), ms(200), ms(350), ms(350), ms(350)]);
    }

    #[test]
    fn a_child_that_lived_long_enough_resets_the_delay() {
        let t0 = Instant::now();
        let mut history = CrashHistory::new(policy());
        history.crashed(t0, t0 + secs(1));
        history.crashed(t0 + secs(1), t0 + secs(2));
        // Lived exactly `healthy_after`: healthy.
        let after = history.crashed(t0 + secs(2), t0 + secs(12));
        assert_eq!(after, Restart::After(Duration::from_millis(100)));
        // Lived one second short of it: counts as young again.
        let after = history.crashed(t0 + secs(12), t0 + secs(21));
        assert_eq!(after, Restart::After(Duration::from_millis(200)));
    }

    #[test]
    fn the_default_gives_up_at_three_crashes_within_five_minutes() {
        let policy = CrashPolicy::default();
        assert_eq!(policy.give_up, Some(CrashLoop { crashes: 3, within: secs(300) }));
        let t0 = Instant::now();
        let mut history = CrashHistory::new(policy);
        // Healthy lives (two minutes each), yet three crashes in 4 minutes.
        assert!(matches!(history.crashed(t0, t0 + secs(120)), Restart::After(_)));
        assert!(matches!(history.crashed(t0 + secs(120), t0 + secs(240)), Restart::After(_)));
        assert_eq!(history.crashed(t0 + secs(240), t0 + secs(360)), Restart::GiveUp);
    }

    #[test]
    fn crashes_older_than_the_window_are_forgotten() {
        let t0 = Instant::now();
        let mut history =
            CrashHistory::new(CrashPolicy { give_up: Some(CrashLoop { crashes: 3, within: secs(300) }), ..policy() });
        assert!(matches!(history.crashed(t0, t0 + secs(1)), Restart::After(_)));
        assert!(matches!(history.crashed(t0 + secs(1), t0 + secs(2)), Restart::After(_)));
        // The first crash (at 1 s) is exactly 5 minutes old: out of the window.
        assert!(matches!(history.crashed(t0 + secs(300), t0 + secs(301)), Restart::After(_)));
        assert_eq!(history.recent_crashes(), 2);
        // The second (at 2 s) is still inside the window half a second later.
        let now = t0 + secs(301) + Duration::from_millis(500);
        assert_eq!(history.crashed(t0 + secs(301), now), Restart::GiveUp);
    }

    #[test]
    fn without_a_cut_off_it_restarts_forever() {
        let t0 = Instant::now();
        let mut history = CrashHistory::new(policy());
        for i in 0..1000 {
            assert!(matches!(history.crashed(t0 + secs(i), t0 + secs(i)), Restart::After(_)));
        }
    }

    #[test]
    fn a_custom_cut_off_of_one_gives_up_at_the_first_crash() {
        let t0 = Instant::now();
        let mut history =
            CrashHistory::new(CrashPolicy { give_up: Some(CrashLoop { crashes: 1, within: secs(60) }), ..policy() });
        assert_eq!(history.crashed(t0, t0 + secs(100)), Restart::GiveUp);
    }

    #[test]
    fn the_ring_keeps_the_newest_lines_within_both_limits() {
        let ring = LineRing::new(3, 10);
        for line in ["a", "bb", "ccc", "dddd"] {
            ring.push(line);
        }
        assert_eq!(ring.tail(10), ["bb", "ccc", "dddd"]);
        ring.push("eeeeeee");
        assert_eq!(ring.tail(10), ["eeeeeee"]);
        assert_eq!(ring.bytes(), 7);
        ring.push("ünïcödé-and-more");
        let last = ring.tail(1).remove(0);
        assert!(last.len() <= 10 && last.ends_with('…'), "{last}");
        assert!(ring.bytes() <= 10);
    }
}
