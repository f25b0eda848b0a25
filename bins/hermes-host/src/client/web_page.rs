//! `hermes-host ctl web [--open]`: the editor page's URL, read from the
//! 0600 file the daemon writes beside its control socket (the URL carries
//! the page's token, so it is never asked for over a wider channel).

use std::path::Path;
use std::process::{Command, ExitCode, Stdio};

use crate::config::url_file;

pub fn run(socket: &Path, open: bool) -> Result<ExitCode, String> {
    let file = url_file(socket);
    let url = std::fs::read_to_string(&file).map_err(|e| {
        format!(
            "no page URL at {} ({e}): is hermes-host running with this socket, and its page on (HERMES_HOST_HTTP)?",
            file.display()
        )
    })?;
    let url = url.trim();
    if !open {
        println!("{url}");
        return Ok(ExitCode::SUCCESS);
    }
    let opener = if cfg!(target_os = "macos") { "open" } else { "xdg-open" };
    // The browser outlives this command: it is started and left to run.
    Command::new(opener)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start {opener} ({e}); open {url} yourself"))?;
    eprintln!("opened {url}");
    Ok(ExitCode::SUCCESS)
}
