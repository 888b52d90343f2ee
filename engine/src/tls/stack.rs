//! What a TLS stack implements: the seam between pqlab's TLS loops and a TLS library. The
//! typed options a stack is configured with, the small traits it implements (contexts that
//! turn a `Wire` into a session, sessions that move application data and report what was
//! negotiated), and what a stack tells `info` it can do.
//!
//! Adding a stack: a folder under `stacks/` implementing `Stack` (or a program of its own
//! that passes it to `cli::run`), one line in `registry::registered()`, and the contract
//! suite (`contract_suite!`) run for it.

use super::record::Negotiated;
use super::transport::tcp::Wire;
use crate::out::Result;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;

/// Protocol version, used as both minimum and maximum.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsVersion {
    Tls12,
    Tls13,
}

impl TlsVersion {
    pub fn parse(text: &str) -> Result<TlsVersion> {
        match text {
            "1.3" | "TLSv1.3" => Ok(TlsVersion::Tls13),
            "1.2" | "TLSv1.2" => Ok(TlsVersion::Tls12),
            v => crate::bail!(
                Usage,
                "--tls-version {v:?} is not supported; use 1.2 or 1.3"
            ),
        }
    }

    /// The name stacks report in `negotiated.version`.
    pub fn name(self) -> &'static str {
        match self {
            TlsVersion::Tls12 => "TLSv1.2",
            TlsVersion::Tls13 => "TLSv1.3",
        }
    }
}

/// Protocol options shared by both roles, already checked for syntax; the stack checks
/// that it knows the names.
#[derive(Clone, Debug)]
pub struct Protocol {
    pub version: TlsVersion,
    /// Key-exchange groups in preference order (stack names); None: the stack's default.
    pub groups: Option<Vec<String>>,
    /// Signature schemes (stack names); None: the stack's default.
    pub sigalgs: Option<Vec<String>>,
    /// TLS 1.2 cipher list in the stack's syntax.
    pub ciphers: Option<String>,
    /// TLS 1.3 cipher suites.
    pub ciphersuites: Option<Vec<String>>,
    /// Security level 0-5 for stacks that have levels; None: the stack's default.
    pub security_level: Option<u32>,
    /// Append secrets in SSLKEYLOGFILE format to this file.
    pub keylog: Option<PathBuf>,
    /// Client: the groups (stack names, a subset of `groups`) its ClientHello carries key
    /// shares for; None: the stack's choice. What a stack can send is in its `info`
    /// (`key_shares`); a set it cannot send is a usage error.
    pub key_shares: Option<Vec<String>>,
    /// Client: how the server's chain is judged.
    pub verify: VerifyMode,
}

/// How a client judges the server's certificate chain and name (`--verify`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VerifyMode {
    /// A chain that does not validate under the CA, or a name it does not match, ends the
    /// handshake (the default).
    Require,
    /// The handshake goes on whatever the chain (the CertificateVerify signature is still
    /// checked); whether the chain validated is reported (`Verification`).
    Report,
}

impl VerifyMode {
    pub fn parse(text: &str) -> Result<VerifyMode> {
        match text {
            "require" => Ok(VerifyMode::Require),
            "report" => Ok(VerifyMode::Report),
            v => crate::bail!(Usage, "--verify {v:?}: use require or report"),
        }
    }
}

pub struct ServerSetup {
    pub protocol: Protocol,
    /// PEM: the certificate and any intermediates to send.
    pub cert_chain: PathBuf,
    /// PEM private key of the certificate.
    pub key: PathBuf,
    /// TLS 1.2 DHE group size (1024, 2048, 3072, 4096); None: the stack's choice.
    pub dh_bits: Option<u32>,
    /// TLS 1.2 DHE parameters from this PEM file instead (e.g. newly generated ones, whose
    /// private exponents are as long as the prime); takes precedence over `dh_bits`.
    pub dh_params: Option<PathBuf>,
    /// Mutual TLS: request a client certificate and require it to chain to these roots.
    pub client_auth: Option<ClientAuth>,
}

/// What a server asks of clients in mutual TLS.
#[derive(Clone, Debug)]
pub struct ClientAuth {
    /// PEM root certificate(s) the client chain must validate against.
    pub ca: PathBuf,
    /// Signature schemes accepted for the client's CertificateVerify (stack names, sent in
    /// the CertificateRequest); None: the stack's default list.
    pub sigalgs: Option<Vec<String>>,
}

/// A client's own certificate (mutual TLS).
#[derive(Clone, Debug)]
pub struct Identity {
    /// PEM: the client certificate and any intermediates to send.
    pub cert_chain: PathBuf,
    /// PEM private key of the certificate.
    pub key: PathBuf,
}

pub struct ClientSetup {
    pub protocol: Protocol,
    /// PEM root certificate(s) the server chain must validate against.
    pub ca: PathBuf,
    /// Mutual TLS: the certificate to present when the server asks for one.
    pub identity: Option<Identity>,
}

/// The name the client sends (SNI) and checks the certificate against.
#[derive(Clone, Debug)]
pub enum ServerName {
    Dns(String),
    Ip(IpAddr),
}

impl ServerName {
    pub fn parse(name: &str) -> ServerName {
        match name.parse::<IpAddr>() {
            Ok(ip) => ServerName::Ip(ip),
            Err(_) => ServerName::Dns(name.to_string()),
        }
    }
}

/// What one read of application data returned.
#[derive(Debug, PartialEq, Eq)]
pub enum ReadOutcome {
    Data(usize),
    /// The peer closed the TLS connection properly (close_notify).
    Closed,
    /// The TCP connection ended (EOF or reset) without close_notify.
    Eof,
}

/// How the peer's certificate chain was judged: the server's chain by a client, the
/// client's chain by a server in mutual TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verification {
    /// Chain valid under the CA (and, for a server's chain, the name matches).
    Verified,
    Failed(String),
    /// Not checked (a server that did not ask for a client certificate).
    NotChecked,
}

/// A library that can run TLS. Implementations are unit structs listed in
/// `registry::registered()`.
pub trait Stack: Send + Sync {
    /// The name `--stack` selects.
    fn name(&self) -> &'static str;
    /// Whether sessions report record and handshake messages to the Recorder (OpenSSL: its
    /// message callback). Without them the lab recovers message boundaries from the
    /// capture and the key log.
    fn reports_messages(&self) -> bool;
    fn server(&self, setup: &ServerSetup) -> Result<Arc<dyn ServerContext>>;
    fn client(&self, setup: &ClientSetup) -> Result<Box<dyn ClientContext>>;
    /// The IANA NamedGroup code of a group name as this stack spells it.
    fn group_code(&self, name: &str) -> Option<u16>;
    /// The IANA SignatureScheme code of a scheme name as this stack spells it.
    fn sigalg_code(&self, name: &str) -> Option<u16>;
    /// What the stack can do, read from the library (the `info.tls_stacks` entry).
    fn describe(&self) -> Result<StackInfo>;
    /// Which heap count holds the stack's own allocations (`tls memory`, `--count-heap`).
    fn heap_counting(&self) -> HeapCounting;
    /// Whether `--fixed-random` can make all of the stack's randomness repeatable
    /// (`fix_randomness` then succeeds).
    fn fixed_random(&self) -> bool {
        false
    }
    /// Make everything the calling thread's sessions draw from the stack's random generator
    /// a fixed sequence, the same in every run (`tls memory --fixed-random`: randomised
    /// algorithms then do the same work, and allocate the same, run to run).
    fn fix_randomness(&self) -> Result<()> {
        crate::bail!(
            Usage,
            "--fixed-random: the {} stack cannot fix its randomness",
            self.name()
        )
    }
    /// Full handshakes between this stack's client and server as the library's own tools
    /// drive them, with none of the engine's loops (`tls reference`): over `Transport::
    /// Memory` in one thread, bytes handed over in buffers (no sockets, no kernel: what the
    /// library itself costs each side); over `Transport::Tcp` a server thread and the
    /// calling thread on 127.0.0.1, blocking sockets and nothing else (the library's example
    /// client and server). None: the stack has no such mode.
    fn reference(
        &self,
        _server: &ServerSetup,
        _client: &ClientSetup,
        _name: &ServerName,
        _transport: Transport,
    ) -> Option<Result<ReferenceRun>> {
        None
    }
}

/// How `Stack::reference` connects its client and server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Transport {
    Memory,
    Tcp,
}

/// One reference handshake (`Stack::reference`): each side's CPU time (its thread's, over
/// its own part of the handshake), the TLS bytes each way where the driver sees them
/// (memory), and what was negotiated.
#[derive(Debug, Default, Clone)]
pub struct ReferenceHandshake {
    /// Wall time of the whole handshake as the calling thread saw it (tcp: connect to the
    /// server's report; memory: both sides' work).
    pub wall_ns: u64,
    pub client_cpu_ns: u64,
    pub server_cpu_ns: u64,
    pub client_bytes: Option<u64>,
    pub server_bytes: Option<u64>,
    /// The group as the client and the server saw it (IANA codes).
    pub client_group: Option<u16>,
    pub server_group: Option<u16>,
    /// The scheme the server signed with and the one the client verified.
    pub signed: Option<u16>,
    pub verified: Option<u16>,
}

/// Runs one reference handshake per call, on configurations made once.
pub type ReferenceRun = Box<dyn FnMut() -> Result<ReferenceHandshake>>;

/// A configured server, shared by the threads that serve connections.
pub trait ServerContext: Send + Sync {
    /// Security level in force (None for stacks without levels).
    fn security_level(&self) -> Option<u32>;
    /// Set up the server side of an accepted connection (not timed).
    fn start(&self, wire: Wire) -> Result<Box<dyn Handshake>>;
}

/// A configured client.
pub trait ClientContext {
    fn security_level(&self) -> Option<u32>;
    /// Set up the client side of a connection that will verify the chain and `name`.
    fn start(&self, wire: Wire, name: &ServerName) -> Result<Box<dyn Handshake>>;
}

/// A connection set up by a context, before its handshake.
pub trait Handshake {
    /// Run the full handshake: the part the loops time.
    fn run(self: Box<Self>) -> Result<Box<dyn Session>>;
}

/// One TLS connection after its handshake.
pub trait Session {
    fn read(&mut self, buf: &mut [u8]) -> Result<ReadOutcome>;
    fn write_all(&mut self, data: &[u8]) -> Result<()>;
    fn flush(&mut self) -> Result<()>;
    /// Send close_notify; with `wait_for_peer`, also wait (bounded by the socket timeout)
    /// for the peer's. A peer that already left is not an error here.
    fn close(&mut self, wait_for_peer: bool);
    fn negotiated(&self) -> Negotiated;
    /// The host name the client sent (server side).
    fn server_name(&self) -> Option<String>;
    /// DER sizes of the certificates the peer sent, leaf first.
    fn peer_chain_der_bytes(&self) -> Option<Vec<usize>>;
    /// The certificates the peer sent (DER), leaf first, in the order it sent them; None
    /// when the stack cannot give them.
    fn peer_chain_der(&self) -> Option<Vec<Vec<u8>>> {
        None
    }
    /// Whether the stack kept only part of the chain the peer sent (wolfSSL keeps at most
    /// 9 certificates): `peer_chain_der*` then hold less than what crossed the wire.
    fn peer_chain_truncated(&self) -> bool {
        false
    }
    fn verification(&self) -> Verification;
}

/// A named TLS code point the stack would negotiate.
#[derive(serde::Serialize, Clone, Debug, PartialEq)]
pub struct NamedCode {
    pub name: String,
    pub code: u16,
    /// Protocol versions it is used in: "1.2", "1.3".
    pub versions: Vec<&'static str>,
}

/// One `info.tls_stacks` entry.
#[derive(serde::Serialize, Debug)]
pub struct StackInfo {
    pub name: &'static str,
    pub implementation: String,
    /// Whether connection records carry record/handshake events from this stack.
    pub message_events: bool,
    /// Every group name the stack accepts and would negotiate (aliases listed separately,
    /// with the same code).
    pub groups: Vec<NamedCode>,
    /// Every signature scheme name the stack accepts and would negotiate.
    pub sigalgs: Vec<NamedCode>,
    /// Every TLS 1.3 cipher suite it can negotiate (`--ciphersuites` names, IANA codes).
    pub cipher_suites: Vec<NamedCode>,
    /// Key specs (`tls certs` syntax) whose certificates this stack can serve.
    pub cert_key_types: Vec<String>,
    /// Key specs this stack's certificate maker can sign certificates with and its client
    /// can verify in a chain (a CA's key): `cert_key_types` and those that sign certificates
    /// but have no TLS signature scheme (e.g. SLH-DSA in OpenSSL 3.5).
    pub ca_key_types: Vec<String>,
    pub limits: Limits,
    /// How the stack hands a handshake flight to the socket and frames its messages.
    pub write_model: WriteModel,
    /// Whether its server answers a client's server_name with an empty server_name
    /// extension in EncryptedExtensions (4 bytes of the flight).
    pub server_name_ack: bool,
    /// Whether its server sends a ChangeCipherSpec record after ServerHello (TLS 1.3's
    /// middlebox compatibility, 6 bytes of the flight).
    pub change_cipher_spec: bool,
    /// How the library was configured, when the engine built it itself (wolfSSL's options);
    /// empty otherwise (OpenSSL's flags are in `info.openssl`).
    pub build_options: Vec<String>,
    /// How `tls memory` counts the stack's heap.
    pub heap_counting: HeapCounting,
    /// Whether `tls memory --fixed-random` can make all of its randomness repeatable.
    pub fixed_random: bool,
    /// The library's own programs this build has, by role (e.g. "tls_bench": its TLS
    /// benchmark), with their paths: the lab runs them beside its own measurement of the
    /// same cells. Only programs that exist are listed.
    pub tools: std::collections::BTreeMap<&'static str, String>,
    /// Which key shares its client can send (`--key-shares`).
    pub key_shares: KeyShares,
    /// With `KeyShares::First`: (group, group) pairs of a hybrid and its classical half, whose key
    /// share the client sends along with the hybrid's when that half is offered too.
    pub key_share_companions: Vec<(u16, u16)>,
}

/// What a stack bounds in what its peer sends (`info.tls_stacks[].limits`): every field
/// is reported, null where the stack has no bound of its own.
#[derive(serde::Serialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    /// The largest certificate list it accepts from a peer (OpenSSL's max_cert_list: a
    /// larger Certificate message fails the handshake).
    pub max_cert_list_bytes: Option<u64>,
    /// The largest handshake message it reassembles (a Certificate message included).
    pub max_handshake_message_bytes: Option<u64>,
    /// The largest single certificate it parses (DER bytes).
    pub max_certificate_bytes: Option<u64>,
}

/// How a stack writes a handshake flight: what the lab's flight model (pqlab.tls.flight)
/// needs to predict writes, records and TCP segments.
#[derive(serde::Serialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteModel {
    pub kind: Writes,
    /// With `Writes::Buffer`: the buffer's size.
    pub buffer_bytes: Option<usize>,
    pub records: Framing,
}

/// When a stack hands handshake records to the socket.
#[derive(serde::Serialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Writes {
    /// Records collect in a buffer of `buffer_bytes`, written when it fills and at the end
    /// of the flight.
    Buffer,
    /// The whole flight in one write.
    Flight,
    /// Every record written as it is made.
    Record,
}

/// How a stack cuts its encrypted handshake messages into records.
#[derive(serde::Serialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Framing {
    /// Each encrypted handshake message in records of its own.
    Message,
    /// A flight's encrypted messages joined and cut into records of up to 16 KiB.
    Flight,
}

/// Which key shares a stack's client can send (`--key-shares`).
#[derive(serde::Serialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum KeyShares {
    /// Any subset of the offered groups.
    Any,
    /// The first offered group's, and for a hybrid first group also its classical half's
    /// when that group is offered too (`key_share_companions`).
    First,
}

/// How `tls memory` and `--count-heap` count a stack's own heap, by the name records give
/// it (`heap_counting`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeapCounting {
    /// OpenSSL's allocations through its own hooks ("openssl-hooks").
    OpensslHooks,
    /// Every block of the C allocator the role's thread obtains: the stack, its crypto
    /// providers and the engine's few per-connection buffers ("malloc").
    Malloc,
    /// The library's own allocator callbacks, named after it ("wolfssl-allocators").
    LibraryAllocators(&'static str),
}

impl HeapCounting {
    /// The heap count that holds these allocations.
    pub fn source(self) -> crate::heap::Source {
        match self {
            HeapCounting::OpensslHooks => crate::heap::Source::OpenSsl,
            HeapCounting::Malloc => crate::heap::Source::Malloc,
            HeapCounting::LibraryAllocators(_) => crate::heap::Source::Library,
        }
    }

    /// The name records give the count.
    pub fn name(self) -> String {
        match self {
            HeapCounting::OpensslHooks => "openssl-hooks".into(),
            HeapCounting::Malloc => "malloc".into(),
            HeapCounting::LibraryAllocators(library) => format!("{library}-allocators"),
        }
    }
}

impl serde::Serialize for HeapCounting {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_both_spellings() {
        assert_eq!(TlsVersion::parse("1.3").ok(), Some(TlsVersion::Tls13));
        assert_eq!(TlsVersion::parse("TLSv1.2").ok(), Some(TlsVersion::Tls12));
        assert!(TlsVersion::parse("1.1").is_err());
    }
}
