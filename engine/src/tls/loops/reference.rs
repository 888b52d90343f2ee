//! `tls reference`: full handshakes between a stack's client and server as the library's own
//! tools drive them, none of the engine's loops around them: `--transport memory` in one
//! thread with the bytes handed over in buffers, as rustls's benchmark (rustls-bench) does
//! (what the library itself costs); `--transport tcp` over 127.0.0.1 with blocking sockets
//! and nothing else, as rustls's example client and server do. The lab sets the engine's
//! loops beside them (benchmarks/stack_handshake_rate.py). One record per handshake, each
//! checked.

use super::options::TlsOpts;
use crate::out::Result;
use crate::tls::stack::{ClientSetup, ServerName, ServerSetup, Transport};
use serde_json::json;
use std::path::PathBuf;

#[derive(clap::Args, Clone, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Args {
    /// Server certificate chain (PEM) to send.
    #[arg(long)]
    pub cert_chain: PathBuf,
    /// Private key (PEM) of --cert-chain.
    #[arg(long)]
    pub key: PathBuf,
    /// Root certificate (PEM) the client verifies the server chain against.
    #[arg(long)]
    pub ca: PathBuf,
    /// Name the client sends and checks (the server certificate's SAN).
    #[arg(long, default_value = "localhost")]
    pub servername: String,
    #[command(flatten)]
    #[serde(flatten)]
    pub tls: TlsOpts,
    /// Measured handshakes, 1-1000000.
    #[arg(short = 'n', long = "count", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub count: u64,
    /// How the client and the server are connected: memory (one thread, buffers) or tcp
    /// (two threads, 127.0.0.1).
    #[arg(long, value_enum, default_value = "memory")]
    pub transport: Transport,
    /// Handshakes before the measured ones, recorded with "warmup": true; 0-10000.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(0..=10_000))]
    pub warmup: u64,
}

/// The one name of a list option, or None without it; several are refused (each handshake
/// is checked against it).
fn one(flag: &str, text: &Option<String>) -> Result<Option<String>> {
    match super::options::list(flag, text)?.as_deref() {
        None => Ok(None),
        Some([one]) => Ok(Some(one.clone())),
        Some(_) => crate::bail!(Usage, "{flag}: tls reference checks one; name exactly one"),
    }
}

pub fn run(a: Args) -> Result<()> {
    let stack = a.tls.stack()?;
    let protocol = a.tls.protocol()?;
    let group = one("--groups", &a.tls.groups)?;
    let sigalg = one("--sigalgs", &a.tls.sigalgs)?;
    let code = |name: &Option<String>, f: &dyn Fn(&str) -> Option<u16>, flag: &str| {
        name.as_deref()
            .map(|n| {
                f(n).ok_or_else(|| {
                    crate::err!(Usage, "{flag} {n:?}: unknown to the {} stack", stack.name())
                })
            })
            .transpose()
    };
    let want_group = code(&group, &|n| stack.group_code(n), "--groups")?;
    let want_sigalg = code(&sigalg, &|n| stack.sigalg_code(n), "--sigalgs")?;
    let server = ServerSetup {
        protocol: a.tls.protocol()?,
        cert_chain: a.cert_chain.clone(),
        key: a.key.clone(),
        dh_bits: None,
        dh_params: None,
        client_auth: None,
    };
    let client = ClientSetup {
        protocol,
        ca: a.ca.clone(),
        identity: None,
    };
    let name = ServerName::parse(&a.servername);
    let Some(made) = stack.reference(&server, &client, &name, a.transport) else {
        crate::bail!(
            Usage,
            "--stack {}: this stack has no reference mode (the rustls stacks have one)",
            stack.name()
        );
    };
    let mut handshake = made?;
    crate::out::emit(&crate::tls::record::config(
        "tls inmemory",
        crate::tls::record::options(&a),
    ));
    for i in 0..a.warmup + a.count {
        let h = handshake()?;
        let fail = |what: &str, got: Option<u16>, want: Option<u16>| {
            crate::err!(
                Check,
                "reference handshake {i}: {what} {}, asked for {}",
                got.map(|c| format!("0x{c:04x}")).unwrap_or("none".into()),
                want.map(|c| format!("0x{c:04x}")).unwrap_or("any".into())
            )
        };
        if h.client_group != h.server_group || h.client_group.is_none() {
            return Err(fail(
                "the two sides negotiated different groups",
                h.client_group,
                h.server_group,
            ));
        }
        if want_group.is_some() && h.client_group != want_group {
            return Err(fail("negotiated group", h.client_group, want_group));
        }
        if h.signed != h.verified || h.signed.is_none() {
            return Err(fail(
                "the server signed with one scheme and the client verified another",
                h.signed,
                h.verified,
            ));
        }
        if want_sigalg.is_some() && h.signed != want_sigalg {
            return Err(fail("signature scheme", h.signed, want_sigalg));
        }
        crate::out::emit(&json!({
            "type": "reference", "transport": a.transport, "i": i, "warmup": i < a.warmup, "stack": stack.name(),
            "wall_ns": h.wall_ns, "client_cpu_ns": h.client_cpu_ns, "server_cpu_ns": h.server_cpu_ns,
            "client_bytes": h.client_bytes, "server_bytes": h.server_bytes,
            "group_code": h.client_group, "sigalg_code": h.signed,
        }));
    }
    Ok(())
}
