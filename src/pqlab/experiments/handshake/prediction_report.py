"""The handshake report's prediction beside measurement: per cell the wire model's server
flight bytes, writes, segments, round trips and time next to what was measured, and for a
--chain-bytes sweep the measured round-trip steps next to the predicted cliffs."""

from __future__ import annotations

from pathlib import Path

from pqlab import figures
from pqlab.experiments.handshake import predicted
from pqlab.report.section import template

CELL_SQL = """
SELECT "group", server_sig, ca_sig, any_value(stack) AS stack,
  any_value(chain_sent) AS chain_sent, any_value(chain_bytes_requested) AS chain_bytes_requested,
  any_value(chain_der_bytes) AS chain_der_bytes, bool_or(shaped) AS shaped, count(*) AS n,
  median(server_flight_bytes) AS server_flight_bytes,
  min(predicted_flight_bytes_min) AS predicted_flight_bytes_min,
  max(predicted_flight_bytes_max) AS predicted_flight_bytes_max,
  mode(len(CAST(server_writes AS JSON[]))) AS writes,
  mode(len(CAST(predicted_writes AS JSON[]))) AS predicted_writes,
  mode(server_flight_segments) AS segments,
  min(predicted_segments_min) AS predicted_segments_min,
  max(predicted_segments_max) AS predicted_segments_max,
  avg(CASE WHEN server_flight_segments BETWEEN predicted_segments_min
      AND predicted_segments_max THEN 1 ELSE 0 END) AS segments_match,
  mode(round_trips) AS round_trips,
  min(predicted_round_trips_min) AS predicted_round_trips_min,
  max(predicted_round_trips_max) AS predicted_round_trips_max,
  avg(CASE WHEN round_trips BETWEEN predicted_round_trips_min
      AND predicted_round_trips_max THEN 1 ELSE 0 END) AS round_trips_match,
  median(handshake_ns) / 1e6 AS handshake_ms,
  median((predicted_handshake_ns_min + predicted_handshake_ns_max) / 2) / 1e6
    AS predicted_handshake_ms,
  cell_id
FROM handshake_raw WHERE predicted_segments_max IS NOT NULL
GROUP BY cell_id, "group", server_sig, ca_sig
ORDER BY "group", server_sig, ca_sig, chain_der_bytes, cell_id
"""


def cell_rows(store) -> list[dict]:
    """One row per cell: measured and predicted side by side, with the time band and
    whether the time fell within it."""
    if "predicted_segments_max" not in store.columns("handshake_raw"):
        return []
    out = []
    for r in store.query(CELL_SQL):
        band = predicted.band_ms(r["predicted_handshake_ms"], bool(r["shaped"]))
        r["time_band_ms"] = band
        r["time_within_band"] = abs(r["handshake_ms"] - r["predicted_handshake_ms"]) <= band
        out.append(r)
    return out


def sweep_rows(store, cells: list[dict]) -> list[dict]:
    """For every configuration measured at several --chain-bytes sizes: each measured step
    in round trips (between two neighbouring sizes) beside the predicted cliff for it, and
    whether the cliff lies within one segment (MSS) of the step."""
    if not store.has_table("handshake_cliffs"):
        return []
    cliffs = {}
    for c in store.query("SELECT * FROM handshake_cliffs ORDER BY round_trips"):
        cliffs.setdefault(c["cell_id"], []).append(c)
    groups: dict[tuple, list[dict]] = {}
    for r in cells:
        if r["chain_bytes_requested"] is not None:
            key = (r["group"], r["server_sig"], r["ca_sig"], r["stack"], r["chain_sent"])
            groups.setdefault(key, []).append(r)
    out = []
    for key, rows in groups.items():
        rows.sort(key=lambda r: r["chain_der_bytes"])
        for below, above in zip(rows, rows[1:], strict=False):
            if above["round_trips"] <= below["round_trips"]:
                continue
            cell_cliffs = cliffs.get(above["cell_id"], [])
            cliff = next((c for c in cell_cliffs if c["round_trips"] == above["round_trips"]), None)
            mss = cliff["mss"] if cliff else None
            at = cliff["chain_der_bytes"] if cliff else None
            out.append(
                {
                    "group": key[0],
                    "server_sig": key[1],
                    "ca_sig": key[2],
                    "stack": key[3],
                    "chain_sent": key[4],
                    "round_trips_below": below["round_trips"],
                    "round_trips_above": above["round_trips"],
                    "measured_step_after_bytes": below["chain_der_bytes"],
                    "measured_step_at_bytes": above["chain_der_bytes"],
                    "predicted_cliff_bytes": at,
                    "mss": mss,
                    "within_one_segment": at is not None
                    and below["chain_der_bytes"] - mss < at <= above["chain_der_bytes"] + mss,
                }
            )
    return out


def extend_section(store, section) -> None:
    cells = cell_rows(store)
    if not cells:
        return
    section.text(
        template(
            "handshake_prediction",
            band_ms=predicted.TIME_BAND_MS,
            band_pct=f"{predicted.TIME_BAND_SHARE:.0%}",
            bare_ms=predicted.BARE_BAND_MS,
            bare_pct=f"{predicted.BARE_BAND_SHARE:.0%}",
        )
    )
    section.table(
        store.export_rows("handshake_prediction", cells),
        "The wire model's prediction beside the measurement, per cell: server flight bytes, "
        "writes, segments and round trips (match: the share of handshakes equal to the "
        "prediction), median handshake time and the band it must fall within",
    )
    steps = sweep_rows(store, cells)
    if steps:
        section.table(
            store.export_rows("handshake_cliff_steps", steps),
            "--chain-bytes sweep: each measured step in round trips between two neighbouring "
            "chain sizes, beside the predicted cliff (within one segment: the prediction "
            "holds)",
        )
    png = _sweep_figure(store, cells)
    if png is not None:
        section.figure(
            png,
            "--chain-bytes sweep: measured (dots) and predicted (line) handshake time against "
            "chain size, predicted cliffs dashed",
        )


def _sweep_figure(store, cells: list[dict]) -> Path | None:
    swept = [r for r in cells if r["chain_bytes_requested"] is not None]
    if len({r["chain_der_bytes"] for r in swept}) < 3:
        return None
    plt = figures.plt
    fig, ax = plt.subplots(figsize=(8, 4.5))
    keys = dict.fromkeys((r["group"], r["server_sig"], r["ca_sig"]) for r in swept)
    cliffs = store.query(
        "SELECT DISTINCT chain_der_bytes FROM handshake_cliffs WHERE list_contains(?, cell_id)",
        [[r["cell_id"] for r in swept]],
    )
    for key in keys:
        rows = sorted(
            (r for r in swept if (r["group"], r["server_sig"], r["ca_sig"]) == key),
            key=lambda r: r["chain_der_bytes"],
        )
        xs = [r["chain_der_bytes"] for r in rows]
        (line,) = ax.plot(xs, [r["predicted_handshake_ms"] for r in rows], label=" / ".join(key))
        ax.plot(xs, [r["handshake_ms"] for r in rows], "o", color=line.get_color(), ms=3)
    top = max(r["chain_der_bytes"] for r in swept)
    for c in cliffs:
        if c["chain_der_bytes"] <= top:
            ax.axvline(c["chain_der_bytes"], color="#888", linestyle="--", linewidth=0.8)
    ax.set_xlabel("chain size: DER bytes of the certificates the server sends")
    ax.set_ylabel("handshake time, median (ms)")
    ax.legend(fontsize=6)
    return figures.save(fig, store, "handshake_chain_bytes_sweep")
