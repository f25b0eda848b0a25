//! The agent's command line: a preset or `--agent-cmd`, and how the prompt
//! reaches it (a file, an argument, or typed into its terminal).

use std::borrow::Cow;
use std::path::Path;

/// Longest prompt passed as an argument. The kernel refuses one argument over
/// 128 KiB (MAX_ARG_STRLEN), and arguments and environment together over
/// ARG_MAX (128 KiB at the least), and the agent would never start: a longer
/// prompt goes through the prompt file, the argument naming it.
const ARGUMENT_MAX: usize = 64 * 1024;
/// A terminal in canonical mode keeps 4095 bytes of a line and drops the
/// rest: a prompt with a longer line goes through the prompt file too.
const TERMINAL_LINE_MAX: usize = 4095;

pub const PRESETS: &[&str] = &["claude", "codex", "opencode"];

/// How the agent is started, and how it gets its prompt.
#[derive(Clone, Debug, PartialEq)]
pub struct AgentCommand {
    /// What `get_status` calls it: the preset, or the program's file name.
    pub name: String,
    words: Vec<String>,
}

/// How the prompt reaches the agent.
#[derive(Debug, PartialEq)]
pub(super) enum Delivery {
    /// A `{PROMPT_FILE}` word: the path of a file holding it.
    File,
    /// A `{PROMPT}` word: the prompt itself, as one argument.
    Argument,
    /// Neither: typed into the terminal, then end-of-file (Ctrl-D).
    Terminal,
}

impl AgentCommand {
    /// A preset: the prompt as the last argument, in each tool's
    /// non-interactive mode, allowed to edit files without asking.
    pub fn preset(name: &str) -> Option<AgentCommand> {
        let words: &[&str] = match name {
            "claude" => &["claude", "--print", "--dangerously-skip-permissions", "{PROMPT}"],
            "codex" => &["codex", "exec", "--full-auto", "{PROMPT}"],
            "opencode" => &["opencode", "run", "{PROMPT}"],
            _ => return None,
        };
        Some(AgentCommand { name: name.to_owned(), words: words.iter().map(|w| (*w).to_owned()).collect() })
    }

    /// `--agent-cmd`: split like a shell would (quotes, no expansion).
    pub fn custom(command: &str) -> Result<AgentCommand, String> {
        let words = shlex::split(command).ok_or_else(|| format!("{command:?}: unbalanced quotes"))?;
        let program = words.first().ok_or("empty command")?;
        let name = Path::new(program).file_name().map_or(program.clone(), |n| n.to_string_lossy().into_owned());
        Ok(AgentCommand { name, words })
    }

    /// Whether the agent's program is there to run, from `cwd` (the project
    /// root, where it runs): a path is checked as it is, a bare name on
    /// `PATH`, as exec would find it. The error names the program.
    pub fn check_program(&self, cwd: &Path) -> Result<(), String> {
        let program = self.words.first().map(String::as_str).unwrap_or_default();
        let found = if program.contains('/') {
            executable(&cwd.join(program))
        } else {
            std::env::var_os("PATH")
                .is_some_and(|path| std::env::split_paths(&path).any(|dir| executable(&dir.join(program))))
        };
        if found {
            return Ok(());
        }
        let place = if program.contains('/') {
            format!("{program} is not an executable file")
        } else {
            format!("no {program} on PATH")
        };
        Err(format!("the agent `{}` cannot run: {place}", self.name))
    }

    pub(super) fn delivery(&self) -> Delivery {
        if self.words.iter().any(|w| w.contains("{PROMPT_FILE}")) {
            Delivery::File
        } else if self.words.iter().any(|w| w == "{PROMPT}") {
            Delivery::Argument
        } else {
            Delivery::Terminal
        }
    }

    /// What the agent is handed for `prompt`, and whether the prompt file is
    /// written: the prompt itself, or, when the way it is passed could not
    /// carry it whole (an argument too long to exec or holding a NUL, a line
    /// too long for the terminal), a short prompt naming the file that holds it.
    pub(super) fn hand_over<'p>(&self, prompt: &'p str, prompt_file: &Path) -> (Cow<'p, str>, bool) {
        let Some(why) = self.cannot_carry(prompt) else {
            return (Cow::Borrowed(prompt), self.delivery() == Delivery::File);
        };
        let pointer = format!(
            "The prompt of this iteration ({} bytes) {why}, so it is in a file. \
             Read the file {} and follow it as your prompt.",
            prompt.len(),
            prompt_file.display()
        );
        (Cow::Owned(pointer), true)
    }

    /// Why the way this agent gets its prompt cannot carry `prompt` as it
    /// is, if it cannot.
    fn cannot_carry(&self, prompt: &str) -> Option<&'static str> {
        const TOO_LONG: &str = "is too long to be passed here";
        match self.delivery() {
            Delivery::File => None,
            Delivery::Argument if prompt.len() > ARGUMENT_MAX => Some(TOO_LONG),
            // An argument ends at a NUL: the agent could not even be started.
            Delivery::Argument if prompt.contains('\0') => Some("holds characters that cannot be passed here"),
            Delivery::Argument => None,
            Delivery::Terminal if prompt.lines().any(|line| line.len() >= TERMINAL_LINE_MAX) => Some(TOO_LONG),
            // The terminal acts on control characters (Ctrl-C interrupts the
            // agent, Ctrl-U erases the line) rather than passing them on.
            Delivery::Terminal if prompt.contains(|c: char| c.is_control() && c != '\n' && c != '\t') => {
                Some("holds characters that cannot be passed here")
            }
            Delivery::Terminal => None,
        }
    }

    /// The argument vector with the placeholders filled in.
    pub(super) fn argv(&self, prompt: &str, prompt_file: &Path) -> Vec<String> {
        let file = prompt_file.display().to_string();
        self.words
            .iter()
            .map(|w| if w == "{PROMPT}" { prompt.to_owned() } else { w.replace("{PROMPT_FILE}", &file) })
            .collect()
    }
}

/// An executable file (not a directory) at `path`.
fn executable(path: &Path) -> bool {
    path.is_file() && nix::unistd::access(path, nix::unistd::AccessFlags::X_OK).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_decide_how_the_prompt_is_delivered() {
        let file = Path::new("/t/.ralph/prompt.md");
        let cmd = AgentCommand::custom("my-agent --in '{PROMPT_FILE}' -v").unwrap();
        assert_eq!(cmd.delivery(), Delivery::File);
        assert_eq!(cmd.argv("p", file), ["my-agent", "--in", "/t/.ralph/prompt.md", "-v"]);
        assert_eq!(cmd.name, "my-agent");
        let cmd = AgentCommand::custom("/usr/bin/agent --prompt-from=stdin").unwrap();
        assert_eq!((cmd.delivery(), cmd.name.as_str()), (Delivery::Terminal, "agent"));
        let claude = AgentCommand::preset("claude").unwrap();
        assert_eq!(claude.delivery(), Delivery::Argument);
        assert_eq!(claude.argv("do it", file).last().unwrap(), "do it");
        assert!(AgentCommand::preset("gpt").is_none());
        assert_eq!(claude.hand_over("do it", file), (Cow::Borrowed("do it"), false));
        assert!(AgentCommand::custom("a 'b").is_err() && AgentCommand::custom("  ").is_err());
    }

    #[test]
    fn a_prompt_too_long_to_pass_as_it_is_goes_through_the_prompt_file() {
        let file = Path::new("/t/.ralph/prompt.md");
        let long = "word ".repeat(ARGUMENT_MAX / 5 + 1);
        let claude = AgentCommand::preset("claude").unwrap();
        let (handed, to_file) = claude.hand_over(&long, file);
        assert!(to_file && handed.len() < 300, "{handed}");
        assert!(handed.contains("Read the file /t/.ralph/prompt.md") && handed.contains(&long.len().to_string()));
        // Typed into the terminal: a line the terminal would cut goes through the file too.
        let typed = AgentCommand::custom("agent").unwrap();
        let with_a_long_line = format!("short\n{}\nend", "x".repeat(TERMINAL_LINE_MAX));
        let (handed, to_file) = typed.hand_over(&with_a_long_line, file);
        assert!(to_file && handed.starts_with("The prompt of this iteration"), "{handed}");
        assert_eq!(typed.hand_over(&long[..4000], file), (Cow::Borrowed(&long[..4000]), false));
        // {PROMPT_FILE}: the file, whatever the length.
        let named = AgentCommand::custom("agent {PROMPT_FILE}").unwrap();
        assert_eq!(named.hand_over(&long, file), (Cow::Borrowed(long.as_str()), true));
    }

    #[test]
    fn a_prompt_holding_a_nul_goes_through_the_prompt_file_not_an_argument() {
        let file = Path::new("/t/.ralph/prompt.md");
        let claude = AgentCommand::preset("claude").unwrap();
        let (handed, to_file) = claude.hand_over("before\0after", file);
        assert!(to_file && !handed.contains('\0') && handed.contains("Read the file /t/.ralph/prompt.md"), "{handed}");
    }

    #[test]
    fn a_typed_prompt_with_control_characters_goes_through_the_prompt_file() {
        let file = Path::new("/t/.ralph/prompt.md");
        let typed = AgentCommand::custom("agent").unwrap();
        for control in ["\x03", "\x15", "\x1c", "\x04", "\x1b[1m", "\r", "\x7f", "\0"] {
            let prompt = format!("before{control}after");
            let (handed, to_file) = typed.hand_over(&prompt, file);
            assert!(to_file && handed.starts_with("The prompt of this iteration"), "{control:?}: {handed}");
        }
        assert_eq!(typed.hand_over("tabs\tand\nlines", file), (Cow::Borrowed("tabs\tand\nlines"), false));
    }
}
