"""The ttlb experiment's part of the report's summary: the time-to-last-byte increase of
each post-quantum combination over the classical baseline at the largest response size, per
link profile, and whether it shrank from the smallest size (document 003's finding)."""

from __future__ import annotations

import html

from pqlab.experiments.ttlb.analyse import baseline, cell_summaries, increases
from pqlab.report.section import template
from pqlab.report.summary import Summary, row
from pqlab.store import RunStore

MAX_TTLB_LINES = 6


def summarize(store: RunStore) -> Summary | None:
    if not store.has_table("ttlb_raw"):
        return None
    summary = cell_summaries(store)
    base = baseline(store)
    if not summary or not base:
        return None
    inc = increases(summary, *base)
    n: dict[tuple, int] = {}
    for r in summary:  # the fewest connections of any cell of the combination
        key = (r["group"], r["chain"])
        n[key] = min(n.get(key, r["n"]), r["n"])
    rows, items = [], []
    for profile in sorted({r["profile"] for r in inc}):
        mine = [r for r in inc if r["profile"] == profile]
        largest = max(r["data_bytes"] for r in mine)
        smallest = min(r["data_bytes"] for r in mine)
        for combo in sorted({(r["group"], r["chain"]) for r in mine}):
            at = {
                (r["data_bytes"], r["percentile"]): r
                for r in mine
                if (r["group"], r["chain"]) == combo
            }
            if (largest, 50) not in at:
                continue
            p50, p90 = at[(largest, 50)], at.get((largest, 90))
            first = at.get((smallest, 50))
            comparison = f"{base[0]} + {base[1]} -> {combo[0]} + {combo[1]} ({profile})"
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
    return Summary(rows, items, template("summary_note_ttlb"))


def _ttlb_sentence(profile, base, combo, p50, p90, first, n) -> str:
    """One TTLB line; whether the increase shrank with the response size (document 003's
    finding) is computed, not assumed."""
    shrinks = first is not None and abs(p50["ttlb_increase_pct"]) < abs(first["ttlb_increase_pct"])
    return template(
        "summary_ttlb",
        profile=html.escape(profile),
        baseline=html.escape(f"{base[0]} + {base[1]}"),
        candidate=html.escape(f"{combo[0]} + {combo[1]}"),
        size=f"{p50['data_bytes']:,}",
        p50=f"{p50['ttlb_increase_pct']:+.1f} %",
        p90=f"{p90['ttlb_increase_pct']:+.1f} %" if p90 else "?",
        small=f"{first['data_bytes']:,}" if first else "?",
        small_p50=f"{first['ttlb_increase_pct']:+.1f} %" if first else "?",
        trend=template("summary_ttlb_shrinks" if shrinks else "summary_ttlb_not_shrinks"),
        n=str(n),
    )
