//! ralph-server over a real PTY and its Unix socket.
