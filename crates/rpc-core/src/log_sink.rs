//! Where a daemon's log lines go: a bounded queue in memory and one thread
//! that writes it to stderr, so that no log reader can hold up, stop or kill
//! the daemon.
//!
//! Why not write to stderr from the thread that logs: a pipe whose reader
//! stopped reading (a paused pager, a stuck journald) blocks that write, and
//! with it the connection or signal task that logged; a pipe whose reader has
//! gone fails it, and tracing-subscriber then reports the failure with
//! `eprintln!`, which panics on the same broken pipe and takes the task with
//! it (the broker's signal task, so SIGTERM was no longer heard). Here a line
//! is queued in a few hundred nanoseconds whatever the reader does; when the
//! queue is full, or the write fails, the line is dropped and counted
//! ([`dropped_lines`]), and once writing works again the first thing written
//! is a warning saying how many were lost.
//!
//! Why not tracing-appender's `non_blocking`: its queue is bounded in lines,
//! not bytes (a child's stderr line can be long), it does not count lines
//! lost to a failed write, and its worker reports a failed flush with
//! `eprintln!`.

use std::collections::VecDeque;
use std::io::{self, Write};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

/// Bytes of log lines the queue holds before it drops new ones.
pub const QUEUE_BYTES: usize = 1024 * 1024;

/// The process's one sink, started by the first [`writer`].
static SINK: OnceLock<Sink> = OnceLock::new();

struct Sink {
    queue: Mutex<Queue>,
    /// Lines were queued.
    queued: Condvar,
    /// The writer thread finished a batch (for [`flush`]).
    written: Condvar,
    dropped: AtomicU64,
}

#[derive(Default)]
struct Queue {
    lines: VecDeque<Vec<u8>>,
    /// Bytes queued or being written.
    bytes: usize,
    /// The writer thread is writing a batch.
    writing: bool,
}

/// A writer for one log line (tracing-subscriber's `MakeWriter` is any
/// `Fn() -> impl Write`: pass `rpc_core::log_sink::writer`). A write always
/// succeeds: the line is queued, or dropped and counted.
#[derive(Clone, Copy, Debug)]
pub struct LineWriter(());

/// The writer of the process's sink, starting its thread the first time.
pub fn writer() -> LineWriter {
    sink();
    LineWriter(())
}

/// How many log lines were dropped since the process started: the queue was
/// full (the reader is not keeping up) or writing failed (the reader is gone,
/// the disk is full).
pub fn dropped_lines() -> u64 {
    SINK.get().map_or(0, |sink| sink.dropped.load(Ordering::Relaxed))
}

/// Waits until every queued line is written (or dropped), at most `limit`:
/// the last lines before the process exits.
pub fn flush(limit: Duration) {
    let Some(sink) = SINK.get() else { return };
    let deadline = Instant::now() + limit;
    let mut queue = sink.queue.lock();
    while !queue.lines.is_empty() || queue.writing {
        if sink.written.wait_until(&mut queue, deadline).timed_out() {
            return;
        }
    }
}

/// Says something on stderr now, after the lines already queued (a start-up
/// failure, just before the process exits), ignoring a stderr that fails.
pub fn report(message: std::fmt::Arguments<'_>) {
    flush(FINAL_FLUSH);
    let _ = writeln!(io::stderr(), "{message}");
}

/// How long the last lines get when the process exits.
pub const FINAL_FLUSH: Duration = Duration::from_secs(1);

impl Write for LineWriter {
    fn write(&mut self, line: &[u8]) -> io::Result<usize> {
        sink().push(line);
        Ok(line.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn sink() -> &'static Sink {
    SINK.get_or_init(|| {
        let sink = Sink {
            queue: Mutex::default(),
            queued: Condvar::new(),
            written: Condvar::new(),
            dropped: AtomicU64::new(0),
        };
        // Without its thread the sink drops every line, counted: a daemon
        // that cannot start a thread has other problems, and still serves.
        let started = std::thread::Builder::new().name("log-writer".into()).spawn(|| write_lines(io::stderr()));
        if started.is_err() {
            sink.dropped.store(u64::MAX / 2, Ordering::Relaxed);
        }
        sink
    })
}

impl Sink {
    fn push(&self, line: &[u8]) {
        let mut queue = self.queue.lock();
        if queue.bytes + line.len() > QUEUE_BYTES {
            drop(queue);
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        queue.bytes += line.len();
        queue.lines.push_back(line.to_vec());
        drop(queue);
        self.queued.notify_one();
    }
}

/// The writer thread: takes what is queued, writes it, and says what was
/// lost once writing works again.
fn write_lines(mut out: impl Write) {
    let sink = sink();
    let mut reported = 0;
    let mut batch = VecDeque::new();
    loop {
        {
            let mut queue = sink.queue.lock();
            queue.writing = false;
            sink.written.notify_all();
            while queue.lines.is_empty() {
                sink.queued.wait(&mut queue);
            }
            std::mem::swap(&mut queue.lines, &mut batch);
            queue.writing = true;
        }
        let mut bytes = 0;
        let mut wrote_any = false;
        for line in batch.drain(..) {
            bytes += line.len();
            match out.write_all(&line) {
                Ok(()) => wrote_any = true,
                Err(_) => {
                    sink.dropped.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        sink.queue.lock().bytes -= bytes;
        let dropped = sink.dropped.load(Ordering::Relaxed);
        if wrote_any && dropped > reported {
            // Queued like any line, so it is written in the daemon's format.
            tracing::warn!(
                lost = dropped - reported,
                total = dropped,
                "log lines were dropped: the log's reader was not keeping up or had gone"
            );
            reported = dropped;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_past_the_queue_are_dropped_and_counted_and_a_write_never_fails() {
        let sink = Sink {
            queue: Mutex::default(),
            queued: Condvar::new(),
            written: Condvar::new(),
            dropped: AtomicU64::new(0),
        };
        let line = vec![b'x'; 1000];
        for _ in 0..QUEUE_BYTES / 1000 + 10 {
            sink.push(&line);
        }
        assert_eq!(sink.dropped.load(Ordering::Relaxed), 10);
        assert!(sink.queue.lock().bytes <= QUEUE_BYTES);
    }
}
