//! What extensions call, over their stdio: the message (`editor/*`,
//! [`editor`]) and dialogs (`ui/*`, [`dialogs`]), behind the [`gate`] that
//! holds them until the extension's `initialize` has completed.

pub mod dialogs;
pub mod editor;
pub mod gate;
