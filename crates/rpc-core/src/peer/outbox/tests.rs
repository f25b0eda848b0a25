//! The outbox's own tests: its budget, its order and its drain.

use super::*;

fn message(n: u32) -> Outbound {
    Outbound::message(Kind::Notification, format!("{n}"))
}

fn soon() -> Option<Instant> {
    Some(Instant::now() + Duration::from_secs(1))
}

/// A sink that hands items to a channel, so a test sees what was written.
fn channel_sink(capacity: usize) -> (FrameSink, tokio::sync::mpsc::Receiver<Outbound>) {
    let (tx, rx) = tokio::sync::mpsc::channel(capacity);
    let sink = futures_util::sink::unfold(tx, |tx, item: Outbound| async move {
        tx.send(item).await.map_err(|_| io::Error::from(io::ErrorKind::BrokenPipe))?;
        Ok::<_, io::Error>(tx)
    });
    (Box::pin(sink), rx)
}

#[tokio::test]
async fn a_direct_write_never_overtakes_what_is_queued() {
    let (sink, mut rx) = channel_sink(64);
    let outbox = Outbox::new(8, 1 << 20);
    let mut drain = Drain::new(sink, Duration::from_secs(30));
    // Nothing ahead: straight to the sink, flushed by the next drain.
    assert!(drain.write_now(&outbox, message(1)).is_ok());
    assert_eq!(drain.owed_direct(), 0, "a notification is not owed");
    // Something queued (another task's event): the reply queues behind it.
    outbox.push_now(message(2)).unwrap();
    let refused = drain.write_now(&outbox, message(3)).unwrap_err();
    outbox.push_now(refused).unwrap();
    std::future::poll_fn(|cx| drain.poll_drain(&outbox, cx)).await.unwrap();
    for n in 1..=3 {
        assert_eq!(rx.recv().await, Some(message(n)));
    }
    // A reply written directly is owed until flushed.
    let reply = Outbound::message(Kind::Response, "{}");
    assert!(drain.write_now(&outbox, reply).is_ok());
    assert_eq!(drain.owed_direct(), 1);
    // Flushing it is all there is to do: the drain then waits for more.
    let polled = std::future::poll_fn(|cx| Poll::Ready(drain.poll_drain(&outbox, cx))).await;
    assert!(polled.is_pending());
    assert_eq!(drain.owed_direct(), 0);
    assert_eq!(rx.recv().await, Some(Outbound::message(Kind::Response, "{}")));
    // After a close, nothing more goes out directly.
    outbox.push_now(Outbound::Close { code: 1000, reason: String::new() }).unwrap();
    drain.finish(&outbox, Duration::from_secs(1)).await;
    assert!(drain.write_now(&outbox, message(4)).is_err());
}

/// A sink that fails its first `poll_ready` and panics if polled after
/// that, as `SinkMapErr` (the WebSocket writer) does.
struct FailsOnce(bool);

impl futures_util::Sink<Outbound> for FailsOnce {
    type Error = io::Error;

    fn poll_ready(mut self: std::pin::Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        assert!(!self.0, "polled after it failed");
        self.0 = true;
        Poll::Ready(Err(io::ErrorKind::ConnectionReset.into()))
    }

    fn start_send(self: std::pin::Pin<&mut Self>, _: Outbound) -> io::Result<()> {
        unreachable!("never ready")
    }

    fn poll_flush(self: std::pin::Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        panic!("polled after it failed")
    }

    fn poll_close(self: std::pin::Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        panic!("polled after it failed")
    }
}

impl crate::codec::FrameWrite for FailsOnce {}

#[tokio::test]
async fn a_sink_that_failed_a_direct_write_is_reported_and_never_polled_again() {
    let outbox = Outbox::new(8, 1 << 20);
    let mut drain = Drain::new(Box::pin(FailsOnce(false)), Duration::from_secs(30));
    let refused = drain.write_now(&outbox, message(1)).unwrap_err();
    assert!(drain.write_now(&outbox, refused).is_err(), "a failed sink takes nothing more");
    assert!(!drain.write_json_now(&outbox, Kind::Response, b"{}"), "nor a borrowed message");
    outbox.push_now(message(2)).unwrap();
    for _ in 0..2 {
        let failed = std::future::poll_fn(|cx| drain.poll_drain(&outbox, cx)).await;
        assert!(failed.is_err());
    }
}

#[tokio::test]
async fn items_are_written_in_queue_order_and_flushed_once_per_batch() {
    let (sink, mut rx) = channel_sink(64);
    let outbox = Outbox::new(8, 1 << 20);
    let mut drain = Drain::new(sink, Duration::from_secs(30));
    for n in 0..5 {
        outbox.push(message(n), soon()).await.unwrap();
    }
    outbox.push_now(Outbound::Close { code: 1000, reason: String::new() }).unwrap();
    outbox.push_now(message(99)).unwrap();
    drain.finish(&outbox, Duration::from_secs(1)).await;
    let mut got = Vec::new();
    while let Ok(item) = rx.try_recv() {
        got.push(item);
    }
    assert_eq!(got.len(), 6, "five messages and the close, nothing after it: {got:?}");
    assert_eq!(got[..5], (0..5).map(message).collect::<Vec<_>>()[..]);
    assert_eq!(outbox.bytes(), 0, "nothing left counted after the close");
}

#[tokio::test]
async fn a_full_queue_makes_producers_wait_until_their_deadline_or_until_room_is_made() {
    let outbox = std::sync::Arc::new(Outbox::new(2, 1 << 20));
    outbox.push(message(1), soon()).await.unwrap();
    outbox.push(message(2), soon()).await.unwrap();
    assert!(outbox.is_full());
    let started = std::time::Instant::now();
    let refused = outbox.push(message(3), Some(Instant::now() + Duration::from_millis(100))).await;
    assert_eq!(refused, Err(PushError::TimedOut));
    assert!(started.elapsed() >= Duration::from_millis(90));
    // Room made by the writer lets a producer without a deadline in.
    let waiting = {
        let outbox = outbox.clone();
        tokio::spawn(async move { outbox.push(message(4), None).await })
    };
    tokio::time::sleep(Duration::from_millis(20)).await;
    let (sink, _rx) = channel_sink(64);
    let mut drain = Drain::new(sink, Duration::from_secs(30));
    let drained = std::future::poll_fn(|cx| drain.poll_drain(&outbox, cx)).await.unwrap();
    assert_eq!(drained, Drained::Progress);
    assert!(waiting.await.unwrap().is_ok());
    outbox.close();
    assert_eq!(outbox.push(message(5), None).await, Err(PushError::Closed));
}

#[tokio::test]
async fn the_budget_counts_bytes_and_owed_replies_until_they_are_flushed() {
    let outbox = Outbox::new(1000, 1000);
    let big = Outbound::message(Kind::Response, vec![b'x'; 600]);
    outbox.push(big.clone(), soon()).await.unwrap();
    assert!(!outbox.is_full());
    // The second one goes past the budget (a queue with room takes one more).
    outbox.push(big.clone(), soon()).await.unwrap();
    assert!(outbox.is_full());
    assert_eq!((outbox.bytes(), outbox.owed()), (1200, 2));
    let refused = outbox.push(message(1), Some(Instant::now() + Duration::from_millis(20))).await;
    assert_eq!(refused, Err(PushError::TimedOut));
    let (sink, mut rx) = channel_sink(64);
    let mut drain = Drain::new(sink, Duration::from_secs(30));
    std::future::poll_fn(|cx| drain.poll_drain(&outbox, cx)).await.unwrap();
    assert_eq!((outbox.bytes(), outbox.owed()), (0, 0));
    assert!(!outbox.is_full());
    assert_eq!(rx.recv().await, Some(big));
}
