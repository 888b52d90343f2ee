"""`pqlab compare RUN_A RUN_B`: what changed between two runs, with significance.

For every measurement present in both runs (same experiment and key), the relative change
of the median B vs A with a 95 % bootstrap confidence interval; a change whose interval
contains zero is reported as "not significant". The machine and library metadata of the
two runs are compared too, since a different CPU or library explains many differences.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import numpy as np

from pqlab import stats
from pqlab.errors import UserError
from pqlab.store import RunStore

# experiment -> (raw table, key columns, value expression, unit, what "lower" means)
SPECS: dict[str, tuple[str, list[str], str, str, str]] = {
    "primitives": (
        "primitive_samples",
        ["algorithm", "backend", "operation"],
        "ns / 1000.0",
        "us",
        "faster",
    ),
}


def register_spec(
    experiment: str,
    table: str,
    keys: list[str],
    value_sql: str,
    unit: str,
    lower_is: str = "faster",
) -> None:
    SPECS[experiment] = (table, keys, value_sql, unit, lower_is)


def _samples(store: RunStore, table: str, keys: list[str], value_sql: str) -> dict:
    if not store.has_table(table):
        return {}
    cols = ", ".join(f'"{k}"' for k in keys)
    rows = store.con.execute(f"SELECT {cols}, {value_sql} AS v FROM {table}").fetchall()
    out: dict[tuple, list[float]] = {}
    for row in rows:
        if row[-1] is not None:
            out.setdefault(tuple(row[:-1]), []).append(float(row[-1]))
    return {k: np.asarray(v) for k, v in out.items()}


def metadata_changes(a: dict, b: dict) -> list[tuple[str, str, str]]:
    def pick(m):
        cpu, eng = m.get("cpu", {}), m.get("engine", {})
        return {
            "CPU": cpu.get("model"),
            "governor": cpu.get("governor"),
            "kernel": m.get("kernel"),
            "OpenSSL": eng.get("openssl", {}).get("version_text"),
            "liboqs": eng.get("liboqs", {}).get("version"),
            "pqlab": m.get("pqlab_commit"),
            "OPENSSL_ia32cap": m.get("env", {}).get("OPENSSL_ia32cap"),
            "congestion control": m.get("network", {}).get("congestion_control"),
        }

    pa, pb = pick(a), pick(b)
    return [(k, str(pa[k]), str(pb[k])) for k in pa if pa[k] != pb[k]]


def compare(run_a: Path, run_b: Path, level: float = 0.95) -> tuple[list[dict], list]:
    a, b = RunStore.open(run_a), RunStore.open(run_b)
    try:
        rows = []
        for experiment, (table, keys, value_sql, unit, lower_is) in SPECS.items():
            sa, sb = (_samples(s, table, keys, value_sql) for s in (a, b))
            for key in sorted(set(sa) & set(sb), key=str):
                xa, xb = sa[key], sb[key]
                if len(xa) < 2 or len(xb) < 2:
                    continue
                est, lo, hi = stats.bootstrap_ci(xa, xb, level=level, n_boot=1000)
                significant = lo > 0 or hi < 0
                rows.append(
                    {
                        "experiment": experiment,
                        "key": " / ".join(map(str, key)),
                        "unit": unit,
                        "median_a": float(np.median(xa)),
                        "median_b": float(np.median(xb)),
                        "n_a": len(xa),
                        "n_b": len(xb),
                        "change_pct": 100 * est,
                        "ci_low_pct": 100 * lo,
                        "ci_high_pct": 100 * hi,
                        "verdict": (
                            "not significant"
                            if not significant
                            else (
                                lower_is
                                if est < 0
                                else {
                                    "faster": "slower",
                                    "smaller": "larger",
                                    "higher": "lower",
                                }.get(lower_is, "higher")
                            )
                        ),
                    }
                )
        return rows, metadata_changes(a.metadata(), b.metadata())
    finally:
        a.close()
        b.close()


def register(sub) -> None:
    p = sub.add_parser("compare", help="compare two runs, with significance", description=__doc__)
    p.add_argument("run_a", metavar="RUN_A")
    p.add_argument("run_b", metavar="RUN_B")
    p.add_argument("--csv", metavar="FILE", help="also write the comparison as CSV")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=run)


def run(args) -> int:
    rows, changes = compare(Path(args.run_a), Path(args.run_b))
    if args.json:
        print(json.dumps({"rows": rows, "metadata_changes": changes}, indent=2))
    else:
        if changes:
            print("Metadata that differs (may explain the differences):")
            for k, va, vb in changes:
                print(f"  {k}: {va}  ->  {vb}")
        if not rows:
            raise UserError("the two runs have no measurement in common to compare")
        width = max(len(r["key"]) for r in rows)
        print(
            f"{'experiment':<11} {'measurement':<{width}} {'A':>10} {'B':>10} "
            f"{'change':>8} {'95% CI':>18}  verdict"
        )
        for r in rows:
            ci = f"[{r['ci_low_pct']:+.1f}, {r['ci_high_pct']:+.1f}]%"
            print(
                f"{r['experiment']:<11} {r['key']:<{width}} {r['median_a']:>10.4g} "
                f"{r['median_b']:>10.4g} {r['change_pct']:>+7.1f}% {ci:>18}  {r['verdict']}"
            )
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["experiment"])
            w.writeheader()
            w.writerows(rows)
        print(f"written: {args.csv}", file=sys.stderr)
    return 0
