//! `tls hello`: the ClientHello a stack's client sends, measured without a server: the
//! client connects to a listener of its own on 127.0.0.1 that reads the ClientHello's
//! records and closes. What a size model cannot know from the algorithms alone (which
//! extensions the stack sends, how long its lists are) comes from the stack itself, for any
//! stack, without running a handshake.

use super::options::TlsOpts;
use crate::out::{emit, Result};
use crate::tls::record::Recorder;
use crate::tls::stack::{ClientSetup, ServerName};
use crate::tls::transport::tcp::Wire;
use serde_json::json;
use std::cell::RefCell;
use std::io::Read;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::PathBuf;
use std::rc::Rc;
use std::time::Duration;

#[derive(clap::Args, Clone, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Args {
    /// Root certificate(s) (PEM) the client would verify a server against (the stack loads
    /// them as it would for a handshake).
    #[arg(long)]
    pub ca: PathBuf,
    /// Name the client sends in SNI (a DNS name; an IP address sends none, as RFC 6066 asks).
    #[arg(long, default_value = "198.18.0.2")]
    pub servername: String,
    #[command(flatten)]
    #[serde(flatten)]
    pub tls: TlsOpts,
}

/// Sizes of one ClientHello as read off the wire.
#[derive(Debug, PartialEq, Eq)]
pub struct Hello {
    /// Bytes of the records that carried it (5-byte headers included).
    pub record_bytes: usize,
    /// The handshake message (4-byte header included).
    pub message_bytes: usize,
    pub records: usize,
    /// Its legacy_session_id's length (a server echoes it in its ServerHello).
    pub session_id_bytes: usize,
}

/// Reads TLS records from `r` until the first handshake message is complete.
pub fn read_client_hello(r: &mut impl Read) -> Result<Hello> {
    let mut body = Vec::new();
    let mut hello = Hello {
        record_bytes: 0,
        message_bytes: 0,
        records: 0,
        session_id_bytes: 0,
    };
    loop {
        let mut header = [0u8; 5];
        r.read_exact(&mut header)
            .map_err(|e| crate::err!(Io, "reading the ClientHello: {e}"))?;
        if header[0] != 22 {
            crate::bail!(
                Check,
                "the client's first record is of type {}, not a handshake",
                header[0]
            );
        }
        let len = usize::from(u16::from_be_bytes([header[3], header[4]]));
        let mut fragment = vec![0u8; len];
        r.read_exact(&mut fragment)
            .map_err(|e| crate::err!(Io, "reading the ClientHello: {e}"))?;
        body.extend_from_slice(&fragment);
        hello.record_bytes += 5 + len;
        hello.records += 1;
        if body.len() >= 4 {
            if body[0] != 1 {
                crate::bail!(Check, "the client's first message is of type {}", body[0]);
            }
            let message =
                4 + (usize::from(body[1]) << 16 | usize::from(body[2]) << 8) + usize::from(body[3]);
            if body.len() >= message {
                hello.message_bytes = message;
                // type, length (4), legacy_version (2), random (32), then the session id's
                // length byte.
                hello.session_id_bytes = usize::from(*body.get(38).unwrap_or(&0));
                return Ok(hello);
            }
        }
    }
}

pub fn run(a: Args) -> Result<()> {
    let stack = a.tls.stack()?;
    let ctx = stack.client(&ClientSetup {
        protocol: a.tls.protocol()?,
        ca: a.ca.clone(),
        identity: None,
    })?;
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let timeout = Duration::from_secs(a.tls.io_timeout.max(1));
    let reader = std::thread::spawn(move || -> Result<Hello> {
        let (mut peer, _) = listener.accept()?;
        peer.set_read_timeout(Some(timeout))?;
        let hello = read_client_hello(&mut peer);
        // Closing ends the client's handshake: it was only here to say hello.
        let _ = peer.shutdown(Shutdown::Both);
        hello
    });
    let tcp = TcpStream::connect_timeout(&addr, timeout)
        .map_err(|e| crate::err!(Io, "TCP connect to the engine's own listener: {e}"))?;
    tcp.set_nodelay(true)?;
    tcp.set_read_timeout(Some(timeout))?;
    tcp.set_write_timeout(Some(timeout))?;
    let wire = Wire {
        tcp: Rc::new(tcp),
        rec: Rc::new(RefCell::new(Recorder::new(false))),
        peer: "server",
        timeout_s: a.tls.io_timeout,
    };
    let handshake = ctx.start(wire, &ServerName::parse(&a.servername))?;
    // The listener closes after the ClientHello, so the handshake fails: expected.
    let _ = handshake.run();
    let hello = reader
        .join()
        .map_err(|_| crate::err!(Check, "the ClientHello reader panicked"))??;
    emit(&json!({
        "type": "client_hello",
        "stack": stack.name(),
        "groups": a.tls.groups,
        "sigalgs": a.tls.sigalgs,
        "servername": a.servername,
        "record_bytes": hello.record_bytes,
        "message_bytes": hello.message_bytes,
        "records": hello.records,
        "session_id_bytes": hello.session_id_bytes,
    }));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn a_client_hello_split_over_records_is_read_whole() {
        // A 300-byte ClientHello in two records of 200 and 104 bytes, with a 32-byte
        // session id.
        let mut message = vec![1u8, 0, 1, 0x28];
        message.resize(300, 7);
        message[38] = 32;
        let mut wire = Vec::new();
        for part in [&message[..200], &message[200..]] {
            wire.extend_from_slice(&[22, 3, 1]);
            wire.extend_from_slice(&(part.len() as u16).to_be_bytes());
            wire.extend_from_slice(part);
        }
        let got = read_client_hello(&mut &wire[..]).unwrap();
        assert_eq!(
            got,
            Hello {
                record_bytes: 310,
                message_bytes: 300,
                records: 2,
                session_id_bytes: 32,
            }
        );
        // Not a handshake record: refused.
        wire[0] = 23;
        assert!(read_client_hello(&mut &wire[..]).is_err());
    }

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        tls: TlsOpts,
    }

    #[test]
    fn every_stack_says_hello_with_its_key_share() {
        let dir = crate::tls::contract::TempDir::new("hello");
        crate::tls::contract::make_certs(dir.path(), "EC:P-256", "EC:P-256");
        let ca = dir.path().join("root.crt.pem");
        for stack in crate::tls::registry::registered() {
            let info = stack.describe().unwrap();
            let name_of = |code: u16| {
                info.groups
                    .iter()
                    .find(|g| g.code == code)
                    .map(|g| g.name.clone())
            };
            let (Some(small), Some(large)) = (name_of(0x0201), name_of(0x0202)) else {
                continue;
            };
            let sizes: Vec<usize> = [small, large]
                .iter()
                .map(|g| {
                    use clap::Parser;
                    let a = Cli::parse_from(["t", "--stack", stack.name(), "--groups", g]).tls;
                    hello_size(stack, &a, &ca)
                })
                .collect();
            // ML-KEM-1024's encapsulation key is 1568 bytes, ML-KEM-768's 1184: nothing
            // else differs between two ClientHellos offering one pure KEM group each.
            assert_eq!(sizes[1] - sizes[0], 384, "{}", stack.name());
        }
    }

    fn hello_size(stack: &dyn crate::tls::stack::Stack, a: &TlsOpts, ca: &Path) -> usize {
        let ctx = stack
            .client(&ClientSetup {
                protocol: a.protocol().unwrap(),
                ca: ca.to_path_buf(),
                identity: None,
            })
            .unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let reader = std::thread::spawn(move || {
            let (mut peer, _) = listener.accept().unwrap();
            let h = read_client_hello(&mut peer).unwrap();
            let _ = peer.shutdown(Shutdown::Both);
            h
        });
        let tcp = TcpStream::connect(addr).unwrap();
        let wire = Wire {
            tcp: Rc::new(tcp),
            rec: Rc::new(RefCell::new(Recorder::new(false))),
            peer: "server",
            timeout_s: 5,
        };
        let hs = ctx.start(wire, &ServerName::parse("198.18.0.2")).unwrap();
        let _ = hs.run();
        reader.join().unwrap().message_bytes
    }
}
