"""A scanned target in one row (`probe_targets`): whether it was reached and why not, what
its configurations got (the browser-like ClientHello's key exchange, each post-quantum
group accepted, refused or answered with a HelloRetryRequest, the signature scheme, the
chain and its expiry, a wait for an ACK), and the one-word verdict. Made from the same
per-configuration results a single probe stores, so a target's verdict is what a
`pqlab probe` of it says."""

from __future__ import annotations

import statistics

from pqlab.experiments.probe.analyse import COMPLETED
from pqlab.experiments.probe.plan import Cell
from pqlab.experiments.probe.targets import TargetLine

VERDICTS = ("pq-ready", "pq-with-hrr", "classical-only", "unreachable", "error")
# The ClientHello browsers send today (Chrome, Firefox, OpenSSL 3.5): key shares for the
# hybrid and X25519.
BROWSER_LIKE = "X25519MLKEM768+X25519"

# The columns of probe_targets (and of tables/probe_targets.csv, .jsonl), in order.
COLUMNS = (
    "target", "given", "line", "address", "reachable", "unreachable_reason", "tls_versions",
    "browser_group", "browser_hello_retry", "pq_accepted", "pq_hello_retry", "pq_refused",
    "sigalg", "chain_certs", "chain_bytes", "chain_algorithms", "chain_expiry",
    "chain_verified", "first_flight_waited_for_ack", "server_flight_bytes",
    "client_hello_bytes", "ttfb_ms", "configurations", "verdict", "detail", "seconds",
)  # fmt: skip

DDL = """
CREATE TABLE IF NOT EXISTS probe_targets (
    target TEXT, given TEXT, line INTEGER, address TEXT, reachable BOOLEAN,
    unreachable_reason TEXT, tls_versions TEXT, browser_group TEXT,
    browser_hello_retry BOOLEAN, pq_accepted TEXT, pq_hello_retry TEXT, pq_refused TEXT,
    sigalg TEXT, chain_certs INTEGER, chain_bytes INTEGER, chain_algorithms TEXT,
    chain_expiry TEXT, chain_verified BOOLEAN, first_flight_waited_for_ack BOOLEAN,
    server_flight_bytes INTEGER, client_hello_bytes INTEGER, ttfb_ms DOUBLE,
    configurations INTEGER, verdict TEXT, detail TEXT, seconds DOUBLE)
"""


def no_tls(result: dict) -> str | None:
    """Why a configuration's result says the target has no TLS service to probe further
    (`dns` is found before any), or None: `refused` or another reason the TCP connection
    failed, `timeout` (no TCP connection, or one on which nothing came back), `not-tls`."""
    raw = result["raw"]
    first = raw[0] if raw else {}
    outcome = result["outcome"]
    if outcome == "unreachable":
        error = (first.get("error") or "").lower()
        return "refused" if "refused" in error else "no-route" if "route" in error else "tcp"
    if outcome == "timeout" and (
        first.get("failed_in") == "TCP connect" or not first.get("bytes_received")
    ):
        return "timeout"
    if outcome == "not-tls":
        return "not-tls"
    return None


def _names(values) -> str | None:
    return ",".join(dict.fromkeys(values)) or None


def row(
    line: TargetLine,
    address: str | None,
    results: list[tuple[Cell, dict]],
    dns_error: str | None = None,
    seconds: float | None = None,
) -> dict:
    """The target's row from its configurations' results (in the order they ran)."""
    out: dict = {c: None for c in COLUMNS}
    out.update(
        target=line.name,
        given=line.text,
        line=line.line,
        address=address,
        configurations=len(results),
        seconds=seconds,
    )
    if dns_error is not None:
        return {
            **out,
            "reachable": False,
            "unreachable_reason": "dns",
            "verdict": "unreachable",
            "detail": dns_error,
        }
    done = [
        (cell, r, res) for cell, res in results for r in res["raw"] if r["outcome"] in COMPLETED
    ]
    why = next((w for w in (no_tls(res) for _, res in results) if w), None)
    if why is not None and not done:
        return {
            **out,
            "reachable": False,
            "unreachable_reason": why,
            "verdict": "unreachable",
            "detail": results[0][1]["verdict"],
        }
    out["reachable"] = True
    browser = next((res for cell, res in results if cell.config.name == BROWSER_LIKE), None)
    out.update(_groups(results))
    versions = [r["version"] for _, r, _ in done if r.get("version")]
    if any(res["outcome"] == "tls12" for _, res in results):
        versions.append("TLS 1.2 or older")
    out["tls_versions"] = _names(sorted(set(versions)))
    if browser is not None:
        first = browser["raw"][0] if browser["raw"] else {}
        out["client_hello_bytes"] = first.get("client_hello_bytes")
        if browser["outcome"] in COMPLETED:
            out["browser_group"] = first.get("group")
            out["browser_hello_retry"] = bool(first.get("hello_retry"))
        else:
            out["browser_group"] = f"({browser['outcome']})"
    if not done:
        tls12 = any(res["outcome"] == "tls12" for _, res in results)
        out["verdict"] = "classical-only" if tls12 else "error"
        out["detail"] = results[0][1]["verdict"] if results else None
        return out
    out.update(_handshake(done, browser))
    browser_direct = (
        browser is not None
        and browser["outcome"] == "accepted"
        and bool(browser["raw"][0].get("post_quantum"))
    )
    if browser_direct or (browser is None and out["pq_accepted"]):
        out["verdict"] = "pq-ready"
    elif out["pq_accepted"] or out["pq_hello_retry"]:
        out["verdict"] = "pq-with-hrr"
    else:
        out["verdict"] = "classical-only"
    out["detail"] = (browser or done[0][2])["verdict"]
    return out


def _groups(results: list[tuple[Cell, dict]]) -> dict:
    """The post-quantum groups the target accepted (in one round trip), accepted only
    after a HelloRetryRequest, and refused when offered alone."""
    accepted, retried, refused = [], [], []
    for cell, res in results:
        completed = [r for r in res["raw"] if r["outcome"] in COMPLETED]
        for r in completed:
            if r.get("post_quantum"):
                (retried if r.get("hello_retry") else accepted).append(r["group"])
        pq = cell.config.post_quantum
        if not completed and len(cell.config.groups) == 1 and pq:
            refused.append(pq[0].name)
    return {
        "pq_accepted": _names(accepted),
        "pq_hello_retry": _names(retried),
        "pq_refused": _names(g for g in refused if g not in accepted + retried),
    }


def _handshake(done: list[tuple[Cell, dict, dict]], browser: dict | None) -> dict:
    """What a completed handshake showed: the browser-like ClientHello's when it completed,
    else the first one's."""
    _, first, res = next(((c, r, s) for c, r, s in done if s is browser), done[0])
    times = [r["ttfb_ms"] for _, r, s in done if s is res and r.get("ttfb_ms") is not None]
    out = {
        "sigalg": first.get("sigalg"),
        "chain_verified": first.get("verified"),
        "server_flight_bytes": first.get("server_flight_bytes"),
        "ttfb_ms": statistics.median(times) if times else None,
        "first_flight_waited_for_ack": None
        if first.get("ack_waits") is None
        else first["ack_waits"] > 0,
    }
    chain = res["chain"] or next((s["chain"] for _, _, s in done if s["chain"]), [])
    if chain:
        out.update(
            chain_certs=len(chain),
            chain_bytes=sum(c["der_bytes"] for c in chain),
            chain_algorithms=" <- ".join(c.get("key_algorithm") or "?" for c in chain),
            chain_expiry=chain[0].get("not_after"),
        )
    return out
