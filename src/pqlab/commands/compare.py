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
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pqlab import stats
from pqlab.errors import UserError
from pqlab.store import RunStore


@dataclass(frozen=True)
class Spec:
    """One comparable measurement: raw samples of `value_sql` from `table`, grouped by `keys`."""

    table: str
    keys: tuple[str, ...]
    value_sql: str
    unit: str
    better: str = "lower"  # "lower" (times) or "higher" (throughput)
    where: str = "TRUE"


SPECS: dict[str, Spec] = {
    "primitives": Spec(
        "primitive_samples",
        ("algorithm", "backend", "operation"),
        "ns / 1e3",
        "us",
        where="NOT coalesce(dropped, FALSE)",
    ),
    "handshake": Spec(
        "handshake_raw", ("group", "server_sig", "ca_sig"), "handshake_ns / 1e6", "ms"
    ),
    "ttfb": Spec("ttlb_raw", ("profile", "grp", "chain", "data_bytes"), "ttfb_ns / 1e6", "ms"),
    "ttlb": Spec("ttlb_raw", ("profile", "grp", "chain", "data_bytes"), "ttlb_ns / 1e6", "ms"),
    "aead": Spec(
        "aead_windows",
        ("cipher", "aesni", "mode", "direction", "record_bytes"),
        "bytes * 1e3 / ns",
        "MB/s",
        better="higher",
        where="ns > 0",
    ),
    "tls12": Spec(
        "tls12_handshakes", ("version", "kex", "cert"), "connect_to_handshake_ns / 1e6", "ms"
    ),
}


def _samples(store: RunStore, spec: Spec) -> dict:
    if not store.has_table(spec.table):
        return {}
    cols = ", ".join(f'"{k}"' for k in spec.keys)
    rows = store.con.execute(
        f"SELECT {cols}, {spec.value_sql} AS v FROM {spec.table} WHERE {spec.where}"
    ).fetchall()
    out: dict[tuple, list[float]] = {}
    for row in rows:
        if row[-1] is not None:
            out.setdefault(tuple(row[:-1]), []).append(float(row[-1]))
    return {k: np.asarray(v) for k, v in out.items()}


def _verdict(significant: bool, change: float, better: str, threshold: float = 0.02) -> str:
    if not significant:
        return "not significant"
    if abs(change) < threshold:
        return f"significant but under {threshold:.0%}"
    improved = change < 0 if better == "lower" else change > 0
    return "faster" if improved else "slower"


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


def compare(
    run_a: Path, run_b: Path, level: float = 0.95, threshold: float = 0.02
) -> tuple[list[dict], list]:
    a, b = RunStore.open(run_a), RunStore.open(run_b)
    try:
        rows = []
        for experiment, spec in SPECS.items():
            sa, sb = (_samples(s, spec) for s in (a, b))
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
                        "unit": spec.unit,
                        "median_a": float(np.median(xa)),
                        "median_b": float(np.median(xb)),
                        "n_a": len(xa),
                        "n_b": len(xb),
                        "change_pct": 100 * est,
                        "ci_low_pct": 100 * lo,
                        "ci_high_pct": 100 * hi,
                        "verdict": _verdict(significant, est, spec.better, threshold),
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
    p.add_argument(
        "--threshold",
        type=float,
        default=2.0,
        metavar="PCT",
        help="changes smaller than this (percent) are reported as small even when "
        "significant (default 2)",
    )
    p.set_defaults(func=run)


def run(args) -> int:
    if not 0 <= args.threshold < 100:
        raise UserError(f"--threshold {args.threshold!r} must be a percentage from 0 to 100")
    rows, changes = compare(Path(args.run_a), Path(args.run_b), threshold=args.threshold / 100)
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
