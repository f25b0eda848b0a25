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
//! - The daemon's kill (a stop whose grace ran out, a dropped child) is a
//!   request to the leader (SIGUSR1, taken only from the daemon), which ends
//!   everything as above. The daemon does not SIGKILL the group itself: that
//!   would kill the leader too, and a descendant that left the group would be
//!   handed to init rather than to it. (If the leader has not ended within
//!   2 s, the daemon SIGKILLs the group after all.)
//!
//! The leader closes every descriptor it inherited: otherwise it would hold the
//! daemon's client sockets, the child's pipes (so their readers never saw EOF)
//! and std's exec-error pipe (so `spawn` would never return). It blocks every
//! signal, so nothing the daemon installed runs in it, and takes them with
//! `sigwaitinfo`. The parent-death signal follows the *thread* that forked: the
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

mod command;
mod connect;
#[cfg(target_os = "linux")]
mod leader;
mod process;
mod restart;
mod stderr;

pub use command::{ChildCommand, Stderr, Stdin, Stdout};
pub use connect::connect;
pub use process::{ChildProcess, Exit};
pub use restart::{CrashHistory, CrashLoop, CrashPolicy, Restart};
pub use stderr::{LONGEST_LINE, LineRing};
pub use tokio::process::{ChildStdin, ChildStdout};
