"""TLS records as one side wrote them, whatever the source: the TLS stack's own message
events (OpenSSL's callback, `from_events`) or the capture decrypted with the key log
(`pqlab.tls.keylog`). The handshake analysis takes either; both must agree exactly."""

from __future__ import annotations

from typing import NamedTuple

CONTENT_TYPES = {"change_cipher_spec": 20, "alert": 21, "handshake": 22, "application_data": 23}
# The engine's handshake type names -> the names the analysis uses.
MESSAGE_NAMES = {
    "client_hello": "ClientHello",
    "server_hello": "ServerHello",
    "encrypted_extensions": "EncryptedExtensions",
    "certificate": "Certificate",
    "certificate_verify": "CertificateVerify",
    "finished": "Finished",
    "new_session_ticket": "NewSessionTicket",
    "certificate_request": "CertificateRequest",
}


class TlsRecord(NamedTuple):
    """One TLS record as written by `sender`; `end` is the cumulative number of bytes the
    sender had written to the TCP stream once this record was out (0-based stream). (A
    named tuple: a cell's analysis makes and hashes some 20,000 of them.)"""

    sender: str  # "client" | "server"
    end: int
    content_type: int  # outer type: 22 handshake, 20 CCS, 21 alert, 23 encrypted/app data
    messages: tuple[tuple[str, int], ...] = ()  # (handshake message name, its length)


def from_events(conn_record: dict, sender: str, direction: str = "sent") -> list[TlsRecord]:
    """The records one side wrote (dir "sent") with the handshake messages they carried, from
    an engine connection record's message events; with `direction` "recv", the records of
    `sender` as the side that recorded them read them (offsets in the sender's stream)."""
    ends: list[tuple[int, int]] = []  # (offset at the record's end, its content type)
    messages: dict[int, list] = {}
    for ev in conn_record.get("events", []):
        if ev.get("dir") != direction:
            continue
        kind = ev.get("ev")
        if kind == "record":
            ends.append((int(ev["offset_end"]), CONTENT_TYPES.get(ev["content_type"], 0)))
        elif kind == "handshake":
            name = MESSAGE_NAMES.get(ev["msg"], ev["msg"])
            messages.setdefault(int(ev["offset_end"]), []).append((name, int(ev["length"])))
    return [TlsRecord(sender, end, ct, tuple(messages.get(end, ()))) for end, ct in ends]
