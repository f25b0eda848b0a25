//! The state of the daemon, at the bottom of the tree: what every connection
//! of both servers shares ([`App`]: the Ruby runtime, the path policy, the
//! token) and what each connection keeps for itself ([`BridgeConn`],
//! [`ReplConn`], and the [`Handshake`] and [`QueueSeat`] both have). No method and no server
//! code here: the method tables and the wiring import this file, never the
//! reverse.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::Mutex;
use rpc_core::peer::ReplyRoom;
use rpc_core::{Ctx, PeerHandle, RpcError};

use crate::errors;
use crate::paths::PathPolicy;
use crate::runtime::Runtime;

/// What every connection of both servers shares.
pub struct App {
    pub runtime: Runtime,
    pub policy: PathPolicy,
    pub auth_token: Option<String>,
    pub eval_timeout: Duration,
    /// Also the cap on one `read_file` reply.
    pub max_message: usize,
}

impl App {
    pub fn token_required(&self) -> bool {
        self.auth_token.is_some()
    }
}

/// Per-connection state of the bridge.
#[derive(Debug, Default)]
pub struct BridgeConn {
    pub handshake: Handshake,
    pub seat: QueueSeat,
    /// The canonical `workspace` given in `hello`: an extra root for this
    /// connection, and the base of its relative paths.
    workspace: Mutex<Option<PathBuf>>,
}

impl BridgeConn {
    pub fn workspace(&self) -> Option<PathBuf> {
        self.workspace.lock().clone()
    }

    pub fn set_workspace(&self, dir: Option<PathBuf>) {
        *self.workspace.lock() = dir;
    }
}

/// Per-connection state of the REPL server.
#[derive(Debug, Default)]
pub struct ReplConn {
    pub handshake: Handshake,
    pub seat: QueueSeat,
    /// The session id given in the first successful `hello`; a later hello
    /// on the same connection gets the same one.
    pub session: OnceLock<String>,
}

/// Room held in the outbox while an evaluation runs: a typical reply. The
/// largest (a 4 MiB value and 1 MiB of output, up to six times that once
/// escaped) cannot be held ahead: room for it would fill the outbox for the
/// whole evaluation, and a connection with a full outbox reads nothing, so
/// its `ping`s and file tools would wait for the evaluation.
const EVAL_REPLY_ROOM: usize = 64 * 1024;

/// A connection's one seat in the runtime's queue: its evaluations enter the
/// queue one at a time, in arrival order, each once the connection's outbox
/// has room for its reply. The engine starts up to 32 handlers a connection;
/// without the seat each would wait for the runtime and then queue a reply
/// of up to ~30 MiB for a client that may never read them (839 MB for one
/// such client); with it that client holds its write budget and a reply or
/// two (one in the transport's buffer, one queued). Calls that do not
/// evaluate never wait for it.
#[derive(Debug, Default)]
pub struct QueueSeat(tokio::sync::Mutex<()>);

/// The seat taken, with room held in the outbox; both are given back when
/// the handler returns, as its reply is queued.
pub struct Seated<'a> {
    _seat: tokio::sync::MutexGuard<'a, ()>,
    _room: ReplyRoom,
}

impl QueueSeat {
    /// Waits for this connection's evaluation before (FIFO), then for room
    /// in its outbox (a client that is not reading gets none).
    pub async fn take(&self, peer: &PeerHandle) -> Result<Seated<'_>, RpcError> {
        let seat = self.0.lock().await;
        let room =
            peer.reserve_reply(EVAL_REPLY_ROOM).await.map_err(|_| RpcError::internal("the connection closed"))?;
        Ok(Seated { _seat: seat, _room: room })
    }
}

/// Failed `hello`s after which a connection is closed.
pub const MAX_FAILED_HELLOS: u32 = 3;

/// The connection states that have a [`Handshake`] (both servers').
pub trait Handshaking: Send + Sync + 'static {
    fn handshake(&self) -> &Handshake;
}

impl Handshaking for BridgeConn {
    fn handshake(&self) -> &Handshake {
        &self.handshake
    }
}

impl Handshaking for ReplConn {
    fn handshake(&self) -> &Handshake {
        &self.handshake
    }
}

/// The handshake state of one connection (either server): whether it said a
/// successful `hello`, how many failed, and the replies it is owed, which
/// the close after the last failure waits for.
#[derive(Debug, Default)]
pub struct Handshake {
    identified: AtomicBool,
    failures: AtomicU32,
    /// Handlers made for this connection's requests and not finished yet.
    owed: AtomicUsize,
    /// Set by the last failed hello: the connection closes once nothing is owed.
    closing: AtomicBool,
}

impl Handshake {
    pub fn is_identified(&self) -> bool {
        self.identified.load(Ordering::Acquire)
    }

    /// Whether too many hellos failed: the connection closes once the replies
    /// it is owed are written, and takes no new work meanwhile.
    pub fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }

    /// Records a successful `hello`; the connection no longer counts against
    /// the listener's share of connections without a handshake, and its
    /// handshake deadline no longer applies.
    pub fn identify<S>(&self, cx: &Ctx<S>) {
        self.identified.store(true, Ordering::Release);
        cx.peer.handshake_done();
    }

    /// The first step of every `hello`: once [`MAX_FAILED_HELLOS`] have
    /// failed, the rest are refused without their token being looked at.
    /// Hellos in one batch run side by side, each before the connection can
    /// close, so without this a batch of 1000 would be 1000 token guesses.
    pub fn admit<S>(&self, cx: &Ctx<S>) -> Result<(), RpcError> {
        if self.failures.load(Ordering::Acquire) < MAX_FAILED_HELLOS {
            return Ok(());
        }
        Err(self.fail(cx, errors::too_many_failed_hellos()))
    }

    /// Counts a failed `hello`; from the third on, the connection closes once
    /// every reply owed to it (this one, its batch's, requests read before)
    /// is written: the last [`OwedReply`] to finish closes it. Returns the
    /// error unchanged.
    pub fn fail<S>(&self, cx: &Ctx<S>, error: RpcError) -> RpcError {
        let failures = self.failures.fetch_add(1, Ordering::AcqRel) + 1;
        if failures == MAX_FAILED_HELLOS {
            tracing::warn!(conn = cx.peer.conn_id(), failures, "too many failed hellos; closing the connection");
        }
        if failures >= MAX_FAILED_HELLOS {
            self.closing.store(true, Ordering::Release);
        }
        error
    }
}

/// One reply owed to a connection, from the moment its request is read (its
/// handler made, even if it waits in the backlog) until its handler returns.
/// The engine closes a connection right after the reply that asked for it,
/// dropping handlers still running; so the close after too many failed
/// hellos is asked for by whichever owed reply finishes last.
pub struct OwedReply<S: Handshaking> {
    state: Arc<S>,
    peer: PeerHandle,
    /// A notification's handler (an id-less legacy call) writes its answer
    /// itself, so the engine writes no reply after it to close behind.
    request: bool,
}

impl<S: Handshaking> OwedReply<S> {
    pub fn new(state: &Arc<S>, peer: &PeerHandle, request: bool) -> Self {
        state.handshake().owed.fetch_add(1, Ordering::AcqRel);
        OwedReply { state: state.clone(), peer: peer.clone(), request }
    }
}

impl<S: Handshaking> Drop for OwedReply<S> {
    fn drop(&mut self) {
        let handshake = self.state.handshake();
        if handshake.owed.fetch_sub(1, Ordering::AcqRel) == 1 && handshake.is_closing() {
            if self.request {
                self.peer.close_after_reply();
            } else {
                // Its answer is queued already: closing writes what is queued first.
                self.peer.close(1000, "");
            }
        }
    }
}
