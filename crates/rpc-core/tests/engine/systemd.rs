//! systemd integration in a real process: socket activation (`LISTEN_FDS`,
//! `LISTEN_PID`) and `READY=1` on `NOTIFY_SOCKET`, with the example
//! `activated_server`.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixDatagram;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().unwrap().parent().unwrap().to_owned();
    let path = profile_dir.join("examples").join(name);
    if !path.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "-q", "-p", "rpc-core", "--example", name]);
        if profile_dir.ends_with("release") {
            cmd.arg("--release");
        }
        assert!(cmd.status().unwrap().success(), "building example {name}");
    }
    path
}

#[test]
fn a_socket_passed_by_systemd_is_served_and_readiness_is_notified() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let notify_path = dir.path().join("notify");
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    notify.set_read_timeout(Some(Duration::from_secs(20))).unwrap();

    let fd = listener.as_raw_fd();
    let mut cmd = Command::new("sh");
    // `$$` is the shell's pid, and exec keeps it: LISTEN_PID names the server.
    cmd.args(["-c", "export LISTEN_PID=$$; exec \"$0\" 127.0.0.1:1"])
        .arg(example("activated_server"))
        .env("LISTEN_FDS", "1")
        .env("LISTEN_FDNAMES", "ping")
        .env("NOTIFY_SOCKET", &notify_path)
        .stdin(Stdio::null())
        .stderr(Stdio::piped());
    #[allow(unsafe_code)]
    // SAFETY: between fork and exec only async-signal-safe calls are allowed;
    // dup2 and fcntl are. They place the listener at fd 3, where systemd
    // would, without close-on-exec (dup2 onto itself would keep the flag, so
    // that case clears it explicitly).
    unsafe {
        cmd.pre_exec(move || {
            let ok = if fd == 3 { nix::libc::fcntl(3, nix::libc::F_SETFD, 0) } else { nix::libc::dup2(fd, 3) };
            if ok < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();

    let mut buf = [0u8; 64];
    let n = notify.recv(&mut buf).expect("no READY=1 from the server");
    assert_eq!(&buf[..n], b"READY=1");

    // The server did not bind 127.0.0.1:1 (it would have failed): it serves our socket.
    drop(listener);
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    stream.write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"ping\",\"id\":1}\n").unwrap();
    let mut reply = String::new();
    BufReader::new(&stream).read_line(&mut reply).unwrap();
    assert_eq!(reply.trim(), r#"{"jsonrpc":"2.0","id":1,"result":{"pong":true}}"#);

    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "exit after SIGTERM: {status}");
    let mut log = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut log).unwrap();
    assert!(log.contains(&addr.to_string()), "it should have listened on the passed socket: {log}");
}

#[test]
fn sighup_is_ignored_rather_than_fatal() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut child = Command::new(example("activated_server"))
        .arg(format!("127.0.0.1:{port}"))
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let ping = || -> Option<String> {
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        stream.write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"ping\",\"id\":1}\n").ok()?;
        let mut reply = String::new();
        BufReader::new(&stream).read_line(&mut reply).ok()?;
        Some(reply)
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while ping().is_none() {
        assert!(std::time::Instant::now() < deadline, "the server never listened");
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    assert!(child.try_wait().unwrap().is_none(), "SIGHUP ended the server");
    assert!(ping().is_some_and(|r| r.contains("pong")));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    assert!(child.wait().unwrap().success());
}
