//! ralph-server: the agent's terminal output in reads of any size, with
//! partial lines published between them; lines come out whole and once, and
//! their plain text has no escape sequence left.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ralph_server::fuzzing::agent_output(data));
