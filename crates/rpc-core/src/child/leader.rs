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

/// What the daemon sends the leader to have the program and everything it
/// started killed at once. The daemon does not SIGKILL the group itself: the
/// leader is in it, and a descendant that left the group would outlive the
/// subreaper that was to catch it. A signal no terminal key sends, taken
/// only from the daemon.
pub(super) const END_NOW: Signal = Signal::SIGUSR1;

/// Returns in the program's process (which std then execs); never returns
/// in the leader. An error is reported by std as the spawn's error.
#[allow(unsafe_code)]
pub(super) fn split(daemon: Pid, on_terminal: bool) -> io::Result<()> {
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
            if !on_terminal {
                setpgid(Pid::from_raw(0), Pid::from_raw(0))?;
            }
            SigSet::empty().thread_set_mask()?;
            Ok(())
        }
        ForkResult::Parent { child } if on_terminal => lead(daemon, child, getpgrp()),
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
    for signal in [Signal::SIGCHLD, Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP, END_NOW] {
        wake.add(signal);
    }
    loop {
        // The checks below run whatever woke us (a SIGCHLD and a SIGTERM
        // may arrive as one); only the daemon's kill request needs its sender.
        // SAFETY: `wake` is a valid signal set and `info` a valid place for
        // what the kernel writes; a zeroed siginfo_t is a valid value.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let signal = unsafe { libc::sigwaitinfo(wake.as_ref(), &mut info) };
        // SAFETY: for a signal sent with kill(), si_pid is the sender's pid.
        let from_daemon = signal == END_NOW as i32 && unsafe { info.si_pid() } == daemon.as_raw();
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
        // The daemon's kill (its stop's grace ran out, or the child was
        // dropped): the leader does it, so that it is still here, the
        // subreaper, for the descendants that left the group.
        if from_daemon {
            end_everything(program, group);
            die_like(Signal::SIGKILL)
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
