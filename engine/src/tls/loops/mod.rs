//! The engine's TLS loops, written once against the `Stack` traits: they never name a
//! concrete stack. `connect` is the client side every client loop shares (dialing, the
//! checks of what was negotiated); `options` the flags every loop shares.

pub mod admission;
pub mod bulk;
pub mod client;
#[cfg(test)]
mod client_tests;
pub mod connect;
pub mod hello;
pub mod load;
#[cfg(test)]
mod loop_tests;
pub mod memory;
pub mod options;
pub mod reference;
pub mod server;
