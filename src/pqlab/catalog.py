"""The algorithm catalogue: every algorithm once (data/algorithms.toml), looked up by name.

Names resolve case-insensitively from the canonical name and its aliases, ignoring spaces,
hyphens and underscores ("ML-KEM 768" == "mlkem768"). An unknown name is a UserError that
lists the closest known names.
"""

from __future__ import annotations

import difflib
import functools
import re
import tomllib
from dataclasses import dataclass, field
from importlib import resources

from pqlab.errors import UserError

KINDS = ("kem", "kex", "sig")  # kex: Diffie-Hellman style key agreement (X25519, ECDH, FFDHE)
BACKENDS = ("openssl", "liboqs")


@dataclass(frozen=True)
class Algorithm:
    name: str  # canonical name, e.g. "ML-KEM-768"
    kind: str  # "kem" | "kex" | "sig"
    family: str  # "ML-KEM", "RSA", "ECDSA", "MAYO", ...
    nist_level: int | None  # claimed NIST security category (None: classical)
    aliases: tuple[str, ...] = ()
    openssl: str | None = None  # name for EVP_PKEY_CTX_new_from_name / TLS group, or None
    liboqs: str | None = None  # liboqs method name, or None
    standard: str | None = None  # "FIPS 203", "RFC 7748", ...
    oid: str | None = None
    tls_group: int | None = None  # TLS NamedGroup code point (key exchange)
    tls_sigscheme: int | None = None  # TLS SignatureScheme code point
    tls_name: str | None = None  # the name OpenSSL's TLS layer uses (groups / sigalgs lists)
    sizes: dict = field(default_factory=dict)  # raw sizes in bytes as the algorithm defines them
    params: dict = field(default_factory=dict)  # backend parameters (bits, curve, padding, ...)
    note: str = ""
    documents: tuple[str, ...] = ()  # which source documents use it ("000", "003", ...)

    @property
    def backends(self) -> tuple[str, ...]:
        return tuple(b for b in BACKENDS if getattr(self, b))

    def backend_name(self, backend: str) -> str:
        name = getattr(self, backend, None)
        if not name:
            raise UserError(
                f"{self.name} is not provided by backend {backend!r}; it is provided by "
                f"{', '.join(self.backends) or 'no backend of this build'}"
            )
        return name


def _norm(name: str) -> str:
    return re.sub(r"[\s_\-/]+", "", name.strip().lower())


@functools.lru_cache(maxsize=1)
def _load() -> tuple[tuple[Algorithm, ...], dict[str, Algorithm]]:
    text = resources.files("pqlab.data").joinpath("algorithms.toml").read_text()
    data = tomllib.loads(text)
    algorithms = []
    index: dict[str, Algorithm] = {}
    for entry in data["algorithm"]:
        entry = dict(entry)
        entry["aliases"] = tuple(entry.get("aliases", ()))
        entry["documents"] = tuple(entry.get("documents", ()))
        alg = Algorithm(**entry)
        if alg.kind not in KINDS:
            raise ValueError(f"catalogue: {alg.name} has unknown kind {alg.kind!r}")
        algorithms.append(alg)
        for key in (
            alg.name,
            *alg.aliases,
            alg.openssl or "",
            alg.liboqs or "",
            alg.tls_name or "",
        ):
            if not key:
                continue
            k = _norm(key)
            other = index.get(k)
            if other is not None and other is not alg:
                raise ValueError(f"catalogue: name {key!r} is used by {other.name} and {alg.name}")
            index[k] = alg
    return tuple(algorithms), index


def all_algorithms(kind: str | None = None) -> list[Algorithm]:
    algs, _ = _load()
    if kind is None:
        return list(algs)
    kinds = ("kem", "kex") if kind == "kem" else (kind,)
    return [a for a in algs if a.kind in kinds]


def resolve(name: str, kind: str | None = None) -> Algorithm:
    """Look up one name; `kind` "kem" accepts KEMs and key agreements, "sig" signatures."""
    _, index = _load()
    alg = index.get(_norm(name))
    wanted = {"kem": ("kem", "kex"), "sig": ("sig",), "kex": ("kex",)}.get(kind or "", KINDS)
    if alg is not None and alg.kind in wanted:
        return alg
    if alg is not None:
        what = "a signature algorithm" if alg.kind == "sig" else "a key exchange"
        raise UserError(f"{name!r} is {what}, not what is asked for here")
    candidates = {}
    for a in all_algorithms():
        if a.kind in wanted:
            for key in (a.name, *a.aliases):
                candidates[_norm(key)] = a.name
    close = difflib.get_close_matches(_norm(name), list(candidates), n=8, cutoff=0.5)
    names = list(dict.fromkeys(candidates[c] for c in close))[:5]
    hint = f"; did you mean {', '.join(names)}?" if names else "; see 'pqlab algorithms'"
    label = {"kem": "KEM or key exchange", "sig": "signature algorithm"}.get(
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
