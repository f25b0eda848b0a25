//! B6: round trips of `editor/getMessage` from an extension to hermes-host,
//! against the same extension loop talking to a raw Content-Length echo over a
//! pipe.
//!
//! The extension side is this program, `rpc-bench hermes-extension`, which the
//! host starts as its extension: it answers `initialize`, and on each
//! `command/execute` of [`COMMAND`] keeps `window` calls in flight for the
//! warm-up and the measured time, then writes its report to a file the suite
//! reads. For the baseline the suite wires the same program's stdin and stdout
//! to `rpc-bench content-length-echo`, which sends every byte back unread: the
//! extension's requests come back as their own "replies", matched by id as the
//! load generator matches them. Both are single-threaded blocking loops that
//! read what is there and write what it triggered in one go, so the loop costs
//! as little as possible and the same on both sides of the ratio.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::daemon::{self, Daemon};
use crate::load::{self, Flight, Report};
use crate::pin;

/// The command the suite runs to start one measured run.
pub const COMMAND: &str = "bench/getMessage";
const METHOD: &str = "editor/getMessage";
/// Present in our own requests (so in the echo's copies), never in what the host sends.
const OWN_METHOD: &[u8] = b"\"method\":\"editor/getMessage\"";
/// The message the host holds: a typical ADT^A01, about 500 bytes.
const MESSAGE: &str = "MSH|^~\\&|ADT1|GOOD HEALTH HOSPITAL|GHH LAB, INC.|GOOD HEALTH HOSPITAL|198808181126|SECURITY|\
ADT^A01^ADT_A01|MSG00001|P|2.8\rEVN|A01|200708181123\rPID|1||PATID1234^^^GOOD HEALTH HOSPITAL^MR~123456789^^^USSSA^SS||\
EVERYMAN^ADAM^A^III||19610615|M||2106-3^White^HL70005|2222 HOME STREET^^GREENSBORO^NC^27401-1020|GL|(555) 555-2004\r\
NK1|1|NUCLEAR^NELDA^W|SPO^Spouse^HL70063||||NK^NEXT OF KIN\rPV1|1|I|2000^2012^01||||004777^ATTEND^AARON^A|||SUR||||ADM|A0\r";

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
}

/// What a message from the host asks of the extension.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Asked {
    Nothing,
    Run,
    Exit,
}

/// stdin and stdout as plain files: unbuffered, so one write is one write(2)
/// (std's stdout would cut each frame at its header's newline).
struct Pipe {
    input: File,
    output: File,
    buf: Vec<u8>,
    chunk: Box<[u8]>,
}

impl Pipe {
    fn stdio() -> Result<Pipe> {
        let input = File::from(std::io::stdin().as_fd().try_clone_to_owned()?);
        let output = File::from(std::io::stdout().as_fd().try_clone_to_owned()?);
        Ok(Pipe { input, output, buf: Vec::with_capacity(256 * 1024), chunk: vec![0; 256 * 1024].into() })
    }

    /// Reads what is there (at least a byte); false at end of input.
    fn fill(&mut self) -> Result<bool> {
        let n = self.input.read(&mut self.chunk)?;
        self.buf.extend_from_slice(&self.chunk[..n]);
        Ok(n > 0)
    }

    fn send(&mut self, out: &[u8]) -> Result<()> {
        if !out.is_empty() {
            self.output.write_all(out)?;
        }
        Ok(())
    }
}

/// Calls `each` with the body of every complete frame at the front of `buf`,
/// then removes them.
fn take_frames(buf: &mut Vec<u8>, mut each: impl FnMut(&[u8]) -> Result<()>) -> Result<()> {
    let mut at = 0;
    loop {
        let rest = &buf[at..];
        let Some(end) = memchr::memmem::find(rest, b"\r\n\r\n") else { break };
        let length = content_length(&rest[..end]).context("a frame without Content-Length")?;
        let body = end + 4;
        if rest.len() < body + length {
            break;
        }
        each(&rest[body..body + length])?;
        at += body + length;
    }
    buf.drain(..at);
    Ok(())
}

fn content_length(headers: &[u8]) -> Option<usize> {
    headers.split(|&b| b == b'\n').find_map(|line| {
        let (key, value) = std::str::from_utf8(line).ok()?.split_once(':')?;
        if key.trim().eq_ignore_ascii_case("content-length") { value.trim().parse().ok() } else { None }
    })
}

fn frame(out: &mut Vec<u8>, body: &str) {
    let _ = write!(out, "Content-Length: {}\r\n\r\n{body}", body.len());
}

/// A reply to one of our calls: no method (the host's answer) or our own
/// method (the echo's copy of the request).
fn is_reply(body: &[u8]) -> bool {
    memchr::memmem::find(body, b"\"method\":").is_none() || memchr::memmem::find(body, OWN_METHOD).is_some()
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
pub fn extension(args: ExtensionArgs) -> Result<()> {
    if let Some(cpu) = args.cpu {
        pin::pin_current_thread(cpu)?;
    }
    let mut pipe = Pipe::stdio()?;
    if args.standalone {
        let report = run(&mut pipe, &args)?;
        return write_report(&args.report, &report);
    }
    let mut out = Vec::new();
    while pipe.fill()? {
        out.clear();
        let mut asked = Asked::Nothing;
        take_frames(&mut pipe.buf, |body| {
            asked = asked.max(host_message(body, &mut out)?);
            Ok(())
        })?;
        pipe.send(&out)?;
        match asked {
            Asked::Nothing => {}
            Asked::Run => write_report(&args.report, &run(&mut pipe, &args)?)?,
            Asked::Exit => return Ok(()),
        }
    }
    Ok(())
}

/// One measured run: `window` calls in flight, one more sent for each reply,
/// all that one read's replies triggered written at once.
fn run(pipe: &mut Pipe, args: &ExtensionArgs) -> Result<Report> {
    let params = json!({ "format": args.format }).to_string();
    let duration = Duration::from_secs_f64(args.seconds);
    let start = Instant::now();
    let measure_from = start + Duration::from_secs_f64(args.warmup);
    let mut flight = Flight::new(measure_from, measure_from + duration)?;
    let mut out = Vec::with_capacity(64 * 1024);
    for _ in 0..args.window {
        let id = flight.issue(start);
        frame(&mut out, &load::request(id, METHOD, &params));
    }
    pipe.send(&out)?;
    loop {
        if !pipe.fill()? {
            bail!("the other end closed the pipe during the run");
        }
        let now = Instant::now();
        out.clear();
        let mut asked = Asked::Nothing;
        take_frames(&mut pipe.buf, |body| {
            if is_reply(body) {
                if flight.complete(body, now) && flight.running(now) {
                    let id = flight.issue(now);
                    frame(&mut out, &load::request(id, METHOD, &params));
                }
            } else {
                asked = asked.max(host_message(body, &mut out)?);
            }
            Ok(())
        })?;
        pipe.send(&out)?;
        if asked == Asked::Exit {
            bail!("the host shut the extension down during the run");
        }
        if flight.finished(now) {
            return Ok(flight.report(duration));
        }
    }
}

fn write_report(path: &Path, report: &Report) -> Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, serde_json::to_vec(report)?)?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))
}

/// `rpc-bench content-length-echo`: B6's baseline, every byte of stdin back
/// on stdout, unread.
pub fn echo(cpu: Option<usize>) -> Result<()> {
    if let Some(cpu) = cpu {
        pin::pin_current_thread(cpu)?;
    }
    let mut pipe = Pipe::stdio()?;
    loop {
        let n = pipe.input.read(&mut pipe.chunk)?;
        if n == 0 {
            return Ok(());
        }
        pipe.output.write_all(&pipe.chunk[..n])?;
    }
}

/// The suite's side of B6: hermes-host with this program as its only
/// extension, and the way to run the extension against the echo instead.
pub struct HermesBench {
    dir: PathBuf,
    host: Option<Daemon>,
    socket: PathBuf,
    report: PathBuf,
    extension: Vec<String>,
    cores: Option<pin::Cores>,
    timeout: Duration,
}

impl HermesBench {
    /// Starts the host (on the server's core) with a message open, and waits
    /// until the extension runs.
    pub fn start(window: usize, seconds: f64, warmup: f64, cores: Option<pin::Cores>) -> Result<HermesBench> {
        let dir = std::env::temp_dir().join(format!("rpc-bench-hermes-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let report = dir.join("report.json");
        let mut extension = vec![
            daemon::sibling("rpc-bench")?.display().to_string(),
            "hermes-extension".into(),
            "--report".into(),
            report.display().to_string(),
            "--window".into(),
            window.to_string(),
            "--seconds".into(),
            seconds.to_string(),
            "--warmup".into(),
            warmup.to_string(),
        ];
        if let Some(cores) = cores {
            extension.extend(["--cpu".into(), cores.load.to_string()]);
        }
        let config = format!(
            "initialize_timeout_ms = 10000\n\n[[extensions]]\nname = \"bench\"\nargs = {}\n",
            serde_json::to_string(&extension)?
        );
        std::fs::write(dir.join("config.toml"), config)?;
        std::fs::write(dir.join("message.hl7"), MESSAGE)?;
        let socket = dir.join("run/hermes.sock");
        let timeout = Duration::from_secs_f64(seconds + warmup + 30.0);
        let mut bench = HermesBench { dir, host: None, socket, report, extension, cores, timeout };
        let args = [
            "serve".to_owned(),
            "--config".into(),
            bench.dir.join("config.toml").display().to_string(),
            "--socket".into(),
            bench.socket.display().to_string(),
            "--data-dir".into(),
            bench.dir.join("data").display().to_string(),
            "--open".into(),
            bench.dir.join("message.hl7").display().to_string(),
        ];
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        bench.host = Some(daemon::start_on("hermes-host", &[], &args, cores.map(|c| c.server))?);
        bench.wait_running()?;
        Ok(bench)
    }

    fn wait_running(&self) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut last = Value::Null;
        while Instant::now() < deadline {
            if let Ok(list) = self.call("extensions/list", json!({})) {
                last = list["result"]["extensions"][0].clone();
                if last["state"] == "running" {
                    return Ok(());
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        bail!("hermes-host's bench extension is not running after 20 s: {last}")
    }

    /// One control request on a fresh connection; the whole response.
    fn call(&self, method: &str, params: Value) -> Result<Value> {
        let mut stream = UnixStream::connect(&self.socket)?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        let request = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        stream.write_all(format!("{request}\n").as_bytes())?;
        let mut reader = std::io::BufReader::new(stream);
        loop {
            let mut line = String::new();
            if std::io::BufRead::read_line(&mut reader, &mut line)? == 0 {
                bail!("hermes-host closed the control connection");
            }
            let message: Value = serde_json::from_str(&line)?;
            if message["id"] == 1 {
                return Ok(message);
            }
        }
    }

    /// One run of the extension inside the host.
    pub fn host_run(&self) -> Result<Report> {
        let _ = std::fs::remove_file(&self.report);
        let answer = self.call("command/execute", json!({ "command": COMMAND }))?;
        if answer.get("error").is_some() {
            bail!("command/execute {COMMAND}: {answer}");
        }
        self.wait_report()
    }

    /// One run of the same extension against the echo.
    pub fn echo_run(&self) -> Result<Report> {
        let _ = std::fs::remove_file(&self.report);
        let mut echo = Command::new(daemon::sibling("rpc-bench")?);
        echo.arg("content-length-echo").stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit());
        if let Some(cores) = self.cores {
            echo.args(["--cpu", &cores.server.to_string()]);
        }
        let mut echo = Daemon::spawn(&mut echo, None)?;
        let (to_echo, from_echo) = echo.pipes().context("the echo's pipes")?;
        let mut extension = Command::new(&self.extension[0]);
        extension.args(&self.extension[1..]).arg("--standalone").stdin(from_echo).stdout(to_echo);
        let mut extension = Daemon::spawn(&mut extension, None)?;
        let status = extension.wait_exit(self.timeout).context("the extension did not finish against the echo")?;
        if !status.success() {
            bail!("the extension failed against the echo: {status}");
        }
        drop(echo);
        self.wait_report()
    }

    fn wait_report(&self) -> Result<Report> {
        let deadline = Instant::now() + self.timeout;
        while Instant::now() < deadline {
            if let Ok(text) = std::fs::read(&self.report) {
                return Ok(serde_json::from_slice(&text)?);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        bail!("no report from the bench extension after {:?}", self.timeout)
    }
}

impl Drop for HermesBench {
    fn drop(&mut self) {
        drop(self.host.take());
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_taken_whole_and_a_partial_one_stays() {
        let mut buf = Vec::new();
        frame(&mut buf, r#"{"id":1}"#);
        buf.extend_from_slice(b"content-length: 8\r\n\r\n{\"id\":2}Content-Length: 8\r\n\r\n{\"id");
        let mut bodies = Vec::new();
        take_frames(&mut buf, |body| {
            bodies.push(body.to_vec());
            Ok(())
        })
        .unwrap();
        assert_eq!(bodies, [b"{\"id\":1}".to_vec(), b"{\"id\":2}".to_vec()]);
        assert_eq!(buf, b"Content-Length: 8\r\n\r\n{\"id");
    }

    #[test]
    fn replies_and_echoed_requests_are_told_from_host_requests() {
        assert!(is_reply(br#"{"jsonrpc":"2.0","id":1001,"result":{"message":"MSH|"}}"#));
        assert!(is_reply(load::request(1001, METHOD, "{}").as_bytes()));
        assert!(!is_reply(br#"{"jsonrpc":"2.0","method":"message/opened","params":{}}"#));
    }
}
