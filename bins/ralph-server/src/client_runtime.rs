//! The runtime that serves the control socket's clients: every connection,
//! its replies and its events, on threads that run only when the loop leaves
//! the CPU free.
//!
//! Why: an agent that floods its terminal keeps the loop busy reading it,
//! and every subscriber that keeps reading takes every line as an event, a
//! write the daemon makes for each of them. With a thousand subscribers on
//! the loop's core, their writes would set the loop's pace (a hundredth of
//! what it is alone). Cheaper deliveries cannot close that gap: a thousand
//! writes a line cost more than the line. So the loop comes first: it runs
//! on the daemon's own runtime, its clients here, on threads of the lowest
//! priority below it: `nice 19`, which the kernel gives about 1/70 of a core
//! while the loop wants it and wakes the loop ahead of at once; or, when the
//! daemon itself already runs at nice 19, the `SCHED_IDLE` class, which runs
//! only when no ordinary thread of that core wants to. While the loop is
//! idle (an agent thinking, a few lines a second) the clients have the whole
//! core and events go out within a millisecond or so; while it is busy (a
//! flood) they get the scraps, subscribers fall behind the event ring and
//! lose events, counted (`dropped {count}`), and the agent never waits for
//! them. Replies get the same treatment: under a flood a request is answered
//! with the time the loop leaves, a few milliseconds later.
//!
//! Not `SCHED_IDLE` always: it yields to every other process on the machine
//! too, so a build running beside the loop would starve its `attach`; a
//! niced thread competes with other work as any background job does. Any
//! user may lower its own threads either way.

use std::io;

/// The clients' runtime; dropped (from anywhere, the loop's runtime
/// included) it stops at once, leaving nothing behind: by then the control
/// socket's own drain is over.
pub struct ClientRuntime(Option<tokio::runtime::Runtime>);

impl ClientRuntime {
    pub fn handle(&self) -> &tokio::runtime::Handle {
        self.0.as_ref().expect("running until dropped").handle()
    }
}

impl Drop for ClientRuntime {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

/// A runtime for the clients, its threads in the idle scheduling class (a
/// worker for each core the daemon may use: one when it is pinned, as a
/// pool on one core only adds hand-offs).
pub fn build() -> io::Result<ClientRuntime> {
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name("ralph-clients")
        .on_thread_start(yield_to_the_loop)
        .enable_all()
        .build()?;
    Ok(ClientRuntime(Some(runtime)))
}

/// Lowers the calling thread below the loop: nice 19, or the idle class
/// when the thread is at nice 19 already. A failure (a seccomp filter)
/// leaves the thread as it was: the clients are then served like the loop,
/// as before.
#[allow(unsafe_code)]
fn yield_to_the_loop() {
    use nix::libc;
    let tid = nix::unistd::gettid().as_raw() as libc::id_t;
    // getpriority returns -1 for nice -1 too: errno tells an error apart.
    nix::errno::Errno::clear();
    // SAFETY: getpriority takes two integers and touches no memory of ours;
    // on Linux PRIO_PROCESS with a thread id names that one thread.
    let nice = unsafe { libc::getpriority(libc::PRIO_PROCESS, tid) };
    let rc = if nice >= LOWEST_NICE && nix::errno::Errno::last_raw() == 0 {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: sched_setscheduler reads the `sched_param` we pass by
        // reference during the call only; pid 0 is the calling thread.
        unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) }
    } else {
        // SAFETY: as above, integers only.
        unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, LOWEST_NICE) }
    };
    if rc != 0 {
        tracing::debug!(error = %io::Error::last_os_error(), "cannot lower a client thread's priority");
    }
}

const LOWEST_NICE: i32 = 19;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_threads_run_below_the_thread_that_started_them() {
        let runtime = build().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        runtime.handle().spawn(async move { tx.send(priority()).unwrap() });
        let (policy, nice) = rx.recv().unwrap();
        let (own_policy, own_nice) = priority();
        assert_ne!(own_policy, nix::libc::SCHED_IDLE, "the test's own thread is left as it was");
        if own_nice < LOWEST_NICE {
            assert_eq!((policy, nice), (own_policy, LOWEST_NICE));
        } else {
            assert_eq!(policy, nix::libc::SCHED_IDLE);
        }
    }

    /// The calling thread's scheduling policy and nice value.
    #[allow(unsafe_code)]
    fn priority() -> (i32, i32) {
        let tid = nix::unistd::gettid().as_raw() as nix::libc::id_t;
        // SAFETY: both take integers only and touch no memory.
        unsafe { (nix::libc::sched_getscheduler(0), nix::libc::getpriority(nix::libc::PRIO_PROCESS, tid)) }
    }
}
