//! What control clients call, over the control socket: the message
//! ([`message`]), extensions and commands ([`extensions`]), the host's files
//! for a UI's file picker ([`files`]), becoming the UI
//! that answers the extensions' dialogs ([`attached_ui`]), events
//! ([`subscribe`]), and the daemon's health ([`status`]).

pub mod attached_ui;
pub mod extensions;
pub mod files;
pub mod message;
pub mod status;
pub mod subscribe;
