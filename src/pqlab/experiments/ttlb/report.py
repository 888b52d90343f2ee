"""The ttlb experiment's tables (ttlb.csv, ttlb_increase.csv), figures (the document's
figures 1-6) and report section, from the database alone."""

from __future__ import annotations

import numpy as np

from pqlab import figures
from pqlab.experiments.ttlb import summary as summary_part
from pqlab.experiments.ttlb.analyse import PERCENTILES, baseline, cell_summaries, increases
from pqlab.report.section import Section, template


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
    inc = increases(summary, *base) if base else []
    if inc:
        csv = store.export_rows("ttlb_increase", inc)
        section.table(
            csv,
            f"Increase over the classical combination ({base[0]} + {base[1]}) "
            "per size and percentile",
            max_rows=90,
        )
    _figures(store, summary, inc, base, section, figures)
    return section


def _figures(store, summary, inc, base, section, figures) -> None:
    profiles = sorted({r["profile"] for r in summary})
    combos = sorted({(r["group"], r["chain"]) for r in summary})
    _increase_figures(store, inc, base, section, figures, profiles)
    _cdf_figures(store, section, figures, profiles, combos)


def _increase_figures(store, inc, base, section, figures, profiles) -> None:
    """Document figure 1 (TTFB increase per percentile) and figures 2-5 (TTLB increase by
    response size), per profile."""
    import matplotlib.pyplot as plt

    colors = {
        p: c for p, c in zip(PERCENTILES, ("tab:blue", "tab:orange", "tab:green"), strict=True)
    }
    for profile in profiles:
        pq = sorted({(r["group"], r["chain"]) for r in inc if r["profile"] == profile})
        if pq:
            # Document figure 1: handshake-time increase at p50/p75/p90, one bar per combo.
            fig, ax = plt.subplots(figsize=(6, 3.5))
            width = 0.8 / len(pq)
            for i, combo in enumerate(pq):
                vals = [
                    next(
                        (
                            r["ttfb_increase_pct"]
                            for r in inc
                            if r["profile"] == profile
                            and (r["group"], r["chain"]) == combo
                            and r["percentile"] == p
                            and r["data_bytes"]
                            == min(x["data_bytes"] for x in inc if x["profile"] == profile)
                        ),
                        np.nan,
                    )
                    for p in PERCENTILES
                ]
                ax.bar(np.arange(3) + i * width, vals, width, label=" + ".join(combo))
            ax.set_xticks(np.arange(3) + width * (len(pq) - 1) / 2, [f"p{p}" for p in PERCENTILES])
            ax.set_ylabel("handshake time (TTFB) increase (%)")
            ax.set_title(f"{profile}: TTFB increase over {base[0]} + {base[1]}", fontsize=9)
            ax.legend(fontsize=7)
            png = figures.save(fig, store, f"ttlb_ttfb_increase_{figures.safe_name(profile)}")
            section.figure(
                png,
                f"Handshake time increase per percentile ({profile}); cf. the document's figure 1",
            )
            # Document figures 2-5: TTLB increase vs response size, one line per percentile.
            for combo in pq:
                fig, ax = plt.subplots(figsize=(6, 3.5))
                for p in PERCENTILES:
                    pts = sorted(
                        (r["data_bytes"] / 1024, r["ttlb_increase_pct"])
                        for r in inc
                        if r["profile"] == profile
                        and r["percentile"] == p
                        and (r["group"], r["chain"]) == combo
                    )
                    ax.plot(
                        [x for x, _ in pts],
                        [y for _, y in pts],
                        marker="o",
                        color=colors[p],
                        label=f"p{p}",
                    )
                ax.axhline(0, color="grey", lw=0.6)
                ax.set_xlabel("data sent by the server (KiB)")
                ax.set_ylabel("TTLB increase (%)")
                ax.set_title(f"{profile}: {' + '.join(combo)} vs {base[0]} + {base[1]}", fontsize=9)
                ax.legend(fontsize=7)
                png = figures.save(
                    fig,
                    store,
                    "ttlb_increase_" + figures.safe_name(f"{profile}_{combo[0]}_{combo[1]}"),
                )
                section.figure(
                    png,
                    f"TTLB increase by response size ({profile}, "
                    f"{' + '.join(combo)}); cf. the document's figures 2-5",
                )


def _cdf_figures(store, section, figures, profiles, combos) -> None:
    """Document figure 6: CDF of TTLB at the largest size, one line per profile, per combo."""
    import matplotlib.pyplot as plt

    raw = store.query("SELECT profile, grp, chain, data_bytes, ttlb_ns FROM ttlb_raw")
    largest = max(r["data_bytes"] for r in raw)
    for combo in combos:
        fig, ax = plt.subplots(figsize=(6, 3.5))
        for profile in profiles:
            v = np.sort(
                [
                    r["ttlb_ns"] / 1e6
                    for r in raw
                    if r["profile"] == profile
                    and (r["grp"], r["chain"]) == combo
                    and r["data_bytes"] == largest
                ]
            )
            if len(v):
                ax.step(v, np.arange(1, len(v) + 1) / len(v), where="post", label=profile)
        lows = [ln.get_xdata().min() for ln in ax.get_lines() if len(ln.get_xdata())]
        highs = [ln.get_xdata().max() for ln in ax.get_lines() if len(ln.get_xdata())]
        if lows and min(lows) > 0 and max(highs) / min(lows) > 20:
            ax.set_xscale("log")  # profiles an order of magnitude apart (1 Gbit/s vs 1 Mbit/s)
        ax.set_xlabel(f"TTLB (ms), {largest / 1024:g} KiB from the server")
        ax.set_ylabel("CDF")
        ax.set_title(" + ".join(combo), fontsize=9)
        ax.legend(fontsize=7)
        png = figures.save(fig, store, "ttlb_cdf_" + figures.safe_name("_".join(combo)))
        section.figure(
            png,
            f"CDF of TTLB at {largest / 1024:g} KiB ({' + '.join(combo)}); "
            "cf. the document's figure 6",
        )


def summarize(store):
    """The experiment's part of the report's summary (see its `summary` module)."""
    return summary_part.summarize(store)
