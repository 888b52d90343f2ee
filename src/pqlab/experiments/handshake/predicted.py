"""The wire model's prediction beside every measured handshake (`pqlab.tls.predict`, the
model of `pqlab plan`): the server flight's bytes, writes, TCP segments and rounds, the
handshake's round trips and its time, and a per-cell verdict naming the mechanism when
they disagree.

Sizes come from the catalogue, the cell's certificates and the stack's ClientHello, never
from the measurement. What the model cannot know comes from the handshake itself and is
named: the CPU time each side spent before writing (from the captures and the server's
io events) and, on the bare link and across real hosts, the network's round trip (from
the TCP handshake in the captures); on a shaped link the profile's delays and rate.
"""

from __future__ import annotations

import functools
import json
import statistics
from dataclasses import dataclass

from pqlab.experiments.handshake import schema
from pqlab.stats import Cause, Warning_
from pqlab.tls import predict, wire

# Times: a cell's median handshake time agrees with the median prediction within this
# band: on a shaped link, where the emulator's delays dominate, the larger of TIME_BAND_MS
# and TIME_BAND_SHARE of the prediction; on the bare link (round trips of tens of
# microseconds, where wake-ups and the kernel's own latency count) the larger of
# BARE_BAND_MS and BARE_BAND_SHARE.
TIME_BAND_MS = 1.0
TIME_BAND_SHARE = 0.05
BARE_BAND_MS = 0.25
BARE_BAND_SHARE = 0.25

COLUMNS = (
    "predicted_flight_bytes_min",
    "predicted_flight_bytes_max",
    "predicted_writes",
    "predicted_segments_min",
    "predicted_segments_max",
    "predicted_round_trips_min",
    "predicted_round_trips_max",
    "predicted_handshake_ns_min",
    "predicted_handshake_ns_max",
)


@dataclass(frozen=True)
class CellModel:
    """What the model knows of a cell before it runs: its sizes and its link (None: the
    bare link or a real network, whose round trip each handshake measures)."""

    handshake: predict.Handshake
    link: wire.Link | None
    mss: int
    initcwnd: int

    @functools.cached_property
    def extremes(self) -> tuple[predict.Handshake, predict.Handshake]:
        """The smallest and largest handshake of the cell (`predict.Handshake.extremes`)."""
        return self.handshake.extremes()

    def for_cliffs(self) -> CellModel:
        """The model with its chain's bytes left out (its certificate count kept): all that
        `cliff_rows` depends on, so cells that differ only in their chain share it."""
        blank = (0,) * len(self.handshake.chain_der)
        return CellModel(self.handshake.with_chain(blank), self.link, self.mss, self.initcwnd)


def cell_model(
    stack, group, server_sig, chain, server_ip: str, profile, initcwnd: int, client=None
):
    """The cell's sizes: its chain as built, the stack's ClientHello to `server_ip`; in
    mutual TLS (`client`: the client's signer and its chain) the CertificateRequest and the
    client's flight too."""
    auth = None
    if client is not None:
        signer, client_chain = client
        auth = predict.ClientAuth(
            signer, tuple(client_chain.sent_der), client_chain.root_name_der_bytes
        )
    hs = predict.of_chain(stack, group, server_sig, chain, server_ip, client_auth=auth)
    link = wire.Link.from_profile(profile) if profile is not None else None
    mss = link.mss if link is not None else wire.DEFAULT_MSS
    return CellModel(hs, link, mss, initcwnd)


def io_writes(srec: dict, shift_ns: float = 0.0) -> list[tuple[int, int]]:
    """The server's socket writes of a connection: (start time, stream offset at the end),
    from its io events; `shift_ns` moves the times onto another clock."""
    return [
        (int(e["t_start"] - shift_ns), int(e["offset_end"]))
        for e in srec.get("events") or []
        if e.get("ev") == "io" and e.get("dir") == "sent"
    ]


def _timing(points: dict, writes: list[tuple[int, int]], flight_end: int) -> predict.Timing:
    """The CPU time each side spent before it wrote, from the captures' points and the
    server's writes (seconds)."""
    d = points["D"]
    server = tuple(max(0, t - d) / 1e9 for t, end in writes if end <= flight_end)
    return predict.Timing(
        client_hello=max(0, points["4"] - points["2"]) / 1e9,
        server_writes=server,
        client_flight=max(0, points["9"] - points["8"]) / 1e9,
    )


def measured_link(model: CellModel, points: dict) -> wire.Link:
    """The link of one handshake: the profile's, else the round trip its TCP handshake
    took on the wire (the client's SYN to SYN-ACK less the server's turnaround)."""
    if model.link is not None:
        return model.link
    rtt = (points["2"] - points["1"]) - (points["B"] - points["A"])
    return wire.Link.symmetric(max(rtt, 0) / 1e9, None, model.mss, model.initcwnd)


def columns(model: CellModel, points: dict, writes, flight_end: int) -> dict:
    """The predicted columns of one handshake (the smallest and largest sizes)."""
    link = measured_link(model, points)
    timing = _timing(points, writes, flight_end)
    small, large = model.extremes
    low = predict.predict(small, link, timing=timing)
    # Most signatures have one size: then one replay serves both ends.
    outs = [low, low if large == small else predict.predict(large, link, timing=timing)]
    w = [o.wire for o in outs]
    return {
        "predicted_flight_bytes_min": outs[0].flight_bytes,
        "predicted_flight_bytes_max": outs[1].flight_bytes,
        "predicted_writes": schema.json_ints(outs[1].writes),
        "predicted_segments_min": min(len(x.flight) for x in w),
        "predicted_segments_max": max(len(x.flight) for x in w),
        "predicted_round_trips_min": min(x.round_trips for x in w),
        "predicted_round_trips_max": max(x.round_trips for x in w),
        "predicted_handshake_ns_min": int(min(x.ttfb_s for x in w) * 1e9),
        "predicted_handshake_ns_max": int(max(x.ttfb_s for x in w) * 1e9),
    }


def _within(value, low, high) -> bool:
    return value is not None and low is not None and low <= value <= high


def band_ms(predicted_ms: float, shaped: bool) -> float:
    if shaped:
        return max(TIME_BAND_MS, TIME_BAND_SHARE * predicted_ms)
    return max(BARE_BAND_MS, BARE_BAND_SHARE * predicted_ms)


# (mechanism, what is compared): checked in this order, so the first disagreement named is
# the one the others follow from.
MECHANISMS = (
    ("message sizes (catalogue and certificates)", "server flight bytes"),
    ("the stack's write model", "writes"),
    ("TCP segmentation (writes into segments, coalescing behind a full window)", "segments"),
    ("the congestion window (initcwnd, slow start)", "round trips"),
)


def _misses(rows: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {m: [] for m, _ in MECHANISMS}
    for r in rows:
        checks = (
            _within(
                r["server_flight_bytes"],
                r["predicted_flight_bytes_min"],
                r["predicted_flight_bytes_max"],
            ),
            len(json.loads(r["server_writes"] or "[]"))
            == len(json.loads(r["predicted_writes"] or "[]")),
            _within(
                r["server_flight_segments"],
                r["predicted_segments_min"],
                r["predicted_segments_max"],
            ),
            _within(
                r["round_trips"], r["predicted_round_trips_min"], r["predicted_round_trips_max"]
            ),
        )
        for (mechanism, _), ok in zip(MECHANISMS, checks, strict=True):
            if not ok:
                out[mechanism].append(r)
                break
    return out


def _burst_text(missed: list[dict], initcwnd: int) -> str | None:
    """When the flight never filled the window although the model says it waited on it:
    the kernel sent it in bursts (a link faster than the CPU), not the window."""
    most = max((r.get("flight_max_in_flight") or 0) for r in missed)
    if (
        most
        and most < initcwnd
        and all(r["round_trips"] < r["predicted_round_trips_min"] for r in missed)
    ):
        return (
            f"the kernel's own queueing: the flight left in bursts of at most {most} segments, "
            f"each after the ACKs of the last (a link faster than the CPU), so the window of "
            f"{initcwnd} never filled; the model sends a whole window at once"
        )
    return None


def warnings(
    cid: str, rows: list[dict], shaped: bool, initcwnd: int = wire.LINUX_INITCWND
) -> list[Warning_]:
    """Where the prediction missed in this cell: every mechanism that disagreed for some
    handshakes (the first of MECHANISMS to disagree, per handshake), and a median time
    outside the band."""
    out = []
    for (mechanism, what), missed in zip(MECHANISMS, _misses(rows).values(), strict=True):
        if missed:
            r = missed[0]
            key = {"server flight bytes": "server_flight_bytes", "writes": "server_writes"}
            key |= {"segments": "server_flight_segments", "round trips": "round_trips"}
            col = key[what]
            pred = {
                "server_flight_bytes": "predicted_flight_bytes",
                "server_flight_segments": "predicted_segments",
                "round_trips": "predicted_round_trips",
            }.get(col)
            expected = (
                r["predicted_writes"] if pred is None else _span(r[f"{pred}_min"], r[f"{pred}_max"])
            )
            if what == "round trips":
                mechanism = _burst_text(missed, initcwnd) or mechanism
            out.append(
                Warning_(
                    Cause.OFF_MODEL,
                    cid,
                    f"{len(missed)} of {len(rows)} handshakes: {what} {r[col]}, predicted "
                    f"{expected}; the mechanism that disagreed: {mechanism}",
                )
            )
    measured = statistics.median(r["handshake_ns"] for r in rows) / 1e6
    predicted = (
        statistics.median(
            (r["predicted_handshake_ns_min"] + r["predicted_handshake_ns_max"]) / 2 for r in rows
        )
        / 1e6
    )
    band = band_ms(predicted, shaped)
    if abs(measured - predicted) > band:
        out.append(
            Warning_(
                Cause.OFF_MODEL,
                cid,
                f"median handshake {measured:.3f} ms, predicted {predicted:.3f} ms: outside the "
                f"band of {band:.3f} ms; the mechanism that disagreed: the link's timing "
                "(delay, rate) or the CPU between the measured writes",
            )
        )
    return out


def _span(low, high) -> str:
    return str(low) if low == high else f"{low}-{high}"


def cliff_rows(cid: str, model: CellModel) -> list[dict]:
    """The cell's cliffs (largest signature; no CPU time: cliffs depend on the flight and
    the window, not on the path's delay)."""
    hs = model.handshake
    link = wire.Link.symmetric(0.1, None, model.mss, model.initcwnd)
    return [
        {
            "cell_id": cid,
            "round_trips": rt,
            "chain_der_bytes": at,
            "mss": model.mss,
            "initcwnd": model.initcwnd,
        }
        for rt, at in predict.cliffs(hs, link)
    ]
