"""The certificates a server sent (DER, leaf first), as its decrypted Certificate message
carried them on the wire or, without a capture, as the probe's client stack kept them: each
one's size, key and signature algorithms (catalogue names where the catalogue knows the OID),
subject and issuer, and whether it is a self-signed root (a server that sends its root spends
bytes on a certificate every client already has or will not trust)."""

from __future__ import annotations

import hashlib

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa

from pqlab import catalog


def certificate_list(body: bytes) -> list[bytes] | None:
    """The DER certificates of a TLS 1.3 Certificate message's body (RFC 8446 4.4.2: a
    request context, then a 24-bit-length list of entries, each a 24-bit-length certificate
    and its 16-bit-length extensions), in order; None when the body is not one."""
    if not body or len(body) < 1 + body[0] + 3:
        return None
    pos = 1 + body[0]
    end = pos + 3 + int.from_bytes(body[pos : pos + 3], "big")
    if end != len(body):
        return None
    pos += 3
    out = []
    # Each pass consumes at least 5 bytes (the two length fields), so this ends.
    while pos < end:
        if pos + 3 > end:
            return None
        size = int.from_bytes(body[pos : pos + 3], "big")
        der_end = pos + 3 + size
        if size == 0 or der_end + 2 > end:
            return None
        out.append(body[pos + 3 : der_end])
        pos = der_end + 2 + int.from_bytes(body[der_end : der_end + 2], "big")
    return out if pos == end else None


def _by_oid() -> dict[str, str]:
    """OID (dotted) -> catalogue name, for signature algorithms and their key OIDs."""
    out: dict[str, str] = {}
    for alg in catalog.all_algorithms("sig"):
        for oid in (alg.oid, alg.key_oid):
            if oid:
                out.setdefault(oid, alg.name)
    return out


def key_algorithm(cert: x509.Certificate, names: dict[str, str]) -> str:
    """The certificate's key: RSA-<bits>, ECDSA-P<bits>, Ed25519, Ed448, or the catalogue
    name of its SubjectPublicKeyInfo OID (ML-DSA-44, ...), else the OID itself."""
    try:
        key = cert.public_key()
    except (ValueError, TypeError, UnsupportedAlgorithm):  # a key this build cannot load
        key = None
    if isinstance(key, rsa.RSAPublicKey):
        return f"RSA-{key.key_size}"
    if isinstance(key, ec.EllipticCurvePublicKey):
        return f"ECDSA-P{key.curve.key_size}"
    if isinstance(key, ed25519.Ed25519PublicKey):
        return "Ed25519"
    if isinstance(key, ed448.Ed448PublicKey):
        return "Ed448"
    oid = cert.public_key_algorithm_oid.dotted_string
    return names.get(oid, oid)


def signature_algorithm(cert: x509.Certificate, names: dict[str, str]) -> str:
    """The algorithm the issuer signed the certificate with: the catalogue's name for a
    post-quantum OID, else the X.509 name (sha256WithRSAEncryption, ecdsa-with-SHA256)."""
    oid = cert.signature_algorithm_oid
    name = getattr(oid, "_name", None)
    if oid.dotted_string in names and (not name or name == "Unknown OID"):
        return names[oid.dotted_string]
    return (
        name if name and name != "Unknown OID" else names.get(oid.dotted_string, oid.dotted_string)
    )


def describe(chain_der: list[bytes]) -> list[dict]:
    """One row per certificate, in the order the server sent them."""
    names = _by_oid()
    rows = []
    for position, der in enumerate(chain_der):
        row = {
            "position": position,
            "der_bytes": len(der),
            "sha256": hashlib.sha256(der).hexdigest(),
        }
        try:
            cert = x509.load_der_x509_certificate(der)
        except ValueError as e:
            rows.append({**row, "subject": f"(not a certificate: {e})"})
            continue
        row.update(
            subject=cert.subject.rfc4514_string(),
            issuer=cert.issuer.rfc4514_string(),
            key_algorithm=key_algorithm(cert, names),
            signature_algorithm=signature_algorithm(cert, names),
            self_signed=cert.subject == cert.issuer,
            not_after=cert.not_valid_after_utc.strftime("%Y-%m-%dT%H:%M:%SZ"),
        )
        rows.append(row)
    return rows
