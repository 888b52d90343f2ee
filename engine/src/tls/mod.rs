//! TLS: certificates, and a server and a client that record every handshake message with
//! timestamps and stream offsets (see docs/tls.md). Layers, lowest first (a module uses only
//! those below it; `engine/tests/structure.rs` keeps it so):
//!
//! - `http/`, `pki/`: HTTP/1.1 heads and the test-pattern bodies; keys, certificates and the
//!   algorithm tables (`tls certs`).
//! - `record`: clocks, the per-connection event recorder, where connection records go.
//! - `transport/`: what carries a stack's bytes and counts them (`Wire`; TCP today).
//! - `stack`: what a TLS library implements (the traits); `stacks/`: one folder per library.
//! - `registry`: every stack by name; the one module outside `stacks/` that names one.
//! - `loops/`: the server, client, load, bulk, memory, hello and reference loops, written
//!   once against `stack`; `commands`: the `tls` subcommands; `contract`: the suite every
//!   stack passes, wherever it is linked.

pub mod commands;
pub mod contract;
pub mod http;
pub mod loops;
pub mod pki;
pub mod record;
pub mod registry;
pub mod stack;
pub mod stacks;
pub mod transport;
