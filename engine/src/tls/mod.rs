//! TLS on OpenSSL libssl: certificates, a server and a client that record every
//! handshake message with timestamps and stream offsets (see docs/tls.md).

mod certs;
mod client;
mod common;
mod server;

use crate::out::Result;

#[derive(clap::Subcommand)]
pub enum Command {
    /// Root CA + server certificate (any OpenSSL signature algorithm) and their sizes.
    Certs(certs::Args),
    /// TLS server: full handshakes, one record per connection.
    Server(Box<server::Args>),
    /// TLS client: N fresh connections, each handshake verified and recorded.
    Client(Box<client::Args>),
}

pub fn run(c: Command) -> Result<()> {
    match c {
        Command::Certs(a) => certs::run(a),
        Command::Server(a) => server::run(*a),
        Command::Client(a) => client::run(*a),
    }
}
