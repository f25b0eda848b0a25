//! The load generator: pipelined JSON-RPC clients over NDJSON/TCP or WebSocket.
//!
//! Each connection is one task running a closed loop: it keeps `window`
//! requests in flight and sends one more for each reply. The load side must
//! never be what limits a baseline (a raw echo costs the server almost
//! nothing a message), so throughput runs count replies instead of matching
//! them (`counting.rs`: newlines or WebSocket frames, requests copied from a
//! pre-built block, one round trip in 16 timed), and only window-1 runs, the
//! latency benchmarks, match every reply to its request by id (`exact.rs`).
//! Every run also reads how busy each side was over the measured time
//! (`cpu.rs`): a row can then say when its load side, not its server, set
//! the pace.

mod counting;
mod cpu;
pub(crate) mod exact;
mod spec;
mod websocket;

pub(crate) use self::counting::{Block, Tally};
pub use self::cpu::{Busy, cpu_seconds, parent_and_name};
pub(crate) use self::spec::request;
pub use self::spec::{Load, Report};

use std::time::Instant;

use anyhow::{Result, bail};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// One run: its report and how busy each side was while it was measured.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Measured {
    pub report: Report,
    pub busy: Busy,
}

pub async fn run(load: &Load) -> Result<Report> {
    Ok(measure(load).await?.report)
}

/// Runs `load`, reading the CPU of this process and of `load.servers` over
/// the measured seconds.
pub async fn measure(load: &Load) -> Result<Measured> {
    if load.window == 0 || load.window > exact::SENT_SLOTS / 2 {
        bail!("window must be between 1 and {}", exact::SENT_SLOTS / 2);
    }
    let start = Instant::now();
    let measure_from = start + load.warmup;
    let stop_at = measure_from + load.duration;
    let busy = tokio::spawn(cpu::Busy::over(measure_from, stop_at, load.servers.clone()));
    let mut tasks = Vec::new();
    for _ in 0..load.connections {
        let load = load.clone();
        tasks.push(tokio::spawn(async move {
            if load.exact {
                exact::connection(&load, measure_from, stop_at).await
            } else {
                counting::connection(&load, measure_from, stop_at).await
            }
        }));
    }
    let mut hist = Histogram::<u64>::new(3)?;
    let (mut requests, mut errors) = (0, 0);
    for task in tasks {
        let stats = task.await??;
        hist.add(&stats.hist)?;
        requests += stats.requests;
        errors += stats.errors;
    }
    let report = Report::from_histogram(&hist, requests, errors, load.duration.as_secs_f64());
    Ok(Measured { report, busy: busy.await? })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn requests_put_the_id_first_so_an_echo_copy_is_its_own_reply() {
        assert_eq!(request(77, "ping", "{}"), r#"{"jsonrpc":"2.0","id":77,"method":"ping","params":{}}"#);
        assert_eq!(exact::reply_id(request(77, "ping", "{}").as_bytes()), Some(77));
    }

    fn load(target: String, window: usize) -> Load {
        Load {
            target,
            method: "ping".into(),
            params: "{}".into(),
            window,
            connections: 2,
            duration: Duration::from_millis(300),
            warmup: Duration::from_millis(50),
            hello: None,
            exact: false,
            servers: vec![std::process::id()],
        }
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
    }

    /// The raw TCP and WebSocket echoes, in this process, as load targets.
    async fn echo_targets() -> [String; 2] {
        let any = "127.0.0.1:0".parse().unwrap();
        let tcp = crate::baseline::echo_server(any).await.unwrap();
        let ws = crate::baseline::ws_echo_server(any).await.unwrap();
        [format!("tcp://{tcp}"), format!("ws://{ws}")]
    }

    #[test]
    fn counting_runs_over_real_sockets_count_echoed_requests_as_replies_and_time_some() {
        runtime().block_on(async {
            for target in echo_targets().await {
                for (window, exact) in [(64, false), (1, true)] {
                    let spec = Load { exact, ..load(target.clone(), window) };
                    let run = measure(&spec).await.unwrap();
                    assert!(run.report.requests > 100, "{target}: {:?}", run.report);
                    assert_eq!(run.report.errors, 0);
                    assert!(run.report.p50_us > 0.0 && run.report.p99_us >= run.report.p50_us);
                    // The echo runs in this process: both sides are this
                    // process, read a moment apart. Other tests' threads
                    // may spend CPU in that moment: a clock tick (10 ms)
                    // or two at each end of the run, not more.
                    let ticks = 0.04 / spec.duration.as_secs_f64();
                    let server = run.busy.server.expect("the server's share, of the pid given");
                    assert!(run.busy.load > 0.0 && (server - run.busy.load).abs() <= ticks, "{:?}", run.busy);
                }
            }
        });
    }

    /// Connections ready only after the measured time (here all of them: it
    /// is over before they connect) end, with nothing counted, instead of
    /// waiting for replies to requests they never sent.
    #[test]
    fn a_counting_run_whose_connections_are_ready_only_after_it_ended_ends() {
        runtime().block_on(async {
            for target in echo_targets().await {
                let late = Load { duration: Duration::ZERO, warmup: Duration::ZERO, ..load(target.clone(), 64) };
                let run = tokio::time::timeout(Duration::from_secs(5), measure(&late)).await;
                let run = run.unwrap_or_else(|_| panic!("{target}: still waiting after 5 s")).unwrap();
                assert_eq!(run.report.requests, 0, "{target}");
            }
        });
    }

    #[test]
    fn a_counting_run_counts_error_replies_and_skips_what_came_before_its_first_reply() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        runtime().block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            // Says hello unasked, then answers every line with an error
            // (whose id, 1, is the priming request's).
            tokio::spawn(async move {
                while let Ok((mut stream, _)) = listener.accept().await {
                    tokio::spawn(async move {
                        let _ = stream.write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"welcome\"}\n").await;
                        let mut buf = vec![0u8; 64 * 1024];
                        while let Ok(n @ 1..) = stream.read(&mut buf).await {
                            let lines = memchr::memchr_iter(b'\n', &buf[..n]).count();
                            let error = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":-1,\"message\":\"no\"}}\n";
                            if stream.write_all(&error.repeat(lines)).await.is_err() {
                                return;
                            }
                        }
                    });
                }
            });
            let run = measure(&load(format!("tcp://{addr}"), 8)).await.unwrap();
            assert!(run.report.requests > 10);
            assert_eq!(run.report.errors, run.report.requests);
        });
    }
}
