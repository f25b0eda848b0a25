//! Idle sockets that never say `hello`:
//! they are closed after SUPEX_HELLO_TIMEOUT and may hold only half of the
//! connection slots, so a client with the right token always gets in.

use std::io::Read;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use integration_tests::{LineClient, eventually};
use serde_json::json;

use crate::support::{Bridge, eval, hello_params};

#[test]
fn idle_sockets_without_hello_never_lock_out_a_client_with_the_token() {
    let Some(bridge) = Bridge::start_with(&[("SUPEX_AUTH_TOKEN", "t0ken"), ("SUPEX_MAX_CONNECTIONS", "16")]) else {
        return;
    };
    // Four times the connection limit, held open and silent.
    let idle: Vec<TcpStream> = (0..64).map(|_| TcpStream::connect(bridge.bridge).unwrap()).collect();
    // The server has taken them all in: past half the slots, the oldest were closed.
    let settled = eventually(Duration::from_secs(10), || idle.iter().filter(|stream| still_open(stream)).count() <= 8);
    assert!(settled, "the silent connections were not taken in");
    let started = Instant::now();
    let mut client = LineClient::connect(bridge.bridge);
    let mut params = hello_params();
    params["token"] = json!("t0ken");
    let reply = client.call(1, "hello", params);
    assert_eq!(reply["result"]["success"], true, "{reply}");
    assert!(started.elapsed() < Duration::from_secs(2), "waited {:?} to get in", started.elapsed());
    assert_eq!(eval(&mut client, "20 + 22"), "42");
    // At most half the slots were ever held by the silent ones: the oldest were closed.
    let open = idle.iter().filter(|stream| still_open(stream)).count();
    assert!(open <= 8, "{open} silent connections still open, more than half of 16");
}

/// Whether the server still holds `stream` open: a read neither ends nor fails,
/// it only times out.
fn still_open(mut stream: &TcpStream) -> bool {
    stream.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
    let mut byte = [0u8; 1];
    matches!(stream.read(&mut byte), Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut))
}

#[test]
fn a_socket_that_never_says_hello_is_closed_after_the_hello_timeout() {
    let Some(bridge) = Bridge::start_with(&[("SUPEX_HELLO_TIMEOUT", "500ms")]) else {
        return;
    };
    let started = Instant::now();
    let mut silent = LineClient::connect(bridge.bridge);
    let mut identified = bridge.client();
    assert!(silent.is_closed_within(Duration::from_secs(3)), "still open after {:?}", started.elapsed());
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(400), "closed before the timeout: {waited:?}");
    std::thread::sleep(Duration::from_millis(700));
    assert_eq!(eval(&mut identified, ":still_here"), "still_here", "a client that said hello is kept");
}
