# Everyday commands. `just --list` shows them all.

# Build every daemon (release).
build:
    cargo build --release --workspace --bins

# The test suite, exactly as CI and the README run it (the engine's tests
# in a release build too).
test:
    cargo test
    cargo test -p rpc-bench
    cargo test --release -p rpc-core

# The same tests, faster, with cargo-nextest.
nextest:
    cargo nextest run

# Lints as CI runs them.
lint:
    cargo fmt --all -- --check
    cargo clippy --workspace --all-targets -- -D warnings

fmt:
    cargo fmt --all

# The benchmark suite (the project's targets, B1-B10), pinned: the table into
# benchmarks/latest.md (copied into BENCHMARKS.md with its analysis), the
# scaling picture into benchmarks/scaling.svg.
bench:
    cargo build --release --workspace --bins
    ./target/release/rpc-bench suite --plot benchmarks/scaling.svg --write benchmarks/latest.md

# Fuzz every parser of untrusted input for `seconds` each, from fuzz/seeds
# (installs cargo-fuzz and a nightly toolchain when missing). CI runs
# `FUZZ_BUILD=dev scripts/fuzz-ci 10`: an unoptimised build, for its time.
fuzz seconds="60" *targets:
    ./scripts/fuzz-ci {{seconds}} {{targets}}

# All four daemons in the foreground, logs prefixed; Ctrl-C stops them.
run:
    ./scripts/run-all

# A local btcp-broker cluster: nats-server and three brokers as one service;
# prints how to attach a browser to one node and call it from another.
cluster:
    ./scripts/cluster

# Install the daemons for you: binaries (run-all's release build), man pages, completions,
# env files and user services (systemd units; launchd agents on macOS).
# Arguments go to scripts/install, e.g. `just install --prefix ~/.local`.
install *args:
    ./scripts/install {{args}}

# Remove what `just install` installed (an env file you changed is kept).
uninstall *args:
    ./scripts/install --uninstall {{args}}

# Man pages of every binary, generated from its command line, into target/man/man1
# (read one with `man -l target/man/man1/btcp-broker.1`).
man:
    cargo build --bins -p supex-bridge -p btcp-broker -p hermes-host -p ralph-server -p rpc-bench
    for b in supex-bridge btcp-broker hermes-host ralph-server rpc-bench; do \
        cargo run -q -p "$b" --bin "$b" -- man --out-dir target/man/man1 || exit 1; done

run-supex-bridge *args:
    cargo run --release -p supex-bridge -- {{args}}

run-btcp-broker *args:
    cargo run --release -p btcp-broker -- {{args}}

run-hermes-host *args:
    cargo run --release -p hermes-host -- {{args}}

run-ralph-server *args:
    cargo run --release -p ralph-server -- {{args}}
