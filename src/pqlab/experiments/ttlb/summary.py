"""The ttlb experiment's part of the report's summary: the time-to-last-byte increase of
each post-quantum combination over the classical baseline at the largest response size, per
link profile, and whether it shrank from the smallest size (document 003's finding); the
pooled handshake time of its figure 1; and what loss or jitter alone costs the classical
connection (its "97-331 % slower")."""

from __future__ import annotations

import html

from pqlab.experiments.ttlb import across, sweep
from pqlab.experiments.ttlb.analyse import (
    baseline,
    cell_summaries,
    combination,
    combo_label,
    combo_order,
    increases,
)
from pqlab.report.section import template
from pqlab.report.summary import Summary, row
from pqlab.store import RunStore

MAX_TTLB_LINES = 6
MAX_DEGRADATION_LINES = 3


def summarize(store: RunStore) -> Summary | None:
    if not store.has_table("ttlb_raw"):
        return None
    summary = cell_summaries(store)
    base = baseline(store)
    if not summary or not base:
        return None
    inc = increases(summary, base)
    n: dict[tuple, int] = {}
    for r in summary:  # the fewest connections of any cell of the combination
        n[combination(r)] = min(n.get(combination(r), r["n"]), r["n"])
    swept = sweep.swept(summary)
    rows, items = [], []
    for profile in sorted({r["profile"] for r in inc}):
        mine = [r for r in inc if r["profile"] == profile and sweep.key(r) not in swept]
        if not mine:
            continue
        largest = max(r["data_bytes"] for r in mine)
        smallest = min(r["data_bytes"] for r in mine)
        for combo in sorted({combination(r) for r in mine}, key=combo_order):
            at = {(r["data_bytes"], r["percentile"]): r for r in mine if combination(r) == combo}
            if (largest, 50) not in at:
                continue
            p50, p90 = at[(largest, 50)], at.get((largest, 90))
            first = at.get((smallest, 50))
            comparison = f"{combo_label(base)} -> {combo_label(combo)} ({profile})"
            rows.append(
                row(
                    "time to last byte",
                    comparison,
                    f"TTLB p50 at {largest} bytes",
                    "ms",
                    p50["ttlb_baseline_ms"],
                    p50["ttlb_ms"],
                )
            )
            if len(items) < MAX_TTLB_LINES:
                items.append(_ttlb_sentence(profile, base, combo, p50, p90, first, n[combo]))
    _pooled_lines(store, summary, base, rows, items)
    _degradation_lines(store, summary, base, rows, items)
    return Summary(rows, items, template("summary_note_ttlb"))


def _pct(value: float) -> str:
    return f"{value:+.1f} %"


def _pooled_lines(store, summary, base, rows, items) -> None:
    """Figure 1's comparison per pool: the combination the document set against the
    classical one."""
    pooled = [r for r in across.pooled_rows(store, summary, base) if r["document_ratio"]]
    for key in dict.fromkeys((r["pool"], r["stack"]) for r in pooled):
        at = {r["percentile"]: r for r in pooled if (r["pool"], r["stack"]) == key}
        p50 = at[50]
        rows.append(
            row(
                "handshake time, pooled profiles",
                f"{p50['baseline']} -> {combo_label(combination(p50))} ({key[0]})",
                "pooled TTFB p50",
                "ms",
                p50["baseline_ttfb_ms"],
                p50["ttfb_ms"],
            )
        )
        items.append(
            template(
                "summary_ttlb_pooled",
                n_profiles=str(p50["n_profiles"]),
                pool=html.escape(key[0]),
                candidate=html.escape(combo_label(combination(p50))),
                baseline=html.escape(p50["baseline"]),
                p50=_pct(at[50]["increase_pct"]),
                p75=_pct(at[75]["increase_pct"]),
                p90=_pct(at[90]["increase_pct"]),
                ratio=f"{p50['ratio']:.2f}",
                document=f"{p50['document_ratio']:g}",
            )
        )


def _degradation_lines(store, summary, base, rows, items) -> None:
    """Per degraded profile, the classical combination at its largest response size."""
    mine = [r for r in across.degradation_rows(store, summary, base) if combination(r) == base]
    lines = 0
    for key in dict.fromkeys((r["profile"], r["stack"]) for r in mine):
        largest = max(r["data_bytes"] for r in mine if (r["profile"], r["stack"]) == key)
        at = {
            r["percentile"]: r
            for r in mine
            if (r["profile"], r["stack"]) == key and r["data_bytes"] == largest
        }
        p50 = at[50]
        rows.append(
            row(
                "link degradation",
                f"{p50['reference_profile']} -> {key[0]} ({combo_label(base)})",
                f"TTLB p50 at {largest} bytes",
                "ms",
                p50["reference_ttlb_ms"],
                p50["ttlb_ms"],
            )
        )
        if lines >= MAX_DEGRADATION_LINES:
            continue
        lines += 1
        doc = ""
        if p50["document_degradation_pct"] is not None:
            doc = template(
                "summary_ttlb_degradation_document",
                low=_pct(min(r["document_degradation_pct"] for r in at.values())),
                high=_pct(max(r["document_degradation_pct"] for r in at.values())),
            ).rstrip("\n")
        items.append(
            template(
                "summary_ttlb_degradation",
                profile=html.escape(key[0]),
                reference=html.escape(p50["reference_profile"]),
                baseline=html.escape(combo_label(base)),
                size=f"{largest:,}",
                p50=_pct(at[50]["ttlb_degradation_pct"]),
                p75=_pct(at[75]["ttlb_degradation_pct"]),
                p90=_pct(at[90]["ttlb_degradation_pct"]),
                document=doc,
            )
        )


def _ttlb_sentence(profile, base, combo, p50, p90, first, n) -> str:
    """One TTLB line; whether the increase shrank with the response size (document 003's
    finding) is computed, not assumed."""
    shrinks = first is not None and abs(p50["ttlb_increase_pct"]) < abs(first["ttlb_increase_pct"])
    return template(
        "summary_ttlb",
        profile=html.escape(profile),
        baseline=html.escape(combo_label(base)),
        candidate=html.escape(combo_label(combo)),
        size=f"{p50['data_bytes']:,}",
        p50=f"{p50['ttlb_increase_pct']:+.1f} %",
        p90=f"{p90['ttlb_increase_pct']:+.1f} %" if p90 else "?",
        small=f"{first['data_bytes']:,}" if first else "?",
        small_p50=f"{first['ttlb_increase_pct']:+.1f} %" if first else "?",
        trend=template("summary_ttlb_shrinks" if shrinks else "summary_ttlb_not_shrinks"),
        n=str(n),
    )
