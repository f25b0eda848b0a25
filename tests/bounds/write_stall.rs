//! A client that pipelines requests and never reads the replies is cut off
//! once the daemon's writes have made no progress for its write stall, and
//! does not hold its connection slot and write budget for ever. Before, the
//! engine's stall clock depended on the order in which the connection loop
//! saw its events: such a client was still connected after 36 s to 70 s.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use integration_tests::LineClient;
use nix::sys::socket::{AddressFamily, SockFlag, SockType, SockaddrIn, connect, setsockopt, socket, sockopt};
use serde_json::json;

use crate::fixtures::{self, Log};

/// The stall the daemons are started with.
pub const STALL: &str = "1";
/// Far past the stall, for a loaded machine; the old engine never closed.
const CUT_OFF_WITHIN: Duration = Duration::from_secs(30);

/// A TCP connection whose receive buffer is small, so the daemon's writes
/// stop after a few replies (the kernel grows a loopback buffer to megabytes
/// otherwise, and then shrinks it again: a test would depend on that).
pub fn tight_tcp(addr: SocketAddr) -> TcpStream {
    let fd = socket(AddressFamily::Inet, SockType::Stream, SockFlag::empty(), None).unwrap();
    setsockopt(&fd, sockopt::RcvBuf, &4096).unwrap();
    let std::net::SocketAddr::V4(v4) = addr else { panic!("IPv4 only") };
    connect(std::os::fd::AsRawFd::as_raw_fd(&fd), &SockaddrIn::from(v4)).unwrap();
    TcpStream::from(fd)
}

/// Writes `frames` again and again from a thread, never reading, until a
/// write fails (the daemon closed the connection); how long that took, or
/// `None` if it had not within [`CUT_OFF_WITHIN`].
pub fn flood_until_cut_off(mut stream: impl Write + Send + 'static, frames: Vec<u8>) -> Option<Duration> {
    let began = Instant::now();
    let (done, cut_off) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        loop {
            if stream.write_all(&frames).is_err() {
                let _ = done.send(began.elapsed());
                return;
            }
        }
    });
    cut_off.recv_timeout(CUT_OFF_WITHIN).ok()
}

fn lines(count: usize, line: impl Fn(usize) -> String) -> Vec<u8> {
    (0..count).flat_map(|n| line(n).into_bytes()).collect()
}

#[test]
fn supex_bridge_cuts_off_a_client_that_never_reads() {
    let bridge = fixtures::bridge(&[("SUPEX_WRITE_STALL", STALL)], Log::Read);
    let stream = tight_tcp(bridge.addr);
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream.try_clone().unwrap();
    let hello = json!({"jsonrpc": "2.0", "id": 0, "method": "hello", "params": fixtures::hello()});
    writeln!(writer, "{hello}").unwrap();
    let mut reply = String::new();
    reader.read_line(&mut reply).unwrap();
    assert!(reply.contains("result"), "{reply}");
    let pings = lines(1000, |n| format!("{}\n", json!({"jsonrpc": "2.0", "id": n + 1, "method": "ping"})));
    let after = flood_until_cut_off(writer, pings);
    assert!(
        after.is_some(),
        "still connected {CUT_OFF_WITHIN:?} after it stopped reading:\n{}",
        bridge.daemon.stderr()
    );
    // The daemon itself serves on.
    let mut client = LineClient::connect(bridge.addr);
    assert!(client.call(1, "ping", json!({})).get("result").is_some());
}

/// A masked WebSocket text frame, as a client must send it.
fn ws_frame(text: &str) -> Vec<u8> {
    let mask = [0x5a, 0x17, 0xc3, 0x2e];
    let mut frame = vec![0x81];
    match text.len() {
        n if n < 126 => frame.push(0x80 | n as u8),
        n => {
            frame.push(0x80 | 126);
            frame.extend_from_slice(&(n as u16).to_be_bytes());
        }
    }
    frame.extend_from_slice(&mask);
    frame.extend(text.bytes().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    frame
}

#[test]
fn the_broker_cuts_off_an_agent_that_never_reads() {
    let broker = fixtures::broker(&[("BTCP_WRITE_STALL", STALL)], Log::Read);
    let stream = tight_tcp(broker.addr);
    let mut writer = stream.try_clone().unwrap();
    write!(
        writer,
        "GET /ws?clientType=agent&sessionId=stall HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n\
         Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    .unwrap();
    let mut reader = BufReader::new(stream);
    let mut status = String::new();
    reader.read_line(&mut status).unwrap();
    assert!(status.contains("101"), "{status}");
    let pings: Vec<u8> =
        (0..1000).flat_map(|n| ws_frame(&json!({"jsonrpc": "2.0", "id": n, "method": "ping"}).to_string())).collect();
    let after = flood_until_cut_off(writer, pings);
    assert!(
        after.is_some(),
        "still connected {CUT_OFF_WITHIN:?} after it stopped reading:\n{}",
        broker.daemon.stderr()
    );
    drop(reader);
}

#[test]
fn ralph_server_cuts_off_a_client_that_pipelines_get_status_and_never_reads() {
    let ralph = fixtures::ralph_loop(&fixtures::fake_agent(), &[("RALPH_WRITE_STALL", STALL)], Log::Read);
    let stream = std::os::unix::net::UnixStream::connect(&ralph.socket).unwrap();
    let requests = lines(1000, |n| format!("{}\n", json!({"jsonrpc": "2.0", "id": n, "method": "get_status"})));
    let after = flood_until_cut_off(stream, requests);
    assert!(after.is_some(), "still connected {CUT_OFF_WITHIN:?} after it stopped reading:\n{}", ralph.daemon.stderr());
    // The loop and its socket serve on.
    let mut client = fixtures::UnixClient::connect(&ralph.socket);
    assert!(client.call(1, "get_status", json!({})).get("result").is_some());
}

/// An HL7 message of about 200 KiB, so a few replies fill a pipe or a socket.
fn big_message(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("big.hl7");
    let mut text = String::from("MSH|^~\\&|A|B|C|D|20260101||ADT^A01|1|P|2.5\r");
    while text.len() < 200 * 1024 {
        text.push_str("NTE|1||a note that is long enough to make the message big quickly\r");
    }
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn hermes_host_cuts_off_a_control_client_that_never_reads() {
    let dir = tempfile::tempdir().unwrap();
    let message = big_message(dir.path()).display().to_string();
    let host = fixtures::host("", &[("HERMES_HOST_WRITE_STALL", STALL), ("HERMES_HOST_OPEN", &message)], Log::Read);
    let stream = std::os::unix::net::UnixStream::connect(&host.socket).unwrap();
    let requests = lines(200, |n| format!("{}\n", json!({"jsonrpc": "2.0", "id": n, "method": "message/get"})));
    let after = flood_until_cut_off(stream, requests);
    assert!(after.is_some(), "still connected {CUT_OFF_WITHIN:?} after it stopped reading:\n{}", host.daemon.stderr());
    let mut client = fixtures::UnixClient::connect(&host.socket);
    assert!(client.call(1, "host/status", json!({})).get("result").is_some());
}

#[test]
fn hermes_host_cuts_off_an_extension_that_never_reads_its_replies() {
    let dir = tempfile::tempdir().unwrap();
    let message = big_message(dir.path()).display().to_string();
    let deaf = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("bounds/deaf_ext.py");
    let config = fixtures::extension("deaf", &format!("python3 {}", deaf.display()));
    let host =
        fixtures::host(&config, &[("HERMES_HOST_WRITE_STALL", STALL), ("HERMES_HOST_OPEN", &message)], Log::Read);
    let mut client = fixtures::UnixClient::connect(&host.socket);
    // Cut off, the extension is stopped and started again: its restarts count.
    let restarted = integration_tests::eventually(CUT_OFF_WITHIN, || {
        let list = client.call(1, "extensions/list", json!({}));
        list["result"]["extensions"][0]["restarts"].as_u64().unwrap_or(0) >= 1
    });
    assert!(restarted, "the extension was never cut off:\n{}", host.daemon.stderr());
    let log = host.daemon.stderr();
    assert!(log.contains("not reading its replies"), "not cut off for the stall:\n{log}");
}
