//! The prompt of one iteration: a template (the task's `prompt.md`, else
//! `~/.config/ralph/prompt.md`, else the built-in one) with its variables
//! filled in, and any injected instructions prepended.

use std::path::{Path, PathBuf};

/// The built-in template: what one iteration of Ralph asks of the agent.
pub const DEFAULT_TEMPLATE: &str = "\
You are one iteration of an autonomous coding loop working on {TASK_DIR}.

1. Read the PRD at {PRD_FILE} and the log at {PROGRESS_FILE} (its patterns section first).
2. Work on user story {STORY_ID}: {STORY_TITLE}. Only this story.
3. Make sure you are on branch {BRANCH_NAME}.
4. Implement it, run the project's checks, and commit when they pass.
5. Set \"passes\": true for {STORY_ID} in {PRD_FILE} once every acceptance criterion holds.
6. Append what you did and what you learned to {PROGRESS_FILE}.

This is iteration {ITERATION}, run by {AGENT}. When every story in the PRD passes, reply with <promise>COMPLETE</promise>.
";

/// The values of the template's variables.
#[derive(Debug)]
pub struct Vars<'a> {
    pub task_dir: &'a Path,
    pub branch_name: &'a str,
    pub agent: &'a str,
    pub story_id: &'a str,
    pub story_title: &'a str,
    pub iteration: u32,
}

/// The most of a template that is read: a prompt is instructions, not data.
pub const MAX_TEMPLATE: usize = 1024 * 1024;

/// Where the template came from, and its text.
#[derive(Debug)]
pub struct Template {
    pub source: Option<PathBuf>,
    pub text: String,
}

impl Template {
    /// The first of: `<task>/prompt.md`, `<config dir>/ralph/prompt.md`, the built-in one.
    pub fn find(task_dir: &Path) -> std::io::Result<Template> {
        let candidates = [Some(task_dir.join("prompt.md")), dirs::config_dir().map(|d| d.join("ralph/prompt.md"))];
        for path in candidates.into_iter().flatten() {
            // Only a regular file, and within the limit: a FIFO would hold the loop.
            let text = rpc_core::files::read_regular(&path, MAX_TEMPLATE).and_then(|bytes| {
                String::from_utf8(bytes)
                    .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8 text"))
            });
            match text {
                Ok(text) => return Ok(Template { source: Some(path), text }),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(std::io::Error::new(e.kind(), format!("{}: {e}", path.display()))),
            }
        }
        Ok(Template { source: None, text: DEFAULT_TEMPLATE.to_owned() })
    }

    /// The prompt: the `injected` prompts (if any) first, in order, then the
    /// template with its variables.
    pub fn render(&self, vars: &Vars<'_>, injected: &[String]) -> String {
        let task_dir = vars.task_dir.display().to_string();
        let prd = vars.task_dir.join("prd.json").display().to_string();
        let progress = vars.task_dir.join("progress.txt").display().to_string();
        let iteration = vars.iteration.to_string();
        let pairs = [
            ("{TASK_DIR}", task_dir.as_str()),
            ("{PRD_FILE}", prd.as_str()),
            ("{PROGRESS_FILE}", progress.as_str()),
            ("{BRANCH_NAME}", vars.branch_name),
            ("{AGENT}", vars.agent),
            ("{STORY_ID}", vars.story_id),
            ("{STORY_TITLE}", vars.story_title),
            ("{ITERATION}", iteration.as_str()),
        ];
        // One pass, so a value that contains `{...}` is never expanded again.
        let mut body = String::with_capacity(self.text.len() + 256);
        let mut rest = self.text.as_str();
        while let Some(open) = rest.find('{') {
            body.push_str(&rest[..open]);
            rest = &rest[open..];
            match pairs.iter().find(|(name, _)| rest.starts_with(name)) {
                Some((name, value)) => {
                    body.push_str(value);
                    rest = &rest[name.len()..];
                }
                None => {
                    body.push('{');
                    rest = &rest[1..];
                }
            }
        }
        body.push_str(rest);
        if injected.is_empty() {
            return body;
        }
        format!("{}\n\n---\n\n{body}", injected.join("\n\n").trim_end())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(dir: &Path) -> Vars<'_> {
        Vars {
            task_dir: dir,
            branch_name: "b",
            agent: "claude",
            story_id: "US-1",
            story_title: "T {ITERATION}",
            iteration: 4,
        }
    }

    #[test]
    fn variables_are_filled_once_and_unknown_braces_are_left_alone() {
        let t = Template { source: None, text: "{STORY_ID} {STORY_TITLE} {ITERATION} {NOPE} {PRD_FILE}".into() };
        assert_eq!(t.render(&vars(Path::new("/t")), &[]), "US-1 T {ITERATION} 4 {NOPE} /t/prd.json");
    }

    #[test]
    fn an_injected_prompt_comes_first_and_two_injections_are_both_kept() {
        let t = Template { source: None, text: "body".into() };
        let prompt = t.render(&vars(Path::new("/t")), &["first".into(), "second\n".into()]);
        assert_eq!(prompt, "first\n\nsecond\n\n---\n\nbody");
    }

    #[test]
    fn the_task_template_wins_over_the_default() {
        let dir = tempfile::tempdir().unwrap();
        assert!(DEFAULT_TEMPLATE.contains("<promise>COMPLETE</promise>"));
        std::fs::write(dir.path().join("prompt.md"), "mine {STORY_ID}").unwrap();
        let t = Template::find(dir.path()).unwrap();
        assert_eq!(t.source.as_deref(), Some(dir.path().join("prompt.md").as_path()));
        assert_eq!(t.render(&vars(dir.path()), &[]), "mine US-1");
    }

    #[test]
    fn a_template_that_is_a_fifo_or_too_long_is_an_error_not_a_wait() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("prompt.md");
        nix::unistd::mkfifo(&path, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let err = Template::find(dir.path()).unwrap_err().to_string();
        assert!(err.contains("prompt.md: not a regular file"), "{err}");
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, "x".repeat(MAX_TEMPLATE + 1)).unwrap();
        let err = Template::find(dir.path()).unwrap_err().to_string();
        assert!(err.contains(&format!("prompt.md: larger than {MAX_TEMPLATE} bytes")), "{err}");
    }
}
