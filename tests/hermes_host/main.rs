//! hermes-host over real processes and sockets.
