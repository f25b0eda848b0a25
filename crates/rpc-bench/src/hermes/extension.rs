//! `rpc-bench hermes-extension`: B6's extension. In hermes-host it answers
//! `initialize` and runs on every `command/execute` of [`COMMAND`];
//! standalone, wired to the echo, it runs once. Each run writes its report
//! to a file the suite reads.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::load::{self, Block, Busy, Measured, Tally};
use crate::pin;

use std::sync::LazyLock;

use memchr::memmem::Finder;

use super::pipe::{Pipe, frame};

/// The command the suite runs to start one measured run.
pub const COMMAND: &str = "bench/getMessage";
const METHOD: &str = "editor/getMessage";
/// Present in our own requests (so in the echo's copies), never in what the host sends.
const OWN_METHOD: &[u8] = b"\"method\":\"editor/getMessage\"";

/// `rpc-bench hermes-extension`: the extension side of B6.
#[derive(Clone, Debug, clap::Args)]
pub struct ExtensionArgs {
    /// Where each run's report goes (JSON, replaced atomically).
    #[arg(long)]
    report: PathBuf,
    /// Calls in flight.
    #[arg(long, default_value_t = 64)]
    window: usize,
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,
    #[arg(long, default_value_t = 0.5)]
    warmup: f64,
    /// `editor/getMessage`'s `format`.
    #[arg(long, default_value = "hl7")]
    format: String,
    /// Run once at start and exit, without waiting for `initialize` (the echo baseline).
    #[arg(long)]
    standalone: bool,
    /// Pin to this CPU before anything else.
    #[arg(long)]
    cpu: Option<usize>,
    /// The server's process (the echo); in the host, the host is found as
    /// this process's parent (or, under a process-group leader forked from
    /// the host, the leader's parent too).
    #[arg(long)]
    server_pid: Option<u32>,
}

/// What a message from the host asks of the extension.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Asked {
    Nothing,
    Run,
    Exit,
}

/// What a frame is to the measured loop.
#[derive(Debug, PartialEq)]
enum Read {
    /// A reply to one of our calls: the host's answer (no method), or the
    /// echo's copy of the request (our own method).
    Reply { error: bool },
    /// Something the host asks or tells.
    FromHost,
}

/// Tells replies from the host's messages. The usual shape, as the host and
/// our own requests are written (`{"jsonrpc":"2.0","id":N,` then the member
/// that decides), is read without a search; anything else by searches built
/// once. Run for every message of the baseline, so it must cost the echo
/// nothing it would not.
fn read(body: &[u8]) -> Read {
    static METHOD: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\"method\":"));
    static OWN: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(OWN_METHOD));
    static ERROR: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\"error\""));
    if let Some(rest) = body.strip_prefix(br#"{"jsonrpc":"2.0","id":"#) {
        let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        let next = &rest[digits..];
        if digits > 0 && next.first() == Some(&b',') {
            let next = &next[1..];
            if next.starts_with(b"\"result\":") || next.starts_with(OWN_METHOD) {
                return Read::Reply { error: false };
            }
            if next.starts_with(b"\"error\":") {
                return Read::Reply { error: true };
            }
        }
    }
    if METHOD.find(body).is_none() || OWN.find(body).is_some() {
        Read::Reply { error: ERROR.find(body).is_some() }
    } else {
        Read::FromHost
    }
}

/// Answers what the host sends besides replies: `initialize`, `shutdown`,
/// `command/execute`; notifications it does not know are ignored.
fn host_message(body: &[u8], out: &mut Vec<u8>) -> Result<Asked> {
    let message: Value = serde_json::from_slice(body).context("a frame from the host that is not JSON")?;
    let method = message.get("method").and_then(Value::as_str).unwrap_or("");
    let reply = |out: &mut Vec<u8>, answer: Value| {
        if let Some(id) = message.get("id") {
            let mut reply = json!({"jsonrpc": "2.0", "id": id});
            reply.as_object_mut().unwrap().extend(answer.as_object().unwrap().clone());
            frame(out, &reply.to_string());
        }
    };
    Ok(match method {
        "initialize" => {
            let result = json!({"name": "rpc-bench", "version": env!("CARGO_PKG_VERSION"),
                "capabilities": {"commands": [COMMAND]}});
            reply(out, json!({ "result": result }));
            Asked::Nothing
        }
        "shutdown" => {
            reply(out, json!({"result": {"success": true}}));
            Asked::Exit
        }
        "command/execute" if message["params"]["command"] == COMMAND => Asked::Run,
        _ => {
            reply(out, json!({"error": {"code": -32601, "message": "Method not found"}}));
            Asked::Nothing
        }
    })
}

/// The extension: in the host, runs on every `command/execute`; standalone,
/// runs once.
pub fn run(args: ExtensionArgs) -> Result<()> {
    if let Some(cpu) = args.cpu {
        pin::pin_current_thread(cpu)?;
    }
    let mut pipe = Pipe::stdio()?;
    if args.standalone {
        let report = measured_run(&mut pipe, &args)?;
        return write_report(&args.report, &report);
    }
    let mut out = Vec::new();
    while pipe.fill()? {
        out.clear();
        let mut asked = Asked::Nothing;
        pipe.inbox.take_frames(|body| {
            asked = asked.max(host_message(body, &mut out)?);
            Ok(())
        })?;
        pipe.send(&out)?;
        match asked {
            Asked::Nothing => {}
            Asked::Run => write_report(&args.report, &measured_run(&mut pipe, &args)?)?,
            Asked::Exit => return Ok(()),
        }
    }
    Ok(())
}

/// The server's processes: `--server-pid`, or the host above this process.
fn server_pids(args: &ExtensionArgs) -> Vec<u32> {
    if let Some(pid) = args.server_pid {
        return vec![pid];
    }
    let parent = std::os::unix::process::parent_id();
    let mut pids = vec![parent];
    // A group leader is a fork of the daemon: the same name as its parent.
    if let (Some((grandparent, name)), true) = (load::parent_and_name(parent), parent > 1)
        && load::parent_and_name(grandparent).is_some_and(|(_, above)| above == name)
    {
        pids.push(grandparent);
    }
    pids
}

/// One measured run: `window` calls in flight, one more sent for each reply,
/// all that one read's replies triggered written at once; both sides' CPU
/// read when the measured time starts and when it ends. Replies are counted
/// and requests copied from a pre-built block, as the load generator's
/// throughput runs do (`load/counting.rs`): the echo costs nothing a
/// message, so the loop must cost as little as it can.
fn measured_run(pipe: &mut Pipe, args: &ExtensionArgs) -> Result<Measured> {
    let servers = server_pids(args);
    let cpu = |pids: &[u32]| pids.iter().map(|p| load::cpu_seconds(&p.to_string())).sum::<f64>();
    let mut at_start: Option<(Instant, f64, f64)> = None;
    let mut busy = Busy::default();
    let params = json!({ "format": args.format }).to_string();
    let duration = Duration::from_secs_f64(args.seconds);
    let start = Instant::now();
    let measure_from = start + Duration::from_secs_f64(args.warmup);
    let block = Block::new(args.window, |out, id| frame(out, &load::request(id, METHOD, &params)));
    let mut tally = Tally::new(args.window, measure_from, measure_from + duration)?;
    let mut out = Vec::with_capacity(64 * 1024);
    out.extend_from_slice(block.requests(0, args.window));
    tally.sent(args.window, start);
    pipe.send(&out)?;
    loop {
        if !pipe.fill()? {
            bail!("the other end closed the pipe during the run");
        }
        let now = Instant::now();
        out.clear();
        let (mut asked, mut replies, mut errors) = (Asked::Nothing, 0, 0);
        pipe.inbox.take_frames(|body| {
            match read(body) {
                Read::Reply { error } => {
                    replies += 1;
                    errors += usize::from(error);
                }
                Read::FromHost => asked = asked.max(host_message(body, &mut out)?),
            }
            Ok(())
        })?;
        tally.received(replies, errors, now)?;
        let owed = tally.owed(now);
        out.extend_from_slice(block.requests(tally.sent_count(), owed));
        tally.sent(owed, now);
        pipe.send(&out)?;
        if asked == Asked::Exit {
            bail!("the host shut the extension down during the run");
        }
        if at_start.is_none() && now >= measure_from {
            at_start = Some((now, load::cpu_seconds("self"), cpu(&servers)));
        }
        if let Some((from, load_cpu, server_cpu)) = at_start.filter(|_| busy.server.is_none() && owed == 0) {
            let wall = (now - from).as_secs_f64();
            busy = Busy {
                load: (load::cpu_seconds("self") - load_cpu) / wall,
                server: Some((cpu(&servers) - server_cpu) / wall),
            };
        }
        if tally.finished(now) {
            return Ok(Measured { report: tally.report(duration), busy });
        }
    }
}

fn write_report(path: &Path, report: &Measured) -> Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, serde_json::to_vec(report)?)?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_and_echoed_requests_are_told_from_host_requests() {
        let ok = Read::Reply { error: false };
        let failed = Read::Reply { error: true };
        // The usual shapes, read without a search.
        assert_eq!(read(br#"{"jsonrpc":"2.0","id":1001,"result":{"message":"MSH|"}}"#), ok);
        assert_eq!(read(load::request(1001, METHOD, "{}").as_bytes()), ok);
        assert_eq!(read(br#"{"jsonrpc":"2.0","id":7,"error":{"code":-32000,"message":"no"}}"#), failed);
        assert_eq!(read(br#"{"jsonrpc":"2.0","method":"message/opened","params":{}}"#), Read::FromHost);
        assert_eq!(read(br#"{"jsonrpc":"2.0","id":3,"method":"shutdown"}"#), Read::FromHost);
        // Other layouts, by the searches.
        assert_eq!(read(br#"{"id":"a","jsonrpc":"2.0","result":{"message":"MSH|"}}"#), ok);
        assert_eq!(read(br#"{"error":{"code":1,"message":"x"},"id":"a","jsonrpc":"2.0"}"#), failed);
        assert_eq!(read(br#"{"id":"b","method":"command/execute","jsonrpc":"2.0"}"#), Read::FromHost);
        assert_eq!(read(br#"{"params":{},"method":"editor/getMessage","id":"c","jsonrpc":"2.0"}"#), ok);
    }
}
