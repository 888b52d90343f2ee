"""The sizes of a TLS 1.3 handshake's messages and records, from the algorithms' own sizes
(the catalogue) and the certificates' DER sizes (the certificate builder), without running
a handshake.

Every size here is a byte count on the wire, by RFC 8446's encoding:

- ServerHello: 4 (handshake header) + 2 (legacy_version) + 32 (random) + 1 + 32 (the
  legacy_session_id echoed: OpenSSL's clients send 32 bytes for middlebox compatibility) +
  2 (cipher suite) + 1 (compression) + 2 (extensions length) + 6 (supported_versions) +
  8 + the key share (key_share: type, length, group, share length, share);
- EncryptedExtensions: 4 + 2 + its extensions (none from pqlab's servers: 6 bytes);
- Certificate: 4 + 1 (request context) + 3 (list length) + per certificate 3 (length) + its
  DER + 2 (its extensions, empty);
- CertificateVerify: 4 + 2 (scheme) + 2 (length) + the signature;
- CertificateRequest (mutual TLS): 4 + 1 (empty request context) + 2 (extensions length) +
  the signature_algorithms extension (4 + 2 + 2 per scheme) + the certificate_authorities
  extension when the server names its client CAs (4 + 2 + per name 2 + its DER);
- Finished: 4 + the suite's hash length (32 for SHA-256, 48 for SHA-384).

Records (TLS 1.3): the ServerHello goes in a plaintext record (5-byte header); a
ChangeCipherSpec record (6 bytes) follows when the client sent a session id (middlebox
compatibility, what OpenSSL does); every encrypted message is its own record(s) of at most
16384 bytes of plaintext, each adding 5 (header) + 1 (inner content type) + 16 (AEAD tag).
After the server's flight the client sends its ChangeCipherSpec record (when it sent a
session id), in mutual TLS its Certificate and CertificateVerify, its Finished, and pqlab's
request (`GET <n>` and a newline) in a record of its own; the server answers with n bytes
in full records of 16384 bytes and a last shorter one.
`tests/test_messages.py` checks all of this against the sizes `pqlab handshake` measured.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from pqlab.catalog import Algorithm
from pqlab.tls.flight import Flight

HANDSHAKE_HEADER = 4
RECORD_HEADER = 5
AEAD_OVERHEAD = 1 + 16  # inner content type + tag
MAX_FRAGMENT = 1 << 14
CHANGE_CIPHER_SPEC_RECORD = 6
SERVER_NAME_ACK = 4  # an empty server_name extension in EncryptedExtensions
HASH_LEN = {"TLS_AES_128_GCM_SHA256": 32, "TLS_AES_256_GCM_SHA384": 48}
HASH_LEN["TLS_CHACHA20_POLY1305_SHA256"] = 32
DEFAULT_SUITE = "TLS_AES_256_GCM_SHA384"  # what OpenSSL's server picks by default


def server_share_bytes(group: Algorithm) -> int:
    """The server's key share: a KEM's ciphertext, a key agreement's public key; hybrids
    concatenate their parts (the catalogue lists their combined sizes)."""
    sizes = group.sizes or {}
    if group.kind == "kem":
        return int(sizes["ciphertext"])
    return int(sizes["public_key"])


def client_share_bytes(group: Algorithm) -> int:
    """The client's key share: the public key (encapsulation key for a KEM)."""
    return int((group.sizes or {})["public_key"])


def signature_bytes(sig: Algorithm) -> tuple[int, int]:
    """(smallest, largest) size of a CertificateVerify signature as TLS carries it: ECDSA
    as a DER SEQUENCE of two INTEGERs of n/2 bytes each (the catalogue's r||s size n): an
    INTEGER grows by a zero byte when its top bit is set (one time in two) and shrinks by
    one when its top byte is zero (one in 256), so n + 4 to n + 8 (shorter still one time in
    2^24 and more); every other algorithm raw (fixed size, or at most the catalogue's size
    for variable-length ones such as Falcon's)."""
    raw = int((sig.sizes or {})["signature"])
    if sig.family == "ECDSA":
        return raw + 4, raw + 8
    if sig.family == "Falcon" and "padded" not in sig.name.lower():
        return raw - 64, raw  # compressed signatures vary below their maximum
    return raw, raw


def server_hello(group: Algorithm, session_id: int = 32) -> int:
    return (
        HANDSHAKE_HEADER + 2 + 32 + 1 + session_id + 2 + 1 + 2 + 6 + 8 + server_share_bytes(group)
    )


def encrypted_extensions(extensions: int = 0) -> int:
    return HANDSHAKE_HEADER + 2 + extensions


def certificate(der_sizes: list[int]) -> int:
    """The Certificate message carrying these certificates, leaf first."""
    return HANDSHAKE_HEADER + 1 + 3 + sum(3 + d + 2 for d in der_sizes)


def certificate_request(schemes: int = 1, authority_names: tuple[int, ...] = ()) -> int:
    """A TLS 1.3 CertificateRequest listing `schemes` signature schemes and, when the server
    names the CAs it accepts, their Names (DER sizes)."""
    extensions = 4 + 2 + 2 * schemes
    if authority_names:
        extensions += 4 + 2 + sum(2 + n for n in authority_names)
    return HANDSHAKE_HEADER + 1 + 2 + extensions


def certificate_verify(signature: int) -> int:
    return HANDSHAKE_HEADER + 2 + 2 + signature


def finished(suite: str = DEFAULT_SUITE) -> int:
    return HANDSHAKE_HEADER + HASH_LEN[suite]


def encrypted_record_bytes(message: int) -> int:
    """Wire bytes of one encrypted handshake message in its own record(s)."""
    return sum(encrypted_records(message))


def encrypted_records(plaintext: int) -> list[int]:
    """Wire bytes of each record that carries `plaintext` bytes encrypted: full records of
    MAX_FRAGMENT bytes and a shorter last one (at least one record)."""
    full, rest = divmod(plaintext, MAX_FRAGMENT)
    sizes = [MAX_FRAGMENT] * full + ([rest] if rest or not full else [])
    return [n + RECORD_HEADER + AEAD_OVERHEAD for n in sizes]


def request_record(size: int) -> int:
    """pqlab's request for `size` bytes (`GET <size>` and a newline) as one record."""
    return encrypted_record_bytes(len(f"GET {size}\n"))


def response_records(size: int) -> list[int]:
    """The records of a `size`-byte response, as pqlab's server writes them (one full
    record per write); none for 0 bytes."""
    return encrypted_records(size) if size else []


@dataclass(frozen=True)
class ServerFlight:
    """The server's first flight, message by message (handshake message bytes) and as
    stream bytes on the wire."""

    server_hello: int
    encrypted_extensions: int
    certificate: int
    certificate_verify: int
    finished: int
    change_cipher_spec: bool = True
    records: str = "message"  # the stack's framing (flight.WriteModel.records)
    certificate_request: int = 0  # mutual TLS: the CertificateRequest (0: none)

    def _encrypted(self) -> list[int]:
        """The encrypted messages in order; the CertificateRequest counts with
        EncryptedExtensions (what ends at "through Certificate" is the same)."""
        ee = [self.encrypted_extensions] + (
            [self.certificate_request] if self.certificate_request else []
        )
        return [*ee, self.certificate, self.certificate_verify, self.finished]

    def record_sizes(self) -> list[int]:
        """Wire bytes of every record of the flight, in the order the stack writes them
        (what its write model sees): ServerHello, ChangeCipherSpec, then the encrypted
        messages each in records of their own ("message") or joined ("flight")."""
        out = [RECORD_HEADER + self.server_hello]
        if self.change_cipher_spec:
            out.append(CHANGE_CIPHER_SPEC_RECORD)
        if self.records == "flight":
            return out + encrypted_records(sum(self._encrypted()))
        return out + [r for m in self._encrypted() for r in encrypted_records(m)]

    def flight(self) -> Flight:
        """Stream offsets at the end of ServerHello (with the ChangeCipherSpec record) and
        of the records that complete Certificate, CertificateVerify and Finished, for a
        stack that frames encrypted messages in records of their own (`records`
        "message") or joins them into shared records of up to 16 KiB ("flight")."""
        return self._flight

    @functools.cached_property
    def _flight(self) -> Flight:
        # (worked out once: the flight is frozen, and every prediction asks for its bytes)
        sh = RECORD_HEADER + self.server_hello
        sh += CHANGE_CIPHER_SPEC_RECORD if self.change_cipher_spec else 0
        messages = self._encrypted()
        if self.records == "flight":
            ends = _joined_record_ends(messages)
        else:
            ends, offset = [], 0
            for m in messages:
                offset += encrypted_record_bytes(m)
                ends.append(offset)
        return Flight(sh, sh + ends[-3], sh + ends[-2], sh + ends[-1])

    @property
    def bytes(self) -> int:
        return self.flight().through_finished


def _joined_record_ends(messages: list[int]) -> list[int]:
    """For messages joined into one plaintext and cut into records of MAX_FRAGMENT bytes:
    the wire offset at the end of the record in which each message ends."""
    total, ends, plain = sum(messages), [], 0
    for m in messages:
        plain += m
        records = -(-plain // MAX_FRAGMENT)
        ends.append(min(records * MAX_FRAGMENT, total) + records * (RECORD_HEADER + AEAD_OVERHEAD))
    return ends


def server_flight(
    group: Algorithm,
    chain_der: list[int],
    signature: int,
    suite: str = DEFAULT_SUITE,
    *,
    records: str = "message",
    server_name_ack: bool = False,
    change_cipher_spec: bool = True,
    certificate_request: int = 0,
    session_id: int = 32,
) -> ServerFlight:
    """The flight of a server with this key exchange, sending these certificates (leaf
    first) and signing its CertificateVerify with a signature of this many bytes, on a stack
    that frames its messages as `records` says (flight.WriteModel.records), does or does
    not acknowledge the client's server_name and does or does not send a ChangeCipherSpec
    (each stack reports these: pqlab.tls.stacks), echoing a session id of `session_id`
    bytes (the client's: OpenSSL's and rustls's clients send 32, wolfSSL's none)."""
    return ServerFlight(
        server_hello(group, session_id),
        encrypted_extensions(SERVER_NAME_ACK if server_name_ack else 0),
        certificate(chain_der),
        certificate_verify(signature),
        finished(suite),
        change_cipher_spec=change_cipher_spec,
        records=records,
        certificate_request=certificate_request,
    )


def client_flight(
    suite: str = DEFAULT_SUITE,
    *,
    change_cipher_spec: bool = True,
    chain_der: list[int] | None = None,
    signature: int = 0,
    records: str = "message",
) -> list[int]:
    """Wire bytes of the records the client writes after the server's flight, in order:
    ChangeCipherSpec (middlebox compatibility), in mutual TLS its Certificate (`chain_der`,
    leaf first) and CertificateVerify (`signature` bytes), and its Finished; each encrypted
    message in records of its own, or joined (`records` "flight", as the server's)."""
    out = [CHANGE_CIPHER_SPEC_RECORD] if change_cipher_spec else []
    encrypted = [finished(suite)]
    if chain_der is not None:
        encrypted = [certificate(chain_der), certificate_verify(signature), *encrypted]
    if records == "flight":
        return out + encrypted_records(sum(encrypted))
    return out + [r for m in encrypted for r in encrypted_records(m)]
