//! The tasks the MCP server knows: one connection per task (a [`Link`] to
//! its socket, subscribed to its events), the task's directory as the server
//! reported it, and a watcher that turns the task's activity into
//! `resources/updated` for its `progress.txt` and `prd.json`.
//!
//! The loop's protocol does not serve those files, so they are read from the
//! task directory `get_status` reports, read-only. Whether they changed is
//! checked (size and modification time) when the task reports activity: an
//! output line or a state change, at most every [`THROTTLE`] while events
//! keep coming and once more [`SETTLE`] after the last, so an agent writing
//! the files while it prints, and the loop's own blocks, are both seen.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use mcp_front::{Change, Changes, Link, Upstream};
use rpc_core::{Ctx, PeerHandle, Router, RpcError, Transport};
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio::time::Instant;

/// The files of a task offered as resources.
pub const FILES: [&str; 2] = ["progress.txt", "prd.json"];
/// The pause between attempts to reach a task that is not running.
const RETRY: Duration = Duration::from_secs(1);
/// Files are looked at no more often than this while events stream in.
const THROTTLE: Duration = Duration::from_millis(200);
/// ...and once more this long after the last event of a burst.
const SETTLE: Duration = Duration::from_millis(500);

/// Every task this server has seen, by name.
pub struct Tasks {
    socket_dir: PathBuf,
    timeout: Duration,
    changes: Changes,
    known: Mutex<HashMap<String, Arc<Task>>>,
}

impl Tasks {
    pub fn new(socket_dir: PathBuf, timeout: Duration, changes: Changes) -> Tasks {
        Tasks { socket_dir, timeout, changes, known: Mutex::default() }
    }

    pub fn socket_dir(&self) -> &Path {
        &self.socket_dir
    }

    /// The task called `name`, known from now on: a new one starts being
    /// watched (its connection is made in the background).
    pub fn get(&self, name: &str, dir: Option<PathBuf>) -> Arc<Task> {
        let mut known = self.known.lock();
        if let Some(task) = known.get(name) {
            if let Some(dir) = dir {
                task.dir.lock().get_or_insert(dir);
            }
            return task.clone();
        }
        let task = Arc::new(Task::new(name, self.socket_dir.join(format!("{name}.sock")), dir, self.timeout));
        // Outside a runtime (never, in this binary) the task still answers
        // calls; it only sends no updates.
        if tokio::runtime::Handle::try_current().is_ok() {
            tokio::spawn(task.clone().watch(self.changes.clone()));
        }
        known.insert(name.to_owned(), task.clone());
        task
    }

    /// Names of the tasks with a socket in the socket directory (running,
    /// or left behind by one that died), sorted.
    pub fn with_sockets(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&self.socket_dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_string_lossy().strip_suffix(".sock").map(str::to_owned))
            .filter(|name| crate::config::check_task_name(name).is_ok())
            .collect();
        names.sort();
        names
    }

    /// Tasks that answer on their socket now, sorted by name.
    pub async fn running(&self) -> Vec<Arc<Task>> {
        let mut running = Vec::new();
        for name in self.with_sockets() {
            let task = self.get(&name, None);
            if task.link.peer().await.is_ok() {
                running.push(task);
            }
        }
        running
    }

    /// Every task seen so far and every one with a socket, sorted by name.
    pub fn all(&self) -> Vec<Arc<Task>> {
        for name in self.with_sockets() {
            self.get(&name, None);
        }
        let mut all: Vec<Arc<Task>> = self.known.lock().values().cloned().collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }
}

/// One task: its connection, its directory, what its files looked like.
pub struct Task {
    pub name: String,
    pub link: Link<TaskSocket>,
    /// From the task's `get_status`, or given as the task's directory.
    dir: Arc<Mutex<Option<PathBuf>>>,
    /// Woken by every event the task sends.
    activity: Arc<Notify>,
    /// Each file's size and modification time when last looked at (`None`
    /// inside: it did not exist); `None`: never looked at.
    seen: Mutex<Option<[Option<Stamp>; 2]>>,
}

type Stamp = (u64, Option<SystemTime>);

impl Task {
    fn new(name: &str, socket: PathBuf, dir: Option<PathBuf>, timeout: Duration) -> Task {
        let dir = Arc::new(Mutex::new(dir));
        let activity = Arc::new(Notify::new());
        let upstream = TaskSocket {
            name: name.to_owned(),
            path: socket,
            timeout,
            dir: dir.clone(),
            events: events_router(),
            activity: activity.clone(),
        };
        Task { name: name.to_owned(), link: Link::new(upstream), dir, activity, seen: Mutex::new(None) }
    }

    pub fn dir(&self) -> Option<PathBuf> {
        self.dir.lock().clone()
    }

    pub fn uri(&self, file: &str) -> String {
        uri(&self.name, file)
    }

    /// Keeps the task's connection while this server runs (while the task is
    /// not running, trying again every [`RETRY`]) and reports its files'
    /// changes.
    async fn watch(self: Arc<Self>, changes: Changes) {
        let never = mcp_front::CancellationToken::new();
        mcp_front::keep_connected(&self.link, &never, RETRY, |peer| {
            let (task, changes) = (&self, &changes);
            async move {
                task.look(changes);
                task.follow(&peer, changes).await;
                // The loop writes its last block (STOPPED, COMPLETED...) before it goes.
                task.look(changes);
            }
        })
        .await
    }

    /// Looks at the files as events come, until the connection closes.
    async fn follow(&self, peer: &PeerHandle, changes: &Changes) {
        let mut looked = Instant::now();
        let mut settle: Option<Instant> = None;
        loop {
            tokio::select! {
                () = peer.closed() => return,
                () = self.activity.notified() => {
                    if looked.elapsed() >= THROTTLE {
                        self.look(changes);
                        looked = Instant::now();
                    }
                    settle = Some(Instant::now() + SETTLE);
                }
                () = sleep_until(settle), if settle.is_some() => {
                    self.look(changes);
                    looked = Instant::now();
                    settle = None;
                }
            }
        }
    }

    /// Compares the files with how they were; each one that differs is
    /// reported. The first look only records them.
    fn look(&self, changes: &Changes) {
        let Some(dir) = self.dir() else { return };
        let now = FILES.map(|file| std::fs::metadata(dir.join(file)).ok().map(|m| (m.len(), m.modified().ok())));
        let before = self.seen.lock().replace(now);
        if let Some(before) = before {
            for ((file, was), is) in FILES.iter().zip(before).zip(now) {
                if was != is {
                    changes.send(Change::Resource(self.uri(file)));
                }
            }
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn events_router() -> Arc<Router<Arc<Notify>>> {
    Router::new().method("event", on_event).build().unwrap_or_else(|_| Router::empty())
}

/// Any event (output, state_change, dropped) is activity.
fn on_event(ctx: Ctx<Arc<Notify>>, _: Value) -> std::future::Ready<Result<(), RpcError>> {
    ctx.state.notify_one();
    std::future::ready(Ok(()))
}

/// A task's socket as an upstream: connect, learn the task's directory from
/// `get_status`, subscribe to every event.
pub struct TaskSocket {
    name: String,
    path: PathBuf,
    timeout: Duration,
    dir: Arc<Mutex<Option<PathBuf>>>,
    events: Arc<Router<Arc<Notify>>>,
    activity: Arc<Notify>,
}

impl Upstream for TaskSocket {
    async fn connect(&self) -> Result<PeerHandle, String> {
        let not_running = || {
            format!(
                "task {:?} is not running (no server at {}). Start it with `ralph-server run TASK_DIR`.",
                self.name,
                self.path.display()
            )
        };
        let stream = match tokio::time::timeout(self.timeout, tokio::net::UnixStream::connect(&self.path)).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => {
                return Err(match e.kind() {
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => not_running(),
                    _ => format!("task {:?}: {}: {e}", self.name, self.path.display()),
                });
            }
            Err(_) => return Err(format!("task {:?}: no connection within {:?}", self.name, self.timeout)),
        };
        let (read, write) = stream.into_split();
        let transport = Transport::ndjson(read, write, rpc_core::codec::DEFAULT_MAX_MESSAGE);
        let peer = rpc_core::client::spawn(transport, self.events.clone(), self.activity.clone());
        let answered = async {
            let status = peer.request_raw("get_status", &json!({}), Some(self.timeout)).await?;
            peer.request_raw("subscribe", &json!({"events": ["*"]}), Some(self.timeout)).await?;
            Ok::<_, rpc_core::CallError>(status)
        };
        let status = match answered.await {
            Ok(status) => status,
            Err(e) => {
                peer.close(1000, "handshake failed");
                return Err(format!("task {:?} took the connection but did not answer: {e}", self.name));
            }
        };
        let status: Value = serde_json::from_str(status.get()).unwrap_or_default();
        if let Some(dir) = status["task_dir"].as_str().filter(|d| !d.is_empty()) {
            *self.dir.lock() = Some(PathBuf::from(dir));
        }
        Ok(peer)
    }
}

/// `ralph://<task>/<file>`, the task's name percent-encoded.
pub fn uri(task: &str, file: &str) -> String {
    let mut encoded = String::new();
    for byte in task.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            encoded.push(byte as char);
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    format!("ralph://{encoded}/{file}")
}

/// The task and the file a `ralph://` URI names, if it names one.
pub fn parse_uri(uri: &str) -> Option<(String, &'static str)> {
    let (task, file) = uri.strip_prefix("ralph://")?.split_once('/')?;
    let file = FILES.into_iter().find(|f| *f == file)?;
    let mut bytes = Vec::new();
    let mut rest = task.as_bytes();
    while let Some((&byte, tail)) = rest.split_first() {
        if byte == b'%' {
            let hex = std::str::from_utf8(tail.get(..2)?).ok()?;
            bytes.push(u8::from_str_radix(hex, 16).ok()?);
            rest = &tail[2..];
        } else {
            bytes.push(byte);
            rest = tail;
        }
    }
    let task = String::from_utf8(bytes).ok()?;
    crate::config::check_task_name(&task).ok()?;
    Some((task, file))
}

/// The most of a file a resource carries: progress.txt beyond it is shown
/// from its end (the latest is what matters), prd.json beyond it is an error.
pub const MAX_RESOURCE: u64 = 2 * 1024 * 1024;

/// A task file's text, read-only.
pub async fn read(dir: &Path, file: &str) -> Result<String, String> {
    use tokio::io::{AsyncReadExt, AsyncSeekExt};
    let path = dir.join(file);
    let describe = |e: std::io::Error| format!("{}: {e}", path.display());
    // Only a regular file: a FIFO put there would hold the read for good.
    let mut handle = match rpc_core::files::open_regular(&path) {
        Ok(handle) => tokio::fs::File::from_std(handle),
        // The loop creates it at its first block.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && file == "progress.txt" => return Ok(String::new()),
        Err(e) => return Err(describe(e)),
    };
    let len = handle.metadata().await.map_err(describe)?.len();
    let skipped = len.saturating_sub(MAX_RESOURCE);
    if skipped > 0 && file != "progress.txt" {
        return Err(format!("{}: {len} bytes, more than the {MAX_RESOURCE} a resource carries", path.display()));
    }
    handle.seek(std::io::SeekFrom::Start(skipped)).await.map_err(describe)?;
    let mut bytes = Vec::new();
    handle.take(MAX_RESOURCE).read_to_end(&mut bytes).await.map_err(describe)?;
    if skipped == 0 {
        return Ok(String::from_utf8_lossy(&bytes).into_owned());
    }
    // From the first whole line, saying what is left out.
    let start = bytes.iter().position(|&b| b == b'\n').map_or(0, |i| i + 1);
    let omitted = skipped + start as u64;
    Ok(format!("[... the first {omitted} bytes are not shown ...]\n{}", String::from_utf8_lossy(&bytes[start..])))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_names_round_trip_through_uris() {
        assert_eq!(uri("my-feature", "progress.txt"), "ralph://my-feature/progress.txt");
        assert_eq!(uri("a b%ü", "prd.json"), "ralph://a%20b%25%C3%BC/prd.json");
        for name in ["my-feature", "a b%ü", "x:y@z", "~t"] {
            for file in FILES {
                assert_eq!(parse_uri(&uri(name, file)), Some((name.to_owned(), file)), "{name} {file}");
            }
        }
        assert_eq!(parse_uri("ralph://t/state.json"), None);
        assert_eq!(parse_uri("ralph://%2E%2E/prd.json"), None, "not a task name");
        assert_eq!(parse_uri("ralph://a%2Fb/prd.json"), None, "no separators");
        assert_eq!(parse_uri("ralph://a%4/prd.json"), None);
        assert_eq!(parse_uri("file:///etc/prd.json"), None);
    }

    #[tokio::test]
    async fn a_long_progress_file_is_shown_from_its_end_and_a_long_prd_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let line = "x".repeat(99) + "\n";
        let long = line.repeat((MAX_RESOURCE / 100 + 10) as usize) + "the end\n";
        std::fs::write(dir.path().join("progress.txt"), &long).unwrap();
        let shown = read(dir.path(), "progress.txt").await.unwrap();
        assert!(shown.starts_with("[... the first ") && shown.ends_with("the end\n"), "{}", &shown[..60]);
        assert!(shown.len() as u64 <= MAX_RESOURCE + 60);
        assert!(shown.lines().skip(1).all(|l| l.len() == 99 || l == "the end"), "whole lines only");
        std::fs::write(dir.path().join("prd.json"), &long).unwrap();
        assert!(read(dir.path(), "prd.json").await.unwrap_err().contains("more than"));
        std::fs::write(dir.path().join("prd.json"), "{}").unwrap();
        assert_eq!(read(dir.path(), "prd.json").await.unwrap(), "{}");
        assert!(read(dir.path(), "missing").await.is_err());
        let fresh = tempfile::tempdir().unwrap();
        assert_eq!(read(fresh.path(), "progress.txt").await.unwrap(), "", "not written yet");
    }
}
