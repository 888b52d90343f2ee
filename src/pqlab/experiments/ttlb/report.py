"""The ttlb experiment's tables (ttlb.csv, ttlb_increase.csv, and from `across` and
`sweep` the pooled figure 1, the degradation against the clean link and the chain-size
steps), figures (the document's figures 1-6, TTFB beside TTLB in the CDFs) and report
section, from the database alone."""

from __future__ import annotations

import json

import numpy as np

from pqlab import figures
from pqlab.experiments.ttlb import across, document, schema, sweep
from pqlab.experiments.ttlb import summary as summary_part
from pqlab.experiments.ttlb.analyse import (
    PERCENTILES,
    baseline,
    cell_summaries,
    combination,
    combo_label,
    combo_order,
    increases,
)
from pqlab.report.section import Section, template
from pqlab.tls.stacks import DEFAULT_STACK, STACK_SQL


def export(store):

    if not store.has_table("ttlb_raw"):
        return None
    summary = cell_summaries(store)
    if not summary:
        return None
    section = Section(
        "Time to first byte and time to last byte over emulated links",
        template("ttlb_intro"),
    )
    table_cols = [
        "profile",
        "shaper",
        "group",
        "chain",
        "chain_bytes_requested",
        "data_bytes",
        "n",
        "ttfb_p50_ms",
        "ttfb_p75_ms",
        "ttfb_p90_ms",
        "ttlb_p50_ms",
        "ttlb_p75_ms",
        "ttlb_p90_ms",
        "retransmits_mean",
        "client_hello_bytes",
        "server_flight_bytes",
        "chain_der_bytes",
        "predicted_server_flight_bytes",
        "predicted_round_trips",
        "model_ttfb_ms",
        "model_ttlb_ms",
        "ttlb_model_error_pct",
        "ttfb_within_band",
        "ttlb_within_band",
        "stack",
    ]
    csv = store.export_rows("ttlb", [{k: r[k] for k in table_cols} for r in summary])
    section.table(
        csv,
        "TTFB and TTLB percentiles per profile, group, chain and response size, beside the "
        "wire model's prediction from the sizes alone (model_*; within_band: the median "
        "within the stated band, on links without loss or jitter)",
    )
    base = baseline(store)
    inc = increases(summary, base) if base else []
    if inc:
        csv = store.export_rows("ttlb_increase", inc)
        section.table(
            csv,
            f"Increase over the classical combination ({combo_label(base)}) "
            "per size and percentile",
            max_rows=90,
        )
    _figures(store, summary, inc, base, section)
    if base is not None:
        across.extend_section(store, section, summary, base)
    sweep.extend_section(store, section, summary)
    return section


def _figures(store, summary, inc, base, section) -> None:
    """Per profile and combination (one chain size each; a --chain-bytes sweep's
    combinations have the sweep's figure instead): the increase figures and the CDFs."""
    swept = sweep.swept(summary)
    summary = [r for r in summary if sweep.key(r) not in swept]
    inc = [r for r in inc if sweep.key(r) not in swept]
    # Each stack's figures from its own connections: a run with several names the stack.
    run_stacks = sorted({_stack(r) for r in summary})
    for st in run_stacks:
        on = st if len(run_stacks) > 1 else None
        mine_all = [r for r in summary if _stack(r) == st]
        profiles = sorted({r["profile"] for r in mine_all})
        combos = sorted({combination(r) for r in mine_all}, key=combo_order)
        for profile in profiles:
            mine = [r for r in inc if r["profile"] == profile and _stack(r) == st]
            pq = sorted({combination(r) for r in mine}, key=combo_order)
            if not pq:
                continue
            _ttfb_increase_figure(store, section, profile, mine, pq, base, on)
            for combo in pq:
                _ttlb_increase_figure(store, section, profile, mine, combo, base, on)
        _cdf_figures(store, section, mine_all, combos, on)


def _stack(row: dict) -> str:
    return row.get("stack") or DEFAULT_STACK


def _on(stack: str | None) -> str:
    """A figure title's " on STACK" when the run has several stacks."""
    return f" on {stack}" if stack else ""


def _file_part(combo: tuple, stack: str | None = None) -> str:
    group, chain, size = combo
    return (
        f"{group}_{chain}"
        + (f"_{size}" if size is not None else "")
        + (f"_{stack}" if stack else "")
    )


def _ttfb_increase_figure(store, section, profile, inc, pq, base, stack=None) -> None:
    """Handshake-time increase at p50/p75/p90 on one profile, one bar per combination, at
    the profile's smallest response size (the document's figure 1 pools profiles:
    `across`)."""
    plt = figures.plt
    smallest = min(r["data_bytes"] for r in inc)
    at = {
        (combination(r), r["percentile"]): r["ttfb_increase_pct"]
        for r in inc
        if r["data_bytes"] == smallest
    }
    fig, ax = plt.subplots(figsize=(6, 3.5))
    width = 0.8 / len(pq)
    for i, combo in enumerate(pq):
        vals = [at.get((combo, p), np.nan) for p in PERCENTILES]
        ax.bar(np.arange(3) + i * width, vals, width, label=combo_label(combo))
    ax.set_xticks(np.arange(3) + width * (len(pq) - 1) / 2, [f"p{p}" for p in PERCENTILES])
    ax.set_ylabel("handshake time (TTFB) increase (%)")
    ax.set_title(f"{profile}{_on(stack)}: TTFB increase over {combo_label(base)}", fontsize=9)
    ax.legend(fontsize=7)
    name = figures.safe_name(profile + (f"_{stack}" if stack else ""))
    png = figures.save(fig, store, f"ttlb_ttfb_increase_{name}")
    section.figure(
        png,
        f"Handshake time increase per percentile ({profile}{_on(stack)}); the document's "
        "figure 1 pools "
        "its profiles (below)",
    )


def _ttlb_increase_figure(store, section, profile, inc, combo, base, stack=None) -> None:
    """Document figures 2-5: TTLB increase against the response size, one line per
    percentile, for one combination on one profile."""
    plt = figures.plt
    colors = dict(zip(PERCENTILES, ("tab:blue", "tab:orange", "tab:green"), strict=True))
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for p in PERCENTILES:
        pts = sorted(
            (r["data_bytes"] / 1024, r["ttlb_increase_pct"])
            for r in inc
            if r["percentile"] == p and combination(r) == combo
        )
        ax.plot(
            [x for x, _ in pts], [y for _, y in pts], marker="o", color=colors[p], label=f"p{p}"
        )
    ax.axhline(0, color="grey", lw=0.6)
    ax.set_xlabel("data sent by the server (KiB)")
    ax.set_ylabel("TTLB increase (%)")
    title = f"{profile}{_on(stack)}: {combo_label(combo)} vs {combo_label(base)}"
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    name = figures.safe_name(f"{profile}_{_file_part(combo, stack)}")
    png = figures.save(fig, store, f"ttlb_increase_{name}")
    section.figure(
        png,
        f"TTLB increase by response size ({profile}{_on(stack)}, {combo_label(combo)}); cf. the "
        "document's figures 2-5",
    )


def cdf_groups(profiles: dict[str, dict]) -> list[tuple[float, list[str]]]:
    """The CDF figures' lines: the profiles (name -> `LinkProfile.describe()`) grouped by
    RTT, one figure each, as document 003's figure 6 draws the paths of one RTT (35 ms)."""
    rtts = sorted({round(d["rtt_ms"], 6) for d in profiles.values()})
    return [
        (rtt, sorted(n for n, d in profiles.items() if round(d["rtt_ms"], 6) == rtt))
        for rtt in rtts
    ]


def _cdf_figures(store, section, summary, combos, stack=None) -> None:
    """Document figure 6: CDF of TTLB at the largest size, one line per profile, one
    figure per combination and RTT (the document's paths are all at 35 ms); the CDF of the
    same connections' TTFB beside it (the document saw the same spread in handshake
    times). A figure whose lines are figure 6's paths at 200 KiB says so."""
    raw = store.query(
        f'SELECT profile, grp AS "group", {schema.chain_sql(store)} AS chain, '
        f"chain_bytes_requested, data_bytes, ttfb_ns, ttlb_ns, {STACK_SQL} AS stack "
        "FROM ttlb_raw"
    )
    shown = {(r["profile"], combination(r), _stack(r)) for r in summary}
    raw = [r for r in raw if (r["profile"], combination(r), r["stack"]) in shown]
    if not raw:
        return
    described = {
        r["profile"]: json.loads(r["profile_json"])
        for r in store.query("SELECT DISTINCT profile, profile_json FROM ttlb_profiles")
    }
    largest = max(r["data_bytes"] for r in raw)
    for combo in combos:
        mine = [r for r in raw if combination(r) == combo and r["data_bytes"] == largest]
        drawn = {r["profile"]: described.get(r["profile"]) for r in mine}
        groups = cdf_groups({n: d for n, d in drawn.items() if d is not None})
        for rtt, names in groups:
            lines = {n: drawn[n] for n in names}
            _cdf_figure(store, section, mine, combo, largest, (rtt, lines, len(groups) > 1), stack)


def _cdf_figure(store, section, raw, combo, largest, group, stack) -> None:
    """One CDF figure: TTFB and TTLB of `raw` at `largest`, one line per profile of
    `group` (RTT, profile name -> description, whether the combination has figures of
    other RTTs)."""
    plt = figures.plt
    rtt, lines, several = group
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.5))
    for ax, metric in zip(axes, ("ttfb", "ttlb"), strict=True):
        for profile in lines:
            v = np.sort([r[f"{metric}_ns"] / 1e6 for r in raw if r["profile"] == profile])
            if len(v):
                ax.step(v, np.arange(1, len(v) + 1) / len(v), where="post", label=profile)
        _log_if_spread(ax)
        ax.set_xlabel(f"{metric.upper()} (ms), {largest / 1024:g} KiB from the server")
        ax.set_ylabel("CDF")
        ax.legend(fontsize=7)
    fig.suptitle(f"{combo_label(combo)}{_on(stack)}, RTT {rtt:g} ms", fontsize=9)
    part = _file_part(combo, stack) + (f"_rtt{rtt:g}ms" if several else "")
    png = figures.save(fig, store, "ttlb_cdf_" + figures.safe_name(part))
    doc = (
        "the document's figure 6 (its five paths)"
        if largest == document.FIGURE6_RESPONSE_BYTES and document.is_figure6(list(lines.values()))
        else "the document's figure 6 draws its five paths at RTT 35 ms, 200 KiB"
    )
    section.figure(
        png,
        f"CDF of TTFB (left) and TTLB (right) at {largest / 1024:g} KiB, RTT {rtt:g} ms "
        f"({combo_label(combo)}{_on(stack)}); cf. {doc}",
    )


def _log_if_spread(ax) -> None:
    """A log scale for profiles an order of magnitude apart (1 Gbit/s vs 1 Mbit/s)."""
    lows = [ln.get_xdata().min() for ln in ax.get_lines() if len(ln.get_xdata())]
    highs = [ln.get_xdata().max() for ln in ax.get_lines() if len(ln.get_xdata())]
    if lows and min(lows) > 0 and max(highs) / min(lows) > 20:
        ax.set_xscale("log")


def summarize(store):
    """The experiment's part of the report's summary (see its `summary` module)."""
    return summary_part.summarize(store)
