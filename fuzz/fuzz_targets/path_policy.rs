//! supex-bridge: a path argument checked against a temporary tree of symlinks
//! leading in, out, nowhere and in circles; an allowed path never resolves
//! outside the roots, and where it exists the kernel agrees where it leads.
#![no_main]

use std::path::PathBuf;
use std::sync::LazyLock;

use supex_bridge::fuzzing::{PathFixture, path_policy};

/// One tree per fuzzing process, `supex-path-fuzz-<pid>` in the temporary
/// directory. libFuzzer exits without running destructors, so each run
/// first removes the trees of runs whose process is gone.
static FIXTURE: LazyLock<PathFixture> = LazyLock::new(|| {
    let tmp = std::env::temp_dir();
    for entry in std::fs::read_dir(&tmp).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(pid) = name.strip_prefix("supex-path-fuzz-")
            && !PathBuf::from("/proc").join(pid).exists()
        {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
    let dir = tmp.join(format!("supex-path-fuzz-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir).expect("a directory for the fixture");
    PathFixture::create(&dir).expect("the fixture tree")
});

libfuzzer_sys::fuzz_target!(|data: &[u8]| path_policy(&FIXTURE, data));
