"""Chain-size sweeps (`pqlab ttlb --chain-bytes 2000..40000`): TTFB and TTLB against the
chain's DER bytes per profile, group, chain algorithm and response size. Where the measured
median steps between two neighbouring sizes (by more than the serialisation of the added
bytes explains) is set beside where the wire model's prediction steps and where the
handshake's round-trip cliffs lie (`pqlab.tls.predict.cliffs`, stored per cell)."""

from __future__ import annotations

import json
from pathlib import Path

from pqlab import figures
from pqlab.experiments.ttlb.across import is_clean
from pqlab.experiments.ttlb.analyse import TIME_BAND_MS
from pqlab.tls import wire
from pqlab.tls.stacks import DEFAULT_STACK

MIN_POINTS = 3  # chain sizes a series needs to be a sweep
# A step is a change between neighbouring sizes that differs from the serialisation of the
# added bytes by more than a quarter of the RTT (a window stall costs up to one RTT) and
# more than the prediction band (3 ms).
STEP_SHARE_OF_RTT = 0.25
METRICS = ("ttfb", "ttlb")


def serialisation_ms(added_bytes: int, rate_bps: float | None, mss: int) -> float:
    """The time `added_bytes` of TLS records take on a link of `rate_bps` in full segments:
    each MSS of payload carries IPv4, TCP with timestamps and Ethernet headers (netem's
    arithmetic); 0 on an unlimited link."""
    if not rate_bps:
        return 0.0
    per_byte = (mss + wire.TCP_IP_HEADERS + wire.ETH) / mss
    return added_bytes * per_byte * 8 / rate_bps * 1e3


def threshold_ms(rtt_ms: float) -> float:
    return max(TIME_BAND_MS, STEP_SHARE_OF_RTT * rtt_ms)


def step(rise_ms: float, serial_ms: float, limit_ms: float) -> str | None:
    """'up' or 'down' when a change between two sizes is not the serialisation of the added
    bytes (None: it is, within the limit)."""
    excess = rise_ms - serial_ms
    if excess > limit_ms:
        return "up"
    if excess < -limit_ms:
        return "down"
    return None


def _assign_cliffs(pairs: list[dict], cliffs: list[tuple[int, int]], mss: int) -> None:
    """Give each cliff inside the swept range to the step within one segment of it (a pair
    whose measurement steps up first, then one whose model does), else to the pair that
    holds it."""
    for rt, at in cliffs:
        if not pairs[0]["after"] < at <= pairs[-1]["at"]:
            continue
        near = [p for p in pairs if p["after"] - mss < at <= p["at"] + mss and p["cliff"] is None]
        holder = [p for p in near if p["after"] < at <= p["at"]]
        for pick in (
            [p for p in near if p["measured_step"] == "up"],
            [p for p in near if p["model_step"] == "up"],
            holder,
        ):
            if pick:
                best = min(pick, key=lambda p: abs((p["after"] + p["at"]) / 2 - at))
                best["cliff"] = (rt, at)
                break


def step_rows(points: list[tuple], cliffs: list[tuple[int, int]], link: dict) -> list[dict]:
    """One metric of one series: `points` are (chain bytes, measured median ms, predicted
    ms or None) sorted by size; `link` has rate_bps, mss and rtt_ms. A row for every pair
    of neighbouring sizes where the measurement or the model steps or a cliff lies, with
    whether they agree and whether a measured step up lies within one segment of a cliff."""
    limit = threshold_ms(link["rtt_ms"])
    pairs = []
    for (a, m_a, p_a), (b, m_b, p_b) in zip(points, points[1:], strict=False):
        serial = serialisation_ms(b - a, link["rate_bps"], link["mss"])
        model_rise = p_b - p_a if p_a is not None and p_b is not None else None
        pairs.append(
            {
                "after": a,
                "at": b,
                "measured_jump_ms": m_b - m_a,
                "model_jump_ms": model_rise,
                "serialisation_ms": serial,
                "threshold_ms": limit,
                "measured_step": step(m_b - m_a, serial, limit),
                "model_step": step(model_rise, serial, limit) if model_rise is not None else None,
                "cliff": None,
            }
        )
    if not pairs:
        return []
    _assign_cliffs(pairs, cliffs, link["mss"])
    out = []
    for p in pairs:
        if not (p["measured_step"] or p["model_step"] or p["cliff"]):
            continue
        cliff = p.pop("cliff")
        up = p["measured_step"] == "up"
        within = None
        if up:
            within = cliff is not None
        elif cliff is not None and p["model_step"] == "up":
            within = False
        out.append(
            {
                "after_chain_bytes": p.pop("after"),
                "at_chain_bytes": p.pop("at"),
                **p,
                "predicted_cliff_bytes": cliff[1] if cliff else None,
                "cliff_round_trips": cliff[0] if cliff else None,
                "within_one_segment": within,
                "agree": p["measured_step"] == p["model_step"],
            }
        )
    return out


def _links(store) -> dict[str, dict]:
    """Per emulated profile: rate (server to client), MSS, RTT and whether it is clean."""
    out = {}
    for r in store.query("SELECT profile, profile_json FROM ttlb_profiles"):
        desc = json.loads(r["profile_json"]) if r["profile_json"] else None
        if desc:
            out[r["profile"]] = {
                "rate_bps": desc["s2c"]["rate_bps"],
                "mss": desc["mtu"] - wire.TCP_IP_HEADERS,
                "rtt_ms": desc["rtt_ms"],
                "clean": is_clean(desc),
            }
    return out


def _cliffs(store) -> dict[str, list[tuple[int, int]]]:
    if not store.has_table("ttlb_cliffs"):
        return {}
    out: dict[str, list[tuple[int, int]]] = {}
    for c in store.query("SELECT * FROM ttlb_cliffs ORDER BY round_trips"):
        out.setdefault(c["cell_id"], []).append((c["round_trips"], c["chain_der_bytes"]))
    return out


def series(summary: list[dict]) -> dict[tuple, list[dict]]:
    """The sweeps of a run: (profile, group, chain, stack, data bytes) -> its cells sorted
    by chain size, where --chain-bytes gave at least MIN_POINTS sizes."""
    out: dict[tuple, list[dict]] = {}
    for r in summary:
        if r["chain_bytes_requested"] is not None:
            key = (r["profile"], r["group"], r["chain"], r["stack"], r["data_bytes"])
            out.setdefault(key, []).append(r)
    return {
        k: sorted(v, key=lambda r: r["chain_der_bytes"])
        for k, v in out.items()
        if len({r["chain_der_bytes"] for r in v}) >= MIN_POINTS
    }


def key(row: dict) -> tuple:
    """A summary or increase row's (profile, group, chain, stack): what a sweep varies the
    chain size of."""
    return row["profile"], row["group"], row["chain"], row.get("stack")


def swept(summary: list[dict]) -> set[tuple]:
    """The (profile, group, chain, stack) whose chain size a sweep varied: the sweep's
    figure shows them, so the per-combination figures and summary lines leave them out."""
    return {k[:4] for k in series(summary)}


def sweep_rows(store, summary: list[dict]) -> list[dict]:
    """tables/ttlb_chain_steps.csv: every sweep's steps on links without loss or jitter
    (elsewhere the medians move with the losses, not the window)."""
    links = _links(store)
    cliffs = _cliffs(store)
    out = []
    for (profile, group, chain, stack, size), cells in series(summary).items():
        link = links.get(profile)
        if link is None or not link["clean"]:
            continue
        found = sorted({c for r in cells for c in cliffs.get(r["cell_id"], [])})
        for metric in METRICS if size else ("ttfb",):
            points = [
                (r["chain_der_bytes"], r[f"{metric}_p50_ms"], r[f"model_{metric}_ms"])
                for r in cells
            ]
            for row in step_rows(points, found, link):
                out.append(
                    {
                        "profile": profile,
                        "group": group,
                        "chain": chain,
                        "stack": stack,
                        "data_bytes": size,
                        "metric": metric,
                        **row,
                    }
                )
    return out


def extend_section(store, section, summary: list[dict]) -> None:
    """The sweep's table and one figure per swept (profile, group, chain, stack)."""
    sweeps = series(summary)
    if not sweeps:
        return
    steps = sweep_rows(store, summary)
    if steps:
        section.table(
            store.export_rows("ttlb_chain_steps", steps),
            "--chain-bytes sweep: where the median TTFB or TTLB steps between two "
            "neighbouring chain sizes by more than the serialisation of the added bytes "
            "(measured_step) beside where the wire model's prediction steps (model_step) and "
            "the handshake's predicted round-trip cliff (within_one_segment: a measured step "
            "up within one MSS of it)",
        )
    cliffs = _cliffs(store)
    keys = dict.fromkeys(k[:4] for k in sweeps)
    for key in keys:
        mine = {k[4]: v for k, v in sweeps.items() if k[:4] == key}
        png = _figure(store, key, mine, cliffs, [s for s in steps if _same(s, key)])
        profile, group, chain, _ = key
        section.figure(
            png,
            f"TTFB and TTLB against chain size ({profile}, {group}, {chain} chains padded by "
            "--chain-bytes): measured medians (dots) and 90th percentiles (x), the wire "
            "model's prediction (line), its round-trip cliffs (dashed) and the measured "
            "steps (shaded)",
        )


def _same(step_row: dict, key: tuple) -> bool:
    return (step_row["profile"], step_row["group"], step_row["chain"], step_row["stack"]) == key


def _figure(store, key: tuple, by_size: dict[int, list[dict]], cliffs, steps) -> Path:
    plt = figures.plt
    sizes = sorted(by_size)
    panels = [("ttfb", [sizes[0]])] + ([("ttlb", [s for s in sizes if s])] if sizes[-1] else [])
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4), squeeze=False)
    cells = [r for rows in by_size.values() for r in rows]
    found = sorted({c for r in cells for c in cliffs.get(r["cell_id"], [])})
    top = max(r["chain_der_bytes"] for r in cells)
    for ax, (metric, shown) in zip(axes[0], panels, strict=True):
        for size in shown:
            _draw_series(
                ax, metric, by_size[size], "" if metric == "ttfb" else f"{size / 1024:g} KiB"
            )
        for rt, at in found:
            if at <= top:
                ax.axvline(at, color="#888", ls="--", lw=0.8)
                ax.annotate(
                    f"{rt} RTT", (at, 1), xycoords=("data", "axes fraction"), fontsize=6,
                    rotation=90, va="top", ha="right",
                )  # fmt: skip
        for s in steps:
            if s["metric"] == metric and s["measured_step"] and s["data_bytes"] in shown:
                ax.axvspan(s["after_chain_bytes"], s["at_chain_bytes"], color="tab:red", alpha=0.12)
        ax.set_xlabel("chain size: DER bytes of the certificates the server sends")
        ax.set_ylabel(f"{metric.upper()} (ms)")
        if metric == "ttlb":
            ax.legend(fontsize=6, title="response", title_fontsize=6)
    profile, group, chain, stack = key
    suffix = f" ({stack})" if stack != DEFAULT_STACK else ""
    fig.suptitle(f"{profile}: {group} + {chain}{suffix}", fontsize=9)
    name = figures.safe_name(f"{profile}_{group}_{chain}" + (f"_{stack}" if suffix else ""))
    return figures.save(fig, store, f"ttlb_chain_sweep_{name}")


def _draw_series(ax, metric: str, cells: list[dict], label: str) -> None:
    """One response size: the model's line (where every cell has one), the measured
    medians as dots and 90th percentiles as crosses in the same colour."""
    xs = [r["chain_der_bytes"] for r in cells]
    model = [r[f"model_{metric}_ms"] for r in cells]
    if all(v is not None for v in model):
        (line,) = ax.plot(xs, model, lw=1, label=label or None)
        color = line.get_color()
    else:
        color = None
    (dots,) = ax.plot(xs, [r[f"{metric}_p50_ms"] for r in cells], "o", ms=3, color=color)
    p90 = [r[f"{metric}_p90_ms"] for r in cells]
    ax.plot(xs, p90, "x", ms=3, color=dots.get_color(), alpha=0.5)
