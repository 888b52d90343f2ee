//! TLS: certificates, and a server and a client that record every handshake message with
//! timestamps and stream offsets (see docs/tls.md). The loops (`server.rs`, `client.rs`)
//! are written once against the stack traits in `stack.rs`; each TLS library is one module
//! (`openssl/`) registered in `stack::registered()`.

mod admission;
mod bulk;
pub mod certkey;
mod certs;
mod client;
#[cfg(test)]
mod client_tests;
#[cfg(test)]
mod fake;
mod hello;
mod http;
pub mod ids;
mod load;
mod memory;
pub mod openssl;
mod options;
pub mod record;
mod reference;
mod request;
pub mod rustls;
mod server;
pub mod stack;
#[cfg(test)]
mod tests;
pub mod x509;

use crate::out::Result;

#[derive(clap::Subcommand)]
pub enum Command {
    /// Root CA + server certificate (any OpenSSL or liboqs signature algorithm) and their
    /// sizes.
    Certs(Box<certs::Args>),
    /// TLS server: full handshakes, one record per connection.
    Server(Box<server::Args>),
    /// TLS client: N fresh connections, each handshake verified and recorded.
    Client(Box<client::Args>),
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

/// What every registered stack can do (`info.tls_stacks`).
pub fn stacks_info() -> Result<Vec<stack::StackInfo>> {
    stack::registered().iter().map(|s| s.describe()).collect()
}

/// Every key spec the certificate builder can make certificates of, whatever stack serves
/// them (`info.certificate_key_types`): every stack's CA key types, and every liboqs
/// signature of the table, those too large for any stack's limits included.
pub fn certificate_key_types(stacks: &[stack::StackInfo]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let liboqs = ids::SIGS.iter().map(|s| s.liboqs.to_string());
    for spec in stacks
        .iter()
        .flat_map(|s| s.ca_key_types.iter().cloned())
        .chain(liboqs)
    {
        let makeable = certkey::KeySpec::parse(&spec).is_ok_and(|k| k.available());
        if makeable && !out.contains(&spec) {
            out.push(spec);
        }
    }
    out
}
