//! What goes into the agent's terminal: the typed prompt, then the keys of
//! `write_pty`, in order, written by one task per run. The keys waiting are
//! bounded in bytes; a client never waits for the terminal to take them.
//!
//! A terminal takes input only as fast as its agent reads it (a few KiB
//! beyond that), and an agent that never reads leaves the writer waiting
//! for room until the run ends. That wait must cost nothing and hold up
//! nothing: once the agent has gone, the kernel reports the terminal
//! writable (hung up) for good while every write still finds it full, and a
//! writer that retried at once would never yield its thread, which also
//! drives the loop's timers, signals and sockets. So the writer stops when
//! the terminal hangs up, pauses after a write that took nothing, and is
//! aborted when the agent exits or is stopped.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::{Buf, Bytes};
use tokio::io::unix::AsyncFd;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Most bytes of keys waiting for the terminal at once (four `write_pty`
/// calls of the most each may carry): past it, keys are refused, not queued.
pub const KEYS_QUEUED_MAX: usize = 256 * 1024;
/// After a write that found no room, how long before the next try: the
/// terminal's readiness alone cannot be trusted to wait (see the module doc).
const FULL_PAUSE: Duration = Duration::from_millis(10);

/// The running agent's terminal, as clients type into it.
#[derive(Clone, Debug)]
pub struct TerminalInput {
    keys: mpsc::UnboundedSender<Bytes>,
    /// Bytes sent and not yet written, kept within [`KEYS_QUEUED_MAX`].
    queued: Arc<AtomicUsize>,
}

/// Why keys were not taken.
#[derive(Debug, PartialEq, Eq)]
pub enum KeysRefused {
    /// [`KEYS_QUEUED_MAX`] bytes already wait: the agent does not read.
    Full,
    /// The run has ended.
    Gone,
}

impl TerminalInput {
    /// Queues `keys` behind those before, at once, or refuses them.
    pub fn send(&self, keys: Bytes) -> Result<(), KeysRefused> {
        let len = keys.len();
        self.queued
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |q| (q + len <= KEYS_QUEUED_MAX).then_some(q + len))
            .map_err(|_| KeysRefused::Full)?;
        self.keys.send(keys).map_err(|_| KeysRefused::Gone)
    }
}

/// The task writing one run's terminal input; aborted when dropped.
#[derive(Debug)]
pub struct TerminalWriter(JoinHandle<()>);

impl TerminalWriter {
    /// Starts writing `typed` (the prompt, when it is typed), then the keys
    /// sent through the returned input.
    pub fn start(master: Arc<AsyncFd<OwnedFd>>, typed: Option<Bytes>) -> (TerminalInput, TerminalWriter) {
        let (keys, received) = mpsc::unbounded_channel();
        let queued = Arc::new(AtomicUsize::new(0));
        let task = tokio::spawn(write(master, typed, received, queued.clone()));
        (TerminalInput { keys, queued }, TerminalWriter(task))
    }

    /// Abandons what is left to write: the agent has exited, or is being stopped.
    pub fn stop(&self) {
        self.0.abort();
    }
}

impl Drop for TerminalWriter {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn write(
    master: Arc<AsyncFd<OwnedFd>>,
    typed: Option<Bytes>,
    mut keys: mpsc::UnboundedReceiver<Bytes>,
    queued: Arc<AtomicUsize>,
) {
    if let Some(prompt) = typed
        && let Err(e) = write_all(&master, prompt).await
    {
        tracing::debug!(error = %e, "the agent's terminal took only part of the prompt");
        return;
    }
    while let Some(bytes) = keys.recv().await {
        let len = bytes.len();
        let written = write_all(&master, bytes).await;
        queued.fetch_sub(len, Ordering::AcqRel);
        if written.is_err() {
            return;
        }
    }
}

/// Writes all of `bytes`, waiting for room without spinning; an error once
/// the terminal has hung up (nothing will ever read it).
async fn write_all(master: &AsyncFd<OwnedFd>, mut bytes: Bytes) -> io::Result<()> {
    while bytes.has_remaining() {
        let mut guard = master.writable().await?;
        if guard.ready().is_write_closed() {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        match guard.try_io(|fd| nix::unistd::write(fd.get_ref(), &bytes).map_err(io::Error::from)) {
            Ok(Ok(0)) | Err(_) => tokio::time::sleep(FULL_PAUSE).await,
            Ok(Ok(n)) => bytes.advance(n),
            Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
            Ok(Err(e)) => return Err(e),
        }
    }
    Ok(())
}
