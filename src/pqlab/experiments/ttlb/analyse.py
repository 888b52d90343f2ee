"""From connection records to rows, and from rows to the summary the report shows: TTFB and
TTLB percentiles per (profile, group, chain, size), the serialisation model, the increase of
every combination over the classical baseline, and warnings worth a user's attention."""

from __future__ import annotations

import json

import numpy as np

from pqlab.errors import CheckError, EngineError
from pqlab.experiments.ttlb import schema
from pqlab.experiments.ttlb.plan import CELLS
from pqlab.net.profiles import Direction, LinkProfile
from pqlab.stats import Cause, Warning_
from pqlab.tls import negotiation, predict, wire
from pqlab.tls.stacks import DEFAULT_STACK

PERCENTILES = (50, 75, 90)


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


# A lossless, jitter-free cell's median TTFB and TTLB agree with the prediction on the
# measured round trip (the emulator's own time per packet included) within the larger of
# TIME_BAND_MS and TIME_BAND_SHARE of it: the model has no CPU time (key shares, signing,
# verifying: about 2 ms for a hybrid group and an ML-DSA chain here).
TIME_BAND_MS = 3.0
TIME_BAND_SHARE = 0.05


def measured_rtt_s(cols: dict) -> float | None:
    """The round trip the cell's connections met: the median TCP connect (SYN to SYN-ACK
    through the emulator, which adds its own time per packet to the profile's delay)."""
    connects = [v for v in cols.get("tcp_connect_ns", []) if v]
    return float(np.median(connects)) / 1e9 if connects else None


def prediction_rows(
    cid: str, hs, profile: LinkProfile, size: int, cols: dict | None = None
) -> list[dict]:
    """What the wire model predicts for a cell (`pqlab.tls.predict`, as `pqlab plan` does):
    one row per signature size (the smallest and the largest where it varies), on the
    profile's link and, given the cell's connections (`cols`), its times on the link as
    measured (the profile's delays scaled to the median TCP connect: `link_*`)."""
    link = wire.Link.from_profile(profile)
    rtt_s = measured_rtt_s(cols) if cols else None
    low, high = hs.extremes()
    variants = [("exact", high)] if low == high else [("smallest", low), ("largest", high)]
    out = []
    for variant, h in variants:
        o = predict.predict(h, link, response_bytes=size)
        w = o.wire
        resp = w.response[-1].round if w.response else 0
        on = predict.predict(h, link.with_rtt(rtt_s), response_bytes=size).wire if rtt_s else w
        out.append(
            {
                "cell_id": cid,
                "variant": variant,
                "client_hello_bytes": h.client_hello,
                "server_flight_bytes": o.flight_bytes,
                "server_flight_segments": len(w.flight),
                "round_trips": w.round_trips,
                "ttfb_ms": w.ttfb_s * 1e3,
                "ttlb_ms": w.ttlb_s * 1e3,
                "ttlb_round_trips": w.round_trips + resp,
                "link_rtt_ms": rtt_s * 1e3 if rtt_s else None,
                "link_ttfb_ms": on.ttfb_s * 1e3 if rtt_s else None,
                "link_ttlb_ms": on.ttlb_s * 1e3 if rtt_s else None,
            }
        )
    return out


def _on_link(p: dict, what: str) -> float:
    """A prediction row's time (`ttfb`, `ttlb`) on the link as measured, where known."""
    v = p.get(f"link_{what}_ms")
    return p[f"{what}_ms"] if v is None else v


def cliff_rows(hs, profile: LinkProfile) -> list[dict]:
    """The handshake's round-trip cliffs on the profile's window and MSS (largest
    signature; without CPU time they do not depend on the delay or the rate): one row per
    extra round trip, without the cell id (the same for every response size)."""
    link = wire.Link.from_profile(profile)
    return [
        {"round_trips": rt, "chain_der_bytes": at, "mss": link.mss, "initcwnd": link.initcwnd}
        for rt, at in predict.cliffs(hs.extremes()[1], link)
    ]


def lossless(profile: LinkProfile) -> bool:
    c, s = profile.c2s, profile.s2c
    return not (c.loss_pct or s.loss_pct or c.jitter_s or s.jitter_s)


def band_ms(predicted_ms: float) -> float:
    return max(TIME_BAND_MS, TIME_BAND_SHARE * predicted_ms)


def _time_miss(
    what: str, measured: float, pred: list[float], rtt_ms: float, on: str = ""
) -> str | None:
    """Why a median time is outside the band around the prediction (None: it is not)."""
    low, high = min(pred), max(pred)
    off = measured - high if measured > high else measured - low if measured < low else 0.0
    if abs(off) <= band_ms(high):
        return None
    rounds = round(off / rtt_ms) if rtt_ms else 0
    mechanism = (
        f"round trips ({rounds:+d}: the congestion window or the receive window)"
        if rounds
        else "the link's timing (delay, rate) or CPU time the model leaves out"
    )
    return (
        f"median {what} {measured:.1f} ms, predicted {low:.1f}-{high:.1f} ms{on} (band "
        f"{band_ms(high):.1f} ms); the mechanism that disagreed: {mechanism}"
    )


def _median(cols: dict, key: str) -> float:
    return float(np.median([v for v in cols[key] if v is not None] or [0]))


def prediction_warnings(profile: LinkProfile, subject: str, cols: dict, prediction) -> list:
    """Where the measurement missed the prediction: the bytes must be equal, the times
    within the band (lossless, jitter-free links only: the model has neither) of the
    prediction on the link as measured."""
    out = []
    if not prediction or not cols["idx"]:
        return out
    checks = [
        ("ClientHello bytes", "client_hello_bytes", "the stack's ClientHello"),
        ("server flight bytes", "server_flight_bytes", "message sizes (catalogue, certificates)"),
    ]
    for what, key, mechanism in checks:
        measured = int(_median(cols, key))
        pred = sorted({int(p[key]) for p in prediction})
        if cols[key][0] is not None and not pred[0] <= measured <= pred[-1]:
            out.append(
                Warning_(
                    Cause.OFF_MODEL,
                    subject,
                    f"{what} {measured}, predicted {'-'.join(map(str, pred))}; the mechanism "
                    f"that disagreed: {mechanism}",
                )
            )
    if not lossless(profile):
        return out
    measured_rtt = prediction[0].get("link_rtt_ms")
    rtt_ms = measured_rtt or profile.rtt_s * 1e3
    on = f" on the measured round trip of {rtt_ms:.2f} ms" if measured_rtt else ""
    for what, key in (("TTFB", "ttfb"), ("TTLB", "ttlb")):
        pred = [_on_link(p, key) for p in prediction]
        text = _time_miss(what, _median(cols, f"{key}_ns") / 1e6, pred, rtt_ms, on)
        if text:
            out.append(Warning_(Cause.OFF_MODEL, subject, text))
    return out


def cell_warnings(profile: LinkProfile, subject: str, cols: dict, prediction=()):
    """Warnings worth a user's attention, each with what to do."""

    out = []
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
    out += prediction_warnings(profile, subject, cols, prediction)
    if sum(cols["retransmits"]) and lossless(profile):
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


def _predictions(store) -> dict[str, list[dict]]:
    if not store.has_table("ttlb_prediction"):
        return {}
    out: dict[str, list[dict]] = {}
    for p in store.query("SELECT * FROM ttlb_prediction"):
        out.setdefault(p["cell_id"], []).append(p)
    return out


def _cell_id(r: dict) -> str:
    if r.get("cell_id"):
        return r["cell_id"]
    b = r.get("chain_bytes_requested")
    return str(
        CELLS.id(
            r["profile"],
            r["grp"],
            r["chain"],
            r["data_bytes"],
            stack=r.get("stack") or DEFAULT_STACK,
            options=(f"chain{b}",) if b is not None else (),
        )
    )


def _add_prediction(row: dict, prediction: list[dict], lossless_link: bool) -> None:
    """The prediction's columns (largest signature where it varies) and whether the
    medians fell within the band."""
    keys = (
        "predicted_server_flight_bytes", "predicted_round_trips", "model_ttfb_ms",
        "model_ttlb_ms", "ttlb_model_error_pct", "ttfb_within_band", "ttlb_within_band",
    )  # fmt: skip
    row.update(dict.fromkeys(keys))
    if not prediction:
        return
    p = max(prediction, key=lambda x: x["server_flight_bytes"])
    row["predicted_server_flight_bytes"] = p["server_flight_bytes"]
    row["predicted_round_trips"] = p["round_trips"]
    row["model_ttfb_ms"] = p["ttfb_ms"]
    row["model_ttlb_ms"] = p["ttlb_ms"]
    row["ttlb_model_error_pct"] = (row["ttlb_p50_ms"] / p["ttlb_ms"] - 1) * 100
    if lossless_link:
        for what in ("ttfb", "ttlb"):
            pred = [_on_link(x, what) for x in prediction]
            low, high = min(pred), max(pred)
            m = row[f"{what}_p50_ms"]
            row[f"{what}_within_band"] = low - band_ms(high) <= m <= high + band_ms(high)


def cell_summaries(store) -> list[dict]:
    """One row per (profile, group, chain, chain size, response size, stack): percentiles,
    retransmissions, bytes, and the wire model's prediction beside them."""
    raw = store.query("SELECT * FROM ttlb_raw ORDER BY profile, grp, chain, data_bytes, idx")
    profiles = {
        r["profile"]: json.loads(r["profile_json"])
        for r in store.query("SELECT profile, profile_json FROM ttlb_profiles")
    }
    predictions = _predictions(store)
    groups: dict[tuple, list[dict]] = {}
    for r in raw:
        key = (
            r["profile"], r["shaper"], r["grp"], schema.chain_label(r["chain"], r.get("client_sig")),
            r.get("chain_bytes_requested"), r["data_bytes"], r.get("stack"),
        )  # fmt: skip
        groups.setdefault(key, []).append(r)
    out = []
    for (profile, shaper, grp, chain, chain_bytes, size, stack), rows in groups.items():
        ttfb = [r["ttfb_ns"] / 1e6 for r in rows]
        ttlb = [r["ttlb_ns"] / 1e6 for r in rows]

        def med(k: str, rows=rows) -> int:
            return int(np.median([r[k] for r in rows if r[k] is not None] or [0]))

        row = {
            "cell_id": _cell_id(rows[0]),
            "profile": profile,
            "shaper": shaper,
            "group": grp,
            "chain": chain,
            "chain_bytes_requested": chain_bytes,
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
        clean = bool(prof) and lossless(_profile_from_json(prof))
        _add_prediction(row, predictions.get(row["cell_id"], []), clean)
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


def combination(row: dict) -> tuple[str, str, int | None]:
    """A summary row's (group, chain, --chain-bytes size or None): what the tables and
    figures compare."""
    return row["group"], row["chain"], row.get("chain_bytes_requested")


def combo_label(combo: tuple) -> str:
    group, chain, size = combo
    return f"{group} + {chain}" + (f" {size} B" if size is not None else "")


def combo_order(combo: tuple) -> tuple:
    return combo[0], combo[1], combo[2] or 0


def increases(summary: list[dict], base: tuple[str, str, int | None]) -> list[dict]:
    """Percentage increase of every other (group, chain, chain size) over the baseline
    combination (`baseline`), per profile, response size, stack and percentile, for TTFB
    and TTLB."""
    label = combo_label(base)
    at = {
        (r["profile"], r["data_bytes"], r.get("stack")): r
        for r in summary
        if combination(r) == tuple(base)
    }
    out = []
    for r in summary:
        if combination(r) == tuple(base):
            continue
        b = at.get((r["profile"], r["data_bytes"], r.get("stack")))
        if not b:
            continue
        for p in PERCENTILES:
            out.append(
                {
                    "profile": r["profile"],
                    "group": r["group"],
                    "chain": r["chain"],
                    "chain_bytes_requested": r.get("chain_bytes_requested"),
                    "baseline": label,
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


def baseline(store) -> tuple[str, str, int | None] | None:
    """The classical combination as (group, chain, chain size): the first group and chain
    of the run's first ttlb command line (by default X25519 with an RSA-2048 chain), at
    that command's smallest --chain-bytes size (None: the algorithm's own chain). Later
    commands of the run (a chain-size sweep in a suite, say) do not move it."""
    meta = store.query(
        "SELECT metadata FROM invocations WHERE experiment = 'ttlb' ORDER BY id LIMIT 1"
    )
    if meta:
        m = json.loads(meta[0]["metadata"])
        if m.get("ttlb_groups") and m.get("ttlb_chains"):
            sizes = m.get("ttlb_chain_bytes") or [None]
            chain = schema.chain_label(
                m["ttlb_chains"][0], (m.get("ttlb_client_sigs") or [None])[0]
            )
            return m["ttlb_groups"][0], chain, min(sizes, key=lambda b: b or 0)
    rows = store.query("SELECT params FROM cells WHERE experiment = 'ttlb' ORDER BY rowid")
    if rows:
        p = json.loads(rows[0]["params"])
        return p["group"], p["chain"], p.get("chain_bytes")
    return None
