//! The cluster's NATS names: subjects and KV keys, built only from the
//! cluster name (checked at start), node ids (checked at start) and encoded
//! session ids. A session id is user input: encoded, it is one subject token
//! of `[0-9a-f]` and a letter, so `a.>`, `*`, spaces or 4 KiB cannot widen a
//! subscription, split a subject or pass NATS' control-line limit.
//!
//! | subject | what |
//! |---|---|
//! | `<name>.s.<key>.call` | a `tools/call` for the session's browser (request/reply, to its owner) |
//! | `<name>.s.<key>.ctl` | an agent's node to the owner: join, agent count, cancel |
//! | `<name>.s.<key>.ev` | the owner's notifications to every node with agents in the session |
//! | `<name>.node.<id>.hb` | a node's heartbeat |
//! | `<name>.node.<id>.ping` | a node's liveness probe (no responders: its connection is gone) |
//!
//! The directory is the JetStream KV bucket `<name>_sessions`, keyed by the
//! same encoded ids.

use sha2::{Digest, Sha256};

/// Ids up to this many bytes are spelt out (hex); longer ones are named by
/// their SHA-256, which keeps every subject far below NATS' 4 KiB control line.
const SPELT_OUT: usize = 96;

/// A session id as one subject token and KV key: `x` + the hex of its
/// bytes, or `h` + the hex of its SHA-256 when it is long. The two forms
/// cannot meet: the prefix differs.
pub fn session_key(id: &str) -> String {
    let (prefix, bytes): (char, Vec<u8>) = if id.len() <= SPELT_OUT {
        ('x', id.as_bytes().to_vec())
    } else {
        ('h', Sha256::digest(id.as_bytes()).to_vec())
    };
    let mut key = String::with_capacity(1 + 2 * bytes.len());
    key.push(prefix);
    for byte in bytes {
        key.push(char::from(HEX[usize::from(byte >> 4)]));
        key.push(char::from(HEX[usize::from(byte & 15)]));
    }
    key
}

/// Lowercase hex digits, by value.
pub(super) const HEX: &[u8; 16] = b"0123456789abcdef";

/// The subjects of one cluster.
#[derive(Clone, Debug)]
pub struct Subjects {
    name: String,
}

impl Subjects {
    pub fn new(name: &str) -> Subjects {
        Subjects { name: name.to_owned() }
    }

    pub fn bucket(&self) -> String {
        format!("{}_sessions", self.name)
    }

    /// Built without `format!`: a cross-node call names its session's
    /// subject every time, and the formatting machinery was 3 % of the
    /// agent's node's work a call.
    pub fn call(&self, key: &str) -> String {
        self.session_subject(key, "call")
    }

    pub fn control(&self, key: &str) -> String {
        self.session_subject(key, "ctl")
    }

    pub fn events(&self, key: &str) -> String {
        self.session_subject(key, "ev")
    }

    /// `<name>.s.<key>.<what>`.
    fn session_subject(&self, key: &str, what: &str) -> String {
        let mut subject = String::with_capacity(self.name.len() + key.len() + what.len() + 4);
        for part in [&self.name, ".s.", key, ".", what] {
            subject.push_str(part);
        }
        subject
    }

    pub fn heartbeat(&self, node: &str) -> String {
        format!("{}.node.{node}.hb", self.name)
    }

    /// Every node's heartbeat.
    pub fn heartbeats(&self) -> String {
        format!("{}.node.*.hb", self.name)
    }

    pub fn probe(&self, node: &str) -> String {
        format!("{}.node.{node}.ping", self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_one_plain_token(key: &str) -> bool {
        !key.is_empty() && key.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    }

    #[test]
    fn session_subjects_are_the_name_the_key_and_the_kind() {
        let subjects = Subjects::new("prod");
        let key = session_key("a.>");
        assert_eq!(subjects.call(&key), format!("prod.s.{key}.call"));
        assert_eq!(subjects.control(&key), format!("prod.s.{key}.ctl"));
        assert_eq!(subjects.events(&key), format!("prod.s.{key}.ev"));
    }

    #[test]
    fn hostile_ids_become_one_plain_token() {
        let long = "z".repeat(4096);
        for id in ["a.>", "*", ">", "a b", "tab\there", "", "élan✓", "日本語", "$KV.x", long.as_str()] {
            let key = session_key(id);
            assert!(is_one_plain_token(&key), "{id:?} -> {key}");
            assert!(key.len() <= 1 + 2 * SPELT_OUT, "{id:?}");
        }
        assert_eq!(session_key("a.>"), "x612e3e");
        assert_eq!(Subjects::new("btcp").call(&session_key("*")), "btcp.s.x2a.call");
    }

    #[test]
    fn distinct_ids_get_distinct_keys() {
        let at_limit = "a".repeat(SPELT_OUT);
        let past = "a".repeat(SPELT_OUT + 1);
        let keys = [session_key("a"), session_key("A"), session_key(&at_limit), session_key(&past), session_key("")];
        let unique: std::collections::HashSet<_> = keys.iter().collect();
        assert_eq!(unique.len(), keys.len());
        assert!(session_key(&past).starts_with('h') && session_key(&at_limit).starts_with('x'));
    }
}
