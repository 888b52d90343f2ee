"""What each scanned target's first flight would cost with an ML-DSA chain, from `pqlab
plan`'s model (`pqlab.tls.predict`): the target's own key exchange and ClientHello, a chain
of as many certificates as it sends today made of ML-DSA ones (their DER sizes from the
certificate builder), on each of the chosen paths; beside it the same model for the chain
the target sends today, so that the extra round trips are the chain's alone."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pqlab import catalog, units
from pqlab.catalog import Algorithm
from pqlab.errors import UserError
from pqlab.experiment import Option
from pqlab.net import profiles
from pqlab.tls import predict, stacks, wire
from pqlab.tls.chains import make_chain

DEFAULT_SIGS = "ML-DSA-44,ML-DSA-65"
DEFAULT_PATHS = ("rtt=20ms,initcwnd=10", "rtt=100ms,rate=20mbit,initcwnd=10")
# The server's writes are modelled as OpenSSL's (the stack of most servers probed).
MODEL_STACK = "openssl"
RECORD_HEADER = 5  # probe_raw's client_hello_bytes is the message; the model takes the record

OPTIONS = (
    Option(
        "plan-sig",
        "with --targets: the ML-DSA (or other) signature algorithms of the chains each "
        "target's flight is predicted with, comma separated",
        default=DEFAULT_SIGS,
        metavar="LIST",
    ),
    Option(
        "plan-path",
        "with --targets: a path to predict each target's flight on (a link profile: a preset "
        "or rtt=...,rate=...,initcwnd=...); may be given several times (default: "
        + " and ".join(DEFAULT_PATHS)
        + ")",
        metavar="PROFILE",
        repeat=True,
    ),
)

DDL = """
CREATE TABLE IF NOT EXISTS probe_target_plans (
    target TEXT, path TEXT, rtt_ms DOUBLE, "group" TEXT, chain_certs INTEGER,
    today_chain_bytes INTEGER, today_flight_bytes INTEGER, today_round_trips INTEGER,
    today_ttfb_ms DOUBLE, sig TEXT, planned_chain_bytes INTEGER, planned_flight_bytes INTEGER,
    planned_segments INTEGER, planned_round_trips INTEGER, planned_ttfb_ms DOUBLE,
    extra_round_trips INTEGER)
"""


@dataclass(frozen=True)
class Planned:
    """A signature algorithm's certificate sizes: its leaf and its CA's (DER bytes)."""

    sig: Algorithm
    leaf: int
    ca: int


def parse(values) -> tuple[list[Algorithm], list]:
    sigs = [
        catalog.resolve(n, "sig")
        for n in units.parse_list(values.plan_sig or DEFAULT_SIGS, "--plan-sig")
    ]
    paths = [profiles.parse_profile(p) for p in (values.plan_path or DEFAULT_PATHS)]
    return sigs, paths


def certificates(sigs: list[Algorithm], certs_dir: Path) -> list[Planned]:
    """Each algorithm's leaf and CA certificate sizes, from chains the certificate builder
    makes once in the run's certs/."""
    out = []
    for sig in sigs:
        chain = make_chain(certs_dir, sig, sig, MODEL_STACK, send_root=True)
        der = list(chain.sent_der)
        out.append(Planned(sig, der[0], der[-1]))
    return out


def _today_signer(target: dict, chain: list[dict]) -> Algorithm | None:
    """The leaf's key algorithm, as the catalogue names it (None when it does not)."""
    for name in (chain[0].get("key_algorithm") if chain else None, target.get("sigalg")):
        if not name:
            continue
        try:
            return catalog.resolve(name, "sig")
        except UserError:
            continue
    return None


def rows(target: dict, chain: list[dict], planned: list[Planned], paths, mss: int) -> list[dict]:
    """The predictions of one target (none when no handshake completed or its group or
    ClientHello is unknown)."""
    group_name = target.get("browser_group") or ""
    if target.get("client_hello_bytes") is None or not target.get("chain_certs"):
        return []
    try:
        group = catalog.resolve(group_name, "kem")
    except UserError:
        return []
    stack = stacks.get(MODEL_STACK)
    hello = target["client_hello_bytes"] + RECORD_HEADER
    count = target["chain_certs"]
    today = None
    signer = _today_signer(target, chain)
    if signer is not None and chain:
        today = predict.Handshake.of(group, signer, [c["der_bytes"] for c in chain], hello, stack)
    out = []
    for path in paths:
        link = wire.Link.from_profile(path, mss)
        now = predict.predict(today, link) if today is not None else None
        for p in planned:
            der = (p.leaf,) + (p.ca,) * (count - 1)
            hs = predict.Handshake.of(group, p.sig, der, hello, stack)
            out_ = predict.predict(hs, link)
            w = out_.wire
            out.append(
                {
                    "target": target["target"],
                    "path": path.name,
                    "rtt_ms": path.rtt_s * 1e3,
                    "group": group.name,
                    "chain_certs": count,
                    "today_chain_bytes": target.get("chain_bytes"),
                    "today_flight_bytes": now.flight_bytes if now else None,
                    "today_round_trips": now.wire.round_trips if now else None,
                    "today_ttfb_ms": now.wire.ttfb_s * 1e3 if now else None,
                    "sig": p.sig.name,
                    "planned_chain_bytes": sum(der),
                    "planned_flight_bytes": out_.flight_bytes,
                    "planned_segments": len(w.flight),
                    "planned_round_trips": w.round_trips,
                    "planned_ttfb_ms": w.ttfb_s * 1e3,
                    "extra_round_trips": w.round_trips - now.wire.round_trips if now else None,
                }
            )
    return out
