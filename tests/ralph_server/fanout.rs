//! Any number of clients: 100 subscribers, one of which never reads, while
//! the agent floods its terminal. The others get every line; the stalled one
//! keeps its connection and, when it reads again, learns how many it missed.

use std::io::{BufRead, BufReader};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::{Client, Task, fake_agent};

const LINES: usize = 5_000;
/// The fake agent's `paced` mode writes this many lines, then waits for the
/// test to say every reader has them.
const BURST: usize = 100;

/// The agent writes its flood in bursts, each let go only once every
/// reading subscriber has read the one before: a reader is never more than
/// a burst behind, however the machine schedules its thread, so any line it
/// misses is the daemon's doing. The stalled subscriber reads nothing and
/// falls the whole flood behind.
#[test]
fn a_hundred_subscribers_get_every_line_while_one_that_never_reads_only_loses_its_own() {
    let task = Task::new("many", 2);
    std::fs::write(task.dir().join("fake-mode-US-001"), format!("paced {LINES}\n")).unwrap();
    quiet_after_the_first_story(&task);
    task.hold();
    let mut daemon = task.run(&[]);
    let mut stalled = task.connect(&daemon);
    let mut readers = Vec::new();
    for _ in 0..99 {
        let mut client = task.connect(&daemon);
        client.call("subscribe", json!({"events": ["output"]}));
        readers.push(client);
    }
    stalled.call("subscribe", json!({"events": ["*"]}));
    task.release();
    // Each reader's flood lines read and lines it was told it lost.
    let progress: Vec<Arc<[AtomicUsize; 2]>> = readers.iter().map(|_| Arc::default()).collect();
    let counting: Vec<_> = readers
        .into_iter()
        .zip(&progress)
        .map(|(client, progress)| {
            let progress = progress.clone();
            std::thread::spawn(move || {
                let Client { reader, .. } = client;
                let (mut floods, mut dropped) = (0, 0);
                for line in BufReader::new(reader.into_inner()).lines() {
                    let line = line.unwrap();
                    if line.contains("\"flood ") {
                        floods += 1;
                        progress[0].store(floods, Ordering::Release);
                    }
                    if line.contains("\"type\":\"dropped\"") {
                        let value: serde_json::Value = serde_json::from_str(&line).unwrap();
                        dropped += value["params"]["data"]["count"].as_u64().unwrap() as usize;
                        progress[1].store(dropped, Ordering::Release);
                    }
                    if line.contains("marked US-001") {
                        break;
                    }
                }
                (floods, dropped)
            })
        })
        .collect();
    let burst = task.dir().join("burst");
    for written in (BURST..=LINES).step_by(BURST) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let lost: usize = progress.iter().map(|p| p[1].load(Ordering::Acquire)).sum();
            assert_eq!(lost, 0, "reading subscribers were told they lost lines, {written} written");
            let slowest = progress.iter().map(|p| p[0].load(Ordering::Acquire)).min().unwrap();
            if burst.exists() && slowest >= written {
                break;
            }
            assert!(Instant::now() < deadline, "after {written} lines written, a reader has read only {slowest}");
            std::thread::sleep(Duration::from_millis(2));
        }
        std::fs::remove_file(&burst).unwrap();
    }
    for reader in counting {
        let (got, dropped) = reader.join().unwrap();
        assert_eq!((got, dropped), (LINES, 0), "a reading subscriber missed lines");
    }
    // Now the stalled one reads: everything until the gap, then `dropped`, then live events.
    let mut dropped = None;
    let mut after = 0;
    while let Some(event) = stalled.recv() {
        if event["params"]["type"] == "dropped" {
            dropped = event["params"]["data"]["count"].as_u64();
        } else if dropped.is_some() {
            after += 1;
            if after > 3 {
                break;
            }
        }
    }
    let dropped = dropped.expect("the stalled subscriber was told how many events it missed");
    assert!(dropped > 0 && dropped < LINES as u64 + 100, "{dropped}");
    // Its connection lives on, with live events.
    stalled.until(|e| e["params"]["data"]["current_story"] == "US-002").expect("the next iteration's state_change");
    assert_eq!(stalled.call("get_status", json!({}))["result"]["current_story"], "US-002");
    stalled.call("stop", json!({"force": true}));
    assert_eq!(daemon.wait_exit(Duration::from_secs(20)).code(), Some(3));
}

/// The second story's agent prints one line and waits at a gate until the
/// daemon is stopped. Readers that fell behind the flood skip to the oldest
/// event the ring still holds, and the first story's last line must still be
/// among them however late they read: an agent that went on printing would
/// push it out of the ring (1024 events) and leave them waiting for it.
fn quiet_after_the_first_story(task: &Task) {
    std::fs::write(task.dir().join("fake-mode-US-002"), "gate\n").unwrap();
    std::fs::write(task.dir().join("gate"), "").unwrap();
}

/// What one subscriber of `output` read up to the first story's end.
#[derive(Debug, Default)]
struct Seen {
    /// `output` events read, and the `dropped` counts told.
    events: u64,
    dropped: u64,
    /// Flood lines read (each numbered by the agent).
    floods: u64,
}

/// Reads `output` events until the line that ends the first story, checking
/// that the flood's lines come in order.
fn read_until_story_end(reader: impl std::io::Read) -> Seen {
    let mut seen = Seen::default();
    let mut last_flood = None;
    for line in BufReader::new(reader).lines() {
        let line = line.unwrap();
        let value: serde_json::Value = serde_json::from_str(&line).unwrap();
        let params = &value["params"];
        match params["type"].as_str() {
            Some("dropped") => seen.dropped += params["data"]["count"].as_u64().unwrap(),
            Some("output") => {
                seen.events += 1;
                let text = params["data"]["line"].as_str().unwrap();
                if let Some(rest) = text.strip_prefix("flood ") {
                    let n: u64 = rest.split(' ').next().unwrap().parse().unwrap();
                    assert!(last_flood.is_none_or(|last| n > last), "flood line {n} after {last_flood:?}");
                    last_flood = Some(n);
                    seen.floods += 1;
                }
                if text.contains("marked US-001") {
                    break;
                }
            }
            _ => {}
        }
    }
    seen
}

/// The shared ring, over real sockets: 250 subscribers, one of which never
/// reads, while the agent floods its terminal as fast as a shell can. Every
/// reader sees the flood in order, and what it saw plus what it was told it
/// lost is every event published since it subscribed, the same for all; the
/// stalled one, when it reads, gets the same count. The daemon's memory
/// stays bounded by the ring, not by the subscribers times the flood.
#[test]
fn many_subscribers_of_a_flood_account_for_every_event_and_the_daemon_stays_small() {
    const FLOOD: u64 = 50_000;
    const SUBSCRIBERS: usize = 250;
    let task = Task::new("ring", 2);
    std::fs::write(task.dir().join("fake-mode-US-001"), format!("flood {FLOOD}\n")).unwrap();
    quiet_after_the_first_story(&task);
    task.hold();
    // The prompt handed as a file: typed into the terminal, its echo would be
    // published while the subscribers below are still connecting, and those
    // that came after it would rightly count fewer events than the first.
    let agent = format!("{} {{PROMPT_FILE}}", fake_agent());
    let mut daemon = task.start(&task.dir(), &agent, &[]);
    let mut stalled = task.connect(&daemon);
    stalled.call("subscribe", json!({"events": ["output"]}));
    let mut readers = Vec::new();
    for _ in 1..SUBSCRIBERS {
        let mut client = task.connect(&daemon);
        client.call("subscribe", json!({"events": ["output"]}));
        readers.push(client);
    }
    let before = integration_tests::rss_bytes(daemon.pid());
    let peak = {
        let pid = daemon.pid();
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let sampler = std::thread::spawn(move || {
            let mut peak = 0;
            while stopped.recv_timeout(Duration::from_millis(20)) == Err(std::sync::mpsc::RecvTimeoutError::Timeout) {
                peak = peak.max(integration_tests::rss_bytes(pid));
            }
            peak
        });
        task.release();
        let counting: Vec<_> = readers
            .into_iter()
            .map(|client| std::thread::spawn(move || read_until_story_end(client.reader.into_inner())))
            .collect();
        let seen: Vec<Seen> = counting.into_iter().map(|r| r.join().unwrap()).collect();
        drop(stop);
        let peak = sampler.join().unwrap();
        let total = seen[0].events + seen[0].dropped;
        assert!(total > FLOOD, "{:?}", seen[0]);
        for s in &seen {
            assert_eq!(s.events + s.dropped, total, "a reader's events and drops do not add up: {s:?}");
            assert!(s.floods + s.dropped >= FLOOD, "flood lines missing uncounted: {s:?}");
        }
        let lost: u64 = seen.iter().map(|s| s.dropped).sum();
        eprintln!("{} readers; {total} events each; {lost} dropped in all", seen.len());
        // The one that never read: what was queued for it, then the gap, then the rest.
        let mine = read_until_story_end(&mut stalled.reader);
        assert_eq!(mine.events + mine.dropped, total, "{mine:?}");
        assert!(mine.dropped > 0, "{mine:?}");
        peak
    };
    const MIB: u64 = 1024 * 1024;
    eprintln!("RSS: {} MiB before the flood, {} MiB at its peak", before / MIB, peak / MIB);
    // The ring holds at most 4 MiB, the stalled subscriber's connection
    // its write budget (8 MiB); each of 250 subscribers holding its own
    // share of the flood would be more.
    assert!(peak < before + 48 * MIB, "RSS grew from {before} to {peak} bytes");
    // A new connection: the stalled one's reader stopped inside a line.
    drop(stalled);
    task.connect(&daemon).call("stop", json!({"force": true}));
    assert_eq!(daemon.wait_exit(Duration::from_secs(20)).code(), Some(3));
}

/// Subscribers that never read hold what a pump takes at a time, not a
/// write budget each: the events wait in the ring, once for all. (Each held
/// up to its 8 MiB budget; events are shared, so the cost shows when they
/// joined at different times, each holding other events: the reviewer's
/// subscriber every 0.7 s took the daemon up 8.5 MB apiece.)
#[test]
fn subscribers_that_never_read_do_not_each_hold_a_write_budget() {
    const SUBSCRIBERS: usize = 10;
    const MIB: u64 = 1024 * 1024;
    let task = Task::new("unread", 2);
    // 10 000 lines of 8 KB, about 2 500 a second: 80 MB over 4 s.
    std::fs::write(task.dir().join("fake-mode-US-001"), "wide 10000\n").unwrap();
    quiet_after_the_first_story(&task);
    std::fs::write(task.dir().join("gate"), "").unwrap();
    task.hold();
    let mut daemon = task.start(&task.dir(), &format!("{} {{PROMPT_FILE}}", fake_agent()), &[]);
    let mut watcher = task.connect(&daemon);
    watcher.call("subscribe", json!({"events": ["output"]}));
    let before = integration_tests::rss_bytes(daemon.pid());
    task.release();
    // One joins every 0.35 s, each while another 8 MiB of lines goes by.
    let stalled: Vec<_> = (0..SUBSCRIBERS)
        .map(|_| {
            std::thread::sleep(Duration::from_millis(350));
            let mut client = task.connect(&daemon);
            client.call("subscribe", json!({"events": ["output"]}));
            client
        })
        .collect();
    watcher.until_line(|l| l == "waiting at the gate").expect("the agent's lines");
    let after = integration_tests::rss_bytes(daemon.pid());
    eprintln!("RSS: {} MiB before, {} MiB with {SUBSCRIBERS} unread subscribers", before / MIB, after / MIB);
    assert!(after < before + 24 * MIB, "RSS grew from {before} to {after} bytes");
    drop(stalled);
    std::fs::remove_file(task.dir().join("gate")).unwrap();
    watcher.call("stop", json!({"force": true}));
    assert_eq!(daemon.wait_exit(Duration::from_secs(20)).code(), Some(3));
}
