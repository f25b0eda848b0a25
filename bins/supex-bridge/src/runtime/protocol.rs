//! The private pipe protocol between the daemon and `driver.rb`: one JSON
//! object per line each way (the driver's header documents it in full).

use serde::{Deserialize, Serialize};

/// The driver script, embedded so the daemon needs nothing on disk.
pub const DRIVER_SOURCE: &str = include_str!("driver.rb");

/// Protocol version the driver announces in its ready line.
pub const PROTOCOL_VERSION: u32 = 1;

/// Where an evaluation runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// A new binding per evaluation: locals do not carry over (`eval_ruby`, `eval_ruby_file`).
    Fresh,
    /// The shared top-level binding of every REPL client.
    Repl,
}

/// How the value of an evaluation is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Show {
    /// `value.to_s` (the bridge).
    ToS,
    /// `value.inspect` (the REPL).
    Inspect,
}

/// A request line to the driver.
#[derive(Debug, Serialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum Request<'a> {
    Eval {
        id: u64,
        code: &'a str,
        scope: Scope,
        #[serde(skip_serializing_if = "Option::is_none")]
        file: Option<&'a str>,
        show: Show,
    },
    Complete {
        id: u64,
        code: &'a str,
    },
}

/// The first line the driver writes once it is ready.
#[derive(Debug, Deserialize)]
pub struct Ready {
    pub ready: bool,
    pub protocol: u32,
    pub pid: u32,
    pub ruby_version: String,
    #[serde(default)]
    pub ruby_description: String,
}

/// A reply line; which fields are set depends on the request.
#[derive(Debug, Deserialize)]
pub struct Reply {
    pub id: Option<u64>,
    pub ok: bool,
    #[serde(default)]
    pub value: Option<String>,
    #[serde(default)]
    pub output: Option<String>,
    #[serde(default)]
    pub error: Option<RubyException>,
    #[serde(default)]
    pub complete: Option<bool>,
}

/// An exception raised by evaluated code, as the driver describes it.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct RubyException {
    pub class: String,
    pub message: String,
    #[serde(default)]
    pub backtrace: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_one_flat_object() {
        let line = serde_json::to_string(&Request::Eval {
            id: 7,
            code: "1+1",
            scope: Scope::Fresh,
            file: None,
            show: Show::ToS,
        })
        .unwrap();
        assert_eq!(line, r#"{"op":"eval","id":7,"code":"1+1","scope":"fresh","show":"to_s"}"#);
        let line = serde_json::to_string(&Request::Complete { id: 1, code: "x" }).unwrap();
        assert_eq!(line, r#"{"op":"complete","id":1,"code":"x"}"#);
    }

    #[test]
    fn the_driver_documents_its_protocol_at_the_top() {
        let header: String = DRIVER_SOURCE.lines().take(60).collect::<Vec<_>>().join("\n");
        for needle in ["fd 3", "\"op\":\"eval\"", "\"op\":\"complete\"", "\"ready\":true", "exit!"] {
            assert!(header.contains(needle), "driver header lacks {needle}");
        }
    }
}
