//! The task's files as an agent, a user or `git clean` may leave them: a
//! FIFO or a device where a file should be.

use std::time::Duration;

use crate::support::Task;

#[test]
fn run_refuses_a_prd_json_or_injected_prompts_that_are_not_regular_files_at_once() {
    let task = Task::new("fifostart", 1);
    std::fs::remove_file(task.dir().join("prd.json")).unwrap();
    nix::unistd::mkfifo(&task.dir().join("prd.json"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    let mut daemon = task.run(&[]);
    // A blocking read of the FIFO would wait here for a writer that never comes.
    assert_eq!(daemon.wait_exit(Duration::from_secs(20)).code(), Some(2), "{}", daemon.stderr());
    assert!(daemon.stderr().contains("prd.json: cannot read: not a regular file"), "{}", daemon.stderr());

    let task = Task::new("zero", 1);
    std::fs::create_dir(task.dir().join(".ralph")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", task.dir().join(".ralph/injected.jsonl")).unwrap();
    let mut daemon = task.run(&[]);
    // An unbounded read of /dev/zero ends in an abort, not exit 2.
    assert_eq!(daemon.wait_exit(Duration::from_secs(20)).code(), Some(2), "{}", daemon.stderr());
    assert!(daemon.stderr().contains("injected.jsonl: not a regular file"), "{}", daemon.stderr());
}

#[test]
fn a_prd_json_the_agent_turns_into_a_fifo_fails_the_next_iterations_instead_of_holding_the_loop() {
    let task = Task::new("fifo", 1);
    task.mode("fifo");
    let mut daemon = task.run(&[]);
    // Each iteration after the first finds the FIFO: a FAILURE, and after
    // three the loop has failed (exit 1), where it used to wait for good.
    assert_eq!(daemon.wait_exit(Duration::from_secs(30)).code(), Some(1), "{}", daemon.stderr());
    let progress = task.read("progress.txt");
    assert!(progress.contains("prd.json: cannot read: not a regular file"), "{progress}");
    assert_eq!(task.state()["reason"], "max_failures");
}
