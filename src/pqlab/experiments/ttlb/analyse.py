"""From connection records to rows, and from rows to the summary the report shows: TTFB and
TTLB percentiles per (profile, group, chain, size), the serialisation model, the increase of
every combination over the classical baseline, and warnings worth a user's attention."""

from __future__ import annotations

import json

import numpy as np

from pqlab.errors import CheckError, EngineError
from pqlab.experiments.ttlb import model as ttlb_model
from pqlab.net.profiles import Direction, LinkProfile
from pqlab.stats import Cause, Warning_
from pqlab.tls import negotiation

PERCENTILES = (50, 75, 90)
CLOSE_NOTIFY_BYTES = 24  # TLS 1.3 alert record: 5 header + 2 alert + 1 type + 16 tag


def _offset(events: list[dict], dirn: str, msg: str) -> int | None:
    for ev in events or []:
        if ev.get("ev") == "handshake" and ev.get("dir") == dirn and ev.get("msg") == msg:
            return ev.get("offset_end")
    return None


def _record_offsets(events: list[dict]) -> tuple[int | None, int | None]:
    """For a stack that reports no handshake messages, from the record headers the engine
    read off the socket: the ClientHello is the client's first record, and the server's
    flight is every record received before the client's first encrypted record (its
    Finished)."""
    records = [e for e in events or [] if e.get("ev") == "record"]
    sent = [e for e in records if e.get("dir") == "sent"]
    finished = next((e for e in sent if e.get("content_type") == "application_data"), None)
    if not sent or finished is None:
        return None, None
    received = [e for e in records if e.get("dir") == "recv" and e["t"] <= finished["t"]]
    return sent[0].get("offset_end"), (received[-1].get("offset_end") if received else None)


def rows(
    profile: LinkProfile,
    shaper: str,
    group: str,
    chain: str,
    size: int,
    clients: list[dict],
    servers: list[dict],
    expected: negotiation.Expected,
    stack=None,
) -> dict[str, list]:
    """The ttlb_raw columns of one cell's measured connections, each checked: the handshake
    negotiated what was asked (both ends) and the client got exactly `size` bytes."""
    by_peer = {s.get("peer"): s for s in servers}
    cols: dict[str, list] = {
        k: []
        for k in (
            "profile",
            "shaper",
            "grp",
            "chain",
            "data_bytes",
            "idx",
            "ttfb_ns",
            "ttlb_ns",
            "tcp_connect_ns",
            "client_retrans",
            "server_retrans",
            "retransmits",
            "client_hello_bytes",
            "server_flight_bytes",
            "record_bytes_sent",
            "record_bytes_received",
            "chain_der_bytes",
            "negotiated_group",
            "negotiated_sigalg",
            "rtt_us",
        )
    }
    for c in clients:
        if c.get("warmup"):
            continue
        d = c["durations"]
        srv = by_peer.get(c.get("local"))
        if srv is not None and srv.get("type") == "connection_error":
            raise EngineError(
                f"server side of connection {c['index']} failed: {srv.get('message')}"
            )
        what = f"connection {c['index']}"
        negotiation.check(c, expected, stack, what=f"{what} (client)")
        if srv is not None:
            negotiation.check(srv, expected, stack, what=f"{what} (server)")
        if c.get("app_bytes_received", 0) != size:
            raise CheckError(
                f"connection {c['index']} received "
                f"{c.get('app_bytes_received')} bytes, asked for {size}"
            )
        ci = c.get("tcp_info") or {}
        si = (srv or {}).get("tcp_info") or {}
        client_retrans = int(ci.get("total_retrans", 0))
        server_retrans = int(si.get("total_retrans", 0)) if srv else None
        events = c.get("events") or []
        ch = _offset(events, "sent", "client_hello")
        flight = _offset(events, "recv", "finished")
        if ch is None and flight is None:
            ch, flight = _record_offsets(events)
        values = {
            "profile": profile.name,
            "shaper": shaper,
            "grp": group,
            "chain": chain,
            "data_bytes": size,
            "idx": int(c["index"]),
            "ttfb_ns": int(d["connect_to_handshake_ns"]),
            "ttlb_ns": int(d.get("last_byte_ns", d["connect_to_handshake_ns"])),
            "tcp_connect_ns": int(d["tcp_connect_ns"]),
            "client_retrans": client_retrans,
            "server_retrans": server_retrans,
            "retransmits": client_retrans + (server_retrans or 0),
            "client_hello_bytes": ch,
            "server_flight_bytes": flight,
            "record_bytes_sent": c.get("record_bytes_sent"),
            "record_bytes_received": c.get("record_bytes_received"),
            "chain_der_bytes": sum(c.get("peer_chain_der_bytes") or [0]),
            "negotiated_group": c["negotiated"].get("group"),
            "negotiated_sigalg": c["negotiated"].get("sigalg"),
            "rtt_us": ci.get("rtt_us"),
        }
        for k, v in values.items():
            cols[k].append(v)
    return cols


def cell_warnings(profile: LinkProfile, group: str, chain: str, size: int, cols: dict):
    """Warnings worth a user's attention, each with what to do."""

    out = []
    subject = f"ttlb {profile.name} {group} {chain} {size} B"
    n = len(cols["idx"])
    if n < 10:
        out.append(
            Warning_(
                Cause.FEW_SAMPLES,
                subject,
                f"percentiles from only {n} connections",
                "use -n 20 or more (the document used 100s) for stable p75/p90",
            )
        )
    lossless = not (
        profile.c2s.loss_pct or profile.s2c.loss_pct or profile.c2s.jitter_s or profile.s2c.jitter_s
    )
    if lossless and n and cols["server_flight_bytes"][0]:

        def med(k):
            return int(np.median([v for v in cols[k] if v is not None] or [0]))

        flight = med("server_flight_bytes")
        _, model_ttlb = ttlb_model.model(
            profile,
            client_hello_bytes=med("client_hello_bytes"),
            server_flight_bytes=flight,
            client_finish_bytes=max(0, med("record_bytes_sent") - med("client_hello_bytes")),
            response_bytes=max(0, med("record_bytes_received") - flight - CLOSE_NOTIFY_BYTES),
            data_bytes=size,
        )
        measured = float(np.median(cols["ttlb_ns"])) / 1e9
        error = measured / model_ttlb - 1 if model_ttlb > 0 else 0.0
        if model_ttlb > 0.005 and abs(error) > 0.10:
            out.append(
                Warning_(
                    Cause.OFF_MODEL,
                    subject,
                    f"median TTLB {measured * 1e3:.1f} ms is {error:+.0%} from the serialisation "
                    f"model ({model_ttlb * 1e3:.1f} ms) on a link without loss or jitter",
                    "check the link with 'pqlab linktest --profile ...'; a busy machine or a "
                    "receive window smaller than initcwnd can cause this",
                )
            )
    if sum(cols["retransmits"]) and lossless:
        out.append(
            Warning_(
                Cause.RETRANSMISSIONS,
                subject,
                f"{sum(cols['retransmits'])} TCP retransmissions on a link without configured loss",
                "the queue limit overflowed or the emulator fell behind; raise limit= or check "
                "with 'pqlab linktest'",
            )
        )
    return out


def _pct(values, p) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), p))


def cell_summaries(store) -> list[dict]:
    """One row per (profile, group, chain, size, stack): percentiles, retransmissions,
    bytes, model."""
    raw = store.query("SELECT * FROM ttlb_raw ORDER BY profile, grp, chain, data_bytes, idx")
    profiles = {
        r["profile"]: json.loads(r["profile_json"])
        for r in store.query("SELECT profile, profile_json FROM ttlb_profiles")
    }
    groups: dict[tuple, list[dict]] = {}
    for r in raw:
        key = (r["profile"], r["shaper"], r["grp"], r["chain"], r["data_bytes"], r.get("stack"))
        groups.setdefault(key, []).append(r)
    out = []
    for (profile, shaper, grp, chain, size, stack), rows in groups.items():
        ttfb = [r["ttfb_ns"] / 1e6 for r in rows]
        ttlb = [r["ttlb_ns"] / 1e6 for r in rows]

        def med(k: str, rows=rows) -> int:
            return int(np.median([r[k] for r in rows if r[k] is not None] or [0]))

        row = {
            "profile": profile,
            "shaper": shaper,
            "group": grp,
            "chain": chain,
            "data_bytes": size,
            "n": len(rows),
        }
        for p in PERCENTILES:
            row[f"ttfb_p{p}_ms"] = _pct(ttfb, p)
        for p in PERCENTILES:
            row[f"ttlb_p{p}_ms"] = _pct(ttlb, p)
        row["retransmits_mean"] = float(np.mean([r["retransmits"] for r in rows]))
        row["client_hello_bytes"] = med("client_hello_bytes")
        row["server_flight_bytes"] = med("server_flight_bytes")
        row["chain_der_bytes"] = med("chain_der_bytes")
        row["bytes_received"] = med("record_bytes_received")
        prof = profiles.get(profile)
        if prof and row["server_flight_bytes"]:
            lp = _profile_from_json(prof)
            response = max(
                0, row["bytes_received"] - row["server_flight_bytes"] - CLOSE_NOTIFY_BYTES
            )
            finish = max(0, med("record_bytes_sent") - row["client_hello_bytes"])
            m_ttfb, m_ttlb = ttlb_model.model(
                lp,
                client_hello_bytes=row["client_hello_bytes"],
                server_flight_bytes=row["server_flight_bytes"],
                client_finish_bytes=finish,
                response_bytes=response,
                data_bytes=size,
            )
            row["model_ttfb_ms"] = m_ttfb * 1e3
            row["model_ttlb_ms"] = m_ttlb * 1e3
            row["ttlb_model_error_pct"] = (row["ttlb_p50_ms"] / row["model_ttlb_ms"] - 1) * 100
        else:
            row["model_ttfb_ms"] = row["model_ttlb_ms"] = row["ttlb_model_error_pct"] = None
        row["stack"] = stack
        out.append(row)
    return out


def _profile_from_json(d: dict) -> LinkProfile:

    def direction(x: dict) -> Direction:
        return Direction(
            delay_s=x["delay_ms"] / 1e3,
            jitter_s=x["jitter_ms"] / 1e3,
            dist=x["dist"],
            delay_corr_pct=x["delay_corr_pct"],
            loss_pct=x["loss_pct"],
            loss_corr_pct=x["loss_corr_pct"],
            rate_bps=x["rate_bps"],
            limit=x["limit"],
        )

    return LinkProfile(
        name=d["name"],
        c2s=direction(d["c2s"]),
        s2c=direction(d["s2c"]),
        initcwnd=d["initcwnd"],
        initrwnd=d["initrwnd"],
        congestion_control=d["congestion_control"],
        mtu=d["mtu"],
        spec=d.get("spec", ""),
    )


def increases(summary: list[dict], baseline_group: str, baseline_chain: str) -> list[dict]:
    """Percentage increase of every other (group, chain) over the baseline, per profile,
    size, stack and percentile, for TTFB and TTLB."""
    base = {
        (r["profile"], r["data_bytes"], r.get("stack")): r
        for r in summary
        if r["group"] == baseline_group and r["chain"] == baseline_chain
    }
    out = []
    for r in summary:
        if (r["group"], r["chain"]) == (baseline_group, baseline_chain):
            continue
        b = base.get((r["profile"], r["data_bytes"], r.get("stack")))
        if not b:
            continue
        for p in PERCENTILES:
            out.append(
                {
                    "profile": r["profile"],
                    "group": r["group"],
                    "chain": r["chain"],
                    "baseline": f"{baseline_group} + {baseline_chain}",
                    "data_bytes": r["data_bytes"],
                    "percentile": p,
                    "ttfb_increase_pct": (r[f"ttfb_p{p}_ms"] / b[f"ttfb_p{p}_ms"] - 1) * 100,
                    "ttlb_increase_pct": (r[f"ttlb_p{p}_ms"] / b[f"ttlb_p{p}_ms"] - 1) * 100,
                    "ttlb_baseline_ms": b[f"ttlb_p{p}_ms"],
                    "ttlb_ms": r[f"ttlb_p{p}_ms"],
                    "stack": r.get("stack"),
                }
            )
    return out


def baseline(store) -> tuple[str, str] | None:
    """The classical combination: the first group and chain of the run's command line
    (by default X25519 with an RSA-2048 chain)."""
    rows = store.query("SELECT params FROM cells WHERE experiment = 'ttlb' ORDER BY rowid")
    meta = store.query(
        "SELECT metadata FROM invocations WHERE experiment = 'ttlb' ORDER BY id LIMIT 1"
    )
    if meta:
        m = json.loads(meta[0]["metadata"])
        if m.get("ttlb_groups") and m.get("ttlb_chains"):
            return m["ttlb_groups"][0], m["ttlb_chains"][0]
    if rows:
        p = json.loads(rows[0]["params"])
        return p["group"], p["chain"]
    return None
