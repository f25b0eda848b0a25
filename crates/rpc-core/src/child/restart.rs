//! When to restart a child that crashed: [`CrashPolicy`] (the daemon's
//! choice) and [`CrashHistory`] (what happened).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

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
}
