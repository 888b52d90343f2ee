//! What carries a TLS stack's bytes between the loops and the peer. A stack reads and
//! writes a `Wire` (`std::io::Read + Write`); the loops make one from a connected socket,
//! set it up, and read the kernel's view of the connection afterwards. TCP is the one
//! transport today (`tcp`); a new one provides the same three things in a module of its own
//! here: a `Wire`-like carrier that records every read and write in the connection's
//! `Recorder`, its setup, and its per-connection facts for the record.

pub mod tcp;
