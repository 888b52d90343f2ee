"""A scan's part of the report and its tables: the count of targets per verdict, the table
of targets (tables/probe_targets.csv and .jsonl, rebuilt whole from the database), what
each target's flight would cost with an ML-DSA chain on the chosen paths
(tables/probe_target_plans.csv), and, for `pqlab compare`, the targets whose verdict,
post-quantum groups or chain changed between two scans."""

from __future__ import annotations

import json

from pqlab.experiments.probe import fleet

# What `pqlab compare` looks at in each target's row.
COMPARED = (
    "verdict", "unreachable_reason", "browser_group", "pq_accepted", "pq_hello_retry",
    "pq_refused", "sigalg", "chain_certs", "chain_bytes", "chain_algorithms", "chain_expiry",
)  # fmt: skip


def is_scan(store) -> bool:
    return store.has_table("probe_targets") and bool(
        store.query("SELECT count(*) AS n FROM probe_targets")[0]["n"]
    )


def counts(store) -> list[dict]:
    got = {
        r["verdict"]: r["targets"]
        for r in store.query("SELECT verdict, count(*) AS targets FROM probe_targets GROUP BY 1")
    }
    total = sum(got.values())
    return [
        {"verdict": v, "targets": got.get(v, 0), "share_pct": 100 * got.get(v, 0) / total}
        for v in fleet.VERDICTS
    ]


def add(store, section) -> None:
    """The scan's tables and blocks, first in the probe's section."""
    rows = counts(store)
    section.text(
        "<p><b>Targets per verdict:</b> "
        + ", ".join(f"{r['verdict']} {r['targets']}" for r in rows)
        + "</p>"
    )
    csv = store.export_rows("probe_target_verdicts", rows)
    section.table(csv, "Targets per verdict")
    csv = store.export_table(
        "probe_targets", f"SELECT {', '.join(fleet.COLUMNS)} FROM probe_targets ORDER BY line"
    )
    with store.output.sub("tables").replacing("probe_targets.jsonl") as f:
        cur = store.con.execute(
            f"SELECT {', '.join(fleet.COLUMNS)} FROM probe_targets ORDER BY line"
        )
        while batch := cur.fetchmany(1000):
            for values in batch:
                row = dict(zip(fleet.COLUMNS, values, strict=True))
                f.write((json.dumps(row, default=str) + "\n").encode())
    section.table(
        csv,
        "One row per target (click a column's name to sort; the CSV and "
        "tables/probe_targets.jsonl hold every target)",
        max_rows=500,
    )
    if store.has_table("probe_target_plans"):
        csv = store.export_table(
            "probe_target_plans",
            "SELECT * FROM probe_target_plans ORDER BY target, path, sig",
        )
        section.text(
            "<p>What each target's first flight would cost with an ML-DSA chain of as many "
            "certificates as it sends today, from <code>pqlab plan</code>'s model, on each "
            "chosen path: its flight, segments, round trips and time to the handshake's "
            "end, beside the same model's for the chain it sends today "
            "(<code>extra_round_trips</code>).</p>"
        )
        section.table(csv, "Each target's flight with an ML-DSA chain, per path", max_rows=200)


def summary_line(store) -> str:
    return "Scan: " + ", ".join(
        f"{r['verdict']} {r['targets']}" for r in counts(store) if r["targets"]
    )


def changes(a, b) -> list[str]:
    """The targets of scan A and scan B whose verdict, post-quantum groups or chain
    differ, and those in one only: one line each."""
    if not (is_scan(a) and is_scan(b)):
        return []
    cols = ", ".join(("target", *COMPARED))

    def rows(store) -> dict[str, dict]:
        return {r["target"]: r for r in store.query(f"SELECT {cols} FROM probe_targets")}

    ra, rb = rows(a), rows(b)
    out = []
    for name in sorted(set(ra) | set(rb)):
        if name not in rb:
            out.append(f"{name}: only in A ({ra[name]['verdict']})")
            continue
        if name not in ra:
            out.append(f"{name}: only in B ({rb[name]['verdict']})")
            continue
        diff = [
            f"{c} {_shown(ra[name][c])} -> {_shown(rb[name][c])}"
            for c in COMPARED
            if ra[name][c] != rb[name][c]
        ]
        if diff:
            out.append(f"{name}: " + "; ".join(diff))
    return out


def _shown(value) -> str:
    return "-" if value is None else str(value)
