"""The TLS stacks of this engine build and what each can do, as the engine reports it.

`pqlab-engine info` lists every stack (`tls_stacks`): its groups and signature schemes with
their TLS code points, the key types its certificate maker handles and its limits. Whether a
catalogue algorithm is usable in TLS on a stack, in a role, is answered here from that
report (`Stack.why_not`, `Stack.usable`), so a stack added to the engine needs no change in
the lab.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from pqlab import catalog, engine
from pqlab.catalog import Algorithm
from pqlab.errors import UserError
from pqlab.tls import flight
from pqlab.units import split_list

DEFAULT_STACK = "openssl"
# The fewest bytes a certificate adds to its public key (names, validity, extensions, the
# shortest signature, framing), and the typical ones of pqlab's certificates besides the
# public key and the CA's signature (measured: 420-440 bytes for every algorithm).
CERTIFICATE_OVERHEAD_MIN = 24 + 512
CERTIFICATE_OVERHEAD = 440
# A root carries no subjectAltName, extended key usage or authority key identifier: about
# 100 bytes less (measured: 82-128 for RSA, ECDSA, EdDSA, ML-DSA and SLH-DSA).
ROOT_CERTIFICATE_OVERHEAD = CERTIFICATE_OVERHEAD - 100
ROLES = ("group", "server", "client", "ca")


@dataclass(frozen=True)
class Stack:
    name: str
    implementation: str
    groups: dict[int, str]  # TLS NamedGroup code -> the stack's name for it
    sigalgs: dict[int, str]  # TLS SignatureScheme code -> the stack's name
    cert_key_types: frozenset[str]  # key specs of certificates it can serve (upper case)
    ca_key_types: frozenset[str]  # key specs it can sign certificates with and verify
    message_events: bool = True  # its connection records carry message events
    limits: dict = field(default_factory=dict)
    versions: dict[tuple[str, int], tuple[str, ...]] = field(default_factory=dict)
    group_codes: dict[str, int] = field(default_factory=dict)  # lower-case name -> code
    sigalg_codes: dict[str, int] = field(default_factory=dict)
    # how it writes a handshake flight and frames its encrypted messages (pqlab.tls.flight)
    write_model: flight.WriteModel = flight.OPENSSL
    # its server acknowledges server_name in EncryptedExtensions (4 bytes more)
    server_name_ack: bool = False
    # its server sends TLS 1.3's middlebox-compatibility ChangeCipherSpec (6 bytes)
    change_cipher_spec: bool = True
    # how `tls memory` counts its heap ("openssl-hooks", "malloc", "wolfssl-allocators") and
    # whether its randomness can be fixed for repeatable allocation counts
    heap_counting: str = "openssl-hooks"
    fixed_random: bool = True
    cipher_suites: tuple[str, ...] = ()  # TLS 1.3 suites it can negotiate (RFC names)
    # the library's own programs this build has (e.g. "tls_bench"), by role, with their paths
    tools: dict[str, str] = field(default_factory=dict)
    # how the library was configured, when the engine built it itself (wolfSSL's options)
    build_options: tuple[str, ...] = ()
    # which key shares its client can send: "any" subset of the offered groups, or "first"
    # (the first group's, plus its companion's: hybrid group code -> classical half's code,
    # sent along when that half is offered too)
    key_shares: str = "any"
    key_share_companions: dict[int, int] = field(default_factory=dict)
    # The engine program that has this stack (`pqlab.engine.programs`): what runs it.
    program: str = engine.MAIN

    def __hash__(self) -> int:  # a stack is its name (its other fields are what it reports)
        return hash(self.name)

    def group_name(self, alg) -> str:
        return self.groups[alg.tls_group]

    def sigalg_name(self, alg) -> str:
        return self.sigalgs[alg.tls_sigscheme]

    def code_of_group(self, name: str | None) -> int | None:
        return self.group_codes.get((name or "").lower())

    def code_of_sigalg(self, name: str | None) -> int | None:
        return self.sigalg_codes.get((name or "").lower())

    def key_spec(self, alg: Algorithm, role: str = "server") -> str | None:
        """The engine's key spec for a signature algorithm (RSA:2048, EC:P-256, ED25519,
        ML-DSA-44, MAYO-1, ...): the first spelling this stack accepts for that role, or the
        first backend name when it accepts none (None: no backend names it). The same
        spelling as `certificate_key_spec`, so one chain serves every stack."""
        names = _key_spec_names(alg)
        for n in names:
            if self.can_certify(n, role):
                return n
        return names[0] if names else None

    def usable(self, alg: Algorithm, role: str = "server", version: str = "1.3") -> bool:
        """Whether `alg` can play `role` here: "group" (key exchange), "server" / "client"
        (certificate key and CertificateVerify signer), "ca" (signs certificates). The one
        answer every command validates against; `why_not` gives the reason when it is no."""
        return self.why_not(alg, role, version) is None

    def can_certify(self, key_spec: str, role: str = "server") -> bool:
        """Whether certificates with keys of `key_spec` can be made and served (role server
        or client) or used to sign others (role ca)."""
        types = self.ca_key_types if role == "ca" else self.cert_key_types
        spec = key_spec.upper()
        return spec in types or spec.split(":")[0] in types

    def _version_ok(self, kind: str, code: int, version: str) -> bool:
        return version in self.versions.get((kind, code), (version,))

    def why_not(self, alg, role: str, version: str = "1.3") -> str | None:
        """None if `alg` can play `role` on this stack, else the reason (one phrase)."""
        if role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, not {role!r}")
        where = f"the {self.name} TLS stack ({self.implementation})"
        if role == "group":
            return self._group_why_not(alg, where, version)
        if alg.kind != "sig":
            return f"{alg.name} is not a signature algorithm"
        too_big = self._certificate_too_big(alg, where)
        if too_big:
            return too_big
        spec = self.key_spec(alg, role)
        if spec is None or not self.can_certify(spec, role):
            what = "sign certificates with" if role == "ca" else "make or serve certificates of"
            return f"{where} cannot {what} {alg.name}"
        if role == "ca":
            return None
        if alg.tls_sigscheme is None:
            return f"{alg.name} has no TLS SignatureScheme code point"
        if alg.tls_sigscheme not in self.sigalgs:
            return (
                f"{alg.name} (scheme {alg.tls_sigscheme:#06x}) is not a signature scheme of {where}"
            )
        if not self._version_ok("sigalg", alg.tls_sigscheme, version):
            return f"{alg.name} is not a TLS {version} signature scheme of {where}"
        return None

    def key_shares_sent(self, groups) -> tuple | None:
        """The groups (of `groups`, offered in that order) a "first" stack's client sends
        key shares for; None for a stack that sends any subset asked for."""
        if self.key_shares != "first":
            return None
        if not groups:
            return ()
        first = groups[0]
        half = self.key_share_companions.get(first.tls_group)
        return (first, *(g for g in groups[1:] if half is not None and g.tls_group == half))

    def key_shares_why_not(self, groups, shares) -> str | None:
        """None if this stack's client can offer `groups` with key shares for exactly
        `shares`, else why not."""
        sent = self.key_shares_sent(groups)
        if sent is None or {g.tls_group for g in sent} == {g.tls_group for g in shares}:
            return None
        return (
            f"the {self.name} TLS stack sends key shares for the first group offered only "
            f"(and for a hybrid first group also its classical half when that is offered): "
            f"here {' and '.join(g.name for g in sent)}"
        )

    def certificate_limit(self) -> int | None:
        """The largest certificate (DER bytes) the stack takes, when it has a limit."""
        v = self.limits.get("max_certificate_bytes")
        return int(v) if v else None

    def _certificate_too_big(self, alg, where: str) -> str | None:
        limit = self.certificate_limit()
        public = int((alg.sizes or {}).get("public_key") or 0)
        if limit is None or not public:
            return None
        least = public + CERTIFICATE_OVERHEAD_MIN
        if least <= limit:
            return None
        return (
            f"a certificate of {alg.name} holds its {public}-byte public key, more than "
            f"{where} takes in a certificate ({limit} bytes, {limit / 1024:.0f} KiB)"
        )

    def chain_why_not(self, server, ca, send_root: bool = False) -> str | None:
        """None if a chain of a `server` leaf signed by a `ca` root fits the stack's limits,
        else why not: estimated from the catalogue's sizes (certificate_bytes), refused only
        when the estimate is over the limit; the engine checks the real chain again."""
        limit = self.certificate_limit()
        if limit is None:
            return None
        leaf = certificate_bytes(server, ca)
        if leaf > limit:
            return (
                f"a {server.name} certificate signed by {ca.name} is about {leaf} bytes, more "
                f"than the {self.name} TLS stack takes in a certificate ({limit} bytes)"
            )
        message = self.limits.get("max_handshake_message_bytes") or self.limits.get(
            "max_cert_list_bytes"
        )
        if message:
            total = 8 + leaf + 5 + (certificate_bytes(ca, ca) + 5 if send_root else 0)
            if total > int(message):
                return (
                    f"a Certificate message carrying {server.name} signed by {ca.name}"
                    + (" and the root" if send_root else "")
                    + f" is about {total} bytes, more than the {self.name} TLS stack takes in "
                    f"a handshake message ({int(message)} bytes)"
                )
        return None

    def _group_why_not(self, alg, where: str, version: str) -> str | None:
        if alg.kind not in ("kem", "kex"):
            return f"{alg.name} is not a key exchange"
        if alg.tls_group is None:
            return f"{alg.name} has no TLS NamedGroup code point"
        if alg.tls_group not in self.groups:
            return f"{alg.name} (group {alg.tls_group:#06x}) is not a group of {where}"
        if not self._version_ok("group", alg.tls_group, version):
            return f"{alg.name} is not a TLS {version} group of {where}"
        return None


def _key_spec_names(alg: Algorithm) -> list[str]:
    params = alg.params or {}
    if alg.family == "RSA" and alg.openssl:
        return [f"RSA:{int(params.get('bits', 2048))}"]
    if alg.family == "ECDSA" and alg.openssl:
        return [f"EC:{params.get('curve', 'P-256')}"]
    return [n for n in (alg.openssl, alg.liboqs) if n]


@functools.lru_cache(maxsize=1)
def certificate_key_types() -> frozenset[str]:
    """Every key spec (upper case) the engine's certificate builder makes certificates of,
    whatever stack serves them."""
    return frozenset(str(k).upper() for k in engine.info().get("certificate_key_types") or [])


def certificate_key_spec(alg: Algorithm) -> str | None:
    """The key spec the certificate builder makes `alg`'s keys with, or None if it cannot."""
    types = certificate_key_types()
    for n in _key_spec_names(alg):
        if n.upper() in types or n.upper().split(":")[0] in types:
            return n
    return None


def require_certificates(algs, option: str) -> None:
    """UserError naming the first algorithm the certificate builder cannot make keys of."""
    for alg in algs:
        if alg.kind != "sig" or certificate_key_spec(alg) is None:
            makeable = [a.name for a in catalog.all_algorithms("sig") if certificate_key_spec(a)]
            raise UserError(
                f"{option} {alg.name}: the engine cannot make certificates of it; it can make "
                + ", ".join(makeable[:12])
                + (" ..." if len(makeable) > 12 else "")
            )


def certificate_bytes(subject, issuer) -> int:
    """About how many DER bytes a pqlab certificate of `subject`'s key signed by `issuer`
    has: both algorithms' catalogue sizes plus CERTIFICATE_OVERHEAD."""
    public = int((subject.sizes or {}).get("public_key") or 0)
    signature = int((issuer.sizes or {}).get("signature") or 0)
    return public + signature + CERTIFICATE_OVERHEAD


def root_certificate_bytes(ca) -> int:
    """About how many DER bytes a pqlab root CA certificate of `ca` has."""
    sizes = ca.sizes or {}
    return (
        int(sizes.get("public_key") or 0)
        + int(sizes.get("signature") or 0)
        + (ROOT_CERTIFICATE_OVERHEAD)
    )


def _lower_map(entries: list[dict]) -> dict[str, int]:
    out: dict[str, int] = {}
    for e in entries:
        if e.get("code") is not None and e.get("name"):
            out.setdefault(str(e["name"]).lower(), int(e["code"]))
    return out


def _first_names(entries: list[dict]) -> dict[int, str]:
    out: dict[int, str] = {}
    for e in entries:
        if e.get("code") is not None and e.get("name"):
            out.setdefault(int(e["code"]), str(e["name"]))
    return out


def _versions(kind: str, entries: list[dict]) -> dict[tuple[str, int], tuple[str, ...]]:
    out: dict[tuple[str, int], tuple[str, ...]] = {}
    for e in entries:
        if e.get("code") is not None and e.get("versions"):
            key = (kind, int(e["code"]))
            out[key] = tuple(sorted(set(out.get(key, ())) | set(e["versions"])))
    return out


def _write_model(entry: dict | None) -> flight.WriteModel:
    """The stack's write model as the engine reports it; an engine that does not report one
    is OpenSSL's (the only stack before the report existed)."""
    if not entry:
        return flight.OPENSSL
    return flight.WriteModel(
        entry["kind"], entry.get("buffer_bytes"), entry.get("records", "message")
    )


def parse(info: dict) -> dict[str, Stack]:
    """The stacks of an engine `info` record."""
    out = {}
    for s in info.get("tls_stacks") or []:
        groups, sigalgs = s.get("groups", []), s.get("sigalgs", [])
        cert = frozenset(str(k).upper() for k in s.get("cert_key_types", []))
        out[s["name"]] = Stack(
            name=s["name"],
            implementation=s.get("implementation", s["name"]),
            groups=_first_names(groups),
            sigalgs=_first_names(sigalgs),
            cert_key_types=cert,
            ca_key_types=cert | frozenset(str(k).upper() for k in s.get("ca_key_types", [])),
            message_events=bool(s.get("message_events", True)),
            limits=dict(s.get("limits") or {}),
            group_codes=_lower_map(groups),
            sigalg_codes=_lower_map(sigalgs),
            versions={**_versions("group", groups), **_versions("sigalg", sigalgs)},
            write_model=_write_model(s.get("write_model")),
            server_name_ack=bool(s.get("server_name_ack", False)),
            change_cipher_spec=bool(s.get("change_cipher_spec", True)),
            heap_counting=str(s.get("heap_counting", "openssl-hooks")),
            fixed_random=bool(s.get("fixed_random", True)),
            cipher_suites=tuple(str(c["name"]) for c in s.get("cipher_suites") or []),
            tools={str(k): str(v) for k, v in (s.get("tools") or {}).items()},
            build_options=tuple(str(o) for o in s.get("build_options") or ()),
            key_shares=str(s.get("key_shares", "any")),
            key_share_companions={int(a): int(b) for a, b in s.get("key_share_companions") or []},
            program=str(s.get("program", engine.MAIN)),
        )
    return out


@functools.lru_cache(maxsize=1)
def all_stacks() -> dict[str, Stack]:
    return parse(engine.info())


def get(name: str = DEFAULT_STACK) -> Stack:
    stacks = all_stacks()
    if name not in stacks:
        raise UserError(
            f"--stack {name!r} is not a TLS stack of this engine build; available: "
            + ", ".join(sorted(stacks))
        )
    return stacks[name]


def parse_stacks(text: str | None, option: str = "--stack") -> list[Stack]:
    """`--stack openssl` or `--stack openssl,rustls`: the stacks, each checked."""
    names = split_list(text) if text else [DEFAULT_STACK]
    if not names:
        raise UserError(f"{option} is empty; give a stack name, e.g. {DEFAULT_STACK}")
    return [get(n) for n in dict.fromkeys(names)]


def require(algs, stack: Stack, role: str, option: str, version: str = "1.3") -> None:
    """UserError naming the first algorithm of `algs` that cannot play `role` on `stack`."""
    for alg in algs:
        why = stack.why_not(alg, role, version)
        if why:
            usable = [a.name for a in _catalogue(role) if stack.why_not(a, role, version) is None]
            raise UserError(
                f"{option} {alg.name}: {why}; usable here: {', '.join(usable[:12])}"
                + (" ..." if len(usable) > 12 else "")
            )


def require_chains(
    servers, cas, stack: Stack, send_root: bool = False, option: str = "--server-sig"
) -> None:
    """UserError naming the first server / CA pair whose chain does not fit `stack`'s
    limits (Stack.chain_why_not)."""
    for server in servers:
        for ca in cas:
            why = stack.chain_why_not(server, ca, send_root)
            if why:
                raise UserError(f"{option} {server.name} with CA {ca.name}: {why}")


@dataclass(frozen=True)
class ClientHello:
    """The ClientHello a stack's client sends: its record bytes and the length of its
    legacy_session_id (which the server echoes in its ServerHello)."""

    record_bytes: int
    session_id_bytes: int


# ClientHellos measured so far, by (stack, group, sigalgs, servername): the root a client
# trusts is not in its hello, so every CA of a matrix shares one measurement (an engine
# start, some 10 ms: 80 of them in the default matrix, 20 with the CA left out).
_HELLOS: dict[tuple, ClientHello] = {}


def client_hello(
    stack: Stack, group: str, sigalgs: str | None, servername: str, ca: str
) -> ClientHello:
    """The ClientHello `stack`'s client sends offering `group` (stack names) and `sigalgs`
    (comma separated; None: the stack's default list), to `servername` (an IP address sends
    no SNI): measured by the engine (`tls hello`: the client's hello to a listener of its
    own that closes, no server, no handshake), once per process. `ca`: any root
    certificate (PEM) the client can load."""
    key = (stack.name, group, sigalgs, servername)
    if key not in _HELLOS:
        argv = ["tls", "hello", "--stack", stack.name, "--groups", group, "--ca", ca]
        argv += ["--servername", servername] + (["--sigalgs", sigalgs] if sigalgs else [])
        records = engine.run(argv, timeout=60, program=stack.program)
        hello = next((r for r in records if r.get("type") == "client_hello"), None)
        if hello is None:
            raise UserError(f"the engine reported no ClientHello for the {stack.name} stack")
        _HELLOS[key] = ClientHello(
            int(hello["record_bytes"]), int(hello.get("session_id_bytes", 32))
        )
    return _HELLOS[key]


# How far below the catalogue's estimate of a chain's size a --chain-bytes size may be
# before it is refused at once (the estimate is within a few tens of bytes; a size between
# the two is refused by the certificate builder, naming the exact size).
PADDING_ESTIMATE_MARGIN = 32


def require_padded_chains(
    sizes: list[int], stack: Stack, send_root: bool, pairs, option: str = "--chain-bytes"
) -> None:
    """UserError when a chain of a (server, CA) pair of `pairs` cannot be padded to one of
    `sizes` DER bytes: smaller than the chain without padding (estimated from the
    catalogue's sizes), or over `stack`'s limits (the padding goes into the server
    certificate, which holds the size less the root's when it is sent; the Certificate
    message holds it all)."""
    limit = stack.certificate_limit()
    message = stack.limits.get("max_handshake_message_bytes") or stack.limits.get(
        "max_cert_list_bytes"
    )
    for server, ca in pairs:
        root = root_certificate_bytes(ca) if send_root else 0
        own = certificate_bytes(server, ca) + root
        for size in sizes:
            if size < own - PADDING_ESTIMATE_MARGIN:
                what = f"a {server.name} certificate signed by {ca.name}" + (
                    " and the root" if send_root else ""
                )
                raise UserError(
                    f"{option} {size}: {what} take about {own} bytes without padding; ask for "
                    "at least that (padding only adds)"
                )
            if limit is not None and size - root > limit:
                raise UserError(
                    f"{option} {size}: the server certificate would hold about {size - root} "
                    f"bytes, more than the {stack.name} TLS stack takes in a certificate "
                    f"({limit} bytes)"
                )
            if message and 8 + size + 10 > int(message):
                raise UserError(
                    f"{option} {size}: a Certificate message of about {size + 18} bytes is "
                    f"more than the {stack.name} TLS stack takes ({int(message)} bytes)"
                )


def _catalogue(role: str):
    return catalog.all_algorithms("kem" if role == "group" else "sig")
