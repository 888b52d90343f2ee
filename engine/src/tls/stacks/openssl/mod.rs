//! The OpenSSL 3.5 libssl stack: contexts configured from the typed options, sessions on
//! an `SslStream<Wire>`, the message callback feeding the Recorder, negotiated code points
//! from libssl's own tables, and libssl failures sorted into the engine's error kinds.

pub mod caps;
#[cfg(test)]
pub mod fake;
pub mod ffi;

use crate::out::{Error, Result};
use crate::tls::record::Negotiated;
use crate::tls::stack::{
    ClientContext, ClientSetup, Framing, Handshake, HeapCounting, KeyShares, Limits, Protocol,
    ReadOutcome, ServerContext, ServerName, ServerSetup, Session, Stack, StackInfo, TlsVersion,
    Verification, VerifyMode, WriteModel, Writes,
};
use crate::tls::transport::tcp::Wire;
use openssl::ssl::{
    ErrorCode, Ssl, SslConnector, SslContext, SslContextBuilder, SslFiletype, SslMethod, SslMode,
    SslOptions, SslSessionCacheMode, SslStream, SslVerifyMode, SslVersion,
};
use openssl::x509::X509VerifyResult;
use std::io::Write;
use std::sync::Arc;

/// The libssl stack (registered as "openssl").
pub struct OpenSsl;

impl Stack for OpenSsl {
    fn name(&self) -> &'static str {
        "openssl"
    }

    fn reports_messages(&self) -> bool {
        true
    }

    fn server(&self, setup: &ServerSetup) -> Result<Arc<dyn ServerContext>> {
        let ctx = server_context(setup)?;
        // Read libssl's code tables now (about 1 ms), not after the first handshake, where
        // it would delay that connection's request and response.
        caps::codes();
        Ok(Arc::new(Server {
            ctx,
            client_auth: setup.client_auth.is_some(),
        }))
    }

    fn client(&self, setup: &ClientSetup) -> Result<Box<dyn ClientContext>> {
        let ctx = client_context(setup)?;
        caps::codes();
        Ok(Box::new(Client {
            ctx,
            verify: setup.protocol.verify,
        }))
    }

    fn group_code(&self, name: &str) -> Option<u16> {
        caps::codes().group(name)
    }

    fn sigalg_code(&self, name: &str) -> Option<u16> {
        caps::codes().sigalg(name)
    }

    fn heap_counting(&self) -> HeapCounting {
        HeapCounting::OpensslHooks
    }

    fn fixed_random(&self) -> bool {
        true
    }

    fn fix_randomness(&self) -> Result<()> {
        if !ffi::fixed_random_for_this_thread() {
            crate::bail!(
                Library,
                "cannot install OpenSSL's TEST-RAND generator (--fixed-random)"
            );
        }
        Ok(())
    }

    fn describe(&self) -> Result<StackInfo> {
        let groups = caps::groups()?;
        let sigalgs = caps::sigalgs()?;
        let mut cert_key_types: Vec<String> = Vec::new();
        for s in &sigalgs {
            if let Some(spec) = caps::key_spec_for_sigalg(&s.name) {
                let makeable = crate::tls::pki::certkey::KeySpec::parse(&spec)
                    .map(|k| k.by_openssl())
                    .unwrap_or(false);
                if makeable && !cert_key_types.contains(&spec) {
                    cert_key_types.push(spec);
                }
            }
        }
        let mut ca_key_types = cert_key_types.clone();
        for name in certificate_only_signers() {
            if !ca_key_types.contains(&name) {
                ca_key_types.push(name);
            }
        }
        let ctx = SslContext::builder(SslMethod::tls())?.build();
        let limits = Limits {
            max_cert_list_bytes: Some(ffi::max_cert_list(&ctx) as u64),
            ..Limits::default()
        };
        // RFC 8446's suites, each kept when libssl takes it alone.
        let cipher_suites = [
            ("TLS_AES_128_GCM_SHA256", 0x1301),
            ("TLS_AES_256_GCM_SHA384", 0x1302),
            ("TLS_CHACHA20_POLY1305_SHA256", 0x1303),
            ("TLS_AES_128_CCM_SHA256", 0x1304),
            ("TLS_AES_128_CCM_8_SHA256", 0x1305),
        ]
        .into_iter()
        .filter(|(name, _)| {
            SslContext::builder(SslMethod::tls())
                .is_ok_and(|mut b| b.set_ciphersuites(name).is_ok())
        })
        .map(|(name, code)| crate::tls::stack::NamedCode {
            name: name.to_string(),
            code,
            versions: vec!["1.3"],
        })
        .collect();
        Ok(StackInfo {
            name: self.name(),
            implementation: format!("{} libssl", openssl::version::version()),
            cipher_suites,
            message_events: true,
            groups,
            sigalgs,
            cert_key_types,
            ca_key_types,
            limits,
            // OpenSSL's handshake write BIO (bf_buff.c default size); one record per
            // handshake message.
            write_model: WriteModel {
                kind: Writes::Buffer,
                buffer_bytes: Some(4096),
                records: Framing::Message,
            },
            server_name_ack: false,
            change_cipher_spec: true,
            // `*` before a group in libssl's groups list asks for its key share.
            key_shares: KeyShares::Any,
            key_share_companions: Vec::new(),
            build_options: Vec::new(),
            heap_counting: self.heap_counting(),
            fixed_random: self.fixed_random(),
            tools: Default::default(),
        })
    }
}

/// Signature algorithms OpenSSL can make keys for and sign X.509 certificates with that have
/// no TLS signature scheme here (SLH-DSA in 3.5): usable as a CA, not as a TLS signer.
fn certificate_only_signers() -> Vec<String> {
    let provided = crate::primitives::ossl::provided();
    let mut out = Vec::new();
    for m in provided["signatures"].as_array().into_iter().flatten() {
        let Some(name) = m["name"].as_str() else {
            continue;
        };
        if !name.to_ascii_uppercase().starts_with("SLH-DSA-") {
            continue;
        }
        let makeable = crate::tls::pki::certkey::KeySpec::parse(name)
            .map(|k| k.by_openssl())
            .unwrap_or(false);
        if makeable {
            out.push(name.to_string());
        }
    }
    out.sort();
    out
}

fn ssl_version(v: TlsVersion) -> SslVersion {
    match v {
        TlsVersion::Tls12 => SslVersion::TLS1_2,
        TlsVersion::Tls13 => SslVersion::TLS1_3,
    }
}

/// Apply the protocol options to a context builder; `min_level` is the security level to
/// use when none was asked for (None: OpenSSL's default).
fn apply(p: &Protocol, b: &mut SslContextBuilder, min_level: Option<u32>) -> Result<()> {
    let v = ssl_version(p.version);
    b.set_min_proto_version(Some(v))?;
    b.set_max_proto_version(Some(v))?;
    if let Some(g) = &p.groups {
        let list = g.join(":");
        b.set_groups_list(&list)
            .map_err(|e| crate::err!(Usage, "--groups {list:?} not accepted by OpenSSL: {e}"))?;
    }
    if let Some(s) = &p.sigalgs {
        let list = s.join(":");
        b.set_sigalgs_list(&list)
            .map_err(|e| crate::err!(Usage, "--sigalgs {list:?} not accepted by OpenSSL: {e}"))?;
    }
    if let Some(l) = p.security_level.or(min_level) {
        if l > 5 {
            crate::bail!(Usage, "--security-level {l} is out of range 0-5");
        }
        b.set_security_level(l);
    }
    if let Some(c) = &p.ciphers {
        b.set_cipher_list(c)
            .map_err(|e| crate::err!(Usage, "--ciphers {c:?} not accepted by OpenSSL: {e}"))?;
    }
    if let Some(c) = &p.ciphersuites {
        let list = c.join(":");
        b.set_ciphersuites(&list).map_err(|e| {
            crate::err!(
                Usage,
                "--ciphersuites {list:?} not accepted by OpenSSL: {e}"
            )
        })?;
    }
    if let Some(path) = &p.keylog {
        // Checked now, created when the first secret comes (`secrets::KeyLog`).
        let log = crate::secrets::KeyLog::new(path).map_err(|e| e.context("--keylog"))?;
        b.set_keylog_callback(move |_, line| log.log(line));
    }
    Ok(())
}

fn server_context(s: &ServerSetup) -> Result<SslContext> {
    let mut b = SslContextBuilder::new(SslMethod::tls_server())?;
    // Full handshakes only: no tickets, no session cache, no resumption of any kind.
    b.set_options(SslOptions::NO_TICKET);
    b.set_num_tickets(0)?;
    b.set_session_cache_mode(SslSessionCacheMode::OFF);
    // The chain exactly as --cert-chain gives it: without this, libssl completes a chain
    // from its trust store, and in mutual TLS the client CA's root (often the server's own
    // root) joined every Certificate message.
    b.set_mode(SslMode::NO_AUTO_CHAIN);
    b.set_certificate_chain_file(&s.cert_chain).map_err(|e| {
        crate::err!(
            Io,
            "cannot load --cert-chain {}: {e}",
            s.cert_chain.display()
        )
    })?;
    b.set_private_key_file(&s.key, SslFiletype::PEM)
        .map_err(|e| crate::err!(Io, "cannot load --key {}: {e}", s.key.display()))?;
    b.check_private_key().map_err(|_| {
        crate::err!(
            Usage,
            "--key does not match the certificate in --cert-chain"
        )
    })?;
    // OpenSSL's default level 2 refuses DH groups under 2048 bits: lower it to 1 for
    // --dh-bits 1024 unless --security-level says otherwise (recorded per connection).
    let dh_bits = match &s.dh_params {
        Some(path) => Some(crate::dhparams::load(path)?.prime_p().num_bits() as u32),
        None => s.dh_bits,
    };
    let min_level = match dh_bits {
        Some(bits) if bits < 2048 => Some(1),
        _ => None,
    };
    apply(&s.protocol, &mut b, min_level)?;
    if let Some(auth) = &s.client_auth {
        // Mutual TLS: ask every client for a certificate and refuse one that does not chain
        // to the given roots (or none at all).
        b.set_verify(SslVerifyMode::PEER | SslVerifyMode::FAIL_IF_NO_PEER_CERT);
        b.set_ca_file(&auth.ca)
            .map_err(|e| crate::err!(Io, "cannot load --client-ca {}: {e}", auth.ca.display()))?;
        if let Some(list) = &auth.sigalgs {
            let list = list.join(":");
            if !ffi::set_client_sigalgs_list(&mut b, &list) {
                let e = openssl::error::ErrorStack::get();
                crate::bail!(
                    Usage,
                    "--client-sigalgs {list:?} not accepted by OpenSSL: {e}"
                );
            }
        }
    }
    let dh = match (&s.dh_params, s.dh_bits) {
        (Some(path), _) => Some(crate::dhparams::load(path)?),
        (None, Some(bits)) => Some(crate::dhparams::rfc(bits)?),
        (None, None) => None,
    };
    if let Some(dh) = dh {
        let bits = dh.prime_p().num_bits();
        b.set_tmp_dh(&dh).map_err(|e| {
            crate::err!(
                Usage,
                "{bits}-bit DH parameters refused at the security level in force: {e}"
            )
        })?;
    }
    Ok(b.build())
}

/// The groups list with `*` before each group that gets a key share (libssl 3.5's syntax).
fn groups_with_shares(groups: &[String], shares: &[String]) -> String {
    groups
        .iter()
        .map(|g| {
            if shares.iter().any(|s| s.eq_ignore_ascii_case(g)) {
                format!("*{g}")
            } else {
                g.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(":")
}

fn client_context(c: &ClientSetup) -> Result<SslContext> {
    let mut b = SslConnector::builder(SslMethod::tls_client())?;
    // Report: libssl still verifies the chain and the name (SSL_get_verify_result) but
    // goes on with the handshake whatever the outcome.
    b.set_verify(match c.protocol.verify {
        VerifyMode::Require => SslVerifyMode::PEER,
        VerifyMode::Report => SslVerifyMode::NONE,
    });
    b.set_session_cache_mode(SslSessionCacheMode::OFF);
    // A client certificate's chain as given, not completed from the trust store (which
    // holds the server's root: often the client's own root too).
    b.set_mode(SslMode::NO_AUTO_CHAIN);
    b.set_ca_file(&c.ca)
        .map_err(|e| crate::err!(Io, "cannot load --ca {}: {e}", c.ca.display()))?;
    apply(&c.protocol, &mut b, None)?;
    if let (Some(groups), Some(shares)) = (&c.protocol.groups, &c.protocol.key_shares) {
        let list = groups_with_shares(groups, shares);
        b.set_groups_list(&list).map_err(|e| {
            crate::err!(
                Usage,
                "--key-shares: the groups list {list:?} is not accepted by OpenSSL: {e}"
            )
        })?;
    }
    if let Some(id) = &c.identity {
        b.set_certificate_chain_file(&id.cert_chain).map_err(|e| {
            crate::err!(
                Io,
                "cannot load --cert-chain {}: {e}",
                id.cert_chain.display()
            )
        })?;
        b.set_private_key_file(&id.key, SslFiletype::PEM)
            .map_err(|e| crate::err!(Io, "cannot load --key {}: {e}", id.key.display()))?;
        b.check_private_key().map_err(|_| {
            crate::err!(
                Usage,
                "--key does not match the certificate in --cert-chain"
            )
        })?;
    }
    Ok(b.build().into_context())
}

struct Server {
    ctx: SslContext,
    client_auth: bool,
}

impl ServerContext for Server {
    fn security_level(&self) -> Option<u32> {
        Some(self.ctx.security_level())
    }

    fn start(&self, wire: Wire) -> Result<Box<dyn Handshake>> {
        let mut ssl = Ssl::new(&self.ctx)?;
        ffi::attach_recorder(&mut ssl, &wire.rec);
        let stream = SslStream::new(ssl, wire)?;
        Ok(Box::new(Pending {
            stream,
            role: Role::Server,
            client_auth: self.client_auth,
            verify: VerifyMode::Require,
        }))
    }
}

struct Client {
    ctx: SslContext,
    verify: VerifyMode,
}

impl ClientContext for Client {
    fn security_level(&self) -> Option<u32> {
        Some(self.ctx.security_level())
    }

    fn start(&self, wire: Wire, name: &ServerName) -> Result<Box<dyn Handshake>> {
        let mut ssl = Ssl::new(&self.ctx)?;
        ffi::attach_recorder(&mut ssl, &wire.rec);
        match name {
            ServerName::Ip(ip) => ssl.param_mut().set_ip(*ip)?,
            ServerName::Dns(host) => {
                ssl.set_hostname(host)?;
                ssl.param_mut().set_host(host)?;
            }
        }
        let stream = SslStream::new(ssl, wire)?;
        Ok(Box::new(Pending {
            stream,
            role: Role::Client,
            client_auth: false,
            verify: self.verify,
        }))
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Server,
    Client,
}

/// A connection set up and not yet shaken hands.
struct Pending {
    stream: SslStream<Wire>,
    role: Role,
    /// Server side of mutual TLS: the client's chain is verified.
    client_auth: bool,
    /// Client: whether a chain that does not validate ends the handshake.
    verify: VerifyMode,
}

impl Handshake for Pending {
    fn run(mut self: Box<Self>) -> Result<Box<dyn Session>> {
        let result = match self.role {
            Role::Server => self.stream.accept(),
            Role::Client => self.stream.connect(),
        };
        if let Err(e) = result {
            // Only a verification that was required can have ended the handshake.
            let required = match self.role {
                Role::Client => self.verify == VerifyMode::Require,
                Role::Server => self.client_auth,
            };
            if required {
                let v = self.stream.ssl().verify_result();
                if v != X509VerifyResult::OK {
                    let whose = if self.role == Role::Client {
                        "the server's"
                    } else {
                        "the client's"
                    };
                    crate::bail!(
                        Check,
                        "{whose} certificate verification failed: {}",
                        v.error_string()
                    );
                }
            }
            return Err(classify("handshake failed", &e));
        }
        Ok(Box::new(Connection {
            stream: self.stream,
            role: self.role,
            client_auth: self.client_auth,
        }))
    }
}

struct Connection {
    stream: SslStream<Wire>,
    role: Role,
    client_auth: bool,
}

/// The negotiated group's code point: libssl's own answer for groups without a NID
/// (SSL_get_negotiated_group returns the code point itself then: the hybrids, ML-KEM),
/// else the capability table's code for the name libssl reports.
fn group_code(ssl: &openssl::ssl::SslRef, name: Option<&str>) -> Option<u16> {
    let raw = ffi::negotiated_group_raw(ssl);
    if raw & ffi::TLSEXT_NID_UNKNOWN != 0 {
        return u16::try_from(raw & 0xffff).ok();
    }
    name.and_then(|n| caps::codes().group(n))
}

/// libssl's reasons (SSL_R_*, include/openssl/sslerr.h) for bytes from the peer that TLS
/// does not allow: records that are not TLS or too long, malformed or unexpected messages,
/// records that do not decrypt. The peer misbehaved; libssl did not refuse by itself.
const MALFORMED: [libc::c_int; 45] = [
    103, // BAD_CHANGE_CIPHER_SPEC
    186, // BAD_CIPHER
    390, // BAD_DATA
    102, // BAD_DH_VALUE
    306, // BAD_ECPOINT
    110, // BAD_EXTENSION
    332, // BAD_HANDSHAKE_LENGTH
    263, // BAD_HRR_VERSION
    108, // BAD_KEY_SHARE
    122, // BAD_KEY_UPDATE
    292, // BAD_LEGACY_VERSION
    271, // BAD_LENGTH
    240, // BAD_PACKET
    115, // BAD_PACKET_LENGTH
    116, // BAD_PROTOCOL_VERSION_NUMBER
    443, // BAD_RECORD_TYPE
    384, // BAD_VALUE
    133, // CCS_RECEIVED_EARLY
    137, // CIPHER_CODE_WRONG_LENGTH
    281, // DECRYPTION_FAILED_OR_BAD_RECORD_MAC
    152, // EXCESSIVE_MESSAGE_SIZE
    153, // EXTRA_DATA_IN_MESSAGE
    155, // HTTPS_PROXY_REQUEST
    156, // HTTP_REQUEST
    260, // INVALID_CCS_MESSAGE
    999, // INVALID_SESSION_ID
    159, // LENGTH_MISMATCH
    404, // LENGTH_TOO_LONG
    160, // LENGTH_TOO_SHORT
    293, // MIXED_HANDSHAKE_AND_NON_HANDSHAKE_DATA
    182, // NOT_ON_RECORD_BOUNDARY
    214, // NO_CHANGE_FOLLOWING_HRR
    198, // PACKET_LENGTH_TOO_LONG
    313, // RECORD_LAYER_FAILURE
    213, // RECORD_LENGTH_MISMATCH
    298, // RECORD_TOO_SMALL
    408, // SSL_SESSION_ID_TOO_LONG
    132, // TOO_MANY_KEY_UPDATES
    262, // UNEXPECTED_CCS_MESSAGE
    244, // UNEXPECTED_MESSAGE
    245, // UNEXPECTED_RECORD
    248, // UNKNOWN_CIPHER_RETURNED
    217, // UNSOLICITED_EXTENSION
    261, // WRONG_CIPHER_RETURNED
    267, // WRONG_VERSION_NUMBER
];

/// Sort a libssl failure on a connection into the engine's kinds: a timeout or local I/O
/// error is io; a peer that closed, reset, sent an alert or sent bytes TLS does not allow
/// is peer; everything libssl refused by itself (too small a DH group, no common cipher) is
/// library.
fn classify(what: &str, e: &openssl::ssl::Error) -> Error {
    use std::io::ErrorKind as K;
    if let Some(io) = e.io_error() {
        return match io.kind() {
            K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe | K::UnexpectedEof => {
                Error::Peer(format!("{what}: the peer closed the connection: {io}"))
            }
            _ => Error::Io(format!("{what}: {io}")),
        };
    }
    match e.code() {
        ErrorCode::ZERO_RETURN => Error::Peer(format!("{what}: the peer sent close_notify")),
        // SSL_ERROR_SYSCALL without an errno is the socket's end of file: the peer went away,
        // whatever libssl queued beside it (a write racing the peer's close leaves an error
        // stack that names no alert).
        ErrorCode::SYSCALL => match e.ssl_error() {
            None => Error::Peer(format!("{what}: the peer closed the connection (EOF)")),
            Some(stack) => Error::Peer(format!(
                "{what}: the peer closed the connection (EOF): {stack}"
            )),
        },
        _ => {
            // Reasons at or above SSL_AD_REASON_OFFSET (1000) are alerts received from the
            // peer; SSL_R_UNEXPECTED_EOF_WHILE_READING (294) is a peer that went away; the
            // reasons of MALFORMED are bytes the peer sent that TLS does not allow.
            const ERR_LIB_SSL: libc::c_int = 20;
            const SSL_AD_REASON_OFFSET: libc::c_int = 1000;
            const SSL_R_UNEXPECTED_EOF_WHILE_READING: libc::c_int = 294;
            let from_peer = e.ssl_error().is_some_and(|stack| {
                stack.errors().iter().any(|er| {
                    er.library_code() == ERR_LIB_SSL
                        && (er.reason_code() >= SSL_AD_REASON_OFFSET
                            || er.reason_code() == SSL_R_UNEXPECTED_EOF_WHILE_READING
                            || MALFORMED.contains(&er.reason_code()))
                })
            });
            if from_peer {
                Error::Peer(format!("{what}: {e}"))
            } else {
                Error::Library(format!("{what}: {e}"))
            }
        }
    }
}

impl Connection {
    /// Whether a client certificate went over this connection (mutual TLS).
    fn client_certificate_sent(&self) -> bool {
        match self.role {
            Role::Server => self.client_auth && self.stream.ssl().peer_certificate().is_some(),
            // A client that was asked signs and libssl names its scheme; one that was not
            // asked has none to name.
            Role::Client => true,
        }
    }
}

impl Session for Connection {
    fn read(&mut self, buf: &mut [u8]) -> Result<ReadOutcome> {
        match self.stream.ssl_read(buf) {
            Ok(0) => Ok(ReadOutcome::Closed),
            Ok(n) => Ok(ReadOutcome::Data(n)),
            Err(e) if e.code() == ErrorCode::ZERO_RETURN => Ok(ReadOutcome::Closed),
            Err(e)
                if e.code() == ErrorCode::SYSCALL
                    && e.io_error().map(|i| i.kind()) != Some(std::io::ErrorKind::TimedOut) =>
            {
                Ok(ReadOutcome::Eof)
            }
            Err(e) => Err(classify("TLS read failed", &e)),
        }
    }

    fn write_all(&mut self, mut data: &[u8]) -> Result<()> {
        while !data.is_empty() {
            match self.stream.ssl_write(data) {
                Ok(n) => data = &data[n..],
                // As SslStream's Write: retry when libssl wants to read first.
                Err(e) if e.code() == ErrorCode::WANT_READ && e.io_error().is_none() => {}
                Err(e) => return Err(classify("TLS write failed", &e)),
            }
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        self.stream
            .flush()
            .map_err(|e| crate::err!(Io, "flushing failed: {e}"))
    }

    fn close(&mut self, wait_for_peer: bool) {
        if let Ok(openssl::ssl::ShutdownResult::Sent) = self.stream.shutdown() {
            if wait_for_peer {
                let _ = self.stream.shutdown();
            }
        }
    }

    fn negotiated(&self) -> Negotiated {
        let ssl = self.stream.ssl();
        let cipher = ssl.current_cipher();
        let group = ffi::group_name(ssl);
        let (sigalg, client_sigalg) = match self.role {
            Role::Server => (ffi::own_sigalg(ssl), ffi::peer_sigalg(ssl)),
            Role::Client => (ffi::peer_sigalg(ssl), ffi::own_sigalg(ssl)),
        };
        // Without a client certificate there is no client signature: libssl may still name
        // a scheme for a client that was never asked, so only report one when a
        // certificate was exchanged.
        let client_sigalg = if self.client_certificate_sent() {
            client_sigalg
        } else {
            None
        };
        let codes = caps::codes();
        Negotiated {
            version: ssl.version_str().to_string(),
            cipher: cipher.map(|c| c.name().to_string()),
            cipher_standard_name: cipher.and_then(|c| c.standard_name()).map(String::from),
            cipher_code: cipher.map(|c| u16::from_be_bytes(c.protocol_id())),
            group_code: group_code(ssl, group.as_deref()),
            group,
            sigalg_code: sigalg.as_deref().and_then(|s| codes.sigalg(s)),
            sigalg,
            client_sigalg_code: client_sigalg.as_deref().and_then(|s| codes.sigalg(s)),
            client_sigalg,
            session_reused: ssl.session_reused(),
            peer_tmp_key: match self.role {
                Role::Client => ffi::peer_tmp_key(ssl),
                Role::Server => None,
            },
        }
    }

    fn server_name(&self) -> Option<String> {
        self.stream
            .ssl()
            .servername(openssl::ssl::NameType::HOST_NAME)
            .map(String::from)
    }

    fn peer_chain_der_bytes(&self) -> Option<Vec<usize>> {
        let ssl = self.stream.ssl();
        let der = |x: &openssl::x509::X509Ref| x.to_der().map(|d| d.len()).unwrap_or(0);
        let chain: Vec<usize> = ssl
            .peer_cert_chain()
            .map(|c| c.iter().map(der).collect())
            .unwrap_or_default();
        match self.role {
            Role::Client => Some(chain).filter(|c| !c.is_empty()),
            // On a server libssl's peer chain leaves out the client's own certificate.
            Role::Server => ssl.peer_certificate().map(|leaf| {
                let mut all = vec![der(&leaf)];
                all.extend(chain);
                all
            }),
        }
    }

    fn peer_chain_der(&self) -> Option<Vec<Vec<u8>>> {
        let ssl = self.stream.ssl();
        let chain: Vec<Vec<u8>> = ssl
            .peer_cert_chain()
            .map(|c| c.iter().filter_map(|x| x.to_der().ok()).collect())
            .unwrap_or_default();
        match self.role {
            Role::Client => Some(chain).filter(|c| !c.is_empty()),
            Role::Server => ssl.peer_certificate().and_then(|leaf| {
                let mut all = vec![leaf.to_der().ok()?];
                all.extend(chain);
                Some(all)
            }),
        }
    }

    fn verification(&self) -> Verification {
        if self.role == Role::Server && !self.client_auth {
            return Verification::NotChecked;
        }
        let v = self.stream.ssl().verify_result();
        if v == X509VerifyResult::OK {
            Verification::Verified
        } else {
            Verification::Failed(v.error_string().to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dh_sizes() {
        use crate::dhparams::rfc;
        assert!(rfc(1024).is_ok() && rfc(4096).is_ok());
        assert!(matches!(rfc(1536), Err(Error::Usage(_))));
    }

    #[test]
    fn key_shares_are_marked_in_the_groups_list() {
        let groups = [
            "X25519MLKEM768".to_string(),
            "X25519".into(),
            "P-256".into(),
        ];
        assert_eq!(
            groups_with_shares(&groups, &["x25519mlkem768".into(), "X25519".into()]),
            "*X25519MLKEM768:*X25519:P-256"
        );
        assert_eq!(
            groups_with_shares(&groups, &["X25519".into()]),
            "X25519MLKEM768:*X25519:P-256"
        );
    }

    #[test]
    fn slh_dsa_signs_certificates_but_has_no_tls_scheme_here() {
        let info = OpenSsl.describe().unwrap();
        assert!(
            info.ca_key_types
                .iter()
                .any(|k| k.starts_with("SLH-DSA") && !info.cert_key_types.contains(k)),
            "{:?}",
            info.ca_key_types
        );
    }
}
