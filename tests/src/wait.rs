//! Waiting for a condition, for the harness's modules and the tests alike
//! (below the harness's other modules, which use it).

use std::time::{Duration, Instant};

/// Polls `check` until it holds or `timeout` passes.
pub fn eventually(timeout: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if check() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    check()
}
