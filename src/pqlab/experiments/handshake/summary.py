"""The handshake experiment's part of the report's summary: X25519MLKEM768 (or the run's
post-quantum group) against X25519 with the same chain; an ML-DSA-44 chain against a
classical one with the same group; both together against the classical pair. Per
comparison: handshake time (median, with a bootstrap 95 % confidence interval of the
relative change), bytes on the wire each way, TCP segments of the server flight and of the
ClientHello, extra round trips (congestion-window stalls), and the server's CPU per
handshake.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

import numpy as np

from pqlab import catalog, stats
from pqlab.errors import UserError
from pqlab.report.section import template
from pqlab.report.summary import Summary, fmt, row, signed
from pqlab.store import RunStore
from pqlab.tls.stacks import DEFAULT_STACK, STACK_SQL

PREFERRED_PQ_GROUPS = ("X25519MLKEM768", "SecP256r1MLKEM768", "ML-KEM-768")
PREFERRED_CLASSICAL_GROUPS = ("X25519", "ECDH-P256")
PREFERRED_PQ_SIGS = ("ML-DSA-44", "ML-DSA-65")
PREFERRED_CLASSICAL_SIGS = ("ECDSA-P256", "RSA-2048", "RSA-3072")


def _is_pq(name: str, kind: str) -> bool:
    try:
        return catalog.resolve(name, kind).nist_level is not None
    except UserError:
        return False


@dataclass(frozen=True)
class Cell:
    group: str
    server_sig: str
    ca_sig: str
    stack: str = DEFAULT_STACK

    def label(self) -> str:
        return f"{self.group} + {self.server_sig} (CA {self.ca_sig})"


def _pick(names: list[str], preferred: tuple[str, ...], pq: bool, kind: str) -> list[str]:
    """The run's names of one kind (post-quantum or classical), preferred ones first."""
    mine = [n for n in names if _is_pq(n, kind) == pq]
    return sorted(mine, key=lambda n: (preferred.index(n) if n in preferred else 99, n))


class HandshakeData:
    """The handshake cells of a run and their raw per-handshake values."""

    COLUMNS = (
        "handshake_ns",
        "client_bytes",
        "server_bytes",
        "server_flight_segments",
        "client_hello_segments",
        "cwnd_stalls",
        "round",
    )

    def __init__(self, store: RunStore):
        self.store = store
        have = store.columns("handshake_raw")
        self.cols = [c for c in self.COLUMNS if c in have]
        rows = store.query(
            f'SELECT DISTINCT "group", server_sig, ca_sig, {STACK_SQL} AS stack '
            "FROM handshake_raw ORDER BY 1, 2, 3, 4"
        )
        self.cells = {Cell(r["group"], r["server_sig"], r["ca_sig"], r["stack"]) for r in rows}
        self.stacks = sorted({c.stack for c in self.cells})
        self.load = {}
        if store.has_table("handshake_load"):
            for r in store.query(
                f'SELECT "group", server_sig, ca_sig, {STACK_SQL} AS stack, '
                "(cpu_user_s + cpu_sys_s) * 1e3 / handshakes AS ms FROM handshake_load "
                "WHERE side = 'server'"
            ):
                self.load[Cell(r["group"], r["server_sig"], r["ca_sig"], r["stack"])] = r["ms"]

    def values(self, cell: Cell) -> dict[str, np.ndarray]:
        cols = ", ".join(f'"{c}"' for c in self.cols)
        data = self.store.numpy(
            f'SELECT {cols} FROM handshake_raw WHERE "group" = ? AND server_sig = ? '
            f"AND ca_sig = ? AND {STACK_SQL} = ?",
            [cell.group, cell.server_sig, cell.ca_sig, cell.stack],
        )
        return {k: np.asarray(v, dtype=float) for k, v in data.items()}

    def names(self, axis: str, stack: str) -> list[str]:
        return sorted({getattr(c, axis) for c in self.cells if c.stack == stack})


def _pairs(h: HandshakeData, st: str) -> list[tuple[str, Cell, Cell]]:
    """(comparison, baseline cell, candidate cell) on one stack: the group swap, the chain
    swap and both together, each with the most common classical choices the run has."""
    groups, sigs, cas = (h.names(axis, st) for axis in ("group", "server_sig", "ca_sig"))
    cl_groups = _pick(groups, PREFERRED_CLASSICAL_GROUPS, False, "kem")
    pq_groups = _pick(groups, PREFERRED_PQ_GROUPS, True, "kem")
    cl_sigs = _pick(sigs, PREFERRED_CLASSICAL_SIGS, False, "sig")
    pq_sigs = _pick(sigs, PREFERRED_PQ_SIGS, True, "sig")
    out = []
    group_pair = _first(
        (Cell(g, s, c, st), Cell(p, s, c, st))
        for g in cl_groups
        for p in pq_groups
        for s in cl_sigs + pq_sigs
        for c in _ca_order(cas, s)
        if {Cell(g, s, c, st), Cell(p, s, c, st)} <= h.cells
    )
    if group_pair:
        out.append(("key exchange", *group_pair))
    chain_pair = _first(
        (Cell(g, s, ca_cl, st), Cell(g, p, ca_pq, st))
        for g in cl_groups + pq_groups
        for s in cl_sigs
        for p in pq_sigs
        for ca_cl, ca_pq in ((s, p), *((c, c) for c in cas))
        if {Cell(g, s, ca_cl, st), Cell(g, p, ca_pq, st)} <= h.cells
    )
    if chain_pair:
        out.append(("certificate chain", *chain_pair))
    both = _first(
        (Cell(g, s, ca_cl, st), Cell(p, q, ca_pq, st))
        for g in cl_groups
        for p in pq_groups
        for s in cl_sigs
        for q in pq_sigs
        for ca_cl, ca_pq in ((s, q), *((c, c) for c in cas))
        if {Cell(g, s, ca_cl, st), Cell(p, q, ca_pq, st)} <= h.cells
    )
    if both:
        out.append(("both", *both))
    return out


def _ca_order(cas: list[str], sig: str) -> list[str]:
    return sorted(cas, key=lambda c: (c != sig, c))


def _first(it):
    return next(iter(it), None)


def _handshake_rows(h: HandshakeData, what: str, base: Cell, cand: Cell) -> list[dict]:
    a, b = h.values(base), h.values(cand)
    comparison = f"{base.label()} -> {cand.label()}"
    est, lo, hi = stats.bootstrap_ci(a["handshake_ns"], b["handshake_ns"], n_boot=1000)
    time_row = row(
        what,
        comparison,
        "handshake time (median)",
        "ms",
        float(np.median(a["handshake_ns"])) / 1e6,
        float(np.median(b["handshake_ns"])) / 1e6,
        (lo * 100, hi * 100),
    )
    drifts = [stats.drift(v["handshake_ns"], v["round"]) for v in (a, b) if "round" in v]
    known = [abs(d) for d in drifts if d is not None]
    time_row["drift_pct"] = max(known) * 100 if known else None
    time_row["significant"] = (lo > 0 or hi < 0) and not stats.within_drift(est, drifts)
    rows = [time_row]
    for col, metric, unit in (
        ("client_bytes", "bytes client -> server (IP, median)", "bytes"),
        ("server_bytes", "bytes server -> client (IP, median)", "bytes"),
        ("server_flight_segments", "TCP segments of the server flight (median)", "segments"),
        ("client_hello_segments", "TCP segments of the ClientHello (median)", "segments"),
        ("cwnd_stalls", "extra round trips: congestion-window stalls (mean)", "round trips"),
    ):
        if col in a:
            fn = np.mean if col == "cwnd_stalls" else np.median
            rows.append(row(what, comparison, metric, unit, float(fn(a[col])), float(fn(b[col]))))
    if base in h.load and cand in h.load:
        rows.append(
            row(what, comparison, "server CPU per handshake", "ms", h.load[base], h.load[cand])
        )
    return rows


def describe(base: Cell, cand: Cell) -> str:
    """What changes between two cells ("a -> b") and what they share ("with ...")."""
    changed, same = [], []
    for axis, label in (("group", "group"), ("server_sig", "server"), ("ca_sig", "CA")):
        a, b = getattr(base, axis), getattr(cand, axis)
        if a == b:
            same.append(f"{label} {a}")
        else:
            changed.append((a, b))
    left = " + ".join(a for a, _ in changed)
    right = " + ".join(b for _, b in changed)
    shared = f" ({html.escape(', '.join(same))})" if same else ""
    return f"{left} &rarr; {right}{shared}"


def _round_trips(r: dict | None) -> str:
    if r is None:
        return ""
    if not r["baseline"] and not r["candidate"]:
        return "no extra round trip (no congestion-window stall)"
    return (
        f"congestion-window stalls {r['baseline']:.2g} &rarr; {r['candidate']:.2g} per "
        "handshake (each waits one round trip)"
    )


def _sentence(rows: list[dict], base: Cell, cand: Cell) -> str:
    by = {r["metric"]: r for r in rows}
    t = by["handshake time (median)"]
    if t["significant"]:
        verdict = ""
    elif t["drift_pct"] is not None and abs(t["change_pct"]) <= t["drift_pct"]:
        verdict = (
            f"; not significant: the cells drifted up to {t['drift_pct']:.1f} % between their "
            "earlier and later rounds, more than this change"
        )
    else:
        verdict = "; not significant"
    facts = []
    c2s, s2c = (
        by.get("bytes client -> server (IP, median)"),
        by.get("bytes server -> client (IP, median)"),
    )
    if c2s and s2c:
        facts.append(
            f"{signed(c2s['change'], 'bytes')} client&rarr;server, "
            f"{signed(s2c['change'], 'bytes')} server&rarr;client"
        )
    segs = [
        f"{name} {r['baseline']:.0f} &rarr; {r['candidate']:.0f} segments"
        for name, r in (
            ("server flight", by.get("TCP segments of the server flight (median)")),
            ("ClientHello", by.get("TCP segments of the ClientHello (median)")),
        )
        if r is not None
    ]
    facts += [", ".join(segs)] if segs else []
    rt = _round_trips(by.get("extra round trips: congestion-window stalls (mean)"))
    facts += [rt] if rt else []
    cpu = by.get("server CPU per handshake")
    if cpu:
        facts.append(
            f"server CPU {fmt(cpu['baseline'], 'ms')} &rarr; {fmt(cpu['candidate'], 'ms')} "
            "per handshake"
        )
    return template(
        "summary_handshake",
        what=html.escape(t["topic"]),
        change=describe(base, cand),
        base_ms=fmt(t["baseline"], "ms"),
        cand_ms=fmt(t["candidate"], "ms"),
        pct=f"{t['change_pct']:+.1f} %",
        lo=f"{t['ci_low_pct']:+.1f}",
        hi=f"{t['ci_high_pct']:+.1f}",
        verdict=verdict,
        details="; ".join(facts),
    )


def summarize(store: RunStore) -> Summary | None:
    if not store.has_table("handshake_raw"):
        return None
    h = HandshakeData(store)
    out = Summary(note=template("summary_note_handshake"))
    for st in h.stacks:
        for what, base, cand in _pairs(h, st):
            # Each stack's comparisons from its own cells; named when the run has several.
            topic = f"{what} on {st}" if len(h.stacks) > 1 else what
            r = _handshake_rows(h, topic, base, cand)
            out.rows += r
            out.items.append(_sentence(r, base, cand))
    return out
