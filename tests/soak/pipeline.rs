//! A pipelining NDJSON client for the SIGTERM tests: it keeps up to a window
//! of requests in flight on one connection (TCP or Unix), notes for each one
//! whether its write finished before the signal was sent, and reads every
//! answer until the daemon closes the connection.

use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::Value;

/// A connection that can be split into a reading and a writing half.
pub trait Duplex: std::io::Read + Write + Send + Sized + 'static {
    fn split(&self) -> Self;
}

impl Duplex for std::net::TcpStream {
    fn split(&self) -> Self {
        self.try_clone().unwrap()
    }
}

impl Duplex for std::os::unix::net::UnixStream {
    fn split(&self) -> Self {
        self.try_clone().unwrap()
    }
}

/// Set just before the signal is sent: a write that finished while it was
/// still clear was sent before the signal.
#[derive(Clone, Default)]
pub struct SignalMark(Arc<AtomicBool>);

impl SignalMark {
    pub fn set(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    fn is_set(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

#[derive(Default)]
struct Window {
    in_flight: Mutex<u64>,
    changed: Condvar,
    closed: AtomicBool,
}

/// What one pipelining connection saw.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Ids whose write finished before the signal.
    pub sent_before: Vec<u64>,
    pub sent_after: u64,
    /// Every answer, by id.
    pub answers: HashMap<u64, Value>,
    /// How the connection ended, if not by a clean end of file.
    pub read_error: Option<String>,
}

impl Outcome {
    /// Problems with the requests sent before the signal: unanswered, or
    /// answered with anything but a result or a `shutting_down` refusal.
    pub fn problems(&self, name: &str) -> Vec<String> {
        let mut problems = Vec::new();
        for id in &self.sent_before {
            match self.answers.get(id) {
                None => problems.push(format!("{name}: request {id}, sent before the signal, got no answer")),
                Some(answer) if answer.get("result").is_some() => {}
                Some(answer) if answer["error"]["data"]["reason"] == "shutting_down" => {}
                Some(answer) => problems.push(format!("{name}: request {id} answered {answer}")),
            }
        }
        if let (Some(error), false) = (&self.read_error, problems.is_empty()) {
            problems.push(format!("{name}: the connection ended with {error}"));
        }
        problems
    }

    pub fn refused(&self) -> usize {
        self.answers.values().filter(|a| a["error"]["data"]["reason"] == "shutting_down").count()
    }
}

/// One connection's writer and reader threads.
pub struct Pipeline {
    writer: JoinHandle<(Vec<u64>, u64)>,
    reader: JoinHandle<(HashMap<u64, Value>, Option<String>)>,
    answered: Arc<AtomicU64>,
}

impl Pipeline {
    /// Sends `request(id)` for ids 1, 2, ... with at most `window` in flight
    /// until the connection closes.
    pub fn start<S: Duplex>(
        stream: S,
        window: u64,
        mark: SignalMark,
        request: impl Fn(u64) -> Value + Send + 'static,
    ) -> Pipeline {
        let state = Arc::new(Window::default());
        let answered = Arc::new(AtomicU64::new(0));
        let read_half = stream.split();
        let reader = {
            let (state, answered) = (state.clone(), answered.clone());
            std::thread::spawn(move || {
                let mut reader = BufReader::new(read_half);
                let mut answers = HashMap::new();
                let error = loop {
                    let mut line = String::new();
                    match reader.read_line(&mut line) {
                        Ok(0) => break None,
                        Ok(_) => {
                            let value: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
                            // Notifications (a goodbye, events) are not answers.
                            let Some(id) = value["id"].as_u64() else { continue };
                            answers.insert(id, value);
                            answered.fetch_add(1, Ordering::Relaxed);
                            *state.in_flight.lock() -= 1;
                            state.changed.notify_all();
                        }
                        Err(e) => break Some(e.to_string()),
                    }
                };
                state.closed.store(true, Ordering::SeqCst);
                state.changed.notify_all();
                (answers, error)
            })
        };
        let writer = std::thread::spawn(move || {
            let mut stream = stream;
            let (mut before, mut after) = (Vec::new(), 0);
            for id in 1.. {
                {
                    let mut in_flight = state.in_flight.lock();
                    while *in_flight >= window && !state.closed.load(Ordering::SeqCst) {
                        state.changed.wait_for(&mut in_flight, Duration::from_millis(100));
                    }
                    if state.closed.load(Ordering::SeqCst) {
                        break;
                    }
                    *in_flight += 1;
                }
                let mut line = serde_json::to_vec(&request(id)).unwrap();
                line.push(b'\n');
                if stream.write_all(&line).is_err() {
                    break;
                }
                if mark.is_set() {
                    after += 1;
                } else {
                    before.push(id);
                }
            }
            (before, after)
        });
        Pipeline { writer, reader, answered }
    }

    pub fn answered(&self) -> u64 {
        self.answered.load(Ordering::Relaxed)
    }

    /// Waits for the connection to end; what it saw.
    pub fn finish(self) -> Outcome {
        let (answers, read_error) = self.reader.join().expect("the reader does not panic");
        let (sent_before, sent_after) = self.writer.join().expect("the writer does not panic");
        Outcome { sent_before, sent_after, answers, read_error }
    }
}

/// Sends `request` and reads its one-line answer byte by byte (nothing read
/// past it, so the stream can be handed to a [`Pipeline`] afterwards).
pub fn exchange<S: Duplex>(stream: &mut S, request: &Value) -> Value {
    let mut line = serde_json::to_vec(request).unwrap();
    line.push(b'\n');
    stream.write_all(&line).unwrap();
    let mut answer = Vec::new();
    let mut byte = [0u8; 1];
    while byte[0] != b'\n' {
        assert_eq!(stream.read(&mut byte).unwrap(), 1, "the connection closed before answering {request}");
        answer.push(byte[0]);
    }
    serde_json::from_slice(&answer).unwrap()
}
