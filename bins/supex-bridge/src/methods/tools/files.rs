//! `read_file`, `write_file`, `list_dir`: file tools under the path policy.
//!
//! Every path goes through [`crate::paths::PathPolicy`] first; the work is
//! then done through a handle on the root the path lies under (see
//! [`crate::paths::AllowedPath`]), off the async threads, so a symlink swapped
//! in after the check cannot lead the open out of the root. Writes are
//! atomic: a temporary file in the same directory (opened through that
//! directory's handle), synced, renamed over the target, and the directory
//! synced, so a reader sees the old content or the new, never half of it.

use std::ffi::OsStr;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::PermissionsExt;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use cap_std::fs::{Dir, MetadataExt, OpenOptions, OpenOptionsExt};
use rpc_core::RpcError;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::context::{ToolContext, ToolSpec, blocking};
use crate::paths::{self, AllowedPath, PathRefusal};
use crate::state::App;
use crate::{errors, json_size};

/// Entries `list_dir` returns at most.
const MAX_ENTRIES: usize = 10_000;

pub fn specs() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: "read_file",
            description: "Read a file inside the allowed roots. Text comes back as UTF-8, anything else as base64.",
            input_schema: || {
                json!({
                    "type": "object",
                    "properties": {
                        "path": {"type": "string", "description": "File to read; relative paths start at the workspace or project root."},
                        "offset": {"type": "integer", "minimum": 0, "default": 0, "description": "Byte offset to start at."},
                        "length": {"type": "integer", "minimum": 0,
                                   "description": "Bytes to read at most (default: the rest of the file). One reply carries at most half of SUPEX_MAX_MESSAGE; `truncated` then says to read on from a higher offset."}
                    },
                    "required": ["path"],
                    "additionalProperties": false
                })
            },
        },
        ToolSpec {
            name: "write_file",
            description: "Write a file inside the allowed roots, atomically (temporary file + rename) unless appending.",
            input_schema: || {
                json!({
                    "type": "object",
                    "properties": {
                        "path": {"type": "string", "description": "File to write; relative paths start at the workspace or project root."},
                        "content": {"type": "string", "description": "The content, as text or base64 (see encoding)."},
                        "encoding": {"type": "string", "enum": ["utf-8", "base64"], "default": "utf-8"},
                        "append": {"type": "boolean", "default": false, "description": "Append instead of replacing."},
                        "create_dirs": {"type": "boolean", "default": false,
                                        "description": "Create missing parent directories (inside the roots only)."}
                    },
                    "required": ["path", "content"],
                    "additionalProperties": false
                })
            },
        },
        ToolSpec {
            name: "list_dir",
            description: "List a directory inside the allowed roots: name, type (file, dir, symlink, other) and size of each entry.",
            input_schema: || {
                json!({
                    "type": "object",
                    "properties": {
                        "path": {"type": "string", "description": "Directory to list; relative paths start at the workspace or project root."}
                    },
                    "required": ["path"],
                    "additionalProperties": false
                })
            },
        },
    ]
}

/// Resolves and checks a path argument: -32002 outside the roots.
pub fn checked(app: &App, given: &str, workspace: Option<&std::path::Path>) -> Result<AllowedPath, RpcError> {
    app.policy.check(given, workspace).map_err(|refusal| match refusal {
        PathRefusal::Denied { resolved, reason } => {
            tracing::info!(path = given, resolved = ?resolved, "path access denied");
            errors::path_denied(given, resolved.as_deref(), &reason)
        }
        PathRefusal::Invalid(why) => RpcError::invalid_params(format!("path: {why}")),
    })
}

/// A failed file operation on an allowed path. One that the kernel stopped
/// because the path now leads out of its root (a symlink swapped in since
/// the check) is a denied path like any other (-32002), naming where it
/// leads now.
pub fn io_error(what: &str, given: &str, path: &AllowedPath, error: std::io::Error) -> RpcError {
    if paths::is_escape(&error) {
        let now = paths::resolve(path.resolved()).ok();
        tracing::warn!(path = given, resolved = ?now, "path led out of its root when opened; denied");
        return errors::path_denied(given, now.as_deref(), "led outside the allowed roots when opened");
    }
    errors::file_operation(what, given, path.resolved(), &error)
}

/// Opens a file for reading without blocking on a FIFO (whose open would
/// wait for a writer forever).
pub fn open_for_reading(root: &Dir, path: &AllowedPath) -> std::io::Result<std::fs::File> {
    let mut options = OpenOptions::new();
    options.read(true).custom_flags(nix::libc::O_NONBLOCK);
    Ok(root.open_with(path.beneath(), &options)?.into_std())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadArgs {
    path: String,
    #[serde(default)]
    offset: u64,
    #[serde(default)]
    length: Option<u64>,
}

#[derive(Serialize)]
pub struct ReadResult {
    success: bool,
    path: String,
    content: String,
    /// Size of the whole file in bytes.
    size: u64,
    encoding: &'static str,
    /// Bytes of the file returned, and whether the reply was cut at half of
    /// SUPEX_MAX_MESSAGE, as written (read on from `offset + length`).
    length: u64,
    truncated: bool,
}

pub async fn read_file(cx: &ToolContext, args: ReadArgs) -> Result<ReadResult, RpcError> {
    let app = cx.app.clone();
    let workspace = cx.workspace.clone();
    let opened = blocking(move || open_to_read(&app, args, workspace.as_deref())).await?;
    // The reply holds the bytes as written (six bytes for a control
    // character, a third more in base64), never more than the cap: its
    // room in the connection's outbox first, so a client that never reads
    // cannot have 32 files read into memory at once.
    let written = usize::try_from(opened.take).unwrap_or(usize::MAX).saturating_mul(6).min(opened.cap);
    let room = cx.peer.reserve_reply(written + 1024).await;
    let _room = room.map_err(|_| RpcError::internal("the connection closed"))?;
    blocking(move || opened.read()).await
}

/// A file checked, opened and measured, not yet read.
struct Opened {
    given: String,
    path: AllowedPath,
    file: std::fs::File,
    size: u64,
    offset: u64,
    /// Bytes asked for (to the end of the file, or `length`), and the bytes
    /// that will be read (at most half the message limit).
    want: u64,
    take: u64,
    /// The most the content may take as written in the reply.
    cap: usize,
}

fn open_to_read(app: &App, args: ReadArgs, workspace: Option<&std::path::Path>) -> Result<Opened, RpcError> {
    let given = args.path;
    let path = checked(app, &given, workspace)?;
    let fail = |e: std::io::Error| io_error("read", &given, &path, e);
    let root = path.open_root().map_err(fail)?;
    let file = open_for_reading(&root, &path).map_err(fail)?;
    let meta = file.metadata().map_err(fail)?;
    let shown = path.resolved().display();
    if meta.is_dir() {
        return Err(RpcError::invalid_params(format!("path: {shown} is a directory; use list_dir")));
    }
    if !meta.is_file() {
        return Err(RpcError::invalid_params(format!("path: {shown} is not a regular file")));
    }
    let size = meta.len();
    // Half the message limit, measured as written (JSON escapes, base64),
    // keeps the reply within what any Supex driver accepts; no more raw
    // bytes than that are read.
    let cap = app.max_message / 2;
    let rest = size.saturating_sub(args.offset);
    let want = args.length.map_or(rest, |l| l.min(rest));
    let take = want.min(cap as u64);
    Ok(Opened { given, path, file, size, offset: args.offset, want, take, cap })
}

impl Opened {
    fn read(mut self) -> Result<ReadResult, RpcError> {
        let fail = |e: std::io::Error| io_error("read", &self.given, &self.path, e);
        let mut bytes = Vec::with_capacity(usize::try_from(self.take).unwrap_or(0));
        if self.take > 0 {
            self.file.seek(SeekFrom::Start(self.offset)).map_err(fail)?;
            (&mut self.file).take(self.take).read_to_end(&mut bytes).map_err(fail)?;
        }
        let read = bytes.len() as u64;
        // Cut where the content as written reaches the cap: a control
        // character is six bytes in JSON, and base64 takes 4 for 3.
        let (content, encoding, length) = match String::from_utf8(bytes) {
            Ok(mut text) => {
                text.truncate(json_size::prefix_within(&text, self.cap));
                let length = text.len() as u64;
                (text, "utf-8", length)
            }
            Err(e) => {
                let mut bytes = e.into_bytes();
                bytes.truncate(self.cap / 4 * 3);
                (BASE64.encode(&bytes), "base64", bytes.len() as u64)
            }
        };
        Ok(ReadResult {
            success: true,
            path: self.path.resolved().display().to_string(),
            content,
            size: self.size,
            encoding,
            length,
            // Cut short by the size cap, not by the end of the file or `length`.
            truncated: self.want > self.take || length < read,
        })
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WriteArgs {
    path: String,
    content: String,
    #[serde(default)]
    encoding: Encoding,
    #[serde(default)]
    append: bool,
    #[serde(default)]
    create_dirs: bool,
}

#[derive(Deserialize, Default, Clone, Copy)]
pub enum Encoding {
    #[default]
    #[serde(rename = "utf-8", alias = "utf8", alias = "UTF-8", alias = "text")]
    Utf8,
    #[serde(rename = "base64")]
    Base64,
}

#[derive(Serialize)]
pub struct WriteResult {
    success: bool,
    path: String,
    bytes_written: usize,
}

pub async fn write_file(cx: &ToolContext, args: WriteArgs) -> Result<WriteResult, RpcError> {
    let app = cx.app.clone();
    let workspace = cx.workspace.clone();
    blocking(move || {
        let given = args.path.as_str();
        let bytes = match args.encoding {
            Encoding::Utf8 => args.content.into_bytes(),
            Encoding::Base64 => BASE64
                .decode(args.content.trim())
                .map_err(|e| RpcError::invalid_params(format!("arguments.content: not valid base64: {e}")))?,
        };
        let path = checked(&app, given, workspace.as_deref())?;
        let fail = |e: std::io::Error| io_error("write", given, &path, e);
        let shown = path.resolved().display();
        let root = path.open_root().map_err(fail)?;
        let is_dir = |root: &Dir| root.metadata(path.beneath()).is_ok_and(|m| m.is_dir());
        let Some((parent, name)) = path.parent_and_name().filter(|_| !is_dir(&root)) else {
            if path.names_a_directory() && !is_dir(&root) {
                return Err(RpcError::invalid_params(format!(
                    "path: {given} ends in '/' (names a directory), not a file to write"
                )));
            }
            return Err(RpcError::invalid_params(format!("path: {shown} is a directory")));
        };
        let parent = match root.open_dir(parent) {
            Ok(dir) => dir,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if !args.create_dirs {
                    let missing = path.resolved().parent().unwrap_or(path.resolved()).display();
                    return Err(RpcError::invalid_params(format!(
                        "path: the directory {missing} does not exist (pass create_dirs: true to create it)"
                    )));
                }
                // Created through the root's handle: a component swapped for a
                // symlink meanwhile cannot take the new directories outside.
                root.create_dir_all(parent).map_err(fail)?;
                root.open_dir(parent).map_err(fail)?
            }
            Err(e) => return Err(fail(e)),
        };
        let not_regular = || RpcError::invalid_params(format!("path: {shown} is not a regular file"));
        if args.append {
            // Without blocking: a FIFO's open would wait for a reader forever,
            // holding a blocking thread and the daemon's exit with it.
            let mut options = OpenOptions::new();
            options.append(true).create(true).custom_flags(nix::libc::O_NONBLOCK);
            let mut file = match parent.open_with(name, &options) {
                Ok(file) => file.into_std(),
                // A FIFO with no reader refuses a non-blocking writer.
                Err(e) if e.raw_os_error() == Some(nix::libc::ENXIO) => return Err(not_regular()),
                Err(e) => return Err(fail(e)),
            };
            if !file.metadata().map_err(fail)?.is_file() {
                return Err(not_regular());
            }
            file.write_all(&bytes).map_err(fail)?;
            file.sync_data().map_err(fail)?;
        } else {
            // A FIFO, socket or device is not replaced by a regular file.
            if parent.metadata(name).is_ok_and(|meta| !meta.is_file()) {
                return Err(not_regular());
            }
            write_atomically(&parent, name, &bytes).map_err(fail)?;
        }
        tracing::debug!(path = %shown, bytes = bytes.len(), append = args.append, "file written");
        Ok(WriteResult { success: true, path: shown.to_string(), bytes_written: bytes.len() })
    })
    .await
}

/// Temporary file in `dir`, synced, renamed over `name`, `dir` synced; all
/// through the directory's handle. An existing file keeps its permissions;
/// a new one gets the usual 0666 minus the umask.
fn write_atomically(dir: &Dir, name: &OsStr, bytes: &[u8]) -> std::io::Result<()> {
    let existing_mode = dir.symlink_metadata(name).ok().filter(|m| m.is_file()).map(|m| m.mode() & 0o7777);
    let temp = format!(".supex-write-{}", uuid::Uuid::new_v4().simple());
    let mut options = OpenOptions::new();
    options.write(true).create_new(true).mode(0o666);
    let mut file = dir.open_with(&temp, &options)?.into_std();
    let written = (|| {
        file.write_all(bytes)?;
        if let Some(mode) = existing_mode {
            file.set_permissions(std::fs::Permissions::from_mode(mode))?;
        }
        file.sync_all()?;
        dir.rename(&temp, dir, name)
    })();
    if written.is_err() {
        let _ = dir.remove_file(&temp);
    }
    written?;
    dir.open(".")?.into_std().sync_all()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListArgs {
    path: String,
}

#[derive(Serialize)]
pub struct Listing {
    success: bool,
    path: String,
    entries: Vec<Entry>,
    truncated: bool,
}

#[derive(Serialize)]
pub struct Entry {
    name: String,
    #[serde(rename = "type")]
    kind: &'static str,
    size: u64,
}

pub async fn list_dir(cx: &ToolContext, args: ListArgs) -> Result<Listing, RpcError> {
    let app = cx.app.clone();
    let workspace = cx.workspace.clone();
    blocking(move || {
        let given = args.path.as_str();
        let path = checked(&app, given, workspace.as_deref())?;
        let fail = |e: std::io::Error| io_error("list", given, &path, e);
        let root = path.open_root().map_err(fail)?;
        let mut entries = Vec::new();
        let mut truncated = false;
        for entry in root.read_dir(path.beneath()).map_err(fail)? {
            let entry = entry.map_err(fail)?;
            if entries.len() == MAX_ENTRIES {
                truncated = true;
                break;
            }
            // Not following symlinks: a link is reported as one, whatever it points at.
            let (kind, size) = match entry.metadata() {
                Ok(meta) if meta.file_type().is_symlink() => ("symlink", meta.len()),
                Ok(meta) if meta.is_dir() => ("dir", meta.len()),
                Ok(meta) if meta.is_file() => ("file", meta.len()),
                Ok(meta) => ("other", meta.len()),
                Err(_) => ("other", 0),
            };
            entries.push(Entry { name: entry.file_name().to_string_lossy().into_owned(), kind, size });
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(Listing { success: true, path: path.resolved().display().to_string(), entries, truncated })
    })
    .await
}
