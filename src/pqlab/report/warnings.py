"""The report's warnings, grouped by cause (the `code` column): one line per cause with the
affected series folded under it, inherent variance told apart from measurement noise.

Runs made before pqlab knew inherent variance stored ML-DSA signing and RSA key generation
spreads as "noisy"/"outliers"; such primitives warnings are re-read here by their subject
("ALG (backend) operation") and the catalogue family, so the advice is right for old runs
too.
"""

from __future__ import annotations

import html
import re
from collections import Counter

from pqlab import catalog, stats
from pqlab.errors import UserError
from pqlab.store import RunStore

# Cause titles, in the order the report lists them (most actionable first).
CAUSES = {
    "linktest-failed": "The emulated link did not behave as its profile says",
    "capture-drops": "Packets missing from a capture",
    "retransmissions": "Retransmissions on a lossless link",
    "capacity-not-saturated": "A capacity maximum that did not saturate the server",
    "off-model": "Time to last byte far from the link's model",
    "cpu-contended": "The CPU was shared during timing",
    "env-mask-ignored": "OPENSSL_ia32cap from the environment ignored",
    "no-aesni": "No AES-NI on this CPU",
    "budget": "Time budget reached before all samples",
    "not-measured": "Algorithms not measured",
    "frequency-scaling": "CPU frequency scaling",
    "turbo": "CPU turbo / boost",
    "noisy": "Measurement noise: robust CV above 10 %",
    "outliers": "Outliers pull the mean up",
    "few-samples": "Few samples",
    "inherent-variance": "Variance by design, not noise",
}
_SUBJECT = re.compile(r"^(?P<alg>.+) \((?P<backend>[\w-]+)\) (?P<op>\w+)$")


def reclassify(w: dict) -> dict:
    """A stored primitives warning about spread, re-read as inherent variance where the
    operation varies by design (stats.INHERENT_VARIANCE)."""
    if w["experiment"] != "primitives" or w["code"] not in ("noisy", "outliers"):
        return w
    m = _SUBJECT.match(w["subject"])
    if not m:
        return w
    try:
        family = catalog.resolve(m["alg"]).family
    except UserError:
        return w
    why = stats.inherent_variance(family, m["op"])
    if why is None:
        return w
    return {**w, "code": "inherent-variance", "message": why, "advice": stats.INHERENT_ADVICE}


def grouped(store: RunStore) -> dict[str, list[dict]]:
    """Warnings by cause, each cause's series once (a series warned twice for the same cause
    after reclassification appears once)."""
    rows = store.query(
        "SELECT experiment, cell_id, code, subject, message, advice FROM warnings "
        "ORDER BY experiment, rowid"
    )
    out: dict[str, list[dict]] = {}
    seen = set()
    for w in map(reclassify, rows):
        key = (w["code"], w["experiment"], w["subject"])
        if key in seen:
            continue
        seen.add(key)
        out.setdefault(w["code"], []).append(w)
    order = list(CAUSES)  # a cause pqlab has no title for yet goes first: nobody knows it
    return dict(sorted(out.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else -1))


def _cause_html(code: str, items: list[dict]) -> str:
    advice, _ = Counter(w["advice"] for w in items).most_common(1)[0]
    experiments = sorted({w["experiment"] for w in items})
    lines = []
    for w in items:
        extra = "" if w["advice"] == advice else f" <i>{html.escape(w['advice'])}</i>"
        lines.append(
            f"<li><b>{html.escape(w['subject'])}</b>: {html.escape(w['message'])}{extra}</li>"
        )
    title = CAUSES.get(code, code)
    cls = "cause inherent" if code == "inherent-variance" else "cause"
    return (
        f"<details class='{cls}' data-code='{html.escape(code)}'><summary><b>"
        f"{html.escape(title)}</b> ({len(items)} {'series' if len(items) != 1 else 'item'}; "
        f"{', '.join(map(html.escape, experiments))}): {html.escape(advice)}</summary>"
        f"<ul>{''.join(lines)}</ul></details>"
    )


def html_grouped(store: RunStore) -> str:
    from pqlab.report import template

    groups = grouped(store)
    if not groups:
        return ""
    total = sum(len(v) for v in groups.values())
    parts = [template("warnings", total=str(total), causes=str(len(groups)))]
    parts += [_cause_html(code, items) for code, items in groups.items()]
    return "".join(parts)
