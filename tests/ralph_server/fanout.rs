//! Any number of clients: 100 subscribers, one of which never reads, while
//! the agent floods its terminal. The others get every line; the stalled one
//! keeps its connection and, when it reads again, learns how many it missed.

use std::io::{BufRead, BufReader};
use std::time::Duration;

use serde_json::json;

use crate::support::{Client, Task};

const LINES: usize = 5_000;

#[test]
fn a_hundred_subscribers_get_every_line_while_one_that_never_reads_only_loses_its_own() {
    let task = Task::new("many", 2);
    std::fs::write(task.dir().join("fake-mode-US-001"), format!("bursts {LINES}\n")).unwrap();
    std::fs::write(task.dir().join("fake-mode-US-002"), "slow 100000\n").unwrap();
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
    let counting: Vec<_> = readers
        .into_iter()
        .map(|client| {
            std::thread::spawn(move || {
                let Client { reader, .. } = client;
                let (mut floods, mut dropped) = (0, 0);
                for line in BufReader::new(reader.into_inner()).lines() {
                    let line = line.unwrap();
                    if line.contains("\"flood ") {
                        floods += 1;
                    }
                    if line.contains("\"type\":\"dropped\"") {
                        let value: serde_json::Value = serde_json::from_str(&line).unwrap();
                        dropped += value["params"]["data"]["count"].as_u64().unwrap() as usize;
                    }
                    if line.contains("marked US-001") {
                        break;
                    }
                }
                (floods, dropped)
            })
        })
        .collect();
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
