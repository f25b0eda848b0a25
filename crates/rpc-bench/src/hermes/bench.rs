//! The suite's side of B6: hermes-host started with `rpc-bench
//! hermes-extension` as its only extension and a message open, and the same
//! extension wired to `rpc-bench content-length-echo` instead.

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::daemon::{self, Daemon};
use crate::load::Measured;
use crate::pin;

use super::extension::COMMAND;

/// The message the host holds: a typical ADT^A01, about 500 bytes.
const MESSAGE: &str = "MSH|^~\\&|ADT1|GOOD HEALTH HOSPITAL|GHH LAB, INC.|GOOD HEALTH HOSPITAL|198808181126|SECURITY|\
ADT^A01^ADT_A01|MSG00001|P|2.8\rEVN|A01|200708181123\rPID|1||PATID1234^^^GOOD HEALTH HOSPITAL^MR~123456789^^^USSSA^SS||\
EVERYMAN^ADAM^A^III||19610615|M||2106-3^White^HL70005|2222 HOME STREET^^GREENSBORO^NC^27401-1020|GL|(555) 555-2004\r\
NK1|1|NUCLEAR^NELDA^W|SPO^Spouse^HL70063||||NK^NEXT OF KIN\rPV1|1|I|2000^2012^01||||004777^ATTEND^AARON^A|||SUR||||ADM|A0\r";

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
    pub fn host_run(&self) -> Result<Measured> {
        let _ = std::fs::remove_file(&self.report);
        let answer = self.call("command/execute", json!({ "command": COMMAND }))?;
        if answer.get("error").is_some() {
            bail!("command/execute {COMMAND}: {answer}");
        }
        self.wait_report()
    }

    /// One run of the same extension against the echo.
    pub fn echo_run(&self) -> Result<Measured> {
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
        extension.args(["--server-pid", &echo.id().to_string()]);
        let mut extension = Daemon::spawn(&mut extension, None)?;
        let status = extension.wait_exit(self.timeout).context("the extension did not finish against the echo")?;
        if !status.success() {
            bail!("the extension failed against the echo: {status}");
        }
        drop(echo);
        self.wait_report()
    }

    fn wait_report(&self) -> Result<Measured> {
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
