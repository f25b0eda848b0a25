//! A client that writes and reads NDJSON lines itself over TCP, for tests that
//! must see exactly what the server sends, and when it closes.

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

pub struct Line {
    lines: Lines<BufReader<OwnedReadHalf>>,
    writer: OwnedWriteHalf,
}

impl Line {
    pub async fn connect(addr: SocketAddr) -> Line {
        Line::new(TcpStream::connect(addr).await.unwrap())
    }

    pub fn new(stream: TcpStream) -> Line {
        let (r, w) = stream.into_split();
        Line { lines: BufReader::new(r).lines(), writer: w }
    }

    /// Sends one message; a write the server already refused (it closed) is
    /// not an error here: what the test checks is what comes back.
    pub async fn send(&mut self, msg: Value) {
        let _ = self.writer.write_all(format!("{msg}\n").as_bytes()).await;
    }

    /// Sends bytes as they are, in one write (a pipelined burst).
    pub async fn send_bytes(&mut self, bytes: &[u8]) {
        self.writer.write_all(bytes).await.unwrap();
    }

    /// `Ok(Some(msg))`, `Ok(None)` once the other side closed, `Err` if nothing came within `limit`.
    pub async fn next_within(&mut self, limit: Duration) -> Result<Option<Value>, tokio::time::error::Elapsed> {
        let line = tokio::time::timeout(limit, self.lines.next_line()).await?;
        Ok(line.ok().flatten().map(|l| serde_json::from_str(&l).unwrap()))
    }

    /// The next message, which must come within `limit`.
    pub async fn recv(&mut self, limit: Duration) -> Value {
        match self.next_within(limit).await {
            Ok(Some(msg)) => msg,
            Ok(None) => panic!("connection closed instead of a message"),
            Err(_) => panic!("nothing within {limit:?}"),
        }
    }

    /// Calls `method` without params; `None` if the server closed instead.
    pub async fn call(&mut self, method: &str, id: u64) -> Option<Value> {
        self.send(json!({"jsonrpc": "2.0", "method": method, "id": id})).await;
        self.next_within(Duration::from_secs(2)).await.expect("no reply within 2 s")
    }

    /// Asserts the other side closes within `limit`, with nothing more sent.
    pub async fn expect_close(&mut self, limit: Duration) {
        match self.next_within(limit).await {
            Ok(None) => {}
            Ok(Some(msg)) => panic!("expected the close, got {msg}"),
            Err(_) => panic!("connection still open after {limit:?}"),
        }
    }
}
