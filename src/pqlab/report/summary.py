"""The summary that opens report.html: what the move to post-quantum cryptography costs, in
the numbers a migration plan needs, computed from whatever experiments the run holds.

Each experiment offers its part through the protocol's `summarize(store)` hook (handshake:
the group swap, the chain swap and both against the classical pair; ttlb: the time-to-last-
byte increase at the largest response size per link profile; primitives: the per-handshake
cost of the TLS library's cryptography). A part is rows of `tables/summary.csv`, one
sentence per comparison and a note on how the numbers were compared; the report says what
was compared with what. This module collects the parts in registry order and holds the
helpers the parts share.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pqlab.experiment import registry
from pqlab.report.section import template
from pqlab.store import RunStore

SUMMARY_COLUMNS = [
    "topic",
    "comparison",
    "metric",
    "unit",
    "baseline",
    "candidate",
    "change",
    "change_pct",
    "ci_low_pct",
    "ci_high_pct",
    "drift_pct",
    "significant",
]


@dataclass
class Summary:
    """One experiment's part of the summary."""

    rows: list[dict] = field(default_factory=list)  # tables/summary.csv rows (SUMMARY_COLUMNS)
    items: list[str] = field(default_factory=list)  # HTML: one sentence per comparison
    note: str = ""  # HTML: how these numbers were compared


def row(topic, comparison, metric, unit, base, cand, ci=None) -> dict:
    """One row of tables/summary.csv: a metric of a baseline and a candidate, the change and
    (optionally) the confidence interval of the relative change, in percent."""
    change = None if base is None or cand is None else cand - base
    pct = None if change is None or not base else change / base * 100
    return {
        "topic": topic,
        "comparison": comparison,
        "metric": metric,
        "unit": unit,
        "baseline": base,
        "candidate": cand,
        "change": change,
        "change_pct": pct,
        "ci_low_pct": ci[0] if ci else None,
        "ci_high_pct": ci[1] if ci else None,
    }


def fmt(v: float | None, unit: str) -> str:
    if v is None:
        return "?"
    if unit == "ms":
        return f"{v:.3g} ms"
    if unit == "bytes":
        return f"{v:,.0f} B"
    return f"{v:.3g}"


def signed(v: float | None, unit: str) -> str:
    if v is None:
        return "?"
    return ("+" if v >= 0 else "-") + fmt(abs(v), unit)


def build(store: RunStore) -> tuple[str, list[dict]]:
    """The summary's HTML and its rows (for tables/summary.csv), from every experiment the
    run holds that offers a summary."""
    rows, items, notes = [], [], []
    present = set(store.experiments())
    for exp in registry():
        if exp.name not in present:
            continue
        part = exp.summarize(store)
        if part is None or not part.items:
            continue
        rows += part.rows
        items += part.items
        notes.append(part.note)
    if not items:
        return template("summary_empty"), []
    items_html = "".join(f"<li>{i}</li>" for i in items)
    return template("summary", items=items_html, notes="".join(notes)), rows
