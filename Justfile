# Everyday commands. `just --list` shows them all.

# Build every daemon (release).
build:
    cargo build --release --workspace --bins

# The test suite, exactly as CI and the README run it.
test:
    cargo test --workspace

# The same tests, faster, with cargo-nextest.
nextest:
    cargo nextest run --workspace

# Lints as CI runs them.
lint:
    cargo fmt --all -- --check
    cargo clippy --workspace --all-targets -- -D warnings

fmt:
    cargo fmt --all

# The benchmark suite (the project's targets, B1-B9); writes BENCHMARKS.md.
bench:
    cargo build --release --workspace --bins
    ./target/release/rpc-bench suite --write BENCHMARKS.md

# Fuzz every parser of untrusted input for `seconds` each, from fuzz/seeds
# (installs cargo-fuzz and a nightly toolchain when missing). CI: `just fuzz 30`.
fuzz seconds="60" *targets:
    ./scripts/fuzz-ci {{seconds}} {{targets}}

# All four daemons in the foreground, logs prefixed; Ctrl-C stops them.
run:
    ./scripts/run-all

run-supex-bridge *args:
    cargo run --release -p supex-bridge -- {{args}}

run-btcp-broker *args:
    cargo run --release -p btcp-broker -- {{args}}

run-hermes-host *args:
    cargo run --release -p hermes-host -- {{args}}

run-ralph-server *args:
    cargo run --release -p ralph-server -- {{args}}
