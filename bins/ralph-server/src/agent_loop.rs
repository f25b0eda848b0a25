//! The Ralph loop: pick the next story, build the prompt, run the agent,
//! judge the run, record it, and go again until the PRD is done, a limit is
//! reached, or a client (or a signal) says stop.

use std::io;
use std::sync::Arc;

use regex::Regex;
use rpc_core::Shutdown;
use rpc_core::child::Exit;
use tokio::sync::mpsc;

use crate::agent::{self, AgentCommand, Interrupt, RunReport, RunSpec};
use crate::config::{AgentChoice, LoopConfig};
use crate::output::{Findings, OutputWatch, completion_marker};
use crate::prd::{Prd, Story};
use crate::progress;
use crate::prompt::{Template, Vars};
use crate::state::{Session, Status};
use crate::timestamp;

/// How the loop ended; `run` exits with its code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Completed,
    /// Stopped or checkpointed: by request, or at max_iterations.
    Stopped,
    Failed,
    /// A signal interrupted it (state saved, resumable): a clean shutdown.
    Interrupted,
}

impl Outcome {
    pub fn exit_code(self) -> u8 {
        match self {
            Outcome::Completed | Outcome::Interrupted => 0,
            Outcome::Failed => 1,
            Outcome::Stopped => 3,
        }
    }
}

pub struct AgentLoop {
    session: Arc<Session>,
    config: LoopConfig,
    shutdown: Shutdown,
    failure: Regex,
}

/// What the loop does next after looking at the requests.
enum Next {
    Go,
    End(Outcome),
}

impl AgentLoop {
    pub fn new(session: Arc<Session>, config: LoopConfig, shutdown: Shutdown) -> AgentLoop {
        let failure = config.failure_pattern.clone();
        AgentLoop { session, config, shutdown, failure }
    }

    pub async fn run(self) -> Outcome {
        let resumed = self.session.fields().iteration;
        self.session.change(|f| f.status = Status::Running);
        if resumed > 0 {
            self.log(&format!("## {} - RESUMED after iteration {resumed}", timestamp::now()));
        }
        loop {
            if let Next::End(outcome) = self.between_iterations() {
                return outcome;
            }
            let prd = match Prd::load(&self.session.task_dir) {
                Ok(prd) => prd,
                Err(e) => {
                    // The agent may have broken it; it counts as a failed iteration.
                    self.log(&format!("## {} - FAILURE\n{e}", timestamp::now()));
                    if let Next::End(outcome) = self.failed_once(&e.to_string()).await {
                        return outcome;
                    }
                    continue;
                }
            };
            let Some(story) = prd.next_story().cloned() else {
                return self.finish(Status::Completed, "all_stories_pass", "COMPLETED: every story passes");
            };
            let done = self.session.fields().iteration;
            if done >= self.session.max_iterations {
                return self.finish(Status::Stopped, "max_iterations", "STOPPED: max_iterations reached");
            }
            if let Next::End(outcome) = self.iteration(&prd, &story, done + 1).await {
                return outcome;
            }
        }
    }

    /// Requests and signals taken between two runs of the agent.
    fn between_iterations(&self) -> Next {
        if self.shutdown.is_draining() {
            return Next::End(self.interrupted());
        }
        let requests = self.session.requests();
        let (stop, checkpoint) = (requests.stop.is_some(), requests.checkpoint);
        drop(requests);
        if stop {
            return Next::End(self.finish(Status::Stopped, "stop_requested", "STOPPED: stop requested"));
        }
        if checkpoint {
            return Next::End(self.finish(
                Status::Checkpointed,
                "checkpoint_requested",
                "CHECKPOINT: run again to resume",
            ));
        }
        Next::Go
    }

    /// One run of the agent on `story`, in named steps. The order of the
    /// state changes, events and progress.txt blocks is what clients (and
    /// the tests) see: ITERATION first, interactive mode off once the agent
    /// is done, then a FAILURE, a WARNING or the end.
    async fn iteration(&self, prd: &Prd, story: &Story, iteration: u32) -> Next {
        let command = self.announce(prd, story, iteration);
        let (prompt, injected) = match self.prompt(prd, story, &command, iteration) {
            Ok(built) => built,
            Err(why) => return self.failed_once(&why).await,
        };
        let mut watch = OutputWatch::new(&prompt, completion_marker(), self.failure.clone());
        let report = self.run_agent(&command, &prompt, story, iteration, &mut watch).await;
        // Interactive mode ends with the iteration.
        self.session.change(|f| f.interactive_mode = false);
        let report = match report {
            Ok(report) => report,
            Err(e) => return self.agent_did_not_start(injected, &e).await,
        };
        if self.stopped_on_purpose(&report) {
            return Next::Go;
        }
        if let Some(why) = failure(&report, &watch.findings) {
            self.log(&format!("## {} - FAILURE - {}\n{why}", timestamp::now(), story.id));
            return self.failed_once(&why).await;
        }
        self.session.record_failure(false);
        if watch.findings.claimed {
            return self.check_claim(story);
        }
        Next::Go
    }

    /// The iteration begins: its agent, number and story in the state (one
    /// `state_change`), its ITERATION block in progress.txt.
    fn announce(&self, prd: &Prd, story: &Story, iteration: u32) -> AgentCommand {
        let command = agent_for(&self.config.agent, prd, story);
        self.session.set_agent(&command.name);
        self.session.change(|f| {
            f.iteration = iteration;
            f.current_story = Some(story.id.clone());
        });
        let max = self.session.max_iterations;
        self.log(&format!("## {} - ITERATION {iteration}/{max} - {}\n{}", timestamp::now(), story.id, story.title));
        command
    }

    /// The prompt from the task's template, with the injected prompts it
    /// takes (returned, to be put back if the agent cannot start). An
    /// unreadable template fails the iteration before any prompt is taken.
    fn prompt(
        &self,
        prd: &Prd,
        story: &Story,
        command: &AgentCommand,
        iteration: u32,
    ) -> Result<(String, Vec<String>), String> {
        let template =
            Template::find(&self.session.task_dir).map_err(|e| format!("cannot read the prompt template: {e}"))?;
        tracing::debug!(template = ?template.source, "prompt template");
        // Taken now, put back if the agent cannot even start: never lost.
        let injected = self.session.take_injected();
        let branch = prd.branch_name.clone().unwrap_or_default();
        let vars = Vars {
            task_dir: &self.session.task_dir,
            branch_name: &branch,
            agent: &command.name,
            story_id: &story.id,
            story_title: &story.title,
            iteration,
        };
        let prompt = template.render(&vars, &injected);
        Ok((prompt, injected))
    }

    /// Runs the agent to its end while requests and signals come in: see
    /// [`AgentLoop::on_request`]; a signal stops the agent, a second one
    /// (the drain's abort) kills it.
    async fn run_agent(
        &self,
        command: &AgentCommand,
        prompt: &str,
        story: &Story,
        iteration: u32,
        watch: &mut OutputWatch,
    ) -> io::Result<RunReport> {
        let (interrupt, mut interrupts) = mpsc::unbounded_channel();
        let spec = RunSpec {
            command,
            prompt,
            prompt_file: self.session.task_dir.join(".ralph/prompt.md"),
            project_root: &self.config.project_root,
            iteration,
            story_id: &story.id,
        };
        let run = agent::run(&self.session, spec, watch, &mut interrupts);
        tokio::pin!(run);
        let mut interrupted = false;
        loop {
            tokio::select! {
                report = &mut run => return report,
                () = self.session.wake.notified() => self.on_request(&interrupt),
                () = self.shutdown.draining(), if !interrupted => {
                    interrupted = true;
                    let _ = interrupt.send(Interrupt::Stop);
                    self.session.change(|f| f.status = Status::Stopping);
                }
                () = self.shutdown.aborted() => {
                    let _ = interrupt.send(Interrupt::Kill);
                }
            }
        }
    }

    /// A client's request while the agent runs: a forced stop stops it now;
    /// any stop or checkpoint makes the status `stopping` (an unforced one
    /// lets the run finish, and the loop ends after it).
    fn on_request(&self, interrupt: &mpsc::UnboundedSender<Interrupt>) {
        let requests = self.session.requests();
        let (stop, checkpoint) = (requests.stop, requests.checkpoint);
        drop(requests);
        if stop == Some(true) {
            let _ = interrupt.send(Interrupt::Stop);
        }
        if stop.is_some() || checkpoint {
            self.session.change(|f| f.status = Status::Stopping);
        }
    }

    /// The agent could not be started: its injected prompts wait for the
    /// next try, and the iteration counts as failed.
    async fn agent_did_not_start(&self, injected: Vec<String>, error: &io::Error) -> Next {
        self.session.put_back_injected(injected);
        self.log(&format!("## {} - FAILURE\n{error}", timestamp::now()));
        self.failed_once(&error.to_string()).await
    }

    /// The loop stopped the agent because it was asked to (a signal, a
    /// forced stop): not a failure of the agent.
    fn stopped_on_purpose(&self, report: &RunReport) -> bool {
        report.stopped_by_us && (self.shutdown.is_draining() || self.session.requests().stop.is_some())
    }

    /// The agent said it is done: the loop believes prd.json, not the agent.
    /// Confirmed, the loop completes; else a WARNING block names what does
    /// not pass yet, and the loop goes on.
    fn check_claim(&self, story: &Story) -> Next {
        match Prd::load(&self.session.task_dir) {
            Ok(prd) if prd.all_pass() => {
                return Next::End(self.finish(
                    Status::Completed,
                    "all_stories_pass",
                    "COMPLETED: the agent's claim is confirmed by prd.json",
                ));
            }
            Ok(prd) => {
                let failing: Vec<&str> = prd.user_stories.iter().filter(|s| !s.passes).map(|s| s.id.as_str()).collect();
                self.log(&format!(
                    "## {} - WARNING - {}\nThe agent claimed completion, but these stories do not pass yet: {}",
                    timestamp::now(),
                    story.id,
                    failing.join(", ")
                ));
            }
            Err(e) => self.log(&format!("## {} - WARNING\nThe agent claimed completion, but {e}", timestamp::now())),
        }
        Next::Go
    }

    /// Counts a failed iteration; too many in a row end the loop.
    async fn failed_once(&self, why: &str) -> Next {
        let count = self.session.record_failure(true);
        tracing::warn!(consecutive = count, why, "iteration failed");
        if count >= self.config.max_failures {
            return Next::End(self.finish(
                Status::Failed,
                "max_failures",
                &format!("FAILED: {count} failures in a row (--max-failures {})", self.config.max_failures),
            ));
        }
        // A rate limit is not lifted by trying again at once.
        tokio::select! {
            () = tokio::time::sleep(self.config.retry_delay) => {}
            () = self.shutdown.draining() => {}
            () = self.session.wake.notified() => {}
        }
        Next::Go
    }

    /// A signal: the agent was stopped; the state says checkpointed, so the
    /// next `run` resumes.
    fn interrupted(&self) -> Outcome {
        self.finish(Status::Checkpointed, "signal", "CHECKPOINT: interrupted by a signal; run again to resume");
        Outcome::Interrupted
    }

    fn finish(&self, status: Status, reason: &str, line: &str) -> Outcome {
        let f = self.session.fields();
        self.log(&format!(
            "## {} - {line} (iteration {}/{})",
            timestamp::now(),
            f.iteration,
            self.session.max_iterations
        ));
        self.session.change(|f| {
            f.status = status;
            f.reason = Some(reason.to_owned());
            f.interactive_mode = false;
        });
        tracing::info!(status = ?status, reason, "loop ended");
        match status {
            Status::Completed => Outcome::Completed,
            Status::Failed => Outcome::Failed,
            _ => Outcome::Stopped,
        }
    }

    fn log(&self, block: &str) {
        if let Err(e) = progress::append(&self.session.task_dir, block) {
            tracing::warn!(error = %e, "cannot append to progress.txt");
        }
    }
}

/// The agent that runs `story`: the command given, else the preset given,
/// else the story's or the PRD's `agent` (a known preset), else claude.
pub fn agent_for(choice: &AgentChoice, prd: &Prd, story: &Story) -> AgentCommand {
    if let AgentChoice::Command(command) = choice {
        return command.clone();
    }
    let preset = match choice {
        AgentChoice::Preset(name, true) => Some(name.as_str()),
        _ => None,
    };
    let from_files = [story.agent.as_deref(), prd.agent.as_deref()].into_iter().flatten().find(|name| {
        let known = AgentCommand::preset(name).is_some();
        if !known {
            tracing::warn!(agent = name, "unknown agent in prd.json; ignored");
        }
        known
    });
    let name = preset.or(from_files).unwrap_or(match choice {
        AgentChoice::Preset(name, _) => name,
        AgentChoice::Command(_) => "claude",
    });
    AgentCommand::preset(name).unwrap_or_else(|| AgentCommand::preset("claude").expect("a preset"))
}

/// Why a finished run failed, if it did: a non-zero exit the loop did not
/// cause, a rate limit or overload in the output, or no output at all.
fn failure(report: &RunReport, findings: &Findings) -> Option<String> {
    match (&report.exit, &findings.failure) {
        (exit, _) if *exit != Exit::Code(0) && !report.stopped_by_us => Some(format!("the agent ended with {exit}")),
        (_, Some(line)) => Some(format!("rate limit or overload: {line}")),
        _ if findings.own_lines == 0 => Some("the agent printed nothing".to_owned()),
        _ => None,
    }
}
