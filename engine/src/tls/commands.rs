//! The `tls` subcommands and the loop, or certificate maker, each one runs.

use super::loops::{bulk, client, connect, hello, load, memory, reference, server};
use super::pki::certs;
use crate::out::Result;

#[derive(clap::Subcommand)]
pub enum Command {
    /// Root CA + server certificate (any OpenSSL or liboqs signature algorithm) and their
    /// sizes.
    Certs(Box<certs::Args>),
    /// TLS server: full handshakes, one record per connection.
    Server(Box<server::Args>),
    /// TLS client: N fresh connections, each handshake verified and recorded.
    Client(Box<connect::Args>),
    /// Heap and stack of full handshakes per role: server and client threads in one
    /// process, OpenSSL's allocations counted through its hooks, stacks painted.
    Memory(Box<memory::Args>),
    /// Open N verified connections to a server and keep them all open (idle memory).
    Hold(Box<memory::HoldArgs>),
    /// Load generator: full handshakes from many workers, closed loop or at a fixed
    /// arrival rate; one load_result record with every sample.
    Load(Box<load::Args>),
    /// Bulk transfer after one handshake, each way (tls_bench style), every read checked.
    Bulk(Box<bulk::Args>),
    /// Full handshakes between the stack's client and server as the library's own tools
    /// drive them (in memory, or blocking sockets on 127.0.0.1): each side's CPU per
    /// handshake without the engine's loops.
    Reference(Box<reference::Args>),
    /// The ClientHello the stack's client sends (its size), read by a listener of the
    /// engine's own on 127.0.0.1 that closes after it: no server, no handshake.
    Hello(Box<hello::Args>),
}

impl Command {
    /// Whether this command counts OpenSSL's allocations: the hooks must then be installed
    /// before OpenSSL allocates anything (first thing in `main`).
    pub fn counts_heap(&self) -> bool {
        match self {
            Command::Memory(_) => true,
            Command::Server(a) => a.count_heap,
            _ => false,
        }
    }
}

pub fn run(c: Command) -> Result<()> {
    match c {
        Command::Certs(a) => certs::run(*a),
        Command::Server(a) => server::run(*a),
        Command::Client(a) => client::run(*a),
        Command::Memory(a) => memory::run(*a),
        Command::Hold(a) => memory::hold(*a),
        Command::Load(a) => load::run(*a),
        Command::Bulk(a) => bulk::run(*a),
        Command::Reference(a) => reference::run(*a),
        Command::Hello(a) => hello::run(*a),
    }
}
