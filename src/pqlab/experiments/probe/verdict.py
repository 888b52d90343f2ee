"""The probe's verdicts: one line per configuration (what the server did with that
ClientHello and what it cost), and one line for the server (which post-quantum groups it
accepts). The same lines go to the terminal, the `probe_configs` table and the report."""

from __future__ import annotations

import re
import statistics

from pqlab import catalog
from pqlab.experiments.probe.analyse import COMPLETED
from pqlab.experiments.probe.plan import Cell, is_post_quantum
from pqlab.units import format_bytes


def _median(rows: list[dict], key: str) -> float | None:
    values = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(values) if values else None


# Certificates named one by one in a verdict line; a longer chain's others are counted.
CHAIN_SHOWN = 5


def _chain(chain_rows: list[dict]) -> str:
    if not chain_rows:
        return ""
    algs = " <- ".join(
        f"{c.get('key_algorithm', '?')} {c['der_bytes']:,} B" for c in chain_rows[:CHAIN_SHOWN]
    )
    if len(chain_rows) > CHAIN_SHOWN:
        algs += f" <- {len(chain_rows) - CHAIN_SHOWN} more"
    root = any(c.get("self_signed") for c in chain_rows)
    total = sum(c["der_bytes"] for c in chain_rows)
    n = len(chain_rows)
    return f"chain {n} cert{'s' if n != 1 else ''} {total:,} B ({algs}" + (
        ", root sent)" if root else ")"
    )


def _costs(rows: list[dict]) -> str:
    """What a completed handshake cost: flight, round trips, waits for an ACK, times."""
    first = rows[0]
    parts = []
    if first.get("server_flight_bytes") is not None:
        segs = first.get("server_flight_segments")
        parts.append(
            f"flight {first['server_flight_bytes']:,} B"
            + (f" in {segs} segment{'s' if segs != 1 else ''}" if segs else "")
        )
    if first.get("round_trips") is not None:
        parts.append(f"{first['round_trips']} RTT")
    waited = [r for r in rows if r.get("ack_waits")]
    if waited:
        wait = _median(waited, "ack_wait_ms")
        segs = _median(waited, "flight_before_wait_segments")
        parts.append(
            f"waited {wait:.1f} ms for an ACK after {segs:.0f} segments (congestion window) "
            f"in {len(waited)}/{len(rows)}"
        )
    elif first.get("ack_waits") == 0:
        parts.append("no wait for an ACK")
    ttfb = _median(rows, "ttfb_ms")
    if ttfb is not None:
        parts.append(f"TTFB {ttfb:.2f} ms")
    ttlb = _median(rows, "ttlb_ms")
    if ttlb is not None:
        parts.append(f"TTLB {ttlb:.2f} ms (HTTP {first.get('http_status')})")
    return ", ".join(parts)


def _completed(cell: Cell, rows: list[dict], chain_rows: list[dict]) -> str:
    first = rows[0]
    group = first.get("group") or "?"
    pq_offered = cell.config.post_quantum
    if first.get("post_quantum"):
        head = f"accepted {group} (post-quantum)"
    elif pq_offered:
        head = f"fell back to {group}: no post-quantum group taken"
    else:
        head = f"accepted {group}"
    if first.get("hello_retry"):
        extra = []
        if first.get("hello_retry_ms") is not None:
            extra.append(f"+{first['hello_retry_ms']:.2f} ms")
        if first.get("hello_retry_bytes") is not None:
            extra.append(f"+{first['hello_retry_bytes']:,} B")
        head = (
            f"HelloRetryRequest for {group} (+1 RTT{', ' + ', '.join(extra) if extra else ''}), then "
            + head
        )
    sig = first.get("sigalg") or "?"
    verified = "verified" if first.get("verified") else f"NOT verified: {first.get('verify_error')}"
    parts = [head, f"{first.get('version')} {first.get('cipher')}", f"signed {sig}"]
    chain = _chain(chain_rows)
    if chain and first.get("chain_from") == "client" and first.get("stack_chain_truncated"):
        chain += f", the first of a longer chain ({cell.stack.name} kept no more)"
    if chain:
        parts.append(chain)
    parts.append(verified)
    costs = _costs(rows)
    if costs:
        parts.append(costs)
    tickets = first.get("session_tickets")
    if tickets:
        parts.append(f"{tickets} session ticket{'s' if tickets != 1 else ''}")
    return "; ".join(parts)


def _failure(row: dict, timeout: int) -> str:
    out = row["outcome"]
    hello = row.get("client_hello_bytes")
    after = f" after the ClientHello ({hello:,} B)" if hello else " after the ClientHello"
    if out == "refused":
        return (
            f"refused: the server answered{after} with alert {row.get('alert') or row.get('error')}"
        )
    if out == "tls12":
        return (
            "the server speaks TLS 1.2 or older only ("
            + (f"alert {row['alert']}" if row.get("alert") else row.get("error") or "")
            + "); a TLS 1.3 client gets no handshake"
        )
    if out == "closed":
        got = row.get("bytes_received") or 0
        return f"the server closed the connection{after} without an alert" + (
            f" ({format_bytes(got)} received)" if got else " (nothing received)"
        )
    if out == "not-tls":
        first = row.get("server_first_bytes")
        return "the server answered with bytes that are not TLS" + (f": {first}" if first else "")
    if out == "timeout":
        phase = row.get("failed_in") or "handshake"
        got = row.get("bytes_received") or 0
        seen = f"{format_bytes(got)} received" if got else "nothing received"
        return f"timed out after {timeout} s in the {phase}: {seen}" + (
            after if phase == "handshake" else ""
        )
    if out == "unreachable":
        return f"cannot connect: {reason(row.get('error'))}"
    if row.get("error_kind") == "check":
        return f"completed, but failed the probe's check: {reason(row.get('error'))}"
    got = row.get("bytes_received") or 0
    cert = row.get("certificate_bytes")
    seen = (
        f" (the server's Certificate message is {cert:,} B; the client read {got:,} B)"
        if cert
        else f" (after receiving {got:,} B from the server)"
        if got
        else ""
    )
    return f"failed: {reason(row.get('error'))}{seen}"


# OpenSSL's error strings: error:CODE:LIBRARY:FUNCTION:REASON:FILE:LINE:
_OPENSSL_ERROR = re.compile(r"error:[0-9A-Fa-f]+:[^:]*:[^:]*:([^:]+):[^:]*:\d+:?")
_CONNECTION = re.compile(r"^connection \d+( to \S+)?: ")


def reason(message: str | None) -> str:
    """An engine error as one short phrase: without the connection's address, and with
    OpenSSL's error strings cut to their reason."""
    text = _CONNECTION.sub("", message or "unknown error")
    return _OPENSSL_ERROR.sub(lambda m: m.group(1), text).strip()


def config_verdict(
    cell: Cell, rows: list[dict], chain_rows: list[dict], timeout: int
) -> tuple[str, str]:
    """(outcome, the one line) for a configuration's connections."""
    done = [r for r in rows if r["outcome"] in COMPLETED]
    failed = [r for r in rows if r["outcome"] not in COMPLETED]
    if done and not failed:
        kind = "hello-retry" if any(r["outcome"] == "hello-retry" for r in done) else "accepted"
        line = _completed(cell, done, chain_rows)
    elif failed and not done:
        kind = failed[0]["outcome"]
        line = _failure(failed[0], timeout)
    else:
        kind = "mixed"
        line = (
            f"mixed: {len(done)} of {len(rows)} completed, then "
            + _failure(failed[0], timeout)
            + f"; completed ones: {_completed(cell, done, chain_rows)}"
        )
    if len(rows) > 1 and not failed:
        line += f" [{len(rows)} connections]"
    return kind, line


def server_verdict(name: str, rows: list[dict]) -> str:
    """Which post-quantum groups the server took alone, refused, or answered with a
    retry; and what the two-share ClientHello got."""
    accepted, refused, classical = [], [], []
    for r in rows:
        groups = r["offered_groups"].split(",")
        if len(groups) != 1:
            continue
        g = groups[0]
        pq = is_post_quantum(catalog.resolve(g, "kem"))
        if r["outcome"] in COMPLETED:
            (accepted if pq else classical).append(g)
        elif pq:
            refused.append(g)
    accepted, refused = list(dict.fromkeys(accepted)), list(dict.fromkeys(refused))
    classical = list(dict.fromkeys(classical))
    pq_refused = [g for g in refused if g not in accepted]
    if accepted:
        line = f"{name}: post-quantum groups accepted: {', '.join(accepted)}"
        if pq_refused:
            line += f"; not: {', '.join(pq_refused)}"
    elif classical:
        line = (
            f"{name}: no post-quantum group accepted (classical only: {', '.join(classical)})"
            + (f"; refused: {', '.join(pq_refused)}" if pq_refused else "")
        )
    else:
        line = f"{name}: no configuration completed a handshake"
    return line
