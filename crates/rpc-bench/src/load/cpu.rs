//! How busy each side of a run was: the CPU time of the load side (this
//! process) and of the server's processes over the measured seconds, over
//! those seconds. Both sides see the same messages, so their shares compare
//! their CPU a message: on a pinned, quiet machine the side with the larger
//! share saturates its core first and sets the pace, and on a shared one
//! (where neither gets a whole core) the comparison still holds. The kernel
//! here does not account interrupt time apart (no
//! `CONFIG_IRQ_TIME_ACCOUNTING`), so loopback's receive work, done in the
//! sender's context, is in the sender's system time.

use std::time::Instant;

use serde::{Deserialize, Serialize};

/// Shares this close (relative) are a tie: both sides bound alike. Two
/// runs of the same pair on this shared machine differ by about this much.
const TIE: f64 = 0.10;
/// A server share at or above this is a saturated core: the server, not the
/// client, set the pace.
const SATURATED: f64 = 0.9;

/// CPU shares of one run's measured time.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct Busy {
    /// The load side: this process (every thread of it).
    pub load: f64,
    /// The server's processes together; `None` when none were watched.
    pub server: Option<f64>,
}

impl Busy {
    /// Reads both sides at `from` and at `until`.
    pub async fn over(from: Instant, until: Instant, servers: Vec<u32>) -> Busy {
        tokio::time::sleep_until(from.into()).await;
        let (load, server, started) = (cpu_seconds("self"), servers_seconds(&servers), Instant::now());
        tokio::time::sleep_until(until.into()).await;
        let wall = started.elapsed().as_secs_f64();
        Busy {
            load: (cpu_seconds("self") - load) / wall,
            server: (!servers.is_empty()).then(|| (servers_seconds(&servers) - server) / wall),
        }
    }

    /// The load side spent more CPU a message than the server (by more
    /// than [`TIE`]), and the server's core was not saturated: given a core
    /// each, the client, not the server, would set the pace. Within the tie,
    /// both sides are bound alike: by the kernel's work for a read and a
    /// write, which no client can spend less on than a raw echo does.
    pub fn client_bound(&self) -> bool {
        self.server.is_some_and(|s| s < SATURATED && self.load > s * (1.0 + TIE))
    }

    /// What the load side could drive at most, from its share at `rate`: its
    /// CPU a request is `load / rate`, so a whole core is `rate / load`.
    pub fn client_ceiling(&self, rate: f64) -> f64 {
        rate / self.load.max(1e-3)
    }

    /// The same for the server: what it could answer with a core of its own.
    pub fn server_ceiling(&self, rate: f64) -> Option<f64> {
        self.server.map(|s| rate / s.max(1e-3))
    }
}

fn servers_seconds(pids: &[u32]) -> f64 {
    pids.iter().map(|pid| cpu_seconds(&pid.to_string())).sum()
}

/// A process's CPU time so far (user and system, every thread), `self` or a
/// pid; 0 if it is gone.
pub fn cpu_seconds(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields = stat_fields(&stat);
    let ticks = |i: usize| fields.get(i - 3).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    // utime is field 14, stime 15, in USER_HZ (100 on Linux).
    (ticks(14) + ticks(15)) / 100.0
}

/// The fields of a `/proc/<pid>/stat` after the command name (which may hold
/// spaces and brackets): the first is field 3, the state.
fn stat_fields(stat: &str) -> Vec<&str> {
    stat.rsplit_once(')').map_or("", |(_, rest)| rest).split_whitespace().collect()
}

/// A process's parent, from its `/proc/<pid>/stat` (field 4), and its
/// command name.
pub fn parent_and_name(pid: u32) -> Option<(u32, String)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let name = stat.split_once('(')?.1.rsplit_once(')')?.0.to_owned();
    Some((stat_fields(&stat).get(1)?.parse().ok()?, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_is_client_bound_when_the_load_side_spends_more_a_message_than_the_server() {
        let busy = |load, server| Busy { load, server };
        assert!(busy(0.99, Some(0.6)).client_bound());
        assert!(!busy(0.24, Some(0.22)).client_bound(), "a tie");
        assert!(busy(0.5, Some(0.4)).client_bound());
        assert!(!busy(0.97, Some(0.99)).client_bound());
        assert!(!busy(1.0, Some(0.9)).client_bound(), "the server's core is saturated");
        assert!(!busy(0.3, Some(0.6)).client_bound());
        assert!(!busy(0.99, None).client_bound());
        assert_eq!(busy(0.5, Some(1.0)).client_ceiling(3.0e6), 6.0e6);
        assert_eq!(busy(0.5, Some(0.75)).server_ceiling(3.0e6), Some(4.0e6));
    }

    #[test]
    fn this_process_has_a_parent_and_spends_cpu() {
        // Spins until a tick (10 ms) of CPU shows, for at most 10 s.
        let (start, until) = (cpu_seconds("self"), Instant::now() + std::time::Duration::from_secs(10));
        while cpu_seconds("self") <= start && Instant::now() < until {
            std::hint::black_box((0..10_000u64).sum::<u64>());
        }
        assert!(cpu_seconds("self") > start);
        let (parent, name) = parent_and_name(std::process::id()).unwrap();
        assert!(parent > 0 && !name.is_empty());
    }
}
