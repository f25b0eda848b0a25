//! The page's files, compiled into the binary: plain ES modules, no
//! framework, no build step, nothing fetched from elsewhere, so the page
//! works with no network.

/// Each file under `/assets/`: name, content type, text.
const FILES: &[(&str, &str, &str)] = &[
    ("style.css", "text/css; charset=utf-8", include_str!("assets/style.css")),
    ("main.js", JS, include_str!("assets/main.js")),
    ("rpc.js", JS, include_str!("assets/rpc.js")),
    ("hl7.js", JS, include_str!("assets/hl7.js")),
    ("tree.js", JS, include_str!("assets/tree.js")),
    ("raw.js", JS, include_str!("assets/raw.js")),
    ("files.js", JS, include_str!("assets/files.js")),
    ("extensions.js", JS, include_str!("assets/extensions.js")),
    ("dialogs.js", JS, include_str!("assets/dialogs.js")),
    ("windows.js", JS, include_str!("assets/windows.js")),
    ("dom.js", JS, include_str!("assets/dom.js")),
];

const JS: &str = "text/javascript; charset=utf-8";

pub const INDEX_HTML: &str = include_str!("assets/index.html");

/// The file called `name`: its content type and text.
pub fn file(name: &str) -> Option<(&'static str, &'static str)> {
    FILES.iter().find(|(n, _, _)| *n == name).map(|(_, kind, text)| (*kind, *text))
}
