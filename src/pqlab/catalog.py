"""The algorithm catalogue: every algorithm once (data/algorithms.toml), looked up by name.

Names resolve case-insensitively from the canonical name, its aliases and its backend / TLS
names, ignoring spaces, hyphens, underscores and "/" ("ML-KEM 768" == "mlkem768"). One
spelling may name one key exchange and one signature ("P-256" is the ECDH group and the
ECDSA curve); the kind the caller asks for decides. An unknown name is a UserError that
lists the closest known names.
"""

from __future__ import annotations

import difflib
import functools
import re
import tomllib
from collections import Counter
from dataclasses import dataclass, field, fields
from importlib import resources

from pqlab.errors import UserError

KINDS = ("kem", "kex", "sig")  # kex: Diffie-Hellman style key agreement (X25519, ECDH, FFDHE)
BACKENDS = ("openssl", "liboqs")
TLS_REGISTRIES = ("iana", "oqs-provider")
# Names are unique within a class: key establishment (kem + kex) and signatures.
_CLASS = {"kem": "kem", "kex": "kem", "sig": "sig"}
_WANTED = {"kem": ("kem", "kex"), "kex": ("kex",), "sig": ("sig",)}
SIZE_FIELDS = ("public_key", "secret_key", "ciphertext", "shared_secret", "signature")


@dataclass(frozen=True)
class Algorithm:
    name: str  # canonical name, e.g. "ML-KEM-768"
    kind: str  # "kem" | "kex" | "sig"
    family: str  # "ML-KEM", "RSA", "ECDSA", "MAYO", ...
    nist_level: int | None = None  # claimed NIST PQC category 1-5 (None: classical)
    aliases: tuple[str, ...] = ()
    openssl: str | None = None  # EVP name for EVP_PKEY_CTX_new_from_name, or None
    liboqs: str | None = None  # liboqs method name, or None
    standard: str | None = None  # "FIPS 203", "RFC 7748", ...
    oid: str | None = None  # signatureAlgorithm OID (sig) / SPKI algorithm OID (kem, kex)
    tls_group: int | None = None  # TLS NamedGroup code point (key exchange)
    tls_sigscheme: int | None = None  # TLS SignatureScheme code point
    tls_name: str | None = None  # the name OpenSSL's TLS layer uses (groups / sigalgs lists)
    sizes: dict = field(default_factory=dict)  # raw sizes in bytes as the algorithm defines them
    params: dict = field(default_factory=dict)  # backend parameters (bits, curve, padding, ...)
    note: str = ""
    documents: tuple[str, ...] = ()  # which source documents use it ("000", "003", ...)
    classical_bits: int | None = None  # classical security strength (SP 800-57), classical algs
    key_oid: str | None = None  # SPKI algorithm OID where it differs from oid
    tls_registry: str | None = None  # "iana" or "oqs-provider" (private-use, pre-standard)
    wolfssl: str | None = None  # wolfSSL's name (document 004)
    wolfssl_code: int | None = None  # wolfSSL's code point (document 004; pre-standard)
    wolfssl_oid: str | None = None  # wolfSSL's certificate OID where it differs from oid (004)
    python: str | None = None  # the `cryptography` class family (the python harness backend)
    predecessor: str | None = None  # the pre-standard entry a document measured in its place
    same_keys_as: str | None = None  # the entry whose key generation is this one's

    def document_004_name(self) -> str | None:
        """The name document 004 (wolfSSL's appendix) gave this algorithm, or the
        pre-standard one it measured in its place ("KYBER_LEVEL3 (Kyber768)" for ML-KEM-768),
        or None when it had neither."""
        if self.wolfssl_code is not None:
            return self.wolfssl
        if self.predecessor:
            before = resolve(self.predecessor, self.kind)
            if before.wolfssl_code is not None:
                return f"{before.wolfssl} ({before.name}, pre-standard)"
        return None

    @property
    def backends(self) -> tuple[str, ...]:
        return tuple(b for b in BACKENDS if getattr(self, b))

    @property
    def tls_code(self) -> int | None:
        """The TLS code point: NamedGroup for kem/kex, SignatureScheme for sig."""
        return self.tls_sigscheme if self.kind == "sig" else self.tls_group

    @property
    def names(self) -> tuple[str, ...]:
        """The canonical name and aliases: spellings that must name this entry alone."""
        return (self.name, *self.aliases)

    @property
    def library_names(self) -> tuple[str, ...]:
        """Backend and TLS names; they resolve too unless shared ("EC", "rsa_pss_rsae_sha256")."""
        return tuple(n for n in (self.openssl, self.liboqs, self.tls_name, self.wolfssl) if n)

    def backend_name(self, backend: str) -> str:
        name = getattr(self, backend, None)
        if not name:
            raise UserError(
                f"{self.name} is not provided by backend {backend!r}; it is provided by "
                f"{', '.join(self.backends) or 'no backend of this build'}"
            )
        return name


def normalize(name: str) -> str:
    """The lookup key of a name: lower case without spaces, hyphens, underscores or '/'."""
    return re.sub(r"[\s_\-/]+", "", name.strip().lower())


def _check(alg: Algorithm) -> None:
    where = f"catalogue: {alg.name}"
    if alg.kind not in KINDS:
        raise ValueError(f"{where} has unknown kind {alg.kind!r}")
    if alg.nist_level is not None and alg.nist_level not in range(1, 6):
        raise ValueError(f"{where} has NIST level {alg.nist_level!r} (1-5 or omitted)")
    if alg.tls_registry is not None and alg.tls_registry not in TLS_REGISTRIES:
        raise ValueError(f"{where} has unknown tls_registry {alg.tls_registry!r}")
    if alg.tls_registry is None and (alg.tls_group or alg.tls_sigscheme):
        raise ValueError(f"{where} has a TLS code point without tls_registry")
    if alg.kind == "sig" and alg.tls_group is not None:
        raise ValueError(f"{where}: a signature has a tls_group")
    if alg.kind != "sig" and alg.tls_sigscheme is not None:
        raise ValueError(f"{where}: a key exchange has a tls_sigscheme")
    unknown = set(alg.sizes) - set(SIZE_FIELDS)
    if unknown:
        raise ValueError(f"{where} has unknown size fields {sorted(unknown)}")
    if alg.wolfssl_oid is not None and (
        not re.fullmatch(r"[0-2](\.\d+)+", alg.wolfssl_oid) or alg.wolfssl_oid == alg.oid
    ):
        raise ValueError(f"{where}: wolfssl_oid {alg.wolfssl_oid!r} is no OID or equals oid")
    for d in alg.documents:
        if d not in ("000", "001", "002", "003", "004"):
            raise ValueError(f"{where} names unknown document {d!r}")
    if alg.predecessor == alg.name:
        raise ValueError(f"{where} is its own predecessor")


# Parameters that choose how a key signs, not which key is made.
_SIGNING_PARAMS = ("padding", "digest")


def _check_references(algorithms: list[Algorithm]) -> None:
    """`predecessor` names an entry of the same kind; `same_keys_as` one that makes the same
    keys (same kind and library names, parameters equal but for how it signs)."""
    by_name = {a.name: a for a in algorithms}
    for alg in algorithms:
        before = by_name.get(alg.predecessor) if alg.predecessor else None
        if alg.predecessor and (before is None or before.kind != alg.kind):
            raise ValueError(
                f"catalogue: {alg.name}'s predecessor {alg.predecessor!r} is no entry of its kind"
            )
        if alg.same_keys_as is None:
            continue
        other = by_name.get(alg.same_keys_as)
        key_params = {k: v for k, v in alg.params.items() if k not in _SIGNING_PARAMS}
        if (
            other is None
            or other is alg
            or (other.kind, other.openssl, other.liboqs) != (alg.kind, alg.openssl, alg.liboqs)
            or {k: v for k, v in other.params.items() if k not in _SIGNING_PARAMS} != key_params
        ):
            raise ValueError(
                f"catalogue: {alg.name}'s same_keys_as {alg.same_keys_as!r} is no entry making "
                "the same keys"
            )


@functools.lru_cache(maxsize=1)
def _load() -> tuple[tuple[Algorithm, ...], dict[tuple[str, str], Algorithm]]:
    text = resources.files("pqlab.data").joinpath("algorithms.toml").read_text()
    data = tomllib.loads(text)
    known = {f.name for f in fields(Algorithm)}
    algorithms = []
    for entry in data["algorithm"]:
        entry = dict(entry)
        bad = set(entry) - known
        if bad:
            raise ValueError(f"catalogue: {entry.get('name')} has unknown fields {sorted(bad)}")
        entry["aliases"] = tuple(entry.get("aliases", ()))
        entry["documents"] = tuple(entry.get("documents", ()))
        alg = Algorithm(**entry)
        _check(alg)
        algorithms.append(alg)
    dup = [n for n, c in Counter(a.name for a in algorithms).items() if c > 1]
    if dup:
        raise ValueError(f"catalogue: names listed twice: {dup}")
    _check_references(algorithms)
    index: dict[tuple[str, str], Algorithm] = {}
    for alg in algorithms:
        cls = _CLASS[alg.kind]
        for key in dict.fromkeys(alg.names):
            k = (cls, normalize(key))
            other = index.get(k)
            if other is not None and other is not alg:
                raise ValueError(f"catalogue: name {key!r} is used by {other.name} and {alg.name}")
            index[k] = alg
    # Library names are lookup conveniences: one shared by several entries ("RSA") names none.
    owners: dict[tuple[str, str], set[str]] = {}
    for alg in algorithms:
        for key in alg.library_names:
            owners.setdefault((_CLASS[alg.kind], normalize(key)), set()).add(alg.name)
    for alg in algorithms:
        for key in alg.library_names:
            k = (_CLASS[alg.kind], normalize(key))
            if len(owners[k]) == 1:
                index.setdefault(k, alg)
    return tuple(algorithms), index


def all_algorithms(kind: str | None = None) -> list[Algorithm]:
    """The catalogue in file order; kind "kem" includes key agreements ("kex")."""
    algs, _ = _load()
    if kind is None:
        return list(algs)
    return [a for a in algs if a.kind in _WANTED.get(kind, (kind,))]


def find(name: str, kind: str | None = None) -> list[Algorithm]:
    """Every algorithm of the wanted kind that `name` names exactly (0, 1 or 2 entries)."""
    _, index = _load()
    key = normalize(name)
    wanted = _WANTED.get(kind or "", KINDS)
    found = (index.get(("kem", key)), index.get(("sig", key)))
    return [a for a in found if a is not None and a.kind in wanted]


def close_matches(name: str, kind: str | None = None, n: int = 5) -> list[str]:
    """Canonical names of the algorithms whose spellings are closest to `name`."""
    wanted = _WANTED.get(kind or "", KINDS)
    candidates: dict[str, str] = {}
    for a in all_algorithms():
        if a.kind in wanted:
            for key in (*a.names, *a.library_names):
                candidates.setdefault(normalize(key), a.name)
    key = normalize(name)
    scored = difflib.get_close_matches(key, list(candidates), n=4 * n, cutoff=0.6)
    # "mlkem" or "cross128" name a family or a prefix: offer its members too.
    if len(key) >= 3:
        scored += [c for c in candidates if c.startswith(key) or (len(key) >= 4 and key in c)]
    if not scored:
        scored = difflib.get_close_matches(key, list(candidates), n=4 * n, cutoff=0.4)
    return list(dict.fromkeys(candidates[c] for c in scored))[:n]


def resolve(name: str, kind: str | None = None) -> Algorithm:
    """Look up one name; `kind` "kem" accepts KEMs and key agreements, "sig" signatures."""
    if not name or not normalize(name):
        raise UserError("empty algorithm name; see 'pqlab algorithms' for the names")
    found = find(name, kind)
    if len(found) == 1:
        return found[0]
    if len(found) > 1:
        raise UserError(
            f"{name!r} names both {found[0].name} (key exchange) and {found[1].name} "
            f"(signature); use one of those names"
        )
    other = find(name)
    if other:
        what = "a signature algorithm" if other[0].kind == "sig" else "a key exchange / KEM"
        asked = {
            "kem": "a KEM or key exchange",
            "kex": "a key exchange",
            "sig": "a signature algorithm",
        }.get(kind or "", "this")
        raise UserError(f"{name!r} ({other[0].name}) is {what}, but {asked} is asked for here")
    names = close_matches(name, kind)
    hint = f"; did you mean {', '.join(names)}?" if names else "; see 'pqlab algorithms'"
    label = {"kem": "KEM or key exchange", "kex": "key exchange", "sig": "signature algorithm"}.get(
        kind or "", "algorithm"
    )
    raise UserError(f"unknown {label} {name!r}{hint}")


def resolve_list(names: list[str], kind: str | None = None) -> list[Algorithm]:
    out = []
    for n in names:
        a = resolve(n, kind)
        if a not in out:
            out.append(a)
    return out
