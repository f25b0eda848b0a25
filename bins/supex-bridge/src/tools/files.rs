//! `read_file`, `write_file`, `list_dir`: file tools under the path policy.
//!
//! Every path goes through [`crate::paths::PathPolicy`] first, and the work is
//! then done on the resolved path (symlinks already followed), off the async
//! threads. Writes are atomic: a temporary file in the same directory, synced,
//! renamed over the target, and the directory synced, so a reader sees the old
//! content or the new, never half of it.

use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use rpc_core::RpcError;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::{ToolContext, ToolSpec, blocking};
use crate::errors;
use crate::paths::PathRefusal;
use crate::server::App;

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
pub fn checked(app: &App, given: &str, workspace: Option<&Path>) -> Result<PathBuf, RpcError> {
    app.policy.check(given, workspace).map_err(|refusal| match refusal {
        PathRefusal::Denied { resolved, reason } => {
            tracing::info!(path = given, resolved = ?resolved, "path access denied");
            errors::path_denied(given, resolved.as_deref(), &reason)
        }
        PathRefusal::Invalid(why) => RpcError::invalid_params(format!("path: {why}")),
    })
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
    /// Bytes returned, and whether the reply was cut at half of
    /// SUPEX_MAX_MESSAGE (read on with a higher `offset`).
    length: u64,
    truncated: bool,
}

pub async fn read_file(cx: &ToolContext, args: ReadArgs) -> Result<ReadResult, RpcError> {
    let app = cx.app.clone();
    let workspace = cx.workspace.clone();
    blocking(move || {
        let given = args.path.as_str();
        let path = checked(&app, given, workspace.as_deref())?;
        let fail = |e: std::io::Error| errors::file_operation("read", given, &path, &e);
        let mut file = fs::File::open(&path).map_err(fail)?;
        let meta = file.metadata().map_err(fail)?;
        if meta.is_dir() {
            return Err(RpcError::invalid_params(format!("path: {} is a directory; use list_dir", path.display())));
        }
        let size = meta.len();
        // Half the message limit, so that even base64 (4/3) or escaped text
        // keeps the reply within what a Supex driver accepts.
        let cap = (app.max_message / 2) as u64;
        let rest = size.saturating_sub(args.offset);
        let want = args.length.map_or(rest, |l| l.min(rest));
        let take = want.min(cap);
        let mut bytes = Vec::with_capacity(usize::try_from(take).unwrap_or(0));
        if take > 0 {
            file.seek(SeekFrom::Start(args.offset)).map_err(fail)?;
            file.take(take).read_to_end(&mut bytes).map_err(fail)?;
        }
        let length = bytes.len() as u64;
        let (content, encoding) = match String::from_utf8(bytes) {
            Ok(text) => (text, "utf-8"),
            Err(e) => (BASE64.encode(e.as_bytes()), "base64"),
        };
        Ok(ReadResult {
            success: true,
            path: path.display().to_string(),
            content,
            size,
            encoding,
            length,
            // Cut short by the size cap, not by the end of the file or `length`.
            truncated: want > take,
        })
    })
    .await
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
        let fail = |e: std::io::Error| errors::file_operation("write", given, &path, &e);
        if path.is_dir() {
            return Err(RpcError::invalid_params(format!("path: {} is a directory", path.display())));
        }
        let parent = path.parent().ok_or_else(|| RpcError::invalid_params("path: names no file"))?;
        if !parent.is_dir() {
            if !args.create_dirs {
                return Err(RpcError::invalid_params(format!(
                    "path: the directory {} does not exist (pass create_dirs: true to create it)",
                    parent.display()
                )));
            }
            // `parent` was resolved and checked with the file: it is inside a
            // root, and none of its missing components can be a symlink.
            fs::create_dir_all(parent).map_err(fail)?;
        }
        if args.append {
            let mut file = fs::OpenOptions::new().append(true).create(true).open(&path).map_err(fail)?;
            file.write_all(&bytes).map_err(fail)?;
            file.sync_data().map_err(fail)?;
        } else {
            write_atomically(parent, &path, &bytes).map_err(fail)?;
        }
        tracing::debug!(path = %path.display(), bytes = bytes.len(), append = args.append, "file written");
        Ok(WriteResult { success: true, path: path.display().to_string(), bytes_written: bytes.len() })
    })
    .await
}

/// Temporary file in the same directory, synced, renamed over the target,
/// directory synced. An existing file keeps its permissions.
fn write_atomically(dir: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let existing_mode = fs::metadata(path).ok().map(|m| m.permissions().mode() & 0o7777);
    let mut temp = tempfile::Builder::new()
        .prefix(".supex-write-")
        // New files get the usual 0666 minus the umask, not tempfile's 0600.
        .permissions(fs::Permissions::from_mode(0o666))
        .tempfile_in(dir)?;
    temp.write_all(bytes)?;
    if let Some(mode) = existing_mode {
        temp.as_file().set_permissions(fs::Permissions::from_mode(mode))?;
    }
    temp.as_file().sync_all()?;
    temp.persist(path).map_err(|e| e.error)?;
    fs::File::open(dir)?.sync_all()
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
        let fail = |e: std::io::Error| errors::file_operation("list", given, &path, &e);
        let mut entries = Vec::new();
        let mut truncated = false;
        for entry in fs::read_dir(&path).map_err(fail)? {
            let entry = entry.map_err(fail)?;
            if entries.len() == MAX_ENTRIES {
                truncated = true;
                break;
            }
            // Not following symlinks: a link is reported as one, whatever it points at.
            let (kind, size) = match entry.metadata() {
                Ok(meta) if meta.is_symlink() => ("symlink", meta.len()),
                Ok(meta) if meta.is_dir() => ("dir", meta.len()),
                Ok(meta) if meta.is_file() => ("file", meta.len()),
                Ok(meta) => ("other", meta.len()),
                Err(_) => ("other", 0),
            };
            entries.push(Entry { name: entry.file_name().to_string_lossy().into_owned(), kind, size });
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(Listing { success: true, path: path.display().to_string(), entries, truncated })
    })
    .await
}
