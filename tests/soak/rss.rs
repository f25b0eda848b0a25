//! The soak's clock and its record: how long to run, the daemon's resident
//! memory (and its children's) sampled on a thread of its own, the verdict
//! that it stayed flat, and what the load saw go wrong.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use integration_tests::rss_bytes;

const MIB: u64 = 1024 * 1024;

/// How far the steady state's last third may rise above its first third.
///
/// 8 MiB, or a tenth of the first third's peak when that is larger. What can
/// move RSS without a leak: the allocator keeping freed pages of a burst
/// (mimalloc and glibc return them lazily, per thread), a connection's byte
/// budgets filling (8 MiB out, 16 MiB backlog, but the soak's clients read
/// and send small messages, so a few hundred KiB at most), and tokio's worker
/// threads touching more of their stacks. Measured over 10 minutes, after the
/// warm-up, the daemons stayed within 4 MiB of their level (supex-bridge had
/// one step of +3.7 MiB that went back down; the others moved under 0.5 MiB).
/// A leak of one small allocation (100 bytes) per operation at the soak's
/// rate (400 to 1300 checked operations a second) grows over 8 MiB in the
/// minutes between the first and the last third; in the short run, one of a
/// few KiB per operation does.
pub fn allowed_growth(first_third_peak: u64) -> u64 {
    (8 * MIB).max(first_third_peak / 10)
}

/// How long to run and how often to sample.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    pub duration: Duration,
    pub interval: Duration,
    /// Samples before this are the warm-up (caches and pools filling).
    pub warmup: Duration,
}

impl Plan {
    /// `SOAK=1`: 10 minutes, a sample every 10 s; else about 18 s, every 2 s.
    /// `SOAK_SECONDS` sets the length either way.
    pub fn from_env() -> Plan {
        let long = std::env::var("SOAK").is_ok_and(|v| v == "1");
        let (seconds, interval) = if long { (600, 10) } else { (18, 2) };
        let seconds = match std::env::var("SOAK_SECONDS") {
            Ok(text) => text.trim().parse().unwrap_or_else(|_| panic!("SOAK_SECONDS={text:?}: whole seconds")),
            Err(_) => seconds,
        };
        let duration = Duration::from_secs(seconds);
        // A fifth of the run, at most a minute: long enough for every kind of
        // work to have run a few times, short enough to leave most samples.
        let warmup = (duration / 5).min(Duration::from_secs(60));
        Plan { duration, interval: Duration::from_secs(interval), warmup }
    }
}

#[derive(Clone, Copy, Debug)]
pub struct Sample {
    pub at: Duration,
    pub daemon: u64,
    /// The daemon's descendants together (0 when it has none).
    pub children: u64,
}

/// Samples `pid` and its descendants every `plan.interval` until the run is over.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Vec<Sample>>,
}

impl Sampler {
    pub fn start(pid: u32, plan: Plan) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let started = Instant::now();
            let mut samples = Vec::new();
            let mut next = Duration::ZERO;
            while next <= plan.duration && !stopped.load(Ordering::Relaxed) {
                let wait = next.saturating_sub(started.elapsed());
                std::thread::sleep(wait);
                let children = descendants(pid).into_iter().map(rss_bytes).sum();
                samples.push(Sample { at: started.elapsed(), daemon: rss_bytes(pid), children });
                next += plan.interval;
            }
            samples
        });
        Sampler { stop, thread }
    }

    /// The samples, after the one at the end of the run (or at once, if the
    /// run was cut short).
    pub fn finish(self, early: bool) -> Vec<Sample> {
        if early {
            self.stop.store(true, Ordering::Relaxed);
        }
        self.thread.join().expect("the sampler does not panic")
    }
}

/// Live descendants of `pid` (children, grandchildren...), zombies left out.
pub fn descendants(pid: u32) -> Vec<u32> {
    let mut parent_of: HashMap<u32, u32> = HashMap::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // After the command's closing parenthesis: state, then the parent pid.
        let mut fields = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or("").split_whitespace();
        let (Some(state), Some(ppid)) = (fields.next(), fields.next().and_then(|p| p.parse().ok())) else {
            continue;
        };
        if state != "Z" {
            parent_of.insert(child, ppid);
        }
    }
    let mut found = vec![pid];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        found.extend(parent_of.iter().filter(|&(_, &p)| p == parent).map(|(&c, _)| c));
        i += 1;
    }
    found.remove(0);
    found
}

/// How much the least-squares line through `samples` rises from the first
/// sample's time to the last's, in bytes (negative when it falls).
fn trend_rise(samples: &[Sample], measure: impl Fn(&Sample) -> u64) -> f64 {
    let n = samples.len() as f64;
    let points: Vec<(f64, f64)> = samples.iter().map(|s| (s.at.as_secs_f64(), measure(s) as f64)).collect();
    let (mean_t, mean_v) = points.iter().fold((0.0, 0.0), |(t, v), p| (t + p.0 / n, v + p.1 / n));
    let covariance: f64 = points.iter().map(|(t, v)| (t - mean_t) * (v - mean_v)).sum();
    let variance: f64 = points.iter().map(|(t, _)| (t - mean_t).powi(2)).sum();
    if variance == 0.0 {
        return 0.0;
    }
    let span = points.last().map_or(0.0, |p| p.0) - points.first().map_or(0.0, |p| p.0);
    covariance / variance * span
}

/// One soak's samples, with what it takes to judge and show them.
pub struct Record {
    pub name: String,
    pub plan: Plan,
    pub samples: Vec<Sample>,
}

fn mib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / MIB as f64)
}

impl Record {
    /// The samples after the warm-up.
    fn steady(&self) -> Vec<Sample> {
        self.samples.iter().copied().filter(|s| s.at >= self.plan.warmup).collect()
    }

    /// Whether `measure` stayed flat: the peak of the steady state's last
    /// third within [`allowed_growth`] of its first third's peak, and the
    /// straight line through the steady samples rising less than that over
    /// the whole steady span. The second catches a slow, steady leak that
    /// the peaks alone let through (a runtime gaining 1 MiB a minute: +7 MiB
    /// between the thirds' peaks, +10 MiB along the line).
    pub fn flatness(&self, what: &str, measure: impl Fn(&Sample) -> u64) -> Result<String, String> {
        let steady = self.steady();
        if steady.len() < 3 {
            return Err(format!("{what}: {} samples after the warm-up, 3 needed", steady.len()));
        }
        let third = steady.len() / 3;
        let first = steady[..third].iter().map(&measure).max().unwrap_or(0);
        let last = steady[steady.len() - third..].iter().map(&measure).max().unwrap_or(0);
        let allowed = allowed_growth(first);
        let summary = format!(
            "{what}: first third's peak {} MiB, last third's {} MiB (allowed +{} MiB)",
            mib(first),
            mib(last),
            mib(allowed)
        );
        if last > first + allowed {
            return Err(format!("{summary}: grew; all samples {}", self.list(&measure)));
        }
        let rise = trend_rise(&steady, &measure);
        let summary = format!("{summary}, trend +{} MiB over the steady span", mib(rise.max(0.0) as u64));
        if rise > allowed as f64 {
            return Err(format!("{summary}: climbs steadily; all samples {}", self.list(&measure)));
        }
        Ok(summary)
    }

    fn list(&self, measure: impl Fn(&Sample) -> u64) -> String {
        self.samples.iter().map(|s| mib(measure(s))).collect::<Vec<_>>().join(", ")
    }

    /// A Markdown table row: daemon, duration, RSS at start, after the
    /// warm-up, at the end, the peak, and every sample (MiB).
    pub fn row(&self, label: &str, measure: impl Fn(&Sample) -> u64) -> String {
        let at_start = self.samples.first().map(&measure).unwrap_or(0);
        let after_warmup = self.steady().first().map(&measure).unwrap_or(0);
        let at_end = self.samples.last().map(&measure).unwrap_or(0);
        let peak = self.samples.iter().map(&measure).max().unwrap_or(0);
        format!(
            "| {label} | {} s | {} | {} | {} | {} | {} |",
            self.plan.duration.as_secs(),
            mib(at_start),
            mib(after_warmup),
            mib(at_end),
            mib(peak),
            self.list(&measure)
        )
    }

    /// Prints the table (the daemon, then its children if it has any) and
    /// asserts both stayed flat.
    pub fn report_and_check(&self, children: Option<&str>) {
        let mut table = vec![
            format!(
                "| daemon | duration | RSS start (MiB) | after warm-up ({} s) | end | max | samples every {} s |",
                self.plan.warmup.as_secs(),
                self.plan.interval.as_secs()
            ),
            "|---|---|---|---|---|---|---|".to_owned(),
            self.row(&self.name, |s| s.daemon),
        ];
        if let Some(kind) = children {
            table.push(self.row(&format!("{} ({kind})", self.name), |s| s.children));
        }
        eprintln!("\n{}\n", table.join("\n"));
        let mut verdicts = vec![self.flatness(&self.name, |s| s.daemon)];
        if let Some(kind) = children {
            verdicts.push(self.flatness(kind, |s| s.children));
        }
        for verdict in &verdicts {
            match verdict {
                Ok(summary) => eprintln!("flat: {summary}"),
                Err(problem) => eprintln!("NOT FLAT: {problem}"),
            }
        }
        let problems: Vec<&String> = verdicts.iter().filter_map(|v| v.as_ref().err()).collect();
        assert!(problems.is_empty(), "resident memory grew under steady load: {problems:?}");
    }
}

/// What the load did: operations that went right, and the first of those
/// that did not (all counted).
#[derive(Default)]
pub struct Tally {
    ok: AtomicU64,
    failed: AtomicU64,
    first_failures: Mutex<Vec<String>>,
}

impl Tally {
    pub fn ok(&self) {
        self.ok.fetch_add(1, Ordering::Relaxed);
    }

    pub fn fail(&self, what: String) {
        self.failed.fetch_add(1, Ordering::Relaxed);
        let mut first = self.first_failures.lock();
        if first.len() < 10 {
            first.push(what);
        }
    }

    /// Checks `condition`, counting it either way.
    pub fn check(&self, condition: bool, what: impl FnOnce() -> String) {
        if condition { self.ok() } else { self.fail(what()) }
    }

    /// Panics with the first failures if any operation went wrong, or if
    /// fewer than `at_least` went right (the load did not really run).
    pub fn assert_clean(&self, name: &str, at_least: u64) {
        let (ok, failed) = (self.ok.load(Ordering::Relaxed), self.failed.load(Ordering::Relaxed));
        eprintln!("{name}: {ok} operations answered as expected, {failed} not");
        let first = self.first_failures.lock();
        assert!(failed == 0, "{name}: {failed} operations went wrong under load; the first: {first:#?}");
        assert!(ok >= at_least, "{name}: only {ok} operations completed (at least {at_least} expected)");
    }
}

/// A small deterministic generator for the load's choices (no dependency).
pub struct Dice(u64);

impl Dice {
    pub fn new(seed: u64) -> Dice {
        Dice(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) % n
    }
}

#[test]
fn the_verdict_passes_a_plateau_and_fails_a_steady_climb() {
    let plan =
        Plan { duration: Duration::from_secs(100), interval: Duration::from_secs(10), warmup: Duration::from_secs(20) };
    let record = |mib_at: &dyn Fn(u64) -> u64| Record {
        name: "d".into(),
        plan,
        samples: (0..=10)
            .map(|i| Sample { at: Duration::from_secs(i * 10), daemon: mib_at(i) * MIB, children: 0 })
            .collect(),
    };
    // Warm-up growth, then a plateau with noise: flat.
    let plateau = record(&|i| if i < 2 { 10 + i * 10 } else { 30 + i % 2 });
    assert!(plateau.flatness("plateau", |s| s.daemon).is_ok());
    // 2 MiB more every sample after the warm-up: 12 MiB between the thirds.
    let climb = record(&|i| 30 + i * 2);
    let verdict = climb.flatness("climb", |s| s.daemon);
    assert!(verdict.as_ref().is_err_and(|e| e.contains("grew")), "{verdict:?}");
    // 1.2 MiB more every sample: 7.2 MiB between the thirds' peaks (let
    // through), 9.6 MiB along the line (caught).
    let slow = Record {
        name: "d".into(),
        plan,
        samples: (0..=10)
            .map(|i| Sample { at: Duration::from_secs(i * 10), daemon: 30 * MIB + i * 12 * MIB / 10, children: 0 })
            .collect(),
    };
    let verdict = slow.flatness("slow", |s| s.daemon);
    assert!(verdict.as_ref().is_err_and(|e| e.contains("climbs steadily")), "{verdict:?}");
}
