//! The command line (`Cli`: every subcommand with its arguments, each
//! setting a flag with its env variable) and the validation of `run`'s
//! settings into what the loop and the server can trust. A bad setting stops
//! `run` before anything starts, exit code 2.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Parser, Subcommand};
use regex::Regex;
use rpc_core::cli::{CommonCommand, LogArgs};
use rpc_core::config::{self, ConfigError, ValueError};

use crate::agent::{AgentCommand, PRESETS};
use crate::injected::Limits;
use crate::output::DEFAULT_FAILURE_PATTERN;

/// Runs a Ralph agent loop over a task's PRD in a pseudo-terminal, and serves its
/// JSON-RPC control protocol on a Unix socket (<socket dir>/<task>.sock).
///
/// `run` exits 0 when the task completed, 3 when it stopped or was checkpointed,
/// 1 when it failed, 2 on bad configuration or when the task already runs.
#[derive(Debug, Parser)]
#[command(name = "ralph-server", version)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    #[command(flatten)]
    pub sockets: SocketArgs,
    #[command(flatten)]
    pub log: LogArgs,
}

/// The man pages' EXIT STATUS section (`man ralph-server`), a paragraph per block.
pub const EXIT_STATUS: &str = "run: 0 completed (or interrupted by SIGTERM or SIGINT, the state checkpointed for the next run); 1 failed (too many failed iterations in a row) or a second signal; 2 bad configuration (prd.json unreadable, an agent that is not there to run) or the task already running; 3 stopped or checkpointed (by request or at --max-iterations).\n\nstatus: 0 completed, 1 running, 2 failed or not running, 3 stopped or checkpointed (of any task when several are listed: 1 if one runs).\n\nOther client commands: 0 done; 1 the task is not running or the request failed; 2 bad usage.";

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the loop for one task directory, in the foreground.
    Run(RunArgs),
    /// Status of one task, or of every running one: exit 0 completed, 1 running,
    /// 2 failed or not found, 3 stopped or checkpointed.
    Status(StatusArgs),
    /// Watch a running task live: i interactive (Esc leaves), s stop, c checkpoint, q detach.
    Attach(TaskArg),
    /// Ask a running task to stop after the current agent run (--force: now).
    Stop(StopArgs),
    /// Ask a running task to checkpoint after the current agent run and exit (run resumes it).
    Checkpoint(TaskArg),
    /// Add instructions to the start of the next iteration's prompt.
    Inject(InjectArgs),
    /// Print a running task's output lines to stdout, for pipes.
    Tail(TaskArg),
    /// A Model Context Protocol server on stdio for AI agents: status, output, inject, stop,
    /// checkpoint of the running tasks, their progress.txt and prd.json as resources.
    Mcp(McpArgs),
    #[command(flatten)]
    Common(CommonCommand),
}

/// Where the control sockets live; shared by `run` and the client commands.
#[derive(Clone, Debug, clap::Args)]
pub struct SocketArgs {
    /// Directory of the control sockets and lock files [default: <data dir>/ralph/sockets].
    #[arg(long, env = "RALPH_SOCKET_DIR", global = true)]
    pub socket_dir: Option<PathBuf>,
}

impl SocketArgs {
    pub fn dir(&self) -> Result<PathBuf, ConfigError> {
        match &self.socket_dir {
            Some(dir) if dir.as_os_str().is_empty() => Err(ConfigError::new("RALPH_SOCKET_DIR", "empty")),
            Some(dir) => Ok(absolute(dir)),
            None => dirs::data_dir()
                .map(|d| d.join("ralph/sockets"))
                .ok_or_else(|| ConfigError::new("RALPH_SOCKET_DIR", "no data directory known for this user; set it")),
        }
    }
}

#[derive(Clone, Debug, clap::Args)]
pub struct RunArgs {
    /// The task directory: prd.json, progress.txt, optional prompt.md.
    pub task_dir: PathBuf,
    /// Task name: the socket is <socket dir>/<name>.sock [default: the task directory's name].
    #[arg(long, env = "RALPH_TASK_NAME")]
    pub name: Option<String>,
    /// Agent preset: claude, codex or opencode [default: prd.json's `agent`, else claude].
    #[arg(long, env = "RALPH_AGENT", value_parser = clap::builder::PossibleValuesParser::new(PRESETS))]
    pub agent: Option<String>,
    /// Agent command instead of a preset, split like a shell would. A {PROMPT_FILE} word is
    /// replaced by the path of a file holding the prompt, {PROMPT} by the prompt itself;
    /// with neither, the prompt is typed into the agent's terminal, then end-of-file.
    #[arg(long, env = "RALPH_AGENT_CMD")]
    pub agent_cmd: Option<String>,
    /// Iterations (agent runs) before the loop stops with reason max_iterations.
    #[arg(long, env = "RALPH_MAX_ITERATIONS", default_value_t = 10, value_parser = config::count_at_least::<1>)]
    pub max_iterations: usize,
    /// Failed iterations in a row after which the loop ends with status failed.
    #[arg(long, env = "RALPH_MAX_FAILURES", default_value_t = 3, value_parser = config::count_at_least::<1>)]
    pub max_failures: usize,
    /// Pause after a failed iteration, in seconds (or `1m`).
    #[arg(long, env = "RALPH_RETRY_DELAY", default_value = "5", value_parser = config::seconds_or_zero)]
    pub retry_delay: Duration,
    /// Output lines matching this regular expression fail the iteration (rate limits, overload).
    #[arg(long, env = "RALPH_FAILURE_PATTERN", default_value = DEFAULT_FAILURE_PATTERN)]
    pub failure_pattern: String,
    /// Working directory of the agent [default: the nearest directory above the task (or the
    /// task itself) holding .git, else the task directory].
    #[arg(long, env = "RALPH_PROJECT_ROOT")]
    pub project_root: Option<PathBuf>,
    /// Clients served at once on the control socket.
    #[arg(long, env = "RALPH_MAX_CONNECTIONS", default_value_t = 1024)]
    pub max_connections: usize,
    /// A client whose replies make no progress for this long while it owes some is disconnected:
    /// one that never reads does not keep its slot (seconds, or `500ms`). Events alone never
    /// disconnect a subscriber; it loses them, counted.
    #[arg(long, env = "RALPH_WRITE_STALL", default_value = "30", value_parser = config::seconds)]
    pub write_stall: Duration,
    /// Injected prompts that may wait for the next iteration at once; inject_prompt past it is
    /// refused (-32602) until the next iteration takes them.
    #[arg(long, env = "RALPH_MAX_PENDING_PROMPTS", default_value_t = 100, value_parser = config::count_at_least::<1>)]
    pub max_pending_prompts: usize,
    /// Bytes of injected prompts that may wait for the next iteration at once (one prompt is at
    /// most 262144 bytes); inject_prompt past it is refused (-32602).
    #[arg(
        long,
        env = "RALPH_MAX_PENDING_PROMPT_BYTES",
        default_value_t = 1024 * 1024,
        value_parser = config::count_at_least::<1>
    )]
    pub max_pending_prompt_bytes: usize,
}

/// `attach`, `checkpoint`, `tail`: the task they act on.
#[derive(Debug, clap::Args)]
pub struct TaskArg {
    /// Task name, or its directory.
    pub task: String,
}

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// Task name, or its directory [default: every task with a socket].
    pub task: Option<String>,
    /// Print the status as JSON (get_status's result; an array without TASK).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct StopArgs {
    /// Task name, or its directory.
    pub task: String,
    /// End the agent now (SIGTERM to its process group, SIGKILL after 5 s).
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, clap::Args)]
pub struct InjectArgs {
    /// Task name, or its directory.
    pub task: String,
    /// The instructions.
    pub text: String,
}

#[derive(Debug, clap::Args)]
pub struct McpArgs {
    /// The task (name or directory) the tools act on when they name none
    /// [default: the only running task]. Its files are then the only resources.
    #[arg(long)]
    pub task: Option<String>,
    /// How long one call may wait for a task's server (seconds or a duration such as 2m).
    #[arg(long, default_value = "10", value_parser = config::seconds)]
    pub timeout: Duration,
}

/// Which agent runs.
#[derive(Clone, Debug)]
pub enum AgentChoice {
    /// A preset, and whether the command line chose it (then it beats prd.json's `agent`).
    Preset(String, bool),
    Command(AgentCommand),
}

#[derive(Clone, Debug)]
pub struct LoopConfig {
    pub project_root: PathBuf,
    pub agent: AgentChoice,
    pub max_failures: u32,
    pub retry_delay: Duration,
    pub failure_pattern: Regex,
}

#[derive(Debug)]
pub struct Config {
    pub task_name: String,
    pub task_dir: PathBuf,
    pub socket_dir: PathBuf,
    pub max_iterations: u32,
    pub max_connections: usize,
    pub write_stall: Duration,
    /// Bounds on the injected prompts waiting for the next iteration.
    pub injected: Limits,
    pub run: LoopConfig,
}

impl Config {
    pub fn from_args(args: RunArgs, sockets: &SocketArgs) -> Result<Config, ConfigError> {
        let task_dir = std::fs::canonicalize(&args.task_dir)
            .map_err(|e| ConfigError::new("TASK_DIR", format!("{}: {e}", args.task_dir.display())))?;
        if !task_dir.is_dir() {
            return Err(ConfigError::new("TASK_DIR", format!("{} is not a directory", task_dir.display())));
        }
        let task_name = match args.name {
            Some(name) => name,
            None => task_dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        };
        check_task_name(&task_name).map_err(|e| e.of("RALPH_TASK_NAME (--name)"))?;
        let agent = match (args.agent_cmd, args.agent) {
            (Some(cmd), _) => AgentChoice::Command(
                AgentCommand::custom(&cmd).map_err(|e| ConfigError::new("RALPH_AGENT_CMD (--agent-cmd)", e))?,
            ),
            (None, Some(preset)) => AgentChoice::Preset(preset, true),
            (None, None) => AgentChoice::Preset("claude".into(), false),
        };
        let max_iterations = iterations(args.max_iterations, "RALPH_MAX_ITERATIONS (--max-iterations)")?;
        let max_failures = iterations(args.max_failures, "RALPH_MAX_FAILURES (--max-failures)")?;
        let failure_pattern = Regex::new(&args.failure_pattern)
            .map_err(|e| ConfigError::new("RALPH_FAILURE_PATTERN (--failure-pattern)", e))?;
        let project_root = match args.project_root {
            Some(root) => std::fs::canonicalize(&root).map_err(|e| {
                ConfigError::new("RALPH_PROJECT_ROOT (--project-root)", format!("{}: {e}", root.display()))
            })?,
            None => find_project_root(&task_dir),
        };
        let socket_dir = sockets.dir()?;
        check_socket_path(&socket_dir.join(format!("{task_name}.sock")))?;
        Ok(Config {
            task_name,
            task_dir,
            socket_dir,
            max_iterations,
            max_connections: args.max_connections.max(1),
            write_stall: args.write_stall,
            injected: Limits { count: args.max_pending_prompts, bytes: args.max_pending_prompt_bytes },
            run: LoopConfig { project_root, agent, max_failures, retry_delay: args.retry_delay, failure_pattern },
        })
    }
}

/// A count of iterations, as the loop and state.json keep it.
fn iterations(count: usize, setting: &str) -> Result<u32, ConfigError> {
    u32::try_from(count).map_err(|_| ConfigError::new(setting, format!("must be at most {}", u32::MAX)))
}

/// A task name becomes a file name: no separators, no hidden or parent names.
pub fn check_task_name(name: &str) -> Result<(), ValueError> {
    if name.is_empty() || name == "." || name == ".." || name.starts_with('.') {
        return Err(ValueError::new(format!("{name:?} cannot name a socket file")));
    }
    if name.contains('/') || name.contains('\0') {
        return Err(ValueError::new(format!("{name:?} contains a path separator")));
    }
    Ok(())
}

/// Longest path a Unix socket may have (`sun_path` holds 108 bytes, the last a NUL).
const SOCKET_PATH_MAX: usize = 107;

/// The socket's path fits in a socket address.
fn check_socket_path(socket: &Path) -> Result<(), ConfigError> {
    let len = socket.as_os_str().len();
    if len > SOCKET_PATH_MAX {
        return Err(ConfigError::new(
            "RALPH_SOCKET_DIR",
            format!(
                "the socket path {} is {len} bytes, longer than a Unix socket's path may be \
                 ({SOCKET_PATH_MAX}); choose a shorter directory or task name (--name)",
                socket.display()
            ),
        ));
    }
    Ok(())
}

fn find_project_root(task_dir: &Path) -> PathBuf {
    task_dir.ancestors().find(|d| d.join(".git").exists()).unwrap_or(task_dir).to_owned()
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_names_that_cannot_be_file_names_are_refused() {
        assert!(check_task_name("my-feature").is_ok());
        for bad in ["", ".", "..", ".hidden", "a/b"] {
            assert!(check_task_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_project_root_is_the_nearest_git_directory() {
        let dir = tempfile::tempdir().unwrap();
        let task = dir.path().join("tasks/t");
        std::fs::create_dir_all(&task).unwrap();
        assert_eq!(find_project_root(&task), task);
        std::fs::create_dir(dir.path().join(".git")).unwrap();
        assert_eq!(find_project_root(&task), dir.path());
    }
}
