//! Pinning the two sides of a benchmark to separate cores, as the project's
//! targets ask on machines with two or more: the server under test (daemon or
//! baseline) on one, the load generator on the other, so that both sides of a
//! ratio get the same CPU and neither steals the other's.

use std::io;
use std::process::{Child, Command};

use anyhow::{Context, Result};
use nix::sched::{CpuSet, sched_getaffinity, sched_setaffinity};
use nix::unistd::Pid;

/// The server's core and the load generator's.
#[derive(Clone, Copy, Debug)]
pub struct Cores {
    pub server: usize,
    pub load: usize,
}

impl Cores {
    /// The first two cores this process may run on; `None` with fewer (then
    /// nothing is pinned and both sides share what there is).
    pub fn pick() -> Option<Cores> {
        let allowed = sched_getaffinity(Pid::from_raw(0)).ok()?;
        let mut cpus = (0..CpuSet::count()).filter(|&cpu| allowed.is_set(cpu).unwrap_or(false));
        Some(Cores { server: cpus.next()?, load: cpus.next()? })
    }
}

/// Pins the calling thread, and so every thread and process it starts from
/// now on, to `cpu`. A process calls it first thing, before any other thread.
pub fn pin_current_thread(cpu: usize) -> Result<()> {
    let mut set = CpuSet::new();
    set.set(cpu).with_context(|| format!("no CPU {cpu}"))?;
    sched_setaffinity(Pid::from_raw(0), &set).with_context(|| format!("pinning to CPU {cpu}"))
}

/// Spawns `command` pinned to `cpu` (if any). A child inherits the affinity
/// of the thread that forks it, so the fork happens on a short-lived thread
/// pinned first: the caller's own threads keep theirs, and no `pre_exec`
/// hook (unsafe) is needed.
pub fn spawn_on(command: &mut Command, cpu: Option<usize>) -> io::Result<Child> {
    let Some(cpu) = cpu else { return command.spawn() };
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                pin_current_thread(cpu).map_err(io::Error::other)?;
                command.spawn()
            })
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("the spawning thread panicked")))
    })
}
