"""The one check of what a TLS handshake negotiated.

Every experiment asks for a version, a group, a signature scheme (and for TLS 1.2 a cipher
suite) and must get exactly that: a handshake that negotiated anything else is an error, not
a sample. Comparisons are by TLS code point (the catalogue's, against the engine's record),
so library spellings ("P-256" vs "secp256r1", "mldsa44" vs "ML-DSA-44") never matter.
"""

from __future__ import annotations

from dataclasses import dataclass

from pqlab.catalog import Algorithm
from pqlab.errors import CheckError

VERSIONS = {"1.2": "TLSv1.2", "1.3": "TLSv1.3"}


@dataclass(frozen=True)
class Expected:
    version: str = "1.3"  # "1.2" | "1.3"
    group: Algorithm | None = None
    sigalg: Algorithm | None = None  # the server's CertificateVerify scheme
    cipher: str | None = None  # OpenSSL / IANA cipher name, when it is fixed
    verified: bool = True  # the client validated the chain (client records only)
    # Mutual TLS: the scheme of the client's CertificateVerify; the server must also have
    # validated the client's chain.
    client_sigalg: Algorithm | None = None


def _code(neg: dict, kind: str, stack) -> int | None:
    code = neg.get(f"{kind}_code")
    if code is not None:
        return int(code)
    if stack is None:
        return None
    name = neg.get(kind)
    return stack.code_of_group(name) if kind == "group" else stack.code_of_sigalg(name)


def _require(neg: dict, kind: str, want: Algorithm | None, stack, what: str, verb: str) -> None:
    """CheckError unless the record's `kind` (group, sigalg, client_sigalg) is `want`'s code
    point (nothing to check when `want` is None or has none)."""
    code = None if want is None else (want.tls_group if kind == "group" else want.tls_sigscheme)
    if code is None:
        return
    got = _code(neg, kind, stack)
    if got != code:
        raise CheckError(
            f"{what} {verb} {neg.get(kind)!r}"
            + (f" ({got:#06x})" if got is not None else "")
            + f", asked for {want.name} ({code:#06x})"
        )


def check(record: dict, expected: Expected, stack=None, what: str = "handshake") -> None:
    """Raise CheckError unless `record` (an engine connection record, client or server)
    negotiated what `expected` asks for."""
    neg = record.get("negotiated") or {}
    want = VERSIONS[expected.version]
    if neg.get("version") != want:
        raise CheckError(f"{what} negotiated {neg.get('version')}, asked for {want}")
    _require(neg, "group", expected.group, stack, what, "negotiated group")
    _require(neg, "sigalg", expected.sigalg, stack, what, "used signature scheme")
    if expected.cipher is not None:
        names = {neg.get("cipher"), neg.get("cipher_standard_name")}
        if expected.cipher not in names:
            raise CheckError(
                f"{what} negotiated cipher {neg.get('cipher')}, asked for {expected.cipher}"
            )
    if expected.verified and record.get("role") == "client" and not record.get("verified"):
        raise CheckError(f"{what}: the client did not verify the server's chain")
    if expected.client_sigalg is not None:
        _require(neg, "client_sigalg", expected.client_sigalg, stack, what, "client signed with")
        if record.get("role") == "server" and not record.get("client_verified"):
            raise CheckError(f"{what}: the server did not verify the client's chain")
