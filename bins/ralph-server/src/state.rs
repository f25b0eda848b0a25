//! The state every connection and the loop share: the status fields of the
//! seed's `get_status`, the last lines of output, the requests clients made
//! of the loop, and the events published when any of it changes; and its
//! saved form, `.ralph/state.json` ([`SavedState`]), from which a new `run`
//! resumes.
//!
//! Every change of a status field goes through [`Session::change`], which
//! publishes one `state_change` event with only the fields that changed and
//! saves `.ralph/state.json`: clients and the file can never disagree.
//!
//! Events go into one shared ring ([`rpc_core::fanout::ring`]), serialised
//! once, a read of the terminal's lines as one batch; each subscriber's pump
//! reads it at its own cursor. The events end with the loop
//! ([`Session::end_events`]): each subscriber gets what is left for it, to
//! the last event, how the loop ended, before the server lets any connection
//! close.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use rpc_core::PeerHandle;
use rpc_core::child::LineRing;
use rpc_core::fanout::Topics;
use rpc_core::fanout::ring::{self, Ring, SharedTopics};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use tokio::sync::Notify;
use tokio_util::task::TaskTracker;

use crate::files;
use crate::injected::{PendingPrompts, Refused};
use crate::terminal::TerminalInput;
use crate::timestamp;

/// Lines kept for `recent_output`.
pub const RECENT_LINES: usize = 200;
/// Longest line kept whole in `recent_output` (a progress bar without
/// newlines must not push out the lines before it).
const RECENT_LINE_BYTES: usize = 8 * 1024;

/// The event ring's bounds, shared by every subscriber: what each
/// subscriber's own queue held before (a burst this long reaches a
/// subscriber that falls behind while it lasts, whole), now for all of them.
pub const RING_EVENTS: usize = 1024;
pub const RING_BYTES: usize = 4 * 1024 * 1024;
/// The ring's topics, in the order of their indices.
const OUTPUT: u8 = 0;
const STATE_CHANGE: u8 = 1;
const TOPICS: [&str; 2] = ["output", "state_change"];

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Starting,
    Running,
    Stopping,
    Checkpointed,
    Stopped,
    Completed,
    Failed,
}

/// The fields of `get_status` that change.
#[derive(Clone, Debug, PartialEq)]
pub struct Fields {
    pub iteration: u32,
    pub current_story: Option<String>,
    pub status: Status,
    /// Why the loop ended (`max_iterations`, `stop_requested`, ...); only in
    /// `state_change` events and state.json, not in the seed's `get_status`.
    pub reason: Option<String>,
    pub interactive_mode: bool,
    pub started_at: String,
    pub updated_at: String,
}

/// What `.ralph/state.json` holds: enough to resume.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct SavedState {
    pub iteration: u32,
    pub status: Option<Status>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default)]
    pub current_story: Option<String>,
    #[serde(default)]
    pub started_at: Option<String>,
    #[serde(default)]
    pub updated_at: Option<String>,
    /// Instructions injected but not yet given to the agent, as versions
    /// before `.ralph/injected.jsonl` kept them: read, never written.
    #[serde(default, skip_serializing)]
    pub pending_prompt: Option<String>,
    #[serde(default)]
    pub consecutive_failures: u32,
}

/// The most of `state.json` that is read.
pub const MAX_STATE: usize = 16 * 1024 * 1024;

impl SavedState {
    pub fn path(task_dir: &Path) -> PathBuf {
        task_dir.join(".ralph/state.json")
    }

    /// The saved state, `None` when there is none; an unreadable one is an error.
    pub fn load(task_dir: &Path) -> io::Result<Option<SavedState>> {
        let path = SavedState::path(task_dir);
        // Only a regular file, and within the limit (state.json is a few
        // hundred bytes; an older version's pending prompt made it larger).
        match rpc_core::files::read_regular(&path, MAX_STATE) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{}: {e}", path.display()))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io::Error::new(e.kind(), format!("{}: {e}", path.display()))),
        }
    }

    /// Whether a new `run` continues this one: after a checkpoint, or after a
    /// run that never reached a final status (it crashed or was killed).
    pub fn resumable(&self) -> bool {
        matches!(self.status, Some(Status::Checkpointed | Status::Starting | Status::Running | Status::Stopping))
    }

    /// Replaces the file whole ([`files::replace`]): a crash leaves the old state or the new.
    pub fn save(&self, task_dir: &Path) -> io::Result<()> {
        let mut json = serde_json::to_vec_pretty(self).map_err(io::Error::other)?;
        json.push(b'\n');
        files::replace(&SavedState::path(task_dir), &json, 0o644)
    }
}

/// What clients asked of the loop, taken by the loop at its next step.
/// (Injected prompts are [`PendingPrompts`], with a file of their own.)
#[derive(Debug, Default)]
pub struct Requests {
    /// `Some(force)` once `stop` was called.
    pub stop: Option<bool>,
    pub checkpoint: bool,
}

/// The seed's `get_status` result, field for field.
#[derive(Debug, Serialize)]
pub struct StatusReply {
    pub task_name: String,
    pub task_dir: String,
    pub iteration: u32,
    pub max_iterations: u32,
    pub current_story: Option<String>,
    pub agent: String,
    pub status: Status,
    pub interactive_mode: bool,
    pub started_at: String,
    pub updated_at: String,
    pub recent_output: Vec<String>,
}

pub struct Session {
    pub task_name: String,
    pub task_dir: PathBuf,
    pub max_iterations: u32,
    agent: Mutex<String>,
    fields: Mutex<Fields>,
    consecutive_failures: Mutex<u32>,
    recent: LineRing,
    requests: Mutex<Requests>,
    /// Held while an injection is written to its file: the next one waits,
    /// so the file keeps the order in which they were accepted.
    injected: Mutex<PendingPrompts>,
    /// Woken whenever a client makes a request of the loop.
    pub wake: Notify,
    /// The running agent's terminal input, while one runs.
    terminal: Mutex<Option<TerminalInput>>,
    /// The event stream, closed once the loop has ended and its last event
    /// is in (subscribers' pumps then end when they have read it).
    events: Arc<Ring>,
    /// Each subscriber's pump, forwarding its part of the ring to its connection.
    pumps: TaskTracker,
    /// Held while state.json is written: saves come from the loop and from
    /// every client's requests at once, and share one temporary file.
    saving: Mutex<()>,
}

impl Session {
    pub fn new(
        task_name: String,
        task_dir: PathBuf,
        max_iterations: u32,
        agent: String,
        saved: &SavedState,
        injected: PendingPrompts,
    ) -> Session {
        let now = timestamp::now();
        let resume = saved.resumable();
        let fields = Fields {
            iteration: if resume { saved.iteration } else { 0 },
            current_story: None,
            status: Status::Starting,
            reason: None,
            interactive_mode: false,
            started_at: saved.started_at.clone().filter(|_| resume).unwrap_or_else(|| now.clone()),
            updated_at: now,
        };
        Session {
            task_name,
            task_dir,
            max_iterations,
            agent: Mutex::new(agent),
            fields: Mutex::new(fields),
            consecutive_failures: Mutex::new(if resume { saved.consecutive_failures } else { 0 }),
            recent: LineRing::new(RECENT_LINES, RECENT_LINES * RECENT_LINE_BYTES),
            requests: Mutex::new(Requests::default()),
            injected: Mutex::new(injected),
            wake: Notify::new(),
            terminal: Mutex::new(None),
            events: Arc::new(Ring::new(&TOPICS, RING_EVENTS, RING_BYTES)),
            pumps: TaskTracker::new(),
            saving: Mutex::new(()),
        }
    }

    pub fn fields(&self) -> Fields {
        self.fields.lock().clone()
    }

    pub fn interactive(&self) -> bool {
        self.fields.lock().interactive_mode
    }

    pub fn agent(&self) -> String {
        self.agent.lock().clone()
    }

    pub fn set_agent(&self, agent: &str) {
        *self.agent.lock() = agent.to_owned();
    }

    pub fn snapshot(&self) -> StatusReply {
        let f = self.fields();
        StatusReply {
            task_name: self.task_name.clone(),
            task_dir: self.task_dir.display().to_string(),
            iteration: f.iteration,
            max_iterations: self.max_iterations,
            current_story: f.current_story,
            agent: self.agent(),
            status: f.status,
            interactive_mode: f.interactive_mode,
            started_at: f.started_at,
            updated_at: f.updated_at,
            recent_output: self.recent.tail(RECENT_LINES),
        }
    }

    /// Applies `edit` to the status fields; if any changed, stamps
    /// `updated_at`, publishes a `state_change` with the changed fields only
    /// and saves state.json.
    pub fn change(&self, edit: impl FnOnce(&mut Fields)) {
        let mut fields = self.fields.lock();
        let before = fields.clone();
        edit(&mut fields);
        let mut data = Map::new();
        if fields.iteration != before.iteration {
            data.insert("iteration".into(), json!(fields.iteration));
        }
        if fields.current_story != before.current_story {
            data.insert("current_story".into(), json!(fields.current_story));
        }
        if fields.status != before.status {
            data.insert("status".into(), json!(fields.status));
        }
        if fields.reason != before.reason && fields.reason.is_some() {
            data.insert("reason".into(), json!(fields.reason));
        }
        if fields.interactive_mode != before.interactive_mode {
            data.insert("interactive_mode".into(), json!(fields.interactive_mode));
        }
        if data.is_empty() {
            return;
        }
        let now = timestamp::now();
        fields.updated_at = now.clone();
        // Published under the lock, so events leave in the order the changes happened.
        self.events.publish(STATE_CHANGE, [event("state_change", &now, &Value::Object(data))]);
        drop(fields);
        self.save();
    }

    pub fn record_failure(&self, failed: bool) -> u32 {
        let mut count = self.consecutive_failures.lock();
        *count = if failed { *count + 1 } else { 0 };
        *count
    }

    /// Saves state.json; a failure is logged, not fatal (the loop goes on).
    /// One save at a time, each of the state as it is then: two at once would
    /// race on the temporary file, and a stale snapshot could land last.
    pub fn save(&self) {
        let _saving = self.saving.lock();
        let fields = self.fields();
        let state = SavedState {
            iteration: fields.iteration,
            status: Some(fields.status),
            reason: fields.reason.clone(),
            current_story: fields.current_story.clone(),
            started_at: Some(fields.started_at.clone()),
            updated_at: Some(fields.updated_at.clone()),
            pending_prompt: None,
            consecutive_failures: *self.consecutive_failures.lock(),
        };
        if let Err(e) = state.save(&self.task_dir) {
            tracing::warn!(error = %e, "cannot save .ralph/state.json");
        }
    }

    /// Pieces of agent output read together (one read of the terminal), as
    /// one batch of `output` events with one timestamp: `(text, partial)`,
    /// `text` as the terminal showed it, ANSI escapes kept; `partial`: the
    /// line has not ended yet (a prompt, typed keys), the rest follows in
    /// later events.
    pub fn publish_output<'t>(&self, pieces: impl IntoIterator<Item = (&'t str, bool)>) {
        let now = timestamp::now();
        let events = pieces.into_iter().map(|(text, partial)| {
            let data = if partial { json!({"line": text, "partial": true}) } else { json!({"line": text}) };
            event("output", &now, &data)
        });
        self.events.publish(OUTPUT, events);
    }

    /// Subscribes a connection to `topics` from the next event on: a pump
    /// forwards its events to `peer` until either ends. `None` once the
    /// events have ended.
    pub fn subscribe(&self, topics: Topics, peer: PeerHandle) -> Option<SharedTopics> {
        if self.pumps.is_closed() {
            return None;
        }
        let topics = SharedTopics::new(topics);
        self.pumps.spawn(ring::pump(self.events.clone(), self.events.cursor(), topics.clone(), peer, |count| {
            event("dropped", &timestamp::now(), &json!({ "count": count })).to_vec()
        }));
        Some(topics)
    }

    /// Ends the event stream after the loop's last event: each pump forwards
    /// what is left for its subscriber, that last event included, to its
    /// connection, then ends. Waits for that, at most `within` (a subscriber
    /// that does not read is not waited for longer); says whether all did.
    pub async fn end_events(&self, within: Duration) -> bool {
        // Each pump ends once it has read the last event.
        self.events.close();
        self.pumps.close();
        tokio::time::timeout(within, self.pumps.wait()).await.is_ok()
    }

    /// A whole line for `recent_output`, ANSI escapes already stripped.
    pub fn remember_line(&self, line: &str) {
        self.recent.push(line);
    }

    /// The line being written, as far as it has been published, ANSI
    /// escapes already stripped: it stands last in `recent_output` (someone
    /// attaching to an agent that waits at a prompt sees the prompt) until
    /// [`Session::remember_line`] gets the whole line.
    pub fn remember_partial(&self, so_far: &str) {
        self.recent.set_partial(so_far);
    }

    pub fn requests(&self) -> parking_lot::MutexGuard<'_, Requests> {
        self.requests.lock()
    }

    /// Records a request and wakes the loop.
    pub fn request(&self, make: impl FnOnce(&mut Requests)) {
        make(&mut self.requests.lock());
        self.wake.notify_one();
        self.save();
    }

    /// Queues a prompt for the next iteration, once it is on disk (this
    /// waits for a sync: call it off the runtime's threads), and wakes the
    /// loop, which may be pausing after a failure.
    pub fn inject(&self, prompt: &str) -> Result<(), Refused> {
        self.injected.lock().push(prompt)?;
        self.wake.notify_one();
        Ok(())
    }

    /// Every injected prompt waiting, for the iteration starting now.
    pub fn take_injected(&self) -> Vec<String> {
        self.injected.lock().take()
    }

    /// Prompts taken for an agent that could not start: the next try gets them.
    pub fn put_back_injected(&self, taken: Vec<String>) {
        self.injected.lock().put_back(taken);
    }

    pub fn attach_terminal(&self, input: Option<TerminalInput>) {
        *self.terminal.lock() = input;
    }

    pub fn terminal(&self) -> Option<TerminalInput> {
        self.terminal.lock().clone()
    }
}

/// An event notification, serialised once for every subscriber.
pub fn event(kind: &str, timestamp: &str, data: &Value) -> Bytes {
    let message = json!({
        "jsonrpc": "2.0",
        "method": "event",
        "params": {"type": kind, "timestamp": timestamp, "data": data},
    });
    Bytes::from(serde_json::to_vec(&message).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_round_trips_and_says_when_to_resume() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(SavedState::load(dir.path()).unwrap(), None);
        let state = SavedState { iteration: 3, status: Some(Status::Checkpointed), ..Default::default() };
        state.save(dir.path()).unwrap();
        let back = SavedState::load(dir.path()).unwrap().unwrap();
        assert_eq!(back, state);
        assert!(back.resumable());
        assert!(!SavedState { status: Some(Status::Completed), ..Default::default() }.resumable());
        // No temporary file is left behind.
        assert_eq!(std::fs::read_dir(dir.path().join(".ralph")).unwrap().count(), 1);
    }

    #[test]
    fn the_line_being_written_stands_last_in_recent_output_until_it_ends() {
        let dir = tempfile::tempdir().unwrap();
        let limits = crate::injected::Limits { count: 1, bytes: 1024 };
        let pending = PendingPrompts::load(dir.path(), limits, None).unwrap();
        let session = Session::new("t".into(), dir.path().into(), 1, "a".into(), &SavedState::default(), pending);
        for n in 0..RECENT_LINES {
            session.remember_line(&format!("line {n}"));
        }
        session.remember_partial("your input: ");
        let recent = session.snapshot().recent_output;
        assert_eq!(recent.len(), RECENT_LINES);
        assert_eq!((recent[0].as_str(), recent[RECENT_LINES - 1].as_str()), ("line 1", "your input: "));
        session.remember_line("your input: yes");
        let recent = session.snapshot().recent_output;
        assert_eq!((recent[0].as_str(), recent[RECENT_LINES - 1].as_str()), ("line 1", "your input: yes"));
    }
}
