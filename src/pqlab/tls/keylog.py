"""TLS 1.3 record and handshake-message boundaries from a packet capture and a key log.

The handshake lab places every TLS 1.3 message on the wire from the records each side
wrote. With OpenSSL the engine reports them through its message callback; other stacks
(rustls, wolfSSL, an outside server) have no such callback. This module recovers the same
facts from the capture itself, so any stack that writes an SSLKEYLOGFILE can be measured:

1. the TCP byte stream of each direction is rebuilt from the capture (pqlab.pcap, which
   needs whole packets: a full-snaplen capture);
2. the streams are cut into TLS records (5-byte header + fragment);
3. the plaintext ClientHello gives the client random (the key log's index) and the
   ServerHello the cipher suite (a HelloRetryRequest is recognised and skipped);
4. each side's encrypted records are decrypted in order with keys derived from the key
   log's traffic secrets (RFC 8446 7.1 HKDF-Expand-Label, 7.3 key and IV, 5.3 per-record
   nonce), handshake keys first, application keys after that side's Finished, the next
   generation after a KeyUpdate;
5. handshake messages are reassembled across records and each one is attributed to the
   record holding its last byte.

The result is what `pqlab.tls.records.from_events` builds from the engine's
callback events: per side, a list of `TlsRecord(sender, end, content_type, messages)`
with `end` the stream offset after the record, `content_type` the OUTER record type (23
for everything encrypted) and `messages` the (name, length incl. the 4-byte header) of
the handshake messages completed in that record. `pqlab.tls.phases.analyse` takes either.

Limits: TLS 1.3 only (a TLS 1.2 connection is refused with a clear error); the AEADs
TLS_AES_128_GCM_SHA256, TLS_AES_256_GCM_SHA384 and TLS_CHACHA20_POLY1305_SHA256; no 0-RTT
early data. Any record that fails authentication stops the reading with an error: it means
the key log belongs to another connection or the capture is damaged, and a guess would
hand the analysis wrong boundaries.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDFExpand

from pqlab import files, pcap
from pqlab.errors import UserError
from pqlab.tls.records import TlsRecord

CHANGE_CIPHER_SPEC, ALERT, HANDSHAKE, APPLICATION_DATA = 20, 21, 22, 23
RECORD_HEADER = 5
HANDSHAKE_HEADER = 4
# RFC 8446 5.1/5.2: a plaintext fragment is at most 2^14 bytes, a protected one 2^14 + 256.
MAX_PLAINTEXT = 1 << 14
MAX_CIPHERTEXT = MAX_PLAINTEXT + 256
TAG_LEN = 16  # every TLS 1.3 AEAD this module supports has a 16-byte tag
TLS13 = 0x0304

# Handshake message names exactly as the callback path produces them: the engine names
# each type (engine/src/tls/record.rs handshake_type_name) and the lab turns the ones it
# analyses into message names (pqlab.tls.records.MESSAGE_NAMES); any other type
# keeps the engine's lower-case name. A test checks this table against MESSAGE_NAMES.
HANDSHAKE_NAMES = {
    0: "hello_request",
    1: "ClientHello",
    2: "ServerHello",  # a HelloRetryRequest is a ServerHello on the wire, and so named
    4: "NewSessionTicket",
    5: "end_of_early_data",
    8: "EncryptedExtensions",
    11: "Certificate",
    12: "server_key_exchange",
    13: "CertificateRequest",
    14: "server_hello_done",
    15: "CertificateVerify",
    16: "client_key_exchange",
    20: "Finished",
    24: "key_update",
    25: "compressed_certificate",
    254: "message_hash",
}
CLIENT_HELLO, SERVER_HELLO, CERTIFICATE, FINISHED, KEY_UPDATE = 1, 2, 11, 20, 24
EXT_SUPPORTED_VERSIONS = 43
# RFC 8446 4.1.3: a ServerHello with this random is a HelloRetryRequest.
HELLO_RETRY_RANDOM = bytes.fromhex(
    "cf21ad74e59a6111be1d8c021e65b891c2a211167abb8c5e079e09e2c8a8339c"
)

# The key-log labels this module reads, per sender and key epoch.
SECRET_LABELS = {
    ("client", "handshake"): "CLIENT_HANDSHAKE_TRAFFIC_SECRET",
    ("server", "handshake"): "SERVER_HANDSHAKE_TRAFFIC_SECRET",
    ("client", "application"): "CLIENT_TRAFFIC_SECRET_0",
    ("server", "application"): "SERVER_TRAFFIC_SECRET_0",
}
# Every label of the NSS key log format (TLS 1.2 and 1.3): these lines are checked for
# form; lines with any other label are skipped (future formats may add labels).
KNOWN_LABELS = {
    "CLIENT_RANDOM",
    "CLIENT_EARLY_TRAFFIC_SECRET",
    "CLIENT_HANDSHAKE_TRAFFIC_SECRET",
    "SERVER_HANDSHAKE_TRAFFIC_SECRET",
    "CLIENT_TRAFFIC_SECRET_0",
    "SERVER_TRAFFIC_SECRET_0",
    "EARLY_EXPORTER_SECRET",
    "EXPORTER_SECRET",
}
_HEX = re.compile(r"[0-9a-fA-F]+")


class KeyLogError(UserError):
    """The capture and the key log do not give a readable TLS 1.3 connection (the message
    says which connection, stream and record, and why)."""


# --- the key log ----------------------------------------------------------------------------


@dataclass
class KeyLog:
    """The secrets of an NSS key log file: client random -> label -> secret."""

    path: str
    secrets: dict[bytes, dict[str, bytes]] = field(default_factory=dict)

    def lookup(self, client_random: bytes, label: str, what: str) -> bytes:
        """The secret `label` of the connection with this client random, or KeyLogError."""
        entry = self.secrets.get(client_random)
        if entry is None:
            raise KeyLogError(
                f"{what}: the key log {self.path} has no secrets for this connection's "
                f"client random {client_random.hex()} (a key log of another run or "
                "another connection?)"
            )
        secret = entry.get(label)
        if secret is None:
            raise KeyLogError(
                f"{what}: the key log {self.path} has no {label} for client random "
                f"{client_random.hex()} (it has {', '.join(sorted(entry))})"
            )
        return secret


def parse_keylog(text: str, path: str = "<key log>") -> KeyLog:
    """Parse NSS key log text (`LABEL <client random hex> <secret hex>` per line).

    Blank lines and `#` comments are skipped, and so are lines with labels this format
    does not know. A line with a known label but the wrong form (field count, a client
    random that is not 32 bytes of hex, a secret that is not hex) is an error naming the
    file and line number; so is one label given two different secrets for one random."""
    log = KeyLog(path)
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        fields = line.split()
        label = fields[0]
        if label not in KNOWN_LABELS:
            if len(fields) < 3:
                raise KeyLogError(
                    f"{path}, line {number}: not a key log line "
                    "(expected LABEL CLIENT_RANDOM SECRET)"
                )
            continue
        if len(fields) != 3:
            raise KeyLogError(
                f"{path}, line {number}: {label} needs a client random and a secret, "
                f"found {len(fields) - 1} field(s)"
            )
        random_hex, secret_hex = fields[1], fields[2]
        if len(random_hex) != 64 or not _HEX.fullmatch(random_hex):
            raise KeyLogError(
                f"{path}, line {number}: the client random must be 64 hex digits "
                f"(32 bytes), found {random_hex[:80]!r}"
            )
        if len(secret_hex) % 2 or not _HEX.fullmatch(secret_hex):
            raise KeyLogError(f"{path}, line {number}: the secret of {label} is not hex bytes")
        client_random, secret = bytes.fromhex(random_hex), bytes.fromhex(secret_hex)
        entry = log.secrets.setdefault(client_random, {})
        if entry.get(label, secret) != secret:
            raise KeyLogError(
                f"{path}, line {number}: a second, different {label} for client random {random_hex}"
            )
        entry[label] = secret
    return log


def read_keylog(path: str | Path) -> KeyLog:
    """Read and parse a key log file (see `parse_keylog`)."""
    try:
        data = files.read_input(path, f"the key log {path}", "key log", follow=False)
    except UserError as e:
        raise KeyLogError(str(e)) from None
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError as e:
        raise KeyLogError(f"{path}: not a key log (non-ASCII byte at {e.start})") from None
    return parse_keylog(text, str(path))


# --- key schedule ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class CipherSuite:
    code: int
    name: str
    hash: type[hashes.HashAlgorithm]
    key_len: int
    aead: type  # AESGCM or ChaCha20Poly1305: both take (key) and decrypt(nonce, data, aad)
    iv_len: int = 12

    @property
    def hash_len(self) -> int:
        return self.hash.digest_size


SUITES = {
    0x1301: CipherSuite(0x1301, "TLS_AES_128_GCM_SHA256", hashes.SHA256, 16, AESGCM),
    0x1302: CipherSuite(0x1302, "TLS_AES_256_GCM_SHA384", hashes.SHA384, 32, AESGCM),
    0x1303: CipherSuite(
        0x1303, "TLS_CHACHA20_POLY1305_SHA256", hashes.SHA256, 32, ChaCha20Poly1305
    ),
}
UNSUPPORTED_SUITES = {0x1304: "TLS_AES_128_CCM_SHA256", 0x1305: "TLS_AES_128_CCM_8_SHA256"}


def hkdf_expand_label(
    secret: bytes, label: str, context: bytes, length: int, hash_alg: type[hashes.HashAlgorithm]
) -> bytes:
    """HKDF-Expand-Label (RFC 8446 7.1): HKDF-Expand(secret, HkdfLabel, length) with
    HkdfLabel = uint16 length || opaque "tls13 " + label<7..255> || opaque context<0..255>."""
    full = b"tls13 " + label.encode("ascii")
    info = length.to_bytes(2, "big") + bytes([len(full)]) + full + bytes([len(context)]) + context
    return HKDFExpand(algorithm=hash_alg(), length=length, info=info).derive(secret)


def traffic_key_iv(secret: bytes, suite: CipherSuite) -> tuple[bytes, bytes]:
    """The write key and IV of a traffic secret (RFC 8446 7.3)."""
    key = hkdf_expand_label(secret, "key", b"", suite.key_len, suite.hash)
    iv = hkdf_expand_label(secret, "iv", b"", suite.iv_len, suite.hash)
    return key, iv


def next_traffic_secret(secret: bytes, suite: CipherSuite) -> bytes:
    """application_traffic_secret_N+1 after a KeyUpdate (RFC 8446 7.2)."""
    return hkdf_expand_label(secret, "traffic upd", b"", suite.hash_len, suite.hash)


class RecordProtection:
    """One direction's keys for one epoch: opens its records in order (the sequence number
    starts at 0 with every new key, RFC 8446 5.3)."""

    def __init__(self, secret: bytes, suite: CipherSuite, label: str):
        if len(secret) != suite.hash_len:
            raise KeyLogError(
                f"the key log's {label} is {len(secret)} bytes, but {suite.name} needs "
                f"{suite.hash_len}-byte secrets (a key log of another connection?)"
            )
        self.label = label
        self.suite = suite
        self.secret = secret
        key, self.iv = traffic_key_iv(secret, suite)
        self.aead = suite.aead(key)
        self.seq = 0

    def open(self, header: bytes, fragment: bytes) -> tuple[int, bytes]:
        """(inner content type, content) of the next record; InvalidTag if it does not
        authenticate under these keys."""
        # RFC 8446 5.3: the 64-bit sequence number, left-padded to the IV length, XOR the IV.
        nonce = (int.from_bytes(self.iv, "big") ^ self.seq).to_bytes(self.suite.iv_len, "big")
        self.seq += 1
        inner = self.aead.decrypt(nonce, fragment, header)
        # TLSInnerPlaintext = content || ContentType || zero padding (RFC 8446 5.4).
        stripped = inner.rstrip(b"\x00")
        if not stripped:
            raise ValueError("the record holds only padding (no content type)")
        return stripped[-1], stripped[:-1]


# --- records and hellos ------------------------------------------------------------------------------


@dataclass(frozen=True)
class RawRecord:
    """One TLS record of a stream: where it starts and ends, its header and fragment."""

    index: int  # 0-based position in its stream
    start: int
    end: int
    content_type: int
    version: int
    fragment: bytes

    @property
    def header(self) -> bytes:
        return bytes([self.content_type, self.version >> 8, self.version & 0xFF]) + len(
            self.fragment
        ).to_bytes(2, "big")


def split_records(stream: bytes, what: str = "stream") -> list[RawRecord]:
    """Cut a TLS byte stream into records. A stream that is not TLS records (unknown
    content type, a version that is not 3.x, an oversized length) or whose last record
    runs past the end of the captured bytes is an error naming `what` and the offset."""
    records = []
    pos = 0
    # Each pass consumes at least the 5-byte header, so this ends within len/5 passes.
    while pos < len(stream):
        if len(stream) - pos < RECORD_HEADER:
            raise KeyLogError(
                f"{what}: the stream ends {len(stream) - pos} bytes into a record header at "
                f"offset {pos} (the capture stops in the middle of a record)"
            )
        ctype, major, minor = stream[pos], stream[pos + 1], stream[pos + 2]
        length = int.from_bytes(stream[pos + 3 : pos + 5], "big")
        if ctype not in (CHANGE_CIPHER_SPEC, ALERT, HANDSHAKE, APPLICATION_DATA) or major != 3:
            raise KeyLogError(
                f"{what}: no TLS record at offset {pos} (header {stream[pos : pos + 5].hex()}); "
                "is this port carrying TLS?"
            )
        if length > MAX_CIPHERTEXT:
            raise KeyLogError(
                f"{what}: the record at offset {pos} claims {length} bytes, more than TLS "
                f"allows ({MAX_CIPHERTEXT})"
            )
        end = pos + RECORD_HEADER + length
        if end > len(stream):
            raise KeyLogError(
                f"{what}: the record at offset {pos} needs {length} bytes but the captured "
                f"stream ends after {len(stream) - pos - RECORD_HEADER} (the capture stops in "
                "the middle of a record)"
            )
        records.append(
            RawRecord(len(records), pos, end, ctype, (major << 8) | minor, stream[pos + 5 : end])
        )
        pos = end
    return records


@dataclass(frozen=True)
class Hello:
    """What this module needs from a ClientHello or ServerHello body."""

    random: bytes
    legacy_version: int
    cipher_suite: int | None = None  # ServerHello only
    selected_version: int | None = None  # ServerHello supported_versions, if present

    @property
    def is_hello_retry(self) -> bool:
        return self.random == HELLO_RETRY_RANDOM


def parse_client_hello(body: bytes, what: str) -> Hello:
    """The ClientHello's legacy version and random (its first 34 bytes)."""
    if len(body) < 34:
        raise KeyLogError(f"{what}: the ClientHello is {len(body)} bytes, too short")
    return Hello(random=body[2:34], legacy_version=int.from_bytes(body[:2], "big"))


def parse_server_hello(body: bytes, what: str) -> Hello:
    """The ServerHello's random, cipher suite and the version its supported_versions
    extension selects (absent in TLS 1.2 and earlier)."""
    try:
        legacy_version = int.from_bytes(body[0:2], "big")
        random = body[2:34]
        sid_len = body[34]
        pos = 35 + sid_len
        suite = int.from_bytes(body[pos : pos + 2], "big")
        pos += 3  # cipher suite + legacy compression method
        selected = None
        if pos < len(body):
            ext_end = pos + 2 + int.from_bytes(body[pos : pos + 2], "big")
            if ext_end > len(body):
                raise IndexError
            pos += 2
            # Each pass consumes a 4-byte extension header, so this ends.
            while pos + 4 <= ext_end:
                ext_type = int.from_bytes(body[pos : pos + 2], "big")
                ext_len = int.from_bytes(body[pos + 2 : pos + 4], "big")
                if ext_type == EXT_SUPPORTED_VERSIONS and ext_len == 2:
                    selected = int.from_bytes(body[pos + 4 : pos + 6], "big")
                pos += 4 + ext_len
        if len(random) != 32 or pos > len(body):
            raise IndexError
    except IndexError:
        raise KeyLogError(f"{what}: the ServerHello is malformed ({len(body)} bytes)") from None
    return Hello(random, legacy_version, suite, selected)


# --- one direction ------------------------------------------------------------------------------


@dataclass
class _Message:
    type: int
    body: bytes  # kept for the hellos and the types a caller asks for; empty for the rest


class _Direction:
    """The records one side sent, read in order: plaintext hellos first, then the
    encrypted epochs. Collects handshake messages across record boundaries, keeping the
    bodies of the hellos and of the types in `keep`."""

    def __init__(self, sender: str, stream: bytes, what: str, keep: frozenset[int] = frozenset()):
        self.sender = sender
        self.keep = keep | {CLIENT_HELLO, SERVER_HELLO}
        self.what = f"{what}, {sender} stream"
        self.records = split_records(stream, self.what)
        self.messages_in: dict[int, list[tuple[str, int]]] = {}
        self.messages: list[_Message] = []
        self.pending = bytearray()  # bytes of a handshake message not yet complete
        self.next = 0  # index of the first record not read yet
        self.protection: RecordProtection | None = None
        self.epoch = "plaintext"

    def _where(self, rec: RawRecord) -> str:
        return f"{self.what}, record {rec.index + 1} (stream offset {rec.start})"

    def _take_handshake(self, rec: RawRecord, data: bytes) -> list[_Message]:
        """Add handshake bytes of `rec`; the messages this completes, in order."""
        self.pending += data
        done = []
        # Each pass removes one whole message (at least 4 bytes), so this ends.
        while len(self.pending) >= HANDSHAKE_HEADER:
            length = int.from_bytes(self.pending[1:4], "big")
            total = HANDSHAKE_HEADER + length
            if len(self.pending) < total:
                break
            msg_type = self.pending[0]
            keep = msg_type in self.keep
            msg = _Message(msg_type, bytes(self.pending[HANDSHAKE_HEADER:total]) if keep else b"")
            del self.pending[:total]
            name = HANDSHAKE_NAMES.get(msg.type, "unknown")
            self.messages_in.setdefault(rec.index, []).append((name, total))
            self.messages.append(msg)
            done.append(msg)
        return done

    def _key_change(self, rec: RawRecord, why: str) -> None:
        # RFC 8446 5.1: handshake messages must not span a key change.
        if self.pending:
            raise KeyLogError(
                f"{self._where(rec)}: a handshake message is cut by a key change ({why}); "
                "not a valid TLS 1.3 stream"
            )

    def read_plaintext(self) -> None:
        """Read the records before the first encrypted one (hellos, CCS, plain alerts)."""
        while self.next < len(self.records):
            rec = self.records[self.next]
            if rec.content_type == APPLICATION_DATA:
                self._key_change(rec, "the first encrypted record")
                return
            if rec.content_type == HANDSHAKE:
                self._take_handshake(rec, rec.fragment)
            self.next += 1

    @property
    def reached_encryption(self) -> bool:
        """Whether `read_plaintext` stopped at an encrypted record (more records follow)."""
        return self.next < len(self.records)

    def read_encrypted(self, suite: CipherSuite, keylog: KeyLog, client_random: bytes) -> None:
        """Decrypt every remaining record: handshake keys first, this side's application
        keys after its Finished, the next generation after each KeyUpdate."""
        while self.next < len(self.records):
            rec = self.records[self.next]
            self.next += 1
            if rec.content_type == CHANGE_CIPHER_SPEC:
                continue  # the middlebox-compatibility CCS is never encrypted
            if rec.content_type != APPLICATION_DATA:
                raise KeyLogError(
                    f"{self._where(rec)}: a plaintext record of type {rec.content_type} "
                    "after encryption started"
                )
            if self.protection is None:
                # The handshake keys first; the application keys once this side's Finished
                # is read, looked up only when a record needs them (a connection that ended
                # at its handshake has no application secrets in the key log).
                epoch = "application" if self.epoch == "handshake" else "handshake"
                self._use(suite, epoch, *self._secret(keylog, client_random, epoch))
            inner_type, content = self._open(rec, suite, keylog, client_random)
            if inner_type == HANDSHAKE:
                self._handshake_content(rec, content, suite, keylog, client_random)
            elif inner_type not in (ALERT, APPLICATION_DATA):
                raise KeyLogError(
                    f"{self._where(rec)}: decrypted to content type {inner_type}, which TLS 1.3 "
                    "does not encrypt"
                )

    def _use(self, suite: CipherSuite, epoch: str, secret: bytes, label: str) -> None:
        self.epoch = epoch
        self.protection = RecordProtection(secret, suite, label)

    def _secret(self, keylog: KeyLog, client_random: bytes, epoch: str) -> tuple[bytes, str]:
        label = SECRET_LABELS[(self.sender, epoch)]
        return keylog.lookup(client_random, label, self.what), label

    def _open(self, rec, suite: CipherSuite, keylog: KeyLog, client_random: bytes):
        """(inner content type, content) of one encrypted record, or KeyLogError."""
        assert self.protection is not None
        label = self.protection.label
        try:
            if len(rec.fragment) <= TAG_LEN:
                raise ValueError(f"{len(rec.fragment)} bytes cannot hold a tag and a type")
            inner_type, content = self.protection.open(rec.header, rec.fragment)
        except InvalidTag:
            early = "CLIENT_EARLY_TRAFFIC_SECRET" in keylog.secrets.get(client_random, {})
            raise KeyLogError(
                f"{self._where(rec)}: does not authenticate with the key log's {label} "
                f"({suite.name}, record {self.protection.seq} of that key): the key log "
                "belongs to another connection or the captured bytes are damaged"
                + ("; 0-RTT early data is not supported" if early else "")
            ) from None
        except ValueError as e:
            raise KeyLogError(f"{self._where(rec)}: {e}") from None
        if len(content) > MAX_PLAINTEXT:
            raise KeyLogError(f"{self._where(rec)}: {len(content)} bytes of content")
        return inner_type, content

    def _handshake_content(
        self, rec, content: bytes, suite: CipherSuite, keylog: KeyLog, client_random: bytes
    ) -> None:
        """Handshake messages completed by this record; switch keys after this side's
        Finished (to application keys) or a KeyUpdate (to the next generation)."""
        done = self._take_handshake(rec, content)
        for i, msg in enumerate(done):
            changes = (msg.type == FINISHED and self.epoch == "handshake") or (
                msg.type == KEY_UPDATE and self.epoch == "application"
            )
            if not changes:
                continue
            why = "after Finished" if msg.type == FINISHED else "after KeyUpdate"
            if i != len(done) - 1:
                raise KeyLogError(
                    f"{self._where(rec)}: more handshake data follows the key change "
                    f"({why}) in the same record; not a valid TLS 1.3 stream"
                )
            self._key_change(rec, why)
            if msg.type == FINISHED:
                self.protection = None  # the application keys, when a record needs them
            else:
                old = self.protection
                self._use(
                    suite,
                    "application",
                    next_traffic_secret(old.secret, suite),
                    f"{old.label} (after KeyUpdate)",
                )

    def tls_records(self) -> list[TlsRecord]:
        return [
            TlsRecord(self.sender, r.end, r.content_type, tuple(self.messages_in.get(r.index, ())))
            for r in self.records
        ]


# --- a connection --------------------------------------------------------------------------------


def decrypt_streams(
    client_stream: bytes, server_stream: bytes, keylog: KeyLog, what: str = "connection"
) -> tuple[list[TlsRecord], list[TlsRecord]]:
    """(client records, server records) of one TLS 1.3 connection, from the two byte
    streams (each from its first byte) and the key log. Raises KeyLogError when the
    streams are not TLS 1.3, the key log has no secrets for the connection, or a record
    does not authenticate. Streams that stop early (a capture cut short after a record
    boundary) give the records up to there."""
    d = decrypt(client_stream, server_stream, keylog, what)
    return d.client_records, d.server_records


@dataclass
class Decrypted:
    """One connection read from its streams: each side's records, and the bodies (without
    the 4-byte header) of the server's handshake messages of the types asked for, in
    order, as (type, body)."""

    client_records: list[TlsRecord] = field(default_factory=list)
    server_records: list[TlsRecord] = field(default_factory=list)
    server_messages: list[tuple[int, bytes]] = field(default_factory=list)


def decrypt(
    client_stream: bytes,
    server_stream: bytes,
    keylog: KeyLog,
    what: str = "connection",
    keep: frozenset[int] = frozenset(),
) -> Decrypted:
    """`decrypt_streams`, also keeping the bodies of the server's messages of the types in
    `keep` (its Certificate, say: what the server sent, whatever the client kept of it)."""
    client = _Direction("client", client_stream, what)
    server = _Direction("server", server_stream, what, keep)
    client.read_plaintext()
    server.read_plaintext()

    def done() -> Decrypted:
        kept = [(m.type, m.body) for m in server.messages if m.type in keep]
        return Decrypted(client.tls_records(), server.tls_records(), kept)

    hellos = [m for m in client.messages if m.type == CLIENT_HELLO]
    if not hellos:
        if client.records or server.records:
            raise KeyLogError(f"{client.what}: no plaintext ClientHello at the start")
        return Decrypted()  # a TCP connection that carried no TLS at all
    client_random = parse_client_hello(hellos[0].body, client.what).random
    for later in hellos[1:]:  # the ClientHello after a HelloRetryRequest
        if parse_client_hello(later.body, client.what).random != client_random:
            raise KeyLogError(f"{client.what}: the second ClientHello has another random")

    server_hellos = [
        parse_server_hello(m.body, server.what) for m in server.messages if m.type == SERVER_HELLO
    ]
    # A HelloRetryRequest keeps the handshake in plaintext; the ServerHello that follows
    # it fixes the cipher suite and starts the encryption.
    final = next((h for h in server_hellos if not h.is_hello_retry), None)
    for h in server_hellos:
        if h.selected_version != TLS13:
            version = h.selected_version or h.legacy_version
            raise KeyLogError(
                f"{server.what}: the server chose TLS version 0x{version:04x}, not TLS 1.3 "
                "(0x0304); key-log decryption reads TLS 1.3 only"
            )
    if final is None:
        if client.reached_encryption or server.reached_encryption:
            raise KeyLogError(f"{server.what}: encrypted records but no ServerHello before them")
        return done()
    suite = SUITES.get(final.cipher_suite or 0)
    if suite is None:
        name = UNSUPPORTED_SUITES.get(final.cipher_suite or 0, f"0x{final.cipher_suite:04x}")
        raise KeyLogError(
            f"{server.what}: cipher suite {name} is not supported (TLS_AES_128_GCM_SHA256, "
            "TLS_AES_256_GCM_SHA384 and TLS_CHACHA20_POLY1305_SHA256 are)"
        )
    server.read_encrypted(suite, keylog, client_random)
    client.read_encrypted(suite, keylog, client_random)
    return done()


def connection_records(
    conn: pcap.Connection, keylog: KeyLog
) -> tuple[list[TlsRecord], list[TlsRecord]]:
    """(client records, server records) of one captured connection (read with its
    payload: `pcap.connections(..., keep_payload=True)`)."""
    what = f"connection {pcap.describe(conn)}"
    client_stream = pcap.reassemble(conn, True)
    server_stream = pcap.reassemble(conn, False)
    return decrypt_streams(client_stream, server_stream, keylog, what)


def records_by_connection(
    pcap_path: str | Path, keylog_path: str | Path, server_port: int
) -> list[tuple[pcap.Connection, list[TlsRecord], list[TlsRecord]]]:
    """Every connection to `server_port` in a full-snaplen capture, in order of its SYN,
    with its (client records, server records) from the key log."""
    conns = pcap.connections(pcap_path, server_port, keep_payload=True)
    keylog = read_keylog(keylog_path)
    out = []
    for conn in conns:
        client_records, server_records = connection_records(conn, keylog)
        out.append((conn, client_records, server_records))
    return out


def records_from_capture(
    pcap_path: str | Path, keylog_path: str | Path, server_port: int
) -> dict[int, tuple[list[TlsRecord], list[TlsRecord]]]:
    """client port -> (client records, server records) for every connection to
    `server_port` in the capture: the same records `handshake.tls_records` builds from the
    engine's callback events for that connection's client and server. A client port used
    twice in one capture is an error (use `records_by_connection` for such captures)."""
    out: dict[int, tuple[list[TlsRecord], list[TlsRecord]]] = {}
    for conn, client_records, server_records in records_by_connection(
        pcap_path, keylog_path, server_port
    ):
        port = conn.client[1]
        if port in out:
            raise KeyLogError(
                f"{pcap_path}: client port {port} carries two connections; "
                "use records_by_connection() to keep them apart"
            )
        out[port] = (client_records, server_records)
    return out
