//! Resource bounds: nothing a peer sends grows memory
//! without limit. The tests run over real sockets and watch the engine's own
//! counters (`PeerHandle::stats`) while the other side misbehaves.
//!
//! A client that never reads is played on a Unix socket pair: its buffers
//! have a fixed size, so once they are full nothing more moves until the
//! client reads. TCP's loopback buffers are resized by the kernel's autotuning
//! and its receive queue is compacted under memory pressure, so there a full
//! socket may take more bytes seconds later, and what a test sees would
//! depend on the machine. The write-stall rule itself is also tested on a
//! transport the test controls, on paused time: there the only clock is
//! tokio's, and the outcome is the same on any machine under any load.
//!
//! The tests of this file run one at a time (see [`serial`]): one of them
//! measures the process's resident memory, and the timing ones should not
//! compete for the machine's cores with a test that floods another socket.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use rpc_core::peer::CloseReason;
use rpc_core::{CallError, Connection, Ctx, NoParams, PeerConfig, PeerHandle, Router, RpcError, Transport};
use rpc_core::{Frame, Outbound};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream, UnixStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Held for the whole of each test in this file, so they run one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    SERIAL.lock().await
}

/// A server connection on a real socket (one end of a Unix socket pair): the
/// raw client stream connected to it, the server's handle and its task
/// (which returns why it closed).
async fn socket_server<S: Send + Sync + 'static>(
    router: Arc<Router<S>>,
    state: S,
    config: PeerConfig,
) -> (UnixStream, PeerHandle, JoinHandle<CloseReason>) {
    let (client, server) = UnixStream::pair().unwrap();
    let (r, w) = server.into_split();
    let (peer, conn) = Connection::new(Transport::ndjson(r, w, 1 << 20), router, Arc::new(state), config);
    (client, peer, tokio::spawn(conn.run()))
}

/// Polls `done` every few milliseconds until it holds; fails the test after `limit`.
async fn wait_until(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "still waiting after {limit:?} for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The next line from the server, as JSON.
async fn next_json(lines: &mut Lines<BufReader<OwnedReadHalf>>) -> Value {
    let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .expect("nothing from the server within 10 s")
        .unwrap()
        .expect("the server closed the connection");
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
}

fn request_line(id: u64, method: &str, params: Value) -> String {
    format!("{}\n", json!({"jsonrpc": "2.0", "method": method, "params": params, "id": id}))
}

fn assert_overloaded(reply: &Value, id: u64) {
    assert_eq!(reply["id"], id, "{reply}");
    assert_eq!(reply["error"]["code"], -32603, "{reply}");
    assert_eq!(reply["error"]["data"]["reason"], "overloaded", "{reply}");
}

/// Resident memory of this process (VmRSS), in bytes.
fn rss_bytes() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).expect("VmRSS in /proc/self/status");
    let kib: usize = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

/// A call the client never answers: while it is pending the server keeps
/// reading whatever else the client sends, full outbox or not.
fn owed_an_answer(server: &PeerHandle) -> JoinHandle<Result<Box<serde_json::value::RawValue>, CallError>> {
    let server = server.clone();
    tokio::spawn(async move { server.request_raw("never", &[0], None).await })
}

/// Methods shared by the tests below.
fn sleep_router() -> Arc<Router<()>> {
    Router::new()
        .method("sleep", |_, ms: [u64; 1]| async move {
            tokio::time::sleep(Duration::from_millis(ms[0])).await;
            Ok(ms[0])
        })
        .method("ping", |_, _: NoParams| async { Ok("pong") })
        .build()
        .unwrap()
}

const MIB: usize = 1024 * 1024;

/// What the `blob` server of rule 1 looks like: 64 KiB replies, a budget of
/// four of them, and a count of the handlers that started.
const BLOB: usize = 64 * 1024;
const BLOB_REQUESTS: u64 = 2000;

fn blob_config() -> PeerConfig {
    PeerConfig {
        max_concurrent: 4,
        write_budget: 256 * 1024,
        write_stall: Duration::from_secs(2),
        backlog_bytes: 64 * 1024,
        ..PeerConfig::default()
    }
}

fn blob_router(started: Arc<AtomicUsize>) -> Arc<Router<()>> {
    Router::<()>::new()
        .method("blob", move |_, _: NoParams| {
            let started = started.clone();
            async move {
                started.fetch_add(1, Ordering::Relaxed);
                Ok("x".repeat(BLOB))
            }
        })
        .build()
        .unwrap()
}

/// Pipelines all the `blob` requests at once from a client that never reads.
/// Returns the client's halves (the read half is never read; dropping it would
/// close the socket).
fn pipeline_blobs(client: UnixStream) -> (OwnedReadHalf, JoinHandle<OwnedWriteHalf>) {
    let (unread, mut write) = client.into_split();
    let requests: String = (0..BLOB_REQUESTS).map(|id| request_line(id, "blob", json!({}))).collect();
    // In a task: once the server stops reading, this may block until it closes.
    let writer = tokio::spawn(async move {
        let _ = write.write_all(requests.as_bytes()).await;
        write
    });
    (unread, writer)
}

/// Rule 1: a client pipelines 2000 requests whose replies are 64 KiB each and
/// never reads. Unbounded, that is 128 MiB queued; bounded, the outbox holds
/// its budget plus at most the replies of the handlers already running, and
/// the reader stops taking requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_large_replies_stay_within_the_write_budget() {
    let _serial = serial().await;
    // A reply is the string plus `{"jsonrpc":"2.0","id":1999,"result":""}`.
    const OVERHEAD: usize = 256;
    let config = blob_config();
    let started = Arc::new(AtomicUsize::new(0));
    let (client, server, run) = socket_server(blob_router(started.clone()), (), config.clone()).await;
    let rss_before = rss_bytes();
    let begun = Instant::now();
    let (_unread, writer) = pipeline_blobs(client);

    // Samples the engine's counters and the process's memory until the server
    // closes the connection or has stopped taking anything for half a second.
    let (mut max_queued, mut max_owed, mut max_backlog_bytes, mut peak_rss) = (0, 0, 0, rss_before);
    let mut last_change = (started.load(Ordering::Relaxed), server.stats(), Instant::now());
    let mut samples = 0u64;
    let deadline = Instant::now() + config.write_stall * 3;
    while !server.is_closed() && last_change.2.elapsed() < Duration::from_millis(500) {
        assert!(Instant::now() < deadline, "the server never settled: {:?}", server.stats());
        let stats = server.stats();
        max_queued = max_queued.max(stats.queued_bytes);
        max_owed = max_owed.max(stats.owed_replies);
        max_backlog_bytes = max_backlog_bytes.max(stats.backlog_bytes);
        if samples.is_multiple_of(8) {
            peak_rss = peak_rss.max(rss_bytes());
        }
        samples += 1;
        let now = (started.load(Ordering::Relaxed), stats);
        if (last_change.0, last_change.1) != now {
            last_change = (now.0, now.1, Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let started = started.load(Ordering::Relaxed);
    let bound = config.write_budget + config.max_concurrent * (BLOB + OVERHEAD);
    let growth = peak_rss.saturating_sub(rss_before);
    eprintln!(
        "write budget: {started} of {BLOB_REQUESTS} handlers started; max queued {max_queued} B (bound {bound} B), \
         max owed {max_owed}, max backlog {max_backlog_bytes} B; RSS {} -> {} KiB (+{} KiB); \
         {samples} samples over {:?}; stats at the end {:?}",
        rss_before / 1024,
        peak_rss / 1024,
        growth / 1024,
        begun.elapsed(),
        server.stats()
    );
    assert!(max_queued <= bound, "outbox held {max_queued} bytes, past {bound}");
    assert!(max_backlog_bytes <= config.backlog_bytes, "incoming backlog held {max_backlog_bytes} bytes");
    assert!(
        (config.max_concurrent as u64..BLOB_REQUESTS / 2).contains(&(started as u64)),
        "{started} handlers started: the server did not stop taking requests it cannot answer"
    );
    assert!(growth < 40 * MIB, "RSS grew by {} MiB (unbounded would be 128 MiB)", growth / MIB);
    drop((writer, run));
}

/// Serves the next connection `listener` accepts; its task.
async fn serve_one(listener: &TcpListener, router: Arc<Router<()>>) -> JoinHandle<CloseReason> {
    let (socket, _) = listener.accept().await.unwrap();
    let (r, w) = socket.into_split();
    let (_peer, conn) = Connection::new(Transport::ndjson(r, w, 1 << 20), router, Arc::new(()), PeerConfig::default());
    tokio::spawn(conn.run())
}

/// A client whose connection is reset (not closed: it can read nothing any
/// more) has its handlers dropped with the connection at once; one that only
/// half-closes still gets its reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_connection_drops_its_handlers_and_a_half_closed_one_is_answered() {
    let _serial = serial().await;
    let [started, finished] = [0; 2].map(|_| Arc::new(AtomicUsize::new(0)));
    let router = Router::<()>::new()
        .method("slow", {
            let (started, finished) = (started.clone(), finished.clone());
            move |_, _: NoParams| {
                let (started, finished) = (started.clone(), finished.clone());
                async move {
                    started.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(600)).await;
                    finished.fetch_add(1, Ordering::Relaxed);
                    Ok("done")
                }
            }
        })
        .build()
        .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let mut client = TcpStream::connect(addr).await.unwrap();
    let server = serve_one(&listener, router.clone()).await;
    client.write_all(request_line(1, "slow", json!({})).as_bytes()).await.unwrap();
    wait_until(Duration::from_secs(5), "the handler to start", || started.load(Ordering::Relaxed) == 1).await;
    // A zero linger makes the close a reset (and never blocks).
    #[allow(deprecated, reason = "SO_LINGER blocks a close only with a non-zero time")]
    client.set_linger(Some(Duration::ZERO)).unwrap();
    drop(client);
    let reason = tokio::time::timeout(Duration::from_millis(400), server).await;
    let reason = reason.expect("the reset connection was not closed before its handler ended").unwrap();
    assert!(matches!(reason, CloseReason::Failed(_)), "{reason:?}");
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(finished.load(Ordering::Relaxed), 0, "the handler of a reset connection ran on");

    let client = TcpStream::connect(addr).await.unwrap();
    let _server = serve_one(&listener, router).await;
    let (read, mut write) = client.into_split();
    write.write_all(request_line(2, "slow", json!({})).as_bytes()).await.unwrap();
    write.shutdown().await.unwrap();
    let line = tokio::time::timeout(Duration::from_secs(5), BufReader::new(read).lines().next_line()).await;
    let reply: Value = serde_json::from_str(&line.unwrap().unwrap().unwrap()).unwrap();
    assert_eq!(reply["result"], "done", "{reply}");
}

/// Rule 1, for batches: a batch is answered once all its members finish, so
/// its replies are held until then. One line of 200 requests for 64 KiB
/// replies would be a 12.5 MiB reply; bounded, the members run at most
/// `max_concurrent` at a time, and once the batch's replies reach the write
/// budget the members left are answered `overloaded` without running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_large_replies_stops_at_the_write_budget() {
    let _serial = serial().await;
    const OVERHEAD: usize = 256;
    const MEMBERS: u64 = 200;
    let config = blob_config();
    let [running, most, started] = [0; 3].map(|_| Arc::new(AtomicUsize::new(0)));
    let router = Router::<()>::new()
        .method("blob", {
            let (running, most, started) = (running.clone(), most.clone(), started.clone());
            move |_, _: NoParams| {
                let (running, most, started) = (running.clone(), most.clone(), started.clone());
                async move {
                    started.fetch_add(1, Ordering::Relaxed);
                    most.fetch_max(running.fetch_add(1, Ordering::Relaxed) + 1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    running.fetch_sub(1, Ordering::Relaxed);
                    Ok("x".repeat(BLOB))
                }
            }
        })
        .build()
        .unwrap();
    let (client, _server, _run) = socket_server(router, (), config.clone()).await;
    let (read, mut write) = client.into_split();
    let mut lines = BufReader::new(read).lines();
    let batch = |ids: std::ops::Range<u64>| {
        let members: Vec<Value> = ids.map(|id| json!({"jsonrpc": "2.0", "id": id, "method": "blob"})).collect();
        format!("{}\n", Value::from(members))
    };

    write.write_all(batch(0..MEMBERS).as_bytes()).await.unwrap();
    let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line()).await.unwrap().unwrap().unwrap();
    let replies: Vec<Value> = serde_json::from_str(&line).unwrap();
    assert_eq!(replies.len() as u64, MEMBERS, "every member is answered");
    let answered = replies.iter().filter(|reply| reply.get("result").is_some()).count();
    for refused in replies.iter().filter(|reply| reply.get("result").is_none()) {
        assert_overloaded(refused, refused["id"].as_u64().unwrap());
    }
    let (started, most) = (started.load(Ordering::Relaxed), most.load(Ordering::Relaxed));
    eprintln!("batch: {answered} of {MEMBERS} answered, {started} started, at most {most} at once, {} B", line.len());
    assert_eq!(answered, started, "a member answered `overloaded` never ran");
    let fits = config.write_budget / BLOB;
    assert!((fits..=fits + config.max_concurrent).contains(&answered), "{answered} members ran");
    assert!(most <= config.max_concurrent, "{most} members ran at once");
    let bound = config.write_budget + config.max_concurrent * (BLOB + OVERHEAD) + MEMBERS as usize * OVERHEAD;
    assert!(line.len() <= bound, "a {} byte reply, past {bound}", line.len());

    // What the batch held is given back: the next small batch runs whole.
    write.write_all(batch(1000..1002).as_bytes()).await.unwrap();
    let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line()).await.unwrap().unwrap().unwrap();
    let replies: Vec<Value> = serde_json::from_str(&line).unwrap();
    assert!(replies.len() == 2 && replies.iter().all(|reply| reply["result"].is_string()), "{line:.200}");
}

/// Rule 2, for what runs: a handler keeps its request until it answers, so
/// the requests whose handlers run are bounded in bytes too. 24 handlers
/// waiting on something slow, each given a 256 KiB request, would hold 6 MiB
/// on one connection whatever its budgets; with a 1 MiB backlog they hold at
/// most 1 MiB between them (and any one request when nothing runs), the next
/// wait in the backlog, and the rest are refused `overloaded`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_handlers_hold_no_more_request_bytes_than_the_backlog_takes() {
    let _serial = serial().await;
    const REQUEST: usize = 256 * 1024;
    const REQUESTS: u64 = 24;
    let config = PeerConfig { max_concurrent: 32, backlog_bytes: 4 * REQUEST, ..PeerConfig::default() };
    let (open, gate) = tokio::sync::watch::channel(false);
    let [running, most, started] = [0; 3].map(|_| Arc::new(AtomicUsize::new(0)));
    let router = Router::<()>::new()
        .method("hold", {
            let (running, most, started) = (running.clone(), most.clone(), started.clone());
            move |_, params: Value| {
                let (running, most, started, mut gate) = (running.clone(), most.clone(), started.clone(), gate.clone());
                async move {
                    started.fetch_add(1, Ordering::Relaxed);
                    most.fetch_max(running.fetch_add(1, Ordering::Relaxed) + 1, Ordering::Relaxed);
                    let _ = gate.wait_for(|open| *open).await;
                    running.fetch_sub(1, Ordering::Relaxed);
                    Ok(params["pad"].as_str().map_or(0, str::len))
                }
            }
        })
        .build()
        .unwrap();
    let (client, server, _run) = socket_server(router, (), config.clone()).await;
    let (read, mut write) = client.into_split();
    let replies = tokio::spawn(async move {
        let mut lines = BufReader::new(read).lines();
        let mut replies = Vec::new();
        while replies.len() < REQUESTS as usize {
            let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line()).await;
            replies.push(serde_json::from_str::<Value>(&line.unwrap().unwrap().unwrap()).unwrap());
        }
        replies
    });
    let pad = "x".repeat(REQUEST);
    for id in 0..REQUESTS {
        let request = json!({"jsonrpc": "2.0", "id": id, "method": "hold", "params": {"pad": pad}});
        write.write_all(format!("{request}\n").as_bytes()).await.unwrap();
    }
    wait_until(Duration::from_secs(10), "the requests to be read", || {
        let stats = server.stats();
        stats.refused + (stats.backlog + started.load(Ordering::Relaxed)) as u64 >= REQUESTS
    })
    .await;
    let held = server.stats().running_bytes;
    open.send_replace(true);
    let replies = replies.await.unwrap();

    let (started, most) = (started.load(Ordering::Relaxed), most.load(Ordering::Relaxed));
    eprintln!("{started} of {REQUESTS} ran, at most {most} at once, holding {held} B");
    assert!(held <= config.backlog_bytes, "running handlers held {held} B of requests");
    assert!(most <= config.backlog_bytes / REQUEST, "{most} handlers of {REQUEST} B requests ran at once");
    let answered: Vec<&Value> = replies.iter().filter(|reply| reply.get("result").is_some()).collect();
    assert_eq!(answered.len(), started, "a request answered `overloaded` never ran");
    assert!(answered.iter().all(|reply| reply["result"] == REQUEST), "{answered:?}");
    for refused in replies.iter().filter(|reply| reply.get("result").is_none()) {
        assert_overloaded(refused, refused["id"].as_u64().unwrap());
    }
    wait_until(Duration::from_secs(5), "the requests' bytes to be given back", || server.stats().running_bytes == 0)
        .await;
}

/// The bytes rule for what runs never keeps a request out for good: a small
/// handler that runs as long as the connection does (a subscription, a
/// dialog) leaves room for one request of any size, larger than the budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_running_small_handler_leaves_room_for_a_request_past_the_budget() {
    let _serial = serial().await;
    let config = PeerConfig { backlog_bytes: 256 * 1024, ..PeerConfig::default() };
    let (open, gate) = tokio::sync::watch::channel(false);
    let router = Router::<()>::new()
        .method("hold", move |_, _: NoParams| {
            let mut gate = gate.clone();
            async move {
                let _ = gate.wait_for(|open| *open).await;
                Ok("released")
            }
        })
        .method("size", |_, params: Value| async move {
            tokio::task::yield_now().await;
            Ok(params["pad"].as_str().map_or(0, str::len))
        })
        .build()
        .unwrap();
    let (client, server, _run) = socket_server(router, (), config).await;
    let (read, mut write) = client.into_split();
    let mut lines = BufReader::new(read).lines();
    write.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"hold\"}\n").await.unwrap();
    wait_until(Duration::from_secs(5), "the hold to run", || server.stats().running_bytes > 0).await;
    let pad = "x".repeat(600 * 1024);
    let large = json!({"jsonrpc": "2.0", "id": 2, "method": "size", "params": {"pad": pad}});
    write.write_all(format!("{large}\n").as_bytes()).await.unwrap();
    let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line()).await;
    let reply: Value =
        serde_json::from_str(&line.expect("the large request is answered while the hold runs").unwrap().unwrap())
            .unwrap();
    assert_eq!((reply["id"].clone(), reply["result"].clone()), (json!(2), json!(600 * 1024)), "{reply}");
    open.send_replace(true);
    let reply: Value = serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
    assert_eq!(reply["result"], "released");
}

/// Rule 1, for replies still being made: the engine counts a reply once it
/// is queued, so 32 handlers started together for a client that never
/// reads would each build a large reply and hold all 32. A handler that
/// reserves its reply's room first (`PeerHandle::reserve_reply`) builds it
/// only while the outbox has room: one budget's worth at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handlers_that_reserve_their_reply_build_one_budget_at_a_time() {
    let _serial = serial().await;
    const REPLY: usize = 256 * 1024;
    const REQUESTS: u64 = 32;
    let config = PeerConfig { max_concurrent: 32, write_budget: REPLY, ..PeerConfig::default() };
    let built = Arc::new(AtomicUsize::new(0));
    let router = Router::<()>::new()
        .method("file", {
            let built = built.clone();
            move |ctx: Ctx<()>, _: NoParams| {
                let built = built.clone();
                async move {
                    let _room = ctx.peer.reserve_reply(REPLY).await.map_err(|_| RpcError::internal("closed"))?;
                    built.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    Ok("x".repeat(REPLY))
                }
            }
        })
        .build()
        .unwrap();
    let (client, server, _run) = socket_server(router, (), config.clone()).await;
    let (_read, mut write) = client.into_split();
    let requests: String =
        (0..REQUESTS).map(|id| format!("{}\n", json!({"jsonrpc": "2.0", "id": id, "method": "file"}))).collect();
    write.write_all(requests.as_bytes()).await.unwrap();
    wait_until(Duration::from_secs(5), "a reply to be built", || built.load(Ordering::Relaxed) > 0).await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    let (built, queued) = (built.load(Ordering::Relaxed), server.stats().queued_bytes);
    eprintln!("{built} of {REQUESTS} replies built, {queued} B queued");
    // One in the socket's buffers, one queued, one being made.
    assert!(built <= 3, "{built} replies of {REPLY} B built for a client that is not reading");
    assert!(queued <= 2 * (REPLY + 64), "{queued} B queued");
}

/// Rule 1: a connection whose writes make no progress for `write_stall` while
/// it owes replies is closed.
///
/// Observed (engine as of this test): the connection is never closed. With
/// the client above, the server's stats freeze at `queued_bytes: 131146,
/// owed_replies: 4, backlog: 0` and `Connection::run` has not returned 5 s
/// after the requests were sent (write_stall 2 s), nor 27 s after. Cause, from
/// `peer.rs`: `stalled_since` and `may_read` are computed before the
/// `select!`; when the drain branch writes part of the outbox and then finds
/// the socket full, `Drain::poll_drain` returns `Pending` (not `Progress`), so
/// the loop never comes round to start the stall timer or to read again, and
/// the task sleeps until the socket becomes writable, which it never does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_its_replies_is_cut_off_after_the_write_stall() {
    let _serial = serial().await;
    let config = blob_config();
    let (client, server, run) = socket_server(blob_router(Arc::default()), (), config.clone()).await;
    let begun = Instant::now();
    let (_unread, writer) = pipeline_blobs(client);
    let reason = match tokio::time::timeout(config.write_stall + Duration::from_secs(3), run).await {
        Ok(reason) => reason.unwrap(),
        Err(_) => panic!("not closed {:?} after the requests were sent: {:?}", begun.elapsed(), server.stats()),
    };
    let closed_after = begun.elapsed();
    eprintln!("write stall: closed after {closed_after:?}: {reason:?}");
    assert!(matches!(reason, CloseReason::Failed(ref why) if why.contains("stalled")), "{reason:?}");
    assert!(closed_after >= config.write_stall, "closed after {closed_after:?}, before the stall timeout");
    drop(writer);
}

/// A transport whose write side takes one message and then nothing more: a
/// peer that stopped reading, without kernel buffers and their timing. The
/// input is fed by the test.
fn transport_that_takes_one() -> (mpsc::Sender<Frame>, mpsc::Receiver<Outbound>, Transport) {
    let (input, inbound) = mpsc::channel(64);
    let (outbound, unread) = mpsc::channel(1);
    (input, unread, Transport::channels(inbound, outbound))
}

fn frame(id: u64, method: &str) -> Frame {
    Frame::Message(request_line(id, method, json!({})).trim_end().to_owned().into())
}

fn assert_stalled(reason: &CloseReason) {
    assert!(matches!(reason, CloseReason::Failed(why) if why.contains("stalled")), "{reason:?}");
}

/// Rule 1, on paused time: the second reply has nowhere to go, and nothing
/// else happens on the connection after it. The stall clock must run anyway.
///
/// Observed before the rule moved into the drain: never closed. The reply was
/// handed to the transport directly (nothing was queued ahead of it), so the
/// connection loop saw no stall when it looked, and the drain's first refused
/// flush came after the look; with no further event the loop slept for good.
#[tokio::test(start_paused = true)]
async fn a_reply_the_peer_never_takes_closes_the_connection_at_the_write_stall() {
    let config = PeerConfig { write_stall: Duration::from_secs(2), ..PeerConfig::default() };
    let (input, _unread, transport) = transport_that_takes_one();
    let (server, conn) = Connection::new(transport, sleep_router(), Arc::new(()), config.clone());
    let run = tokio::spawn(conn.run());
    let began = tokio::time::Instant::now();
    for id in 1..=2 {
        input.send(frame(id, "ping")).await.unwrap();
    }
    let Ok(reason) = tokio::time::timeout(config.write_stall * 10, run).await else {
        panic!("not closed {:?} after a reply it could not write: {:?}", began.elapsed(), server.stats());
    };
    let after = began.elapsed();
    assert_stalled(&reason.unwrap());
    assert!(after >= config.write_stall, "closed after {after:?}, before the stall limit");
    assert!(after < config.write_stall + Duration::from_millis(50), "closed late: {after:?}");
}

/// Rule 1 and §5 together, on paused time: events the peer does not take
/// never close the connection, however long; a reply owed then does, one
/// stall limit after it was owed.
#[tokio::test(start_paused = true)]
async fn unread_events_never_close_a_connection_but_an_unread_reply_then_does() {
    let config = PeerConfig { write_stall: Duration::from_secs(2), ..PeerConfig::default() };
    let (input, _unread, transport) = transport_that_takes_one();
    let (server, conn) = Connection::new(transport, sleep_router(), Arc::new(()), config.clone());
    let run = tokio::spawn(conn.run());
    let events = {
        let server = server.clone();
        tokio::spawn(async move {
            for n in 0..10 {
                server.notify("event", [n]).await.unwrap();
            }
        })
    };
    tokio::time::sleep(config.write_stall * 50).await;
    assert!(events.is_finished(), "ten small events fit in the outbox");
    assert!(!run.is_finished(), "closed over events alone: {:?}", server.stats());
    assert!(server.stats().queued_bytes > 0, "the events were taken: this proved nothing");

    let asked = tokio::time::Instant::now();
    input.send(frame(1, "ping")).await.unwrap();
    let Ok(reason) = tokio::time::timeout(config.write_stall * 10, run).await else {
        panic!("not closed with a reply owed: {:?}", server.stats());
    };
    let after = asked.elapsed();
    assert_stalled(&reason.unwrap());
    assert!(after >= config.write_stall && after < config.write_stall + Duration::from_millis(50), "{after:?}");
}

/// Rule 1, on paused time: a slow reader that takes something now and then
/// is not stalled; the clock starts again at each bit of progress.
#[tokio::test(start_paused = true)]
async fn a_slow_reader_that_keeps_taking_replies_is_not_cut_off() {
    let config = PeerConfig { write_stall: Duration::from_secs(2), ..PeerConfig::default() };
    let (input, mut unread, transport) = transport_that_takes_one();
    let (server, conn) = Connection::new(transport, sleep_router(), Arc::new(()), config.clone());
    let run = tokio::spawn(conn.run());
    for id in 1..=20 {
        input.send(frame(id, "ping")).await.unwrap();
    }
    // One reply every 1.5 s: each within the limit of the one before.
    for _ in 0..20 {
        tokio::time::sleep(config.write_stall * 3 / 4).await;
        assert!(unread.recv().await.is_some());
    }
    assert!(!run.is_finished(), "cut off while taking replies: {:?}", server.stats());
    // Then it stops taking them, with none owed: kept.
    tokio::time::sleep(config.write_stall * 10).await;
    assert!(!run.is_finished());
    drop(input);
    assert_eq!(tokio::time::timeout(config.write_stall, run).await.unwrap().unwrap(), CloseReason::Eof);
}

/// Rule 2, requests: one slot, eight waiting, the rest refused at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_past_the_backlog_are_refused_at_once_and_the_waiting_ones_run_in_order() {
    let _serial = serial().await;
    let config = PeerConfig { max_concurrent: 1, backlog: 8, backlog_bytes: 64 * 1024, ..PeerConfig::default() };
    let (client, server, _run) = socket_server(sleep_router(), (), config).await;
    let (read, mut write) = client.into_split();
    let mut lines = BufReader::new(read).lines();

    const LONG_MS: u64 = 1500;
    let mut burst = request_line(1, "sleep", json!([LONG_MS]));
    for id in 2..=51 {
        burst.push_str(&request_line(id, "sleep", json!([1])));
    }
    let sent = Instant::now();
    write.write_all(burst.as_bytes()).await.unwrap();

    // Ids 2..=9 wait for the slot; 10..=51 are refused, in order, before anything else.
    for id in 10..=51 {
        assert_overloaded(&next_json(&mut lines).await, id);
    }
    let refused_after = sent.elapsed();
    assert!(refused_after < Duration::from_millis(LONG_MS * 2 / 3), "refusals took {refused_after:?}");
    let stats = server.stats();
    assert_eq!((stats.refused, stats.backlog), (42, 8), "{stats:?}");
    assert!(stats.backlog_bytes <= 64 * 1024, "{stats:?}");

    let long = next_json(&mut lines).await;
    assert_eq!(long, json!({"jsonrpc": "2.0", "id": 1, "result": LONG_MS}));
    assert!(sent.elapsed() >= Duration::from_millis(LONG_MS));
    for id in 2..=9 {
        assert_eq!(next_json(&mut lines).await, json!({"jsonrpc": "2.0", "id": id, "result": 1}));
    }
    let stats = server.stats();
    assert_eq!((stats.refused, stats.backlog, stats.backlog_bytes), (42, 0, 0), "{stats:?}");
    eprintln!("backlog: 42 refusals within {refused_after:?}, long request after {:?}", sent.elapsed());
}

/// Rule 2, notifications: they share the backlog's byte bound; past it they
/// are dropped and counted, and the connection lives on while the flood limit
/// is not reached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_past_the_backlog_bytes_are_dropped_and_counted_and_the_connection_lives() {
    let _serial = serial().await;
    const NOTES: usize = 1000;
    const PAYLOAD: usize = 16 * 1024;
    let handled = Arc::new(AtomicUsize::new(0));
    let router = {
        let handled = handled.clone();
        Router::<()>::new()
            .method("note", move |_, _: Value| {
                let handled = handled.clone();
                async move {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    handled.fetch_add(1, Ordering::Relaxed);
                    Ok(())
                }
            })
            .method("ping", |_, _: NoParams| async { Ok("pong") })
            .build()
            .unwrap()
    };
    let config = PeerConfig { backlog: 8, backlog_bytes: 64 * 1024, flood_limit: 1_000_000, ..PeerConfig::default() };
    let (client, server, run) = socket_server(router, (), config.clone()).await;
    let (read, mut write) = client.into_split();
    let mut lines = BufReader::new(read).lines();

    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let (server, sampling) = (server.clone(), sampling.clone());
        tokio::spawn(async move {
            let (mut bytes, mut len) = (0, 0);
            while sampling.load(Ordering::Relaxed) {
                let stats = server.stats();
                bytes = bytes.max(stats.backlog_bytes);
                len = len.max(stats.backlog);
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            (bytes, len)
        })
    };

    let note = format!("{}\n", json!({"jsonrpc": "2.0", "method": "note", "params": ["n".repeat(PAYLOAD)]}));
    let started = Instant::now();
    for _ in 0..NOTES {
        write.write_all(note.as_bytes()).await.unwrap();
    }
    let sent_after = started.elapsed();
    wait_until(Duration::from_secs(15), "every notification handled or dropped", || {
        let stats = server.stats();
        stats.backlog == 0 && handled.load(Ordering::Relaxed) + stats.dropped_notifications as usize == NOTES
    })
    .await;
    sampling.store(false, Ordering::Relaxed);
    let (max_bytes, max_len) = sampler.await.unwrap();
    let stats = server.stats();
    let handled = handled.load(Ordering::Relaxed);
    eprintln!(
        "notifications: sent in {sent_after:?}, handled {handled}, dropped {}, max backlog {max_len} / {max_bytes} B",
        stats.dropped_notifications
    );
    assert!(max_bytes <= config.backlog_bytes, "backlog held {max_bytes} bytes");
    assert_eq!(stats.dropped_notifications as usize, NOTES - handled);
    assert!(stats.dropped_notifications >= 900, "{stats:?}: expected most to be dropped");
    assert_eq!(stats.refused, 0, "{stats:?}");
    // Still connected and serving, and no notification was answered.
    write.write_all(request_line(1, "ping", json!({})).as_bytes()).await.unwrap();
    assert_eq!(next_json(&mut lines).await, json!({"jsonrpc": "2.0", "id": 1, "result": "pong"}));
    assert!(!server.is_closed() && !run.is_finished());
}

/// Rule 2, flooding: a peer that keeps sending past the backlog is cut off
/// after `flood_limit` refusals in a row, and gets its refusals first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_flooding_past_the_backlog_is_disconnected() {
    let _serial = serial().await;
    let config = PeerConfig { max_concurrent: 1, backlog: 8, flood_limit: 100, ..PeerConfig::default() };
    let (client, server, run) = socket_server(sleep_router(), (), config).await;
    let (read, mut write) = client.into_split();
    let flood: String = (1..=500).map(|id| request_line(id, "sleep", json!([10_000]))).collect();
    let started = Instant::now();
    let writer = tokio::spawn(async move {
        // The server may close before it has read everything.
        let _ = write.write_all(flood.as_bytes()).await;
        write
    });

    let reason = tokio::time::timeout(Duration::from_secs(5), run).await.expect("a flooding peer kept").unwrap();
    let closed_after = started.elapsed();
    assert!(matches!(reason, CloseReason::Failed(ref why) if why.contains("flooding")), "{reason:?}");
    let refused = server.stats().refused;
    assert!((100..=102).contains(&refused), "cut off after {refused} refusals, flood_limit is 100");

    // What the client reads: the refusals (1 ran, 2..=9 waited), then the end.
    let mut lines = BufReader::new(read).lines();
    let mut replies = Vec::new();
    while let Some(line) =
        tokio::time::timeout(Duration::from_secs(5), lines.next_line()).await.unwrap().unwrap_or(None)
    {
        replies.push(serde_json::from_str::<Value>(&line).unwrap());
    }
    assert_eq!(replies.len() as u64, refused, "{replies:?}");
    for (n, reply) in replies.iter().enumerate() {
        assert_overloaded(reply, 10 + n as u64);
    }
    eprintln!("flood: cut off after {refused} refusals, {closed_after:?}");
    drop(writer);
}

/// What one side of rule 3 is doing, for the report when it stalls.
#[derive(Default)]
struct Side {
    /// `bounce` handlers running (waiting for their `leaf`).
    bouncing: AtomicUsize,
    /// `leaf` requests served.
    leaves: AtomicUsize,
}

/// Counts a running `bounce` until dropped.
struct Bouncing(Arc<Side>);

impl Drop for Bouncing {
    fn drop(&mut self) {
        self.0.bouncing.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The methods of rule 3: `bounce` asks the other side for a `leaf` and
/// returns it; refusals pass through as they came.
fn bounce_router() -> Arc<Router<Side>> {
    Router::new()
        .method("bounce", |cx: Ctx<Side>, n: [u64; 1]| async move {
            cx.state.bouncing.fetch_add(1, Ordering::Relaxed);
            let _running = Bouncing(cx.state.clone());
            match cx.peer.request_raw("leaf", &n, Some(Duration::from_secs(20))).await {
                Ok(leaf) => Ok(leaf),
                Err(CallError::Rpc(e)) => Err(e),
                Err(other) => Err(RpcError::internal(format!("leaf failed: {other}"))),
            }
        })
        .method("leaf", |cx: Ctx<Side>, _: [u64; 1]| async move {
            cx.state.leaves.fetch_add(1, Ordering::Relaxed);
            Ok("l".repeat(1024))
        })
        .build()
        .unwrap()
}

fn is_overloaded(e: &CallError) -> bool {
    matches!(e, CallError::Rpc(e) if e.code == -32603 && e.data.as_ref().is_some_and(|d| d["reason"] == "overloaded"))
}

/// Rule 3: two engine peers with small budgets flood each other with requests
/// whose handlers call back. Each side keeps reading the answers to its own
/// calls even with its outbox and backlog full, so everything completes.
///
/// Observed (engine as of this test, in 10 of 14 runs; the others finish
/// in under 1 s):
/// nothing completes for 20 s. Both sides then show `queued_bytes: 0,
/// owed_replies: 0, backlog: 16, refused: 1984`, 4 `bounce` handlers running
/// (all of `max_concurrent`) and 0 `leaf` requests served. Every handler slot
/// on each side is held by a `bounce` waiting for a `leaf` that sits in the
/// other side's backlog behind `bounce` requests, which wait for a slot. The
/// reader does read (outbox empty); it is the slots that deadlock, until the
/// 20 s timeouts of the `leaf` calls fail the `bounce`s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_peers_flooding_each_other_with_calls_that_call_back_do_not_stall() {
    let _serial = serial().await;
    const CALLS: u64 = 2000;
    let config = PeerConfig {
        write_budget: 4 * 1024,
        write_queue: 8,
        backlog: 16,
        max_concurrent: 4,
        request_timeout: Duration::from_secs(20),
        ..PeerConfig::default()
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let b_stream = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
    let (a_stream, _) = listener.accept().await.unwrap();
    let (mut peers, mut sides_state) = (Vec::new(), Vec::new());
    for stream in [a_stream, b_stream] {
        let (r, w) = stream.into_split();
        let side = Arc::new(Side::default());
        let (peer, conn) =
            Connection::new(Transport::ndjson(r, w, 1 << 20), bounce_router(), side.clone(), config.clone());
        tokio::spawn(conn.run());
        peers.push(peer);
        sides_state.push(side);
    }
    let started = Instant::now();
    let sides: Vec<_> = peers
        .iter()
        .map(|peer| {
            let peer = peer.clone();
            tokio::spawn(async move {
                let calls = (0..CALLS).map(|n| {
                    let peer = peer.clone();
                    async move { peer.request_raw("bounce", &[n], Some(Duration::from_secs(20))).await }
                });
                join_all(calls).await
            })
        })
        .collect();
    let results = match tokio::time::timeout(Duration::from_secs(20), join_all(sides)).await {
        Ok(results) => results,
        Err(_) => {
            let report: Vec<_> = peers
                .iter()
                .zip(&sides_state)
                .map(|(p, side)| {
                    format!(
                        "{:?}, closed {}, bounce handlers running {}, leaves served {}",
                        p.stats(),
                        p.is_closed(),
                        side.bouncing.load(Ordering::Relaxed),
                        side.leaves.load(Ordering::Relaxed)
                    )
                })
                .collect();
            panic!("the two peers stalled: not every call completed within 20 s: {report:#?}");
        }
    };
    let elapsed = started.elapsed();
    let leaf = format!("\"{}\"", "l".repeat(1024));
    let (mut ok, mut overloaded) = (0, 0);
    for result in results.into_iter().flat_map(|side| side.unwrap()) {
        match result {
            Ok(raw) => {
                assert_eq!(raw.get(), leaf);
                ok += 1;
            }
            Err(e) if is_overloaded(&e) => overloaded += 1,
            Err(e) => panic!("a call failed otherwise than overloaded: {e:?}"),
        }
    }
    eprintln!("mutual flood: {ok} answered, {overloaded} overloaded, in {elapsed:?}");
    assert_eq!(ok + overloaded, 2 * CALLS);
    assert!(ok > 0, "no call succeeded");
    assert!(peers.iter().all(|p| !p.is_closed()));
}

/// Rule 3: a server whose outbox is full (its client never reads the replies)
/// still reads the answer to a call it made itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_answer_to_our_own_call_is_read_while_the_outbox_is_full() {
    let _serial = serial().await;
    const REPLY: usize = 64 * 1024;
    let config = PeerConfig { write_budget: 64 * 1024, write_stall: Duration::from_secs(20), ..PeerConfig::default() };
    let router = Router::<()>::new().method("blob", |_, _: NoParams| async { Ok("x".repeat(REPLY)) }).build().unwrap();
    let (client, server, run) = socket_server(router, (), config.clone()).await;

    // The server asks first (id 1), so its request is written before the outbox fills.
    let call = {
        let server = server.clone();
        tokio::spawn(async move { server.request_raw("question", &["?"], Some(Duration::from_secs(15))).await })
    };
    tokio::time::timeout(Duration::from_secs(5), client.readable())
        .await
        .expect("the server's request was not written")
        .unwrap();

    // Then the client fills the outbox with replies it never reads.
    let (_unread, mut write) = client.into_split();
    let blobs: String = (0..400).map(|id| request_line(id, "blob", json!({}))).collect();
    write.write_all(blobs.as_bytes()).await.unwrap();
    wait_until(Duration::from_secs(5), "the outbox to fill", || server.stats().queued_bytes >= config.write_budget)
        .await;
    let full = server.stats();

    // The client answers the question without reading anything.
    let answered = Instant::now();
    write.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":\"answer\"}\n").await.unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(5), call)
        .await
        .expect("the answer to our own call was not read while the outbox was full")
        .unwrap()
        .unwrap();
    assert_eq!(answer.get(), "\"answer\"");
    let still = server.stats();
    eprintln!("own call answered in {:?} with the outbox full: {full:?} / {still:?}", answered.elapsed());
    assert!(still.queued_bytes >= config.write_budget, "the outbox drained, so this proved nothing: {still:?}");
    assert!(!run.is_finished());
}

/// Rule 4: while the outbox is full no new request starts, even though the
/// reader keeps reading (it has to: the server waits for an answer of its own).
/// The requests read meanwhile wait in the backlog or are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_request_starts_while_the_outbox_is_full() {
    let _serial = serial().await;
    const REPLY: usize = 16 * 1024;
    const REQUESTS: usize = 3000;
    let started = Arc::new(AtomicUsize::new(0));
    let router = {
        let started = started.clone();
        Router::<()>::new()
            .method("work", move |_, _: NoParams| {
                // Counted when the handler runs, not when its future is made
                // (that happens for requests put in the backlog too).
                let started = started.clone();
                async move {
                    started.fetch_add(1, Ordering::Relaxed);
                    Ok("w".repeat(REPLY))
                }
            })
            .build()
            .unwrap()
    };
    let config = PeerConfig {
        max_concurrent: 4,
        backlog: 64,
        flood_limit: 1_000_000,
        write_budget: 32 * 1024,
        write_stall: Duration::from_secs(30),
        ..PeerConfig::default()
    };
    let (client, server, run) = socket_server(router, (), config.clone()).await;
    // A call the client never answers keeps the server reading whatever else comes.
    let _pending = owed_an_answer(&server);
    let (_unread, mut write) = client.into_split();
    let read_all = |sent: usize| {
        let (server, started) = (server.clone(), started.clone());
        move || {
            let stats = server.stats();
            started.load(Ordering::Relaxed) + stats.backlog + stats.refused as usize == sent
        }
    };

    // First a third of the requests: far more replies than the socket and
    // the outbox hold, so the outbox fills and requests are refused.
    let first: String = (0..REQUESTS / 3).map(|id| request_line(id as u64, "work", json!({}))).collect();
    write.write_all(first.as_bytes()).await.unwrap();
    wait_until(Duration::from_secs(10), "the first requests to be read", read_all(REQUESTS / 3)).await;
    let started_when_full = started.load(Ordering::Relaxed);
    let full = server.stats();
    assert!(full.refused > 0 && full.queued_bytes >= config.write_budget, "the outbox did not fill: {full:?}");

    // Then the rest, read while the outbox stays full (the server waits for
    // an answer of its own): none of them may start.
    let rest: String = (REQUESTS / 3..REQUESTS).map(|id| request_line(id as u64, "work", json!({}))).collect();
    write.write_all(rest.as_bytes()).await.unwrap();
    wait_until(Duration::from_secs(10), "every request to be read", read_all(REQUESTS)).await;
    let end = server.stats();
    let started_at_end = started.load(Ordering::Relaxed);
    eprintln!(
        "handler slots: {started_when_full} started when the outbox filled ({full:?}), {started_at_end} at the end ({end:?})"
    );
    assert_eq!(started_at_end, started_when_full, "requests started while the outbox was full");
    assert_eq!(end.backlog, config.backlog);
    assert_eq!(end.refused - full.refused, (REQUESTS - REQUESTS / 3) as u64, "{full:?} -> {end:?}");
    assert!(end.queued_bytes >= config.write_budget, "the outbox drained: {end:?}");
    assert!(!run.is_finished());
    drop(write);
}

/// Rules 1 and 3 together: the reader keeps reading while we wait for an
/// answer of our own, so what it reads then must not grow the outbox past its
/// budget without limit either. Each answer to garbage queued while the outbox
/// is full counts towards the flood limit, so the overshoot is at most
/// `flood_limit` small error replies, and then the peer is disconnected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_read_while_a_call_is_pending_does_not_grow_the_outbox_past_its_budget() {
    let _serial = serial().await;
    const LINES: usize = 100_000;
    let config = PeerConfig { write_budget: 64 * 1024, write_stall: Duration::from_secs(30), ..PeerConfig::default() };
    let (client, server, run) = socket_server(sleep_router(), (), config.clone()).await;
    let _pending = owed_an_answer(&server);
    let (_unread, mut write) = client.into_split();
    let writer = tokio::spawn(async move {
        // 128 KiB of garbage per write: 65 536 lines of `x`.
        let chunk = "x\n".repeat(64 * 1024);
        for _ in 0..LINES.div_ceil(64 * 1024) {
            if write.write_all(chunk.as_bytes()).await.is_err() {
                break;
            }
        }
        write
    });
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let (server, sampling) = (server.clone(), sampling.clone());
        tokio::spawn(async move {
            let mut max = 0;
            while sampling.load(Ordering::Relaxed) && !server.is_closed() {
                max = max.max(server.stats().queued_bytes);
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            max
        })
    };
    // Give the server the time to read everything it is going to read.
    let mut last = (usize::MAX, Instant::now());
    wait_until(Duration::from_secs(10), "the server to stop taking more", || {
        let queued = server.stats().queued_bytes;
        if queued != last.0 {
            last = (queued, Instant::now());
        }
        last.1.elapsed() > Duration::from_millis(500) || run.is_finished()
    })
    .await;
    sampling.store(false, Ordering::Relaxed);
    let max_queued = sampler.await.unwrap();
    eprintln!("garbage while a call is pending: max queued {max_queued} B, budget {} B", config.write_budget);
    // A -32700 reply with `id: null` is well under 128 bytes.
    let bound = config.write_budget + config.flood_limit * 128;
    assert!(
        max_queued <= bound,
        "the outbox grew to {max_queued} bytes answering garbage (budget {}, allowance {bound})",
        config.write_budget
    );
    let reason = tokio::time::timeout(Duration::from_secs(5), run).await.expect("not disconnected").unwrap();
    assert!(matches!(reason, CloseReason::Failed(ref why) if why.contains("flooding")), "{reason:?}");
    drop(writer);
}

/// The same with requests whose ids are huge: each refusal echoes its id,
/// so a count of refusals alone let 4 096 of them queue gigabytes (a
/// browser that stopped reading, with a call of ours pending, flooding
/// `ping`s with 1 MB ids: 2.1 GB). Refusals are counted in bytes too: the
/// outbox holds at most about twice its budget and the peer is cut off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_with_huge_ids_read_while_a_call_is_pending_are_cut_off_at_the_write_budget() {
    let _serial = serial().await;
    const ID: usize = 256 * 1024;
    const REQUESTS: usize = 400;
    let config = PeerConfig {
        write_budget: MIB,
        backlog_bytes: MIB,
        write_stall: Duration::from_secs(30),
        ..PeerConfig::default()
    };
    let (client, server, run) = socket_server(sleep_router(), (), config.clone()).await;
    let _pending = owed_an_answer(&server);
    let (_unread, mut write) = client.into_split();
    let writer = tokio::spawn(async move {
        let id = "7".repeat(ID);
        for _ in 0..REQUESTS {
            let line = format!("{{\"jsonrpc\":\"2.0\",\"id\":\"{id}\",\"method\":\"ping\"}}\n");
            if write.write_all(line.as_bytes()).await.is_err() {
                break;
            }
        }
        write
    });
    let mut max_queued = 0;
    let reason = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            max_queued = max_queued.max(server.stats().queued_bytes);
            if run.is_finished() {
                return run.await.unwrap();
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("not cut off; {} B queued", server.stats().queued_bytes));
    eprintln!("huge ids while a call is pending: max queued {max_queued} B, budget {} B", config.write_budget);
    assert!(matches!(reason, CloseReason::Failed(ref why) if why.contains("flooding")), "{reason:?}");
    // The budget, the refusals' budget past it and one refusal more, and the
    // kilobyte of each refusal that is not counted in bytes.
    let bound = 2 * config.write_budget + 2 * ID + 64 * 1024;
    assert!(max_queued <= bound, "the outbox grew to {max_queued} bytes (bound {bound})");
    drop(writer);
}

/// One reply larger than the socket takes, read slowly but steadily: the
/// peer is reading, so the write-stall rule must not cut it off, however
/// long the whole reply takes. (Only whole messages handed to the sink
/// counted as progress, so a 3 MiB reply read at 640 KiB/s was cut off at
/// the stall limit, part-way through.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_reply_read_slowly_is_written_to_its_end() {
    let _serial = serial().await;
    const REPLY: usize = 3 * MIB;
    let router = Router::<()>::new().method("big", |_, _: NoParams| async { Ok("x".repeat(REPLY)) }).build().unwrap();
    let config = PeerConfig { write_budget: 8 * MIB, write_stall: Duration::from_millis(500), ..PeerConfig::default() };
    let (client, _server, run) = socket_server(router, (), config).await;
    let (mut read, mut write) = client.into_split();
    write.write_all(request_line(1, "big", json!([])).as_bytes()).await.unwrap();
    let started = Instant::now();
    let mut got = Vec::new();
    let mut chunk = vec![0; 64 * 1024];
    use tokio::io::AsyncReadExt;
    while !got.ends_with(b"\n") {
        // 64 KiB every 100 ms: the whole reply takes about 5 s, ten stall limits.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let n = read.read(&mut chunk).await.unwrap();
        assert!(
            n > 0,
            "closed after {} of {REPLY} bytes, {:?} in: {:?}",
            got.len(),
            started.elapsed(),
            run.is_finished()
        );
        got.extend_from_slice(&chunk[..n]);
    }
    let reply: Value = serde_json::from_slice(&got).unwrap();
    assert_eq!(reply["result"].as_str().map(str::len), Some(REPLY));
    eprintln!("a {REPLY}-byte reply read at 640 KiB/s in {:?}, stall limit 500 ms", started.elapsed());
    assert!(!run.is_finished(), "the connection is still open");
}
