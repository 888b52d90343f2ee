"""The tls12 experiment's options and their validation, and its cells: (version, key
exchange, certificate), including the ones TLS 1.2 does not define.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pqlab import units
from pqlab.cpuquota import parse_fraction
from pqlab.errors import UserError
from pqlab.experiment import CellId, Cells, Option
from pqlab.net import profiles
from pqlab.net.shaping import check_shaper
from pqlab.options import hosts as remote_hosts
from pqlab.options.shaper import shaper_option
from pqlab.tls import stacks

NAME = "tls12"


# The cipher lists and key-exchange names below are OpenSSL's: tls12 runs the OpenSSL stack.
STACK = stacks.DEFAULT_STACK


CELLS = Cells(NAME, ("version", "kex", "cert"), tls=True)


SUITE12 = "AES128-GCM-SHA256"  # the bulk cipher fixed by the document


SUITE13 = "TLS_AES_128_GCM_SHA256"


@dataclass(frozen=True)
class Kex:
    label: str  # as in the tables: RSA, DHE-2048, ECDHE-X25519, FFDHE-2048
    family: str  # rsa | dhe | ecdhe | ffdhe
    group: str | None = None  # OpenSSL group name (what the client must negotiate)
    dh_bits: int | None = None
    dh_source: str | None = None  # DHE: "rfc" (named primes) or "generated" (a new prime)

    def with_source(self, source: str) -> Kex:
        """This DHE key exchange with the parameters of `source` (its label says which,
        except for the RFC primes, the label documents and earlier runs used)."""
        label = self.label if source == "rfc" else f"{self.label}-{source}"
        return Kex(label, self.family, self.group, self.dh_bits, source)


KEX12 = [
    Kex("RSA", "rsa"),
    *[Kex(f"DHE-{b}", "dhe", dh_bits=b, dh_source="rfc") for b in (1024, 2048, 3072, 4096)],
    Kex("ECDHE-P-256", "ecdhe", "secp256r1"),
    Kex("ECDHE-P-384", "ecdhe", "secp384r1"),
    Kex("ECDHE-P-521", "ecdhe", "secp521r1"),
    Kex("ECDHE-X25519", "ecdhe", "x25519"),
    Kex("ECDHE-X448", "ecdhe", "x448"),
]


# TLS 1.3 has no RSA key exchange and no 1024-bit FFDHE group (RFC 7919 starts at 2048).
KEX13 = [Kex(f"FFDHE-{b}", "ffdhe", f"ffdhe{b}", b) for b in (2048, 3072, 4096)] + [
    k for k in KEX12 if k.family == "ecdhe"
]


# Certificate label (as in the tables) -> catalogue algorithm of root and server key.
CERTS = {"RSA-2048": "RSA-2048", "ECDSA-P-256": "ECDSA-P256"}


KEX_NAMES = {k.label.lower(): k for k in KEX12 + KEX13}


DH_SOURCES = ("rfc", "generated")


@dataclass(frozen=True)
class CellSpec:
    version: str  # "1.2" | "1.3"
    kex: Kex
    cert: str  # key of CERTS
    suite: str | None  # OpenSSL cipher name expected; None: not defined
    note: str = ""

    @property
    def cell_id(self) -> str:
        return str(self.cell())

    def cell(self, pair: str | None = None) -> CellId:
        # TLS 1.2's cipher lists and key exchanges are OpenSSL's (see `cell_spec`).
        return CELLS.id(self.version, self.kex.label, self.cert, stack=STACK, pair=pair)


def cell_spec(version: str, kex: Kex, cert: str) -> CellSpec:
    ecdsa = cert.startswith("ECDSA")
    if version == "1.3":
        return CellSpec(version, kex, cert, SUITE13)
    if kex.family == "rsa":
        if ecdsa:
            return CellSpec(
                version,
                kex,
                cert,
                None,
                "RSA key exchange encrypts to the certificate's RSA key; an ECDSA "
                "certificate cannot do it",
            )
        return CellSpec(version, kex, cert, SUITE12)
    if kex.family == "dhe":
        if ecdsa:
            return CellSpec(
                version,
                kex,
                cert,
                None,
                "TLS 1.2 defines no DHE-ECDSA cipher suite (RFC 5246/5288 only "
                "have DHE_RSA and DHE_DSS); not measured",
            )
        return CellSpec(version, kex, cert, "DHE-RSA-" + SUITE12)
    return CellSpec(version, kex, cert, ("ECDHE-ECDSA-" if ecdsa else "ECDHE-RSA-") + SUITE12)


@dataclass
class Plan:
    versions: list[str]
    kexes: list[str]  # labels
    certs: list[str]
    n: int
    warmup: int
    server_cpu: float | None
    profile: object | None  # pqlab.net.profiles.LinkProfile
    shaper: str
    remote: object | None = None  # pqlab.net.remote.RemotePlan: the host pairs
    dh_sources: list[str] = field(default_factory=lambda: ["rfc"])

    @property
    def pairs(self) -> list:
        return list(self.remote.pairs) if self.remote is not None else [None]

    def cell_id(self, spec: CellSpec, pair) -> CellId:
        """The cell's id; with several host pairs, once per pair."""
        several = pair is not None and len(self.pairs) > 1
        return spec.cell(pair.label if several else None)

    def cells(self) -> list[CellSpec]:
        out = []
        for version in self.versions:
            table = KEX12 if version == "1.2" else KEX13
            for base in table:
                if base.label.lower() not in self.kexes:
                    continue
                variants = [base.with_source(s) for s in self.dh_sources]
                for kex in variants if base.family == "dhe" else [base]:
                    for cert in self.certs:
                        out.append(cell_spec(version, kex, cert))
        return out


def parse_kexes(text: str | None) -> list[str]:
    if not text:
        return [k.lower() for k in KEX_NAMES]
    out = []
    for item in text.split(","):
        key = item.strip().lower()
        if not key:
            continue
        if key not in KEX_NAMES:
            raise UserError(
                f"unknown key exchange {item.strip()!r} in --kex; choose from "
                + ", ".join(k.label for k in KEX12 + KEX13[:3])
            )
        out.append(key)
    if not out:
        raise UserError("--kex is empty")
    return out


OPTIONS = (
    Option(
        "n",
        "measured handshakes per (version, kex, cert) cell (1-100000)",
        default="200",
        short="-n",
        metavar="N",
    ),
    Option("warmup", "unrecorded handshakes before each cell", default="3", metavar="N"),
    Option("versions", "TLS versions: 1.2, 1.3 or 1.2,1.3", default="1.2,1.3", metavar="LIST"),
    Option(
        "kex",
        "key exchanges, comma separated (default: all): "
        + ", ".join(k.label for k in KEX12 + KEX13[:3]),
        metavar="LIST",
    ),
    Option(
        "dh-params",
        "TLS 1.2 DHE parameters: rfc (the RFC primes; OpenSSL draws short private exponents "
        "for the named 2048-4096-bit groups), generated (a safe prime the server makes, "
        "full-length exponents, as document 002's nginx had; made once per size and cached), "
        "or rfc,generated for both",
        default="rfc",
        metavar="LIST",
    ),
    Option(
        "certs",
        "server certificates: " + ", ".join(CERTS),
        default=",".join(CERTS),
        metavar="LIST",
    ),
    Option(
        "server-cpu",
        "limit the server to this fraction of one CPU core (cgroup CPU quota), e.g. 0.25, "
        "to see the ranking on weaker hardware",
        metavar="FRACTION",
    ),
    Option(
        "profile",
        "link profile (preset, key=value list or .toml file naming one profile, see "
        "'pqlab linktest'); default: an unshaped veth link",
        metavar="PROFILE",
    ),
    shaper_option(),
    *remote_hosts.OPTIONS,
)


def _dh_sources(text: str | None) -> list[str]:
    sources = units.parse_list(text or "rfc", "--dh-params", example="rfc,generated")
    if not sources or any(x not in DH_SOURCES for x in sources):
        raise UserError(f"--dh-params {text!r}: use rfc, generated or rfc,generated")
    return list(dict.fromkeys(sources))


def from_values(values) -> Plan:
    n = units.parse_positive_int(values.n, "-n")
    if n > 100_000:
        raise UserError(f"-n {values.n!r} is more than 100000 handshakes per cell")
    warmup = units.parse_positive_int(values.warmup, "--warmup", minimum=0)
    if warmup > 10_000:
        raise UserError(f"--warmup {values.warmup!r}: at most 10000")
    versions = units.parse_list(values.versions, "--versions", example="1.2,1.3")
    if not versions or any(v not in ("1.2", "1.3") for v in versions):
        raise UserError(f"--versions {values.versions!r}: use 1.2, 1.3 or 1.2,1.3")
    kexes = parse_kexes(values.kex)
    certs = []
    for c in units.parse_list(values.certs, "--certs", example="RSA-2048"):
        match = [k for k in CERTS if k.lower() == c.lower()]
        if not match:
            raise UserError(f"unknown certificate {c!r} in --certs; use " + ", ".join(CERTS))
        certs.append(match[0])
    if not certs:
        raise UserError("--certs is empty; use RSA-2048, ECDSA-P-256 or both")
    server_cpu = None
    if values.server_cpu is not None:
        server_cpu = parse_fraction(values.server_cpu)

    check_shaper(values.shaper or "auto")
    profile = None
    if values.profile:
        loaded = profiles.load_profiles([values.profile])
        if len(loaded) != 1:
            raise UserError(
                f"--profile {values.profile!r} names {len(loaded)} profiles; give exactly one"
            )
        profile = loaded[0]
    plan = Plan(
        dh_sources=_dh_sources(values.dh_params),
        versions=list(dict.fromkeys(versions)),
        kexes=kexes,
        certs=list(dict.fromkeys(certs)),
        n=n,
        warmup=warmup,
        server_cpu=server_cpu,
        profile=profile,
        shaper=values.shaper or "auto",
    )
    if not plan.cells():
        raise UserError(
            "no cells: the chosen --kex do not exist in the chosen --versions "
            "(RSA and DHE are TLS 1.2 only, FFDHE TLS 1.3 only)"
        )
    remote_hosts.refuse_profile_values(values, "tls12")
    if plan.server_cpu is not None and (
        getattr(values, "server_host", None) or getattr(values, "inventory", None)
    ):
        raise UserError(
            "--server-cpu limits the server with a cgroup on this machine; it cannot limit a "
            "server on a remote host"
        )
    plan.remote = remote_hosts.plan(values, needs_capture=False, what="tls12")
    return plan
