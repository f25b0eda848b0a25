//! The parts of ralph-server that read what the agent writes, as a library:
//! the task's `prd.json` ([`prd`]) and the agent's terminal output
//! ([`output`]). The daemon (`main.rs`) uses them from here, and the fuzz
//! targets in `fuzz/` reach them through `fuzzing`. Nothing else is public:
//! this is not an API for other crates.

pub mod output;
pub mod prd;

#[doc(hidden)]
pub mod fuzzing;
