"""`pqlab compare RUN_A RUN_B`: what changed between two runs, with significance.

For every measurement present in both runs (same experiment and key), the relative change
of the median B vs A with a 95 % bootstrap confidence interval; a change whose interval
contains zero, or (for experiments that interleave their cells in rounds) that is no larger
than the drift either run showed between a cell's earlier and later rounds, is reported as
"not significant". The machine and library metadata of the
two runs are compared too, since a different CPU or library explains many differences.
"""

from __future__ import annotations

import csv
import io
import json
import math
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from pqlab import files, stats
from pqlab.errors import UserError
from pqlab.experiment import CompareSpec, registry
from pqlab.store import RunStore


def _samples(store: RunStore, spec: CompareSpec) -> dict:
    """key -> (samples, the round of each sample or None)."""
    if not store.has_table(spec.table):
        return {}
    have = store.columns(spec.table)
    cols = ", ".join(
        f'"{k}"' if k in have else f'{_literal(spec.missing.get(k))} AS "{k}"' for k in spec.keys
    )
    rounds = f'"{spec.round_column}"' if spec.round_column in have else "NULL"
    rows = store.con.execute(
        f"SELECT {cols}, {rounds} AS r, {spec.value_sql} AS v FROM {spec.table} WHERE {spec.where}"
    ).fetchall()
    out: dict[tuple, tuple[list, list]] = {}
    for row in rows:
        if row[-1] is not None:
            values, rnds = out.setdefault(tuple(row[:-2]), ([], []))
            values.append(float(row[-1]))
            rnds.append(row[-2])
    return {k: (np.asarray(v), r) for k, (v, r) in out.items()}


def _literal(value) -> str:
    if value is None:
        return "NULL"
    return "'" + str(value).replace("'", "''") + "'"


def _verdict(
    significant: bool, change: float, better: str, threshold: float = 0.02, drift: bool = False
) -> str:
    if drift:
        return "not significant (within drift)"
    if not significant:
        return "not significant"
    if abs(change) < threshold:
        return f"significant but under {threshold:.0%}"
    improved = change < 0 if better == "lower" else change > 0
    return "faster" if improved else "slower"


def stack_changes(a: RunStore, b: RunStore) -> list[tuple[str, str, str]]:
    """The TLS stacks each run measured on, with their implementations, when they differ."""

    def named(store: RunStore) -> str:
        impl = {
            s.get("name"): s.get("implementation")
            for s in store.metadata().get("engine", {}).get("tls_stacks") or []
        }
        names = run_stacks(store)
        return "; ".join(f"{n} ({impl[n]})" if impl.get(n) else n for n in names) or "none"

    na, nb = named(a), named(b)
    return [("TLS stack", na, nb)] if run_stacks(a) != run_stacks(b) else []


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


def _csv_tables(run: Path) -> dict[str, tuple[list[str], int]]:
    """tables/*.csv of a run: name -> (columns, rows)."""
    out: dict[str, tuple[list[str], int]] = {}
    if (run / "tables").is_symlink():
        return out  # not the run's own: nothing of it is read
    for path in sorted((run / "tables").glob("*.csv")):
        text = files.read_input_text(path, str(path), "table", follow=False)
        rows = list(csv.reader(io.StringIO(text, newline="")))
        out[path.stem] = (rows[0] if rows else [], max(0, len(rows) - 1))
    return out


def _cell_ids(store: RunStore) -> list[tuple[str, object]]:
    """(experiment, cell) of every finished cell: a CellId read through the experiment's
    cell shape (so the forms older runs stored compare equal to today's), else the text."""
    shapes = {exp.name: exp.cells for exp in registry() if exp.cells is not None}
    out = []
    for r in store.query("SELECT experiment, cell_id FROM cells"):
        shape = shapes.get(r["experiment"])
        try:
            cell = shape.parse(r["cell_id"]) if shape is not None else r["cell_id"]
        except UserError:
            cell = r["cell_id"]
        out.append((r["experiment"], cell))
    return out


def run_stacks(store: RunStore) -> list[str]:
    """The TLS stacks the run's cells ran on, sorted."""
    return sorted({c.stack for _, c in _cell_ids(store) if getattr(c, "stack", None)})


def _cells(store: RunStore, ignore_stack: bool = False) -> set[tuple[str, str]]:
    """(experiment, cell id) of every finished cell; with `ignore_stack` the TLS stack left
    out of the id (two runs of the same cells on different stacks then match)."""
    out = set()
    for exp, cell in _cell_ids(store):
        if ignore_stack and getattr(cell, "stack", None):
            cell = replace(cell, stack=None)
        out.add((exp, str(cell)))
    return out


def structure_changes(a: RunStore, b: RunStore) -> list[str]:
    """How the two runs differ in shape rather than in numbers: exported tables, their
    columns and row counts, and the measured cells (experiment and cell id)."""
    out = []
    ta, tb = _csv_tables(a.path), _csv_tables(b.path)
    for name in sorted(set(ta) - set(tb)):
        out.append(f"table {name} only in A")
    for name in sorted(set(tb) - set(ta)):
        out.append(f"table {name} only in B")
    for name in sorted(set(ta) & set(tb)):
        (ca, na), (cb, nb) = ta[name], tb[name]
        if ca != cb:
            gone, new = [c for c in ca if c not in cb], [c for c in cb if c not in ca]
            out.append(
                f"table {name}: columns differ"
                + (f" (only in A: {', '.join(gone)})" if gone else "")
                + (f" (only in B: {', '.join(new)})" if new else "")
                + ("" if gone or new else " (order)")
            )
        if na != nb:
            out.append(f"table {name}: {na} rows in A, {nb} in B")
    stacks_a, stacks_b = run_stacks(a), run_stacks(b)
    # One stack each, different: the same cells measured on two TLS stacks (the stack is
    # named among the metadata differences, not as cells only in one run).
    one_each = len(stacks_a) == 1 and len(stacks_b) == 1 and stacks_a != stacks_b
    sa, sb = _cells(a, one_each), _cells(b, one_each)
    for label, only in (("A", sa - sb), ("B", sb - sa)):
        if only:
            first = sorted(only)[:3]
            out.append(
                f"{len(only)} cell(s) only in {label}: "
                + ", ".join(f"{e} {c}" for e, c in first)
                + (" ..." if len(only) > 3 else "")
            )
    return out


def compare(
    run_a: Path, run_b: Path, level: float = 0.95, threshold: float = 0.02
) -> tuple[list[dict], list, list[str]]:

    a = RunStore.open(run_a, any_version=True)
    try:
        b = RunStore.open(run_b, any_version=True)
    except BaseException:
        a.close()
        raise
    try:
        with a.reading(), b.reading():
            return _compare(a, b, level, threshold)
    finally:
        a.close()
        b.close()


def _compare(a: RunStore, b: RunStore, level: float, threshold: float):
    """The comparison of two opened runs (see `compare`)."""
    rows = []
    specs = [spec for exp in registry() for spec in exp.compare]
    for spec in specs:
        sa, sb = (_samples(s, spec) for s in (a, b))
        for key in sorted(set(sa) & set(sb), key=str):
            (xa, ra), (xb, rb) = sa[key], sb[key]
            if spec.exact:
                rows.append(_exact_row(spec, key, xa, xb))
                continue
            if len(xa) < 2 or len(xb) < 2:
                continue
            est, lo, hi = stats.bootstrap_ci(xa, xb, level=level, n_boot=1000)
            # Each run's own drift (its cells' earlier rounds against their later ones):
            # a change no larger than that may be the machine's.
            drifts = [stats.drift(xa, ra), stats.drift(xb, rb)]
            known = [abs(d) for d in drifts if d is not None]
            significant = lo > 0 or hi < 0
            drifted = significant and stats.within_drift(est, drifts)
            rows.append(
                {
                    "experiment": spec.label,
                    "key": " / ".join(map(str, key)),
                    "unit": spec.unit,
                    "median_a": float(np.median(xa)),
                    "median_b": float(np.median(xb)),
                    "n_a": len(xa),
                    "n_b": len(xb),
                    "change_pct": 100 * est,
                    "ci_low_pct": 100 * lo,
                    "ci_high_pct": 100 * hi,
                    "drift_pct": 100 * max(known) if known else None,
                    "verdict": _verdict(significant, est, spec.better, threshold, drifted),
                }
            )
    meta = stack_changes(a, b) + metadata_changes(a.metadata(), b.metadata())
    return rows, meta, structure_changes(a, b)


def _exact_row(spec: CompareSpec, key: tuple, xa, xb) -> dict:
    """Computed values (predictions): the same or changed, with the relative change."""
    va, vb = float(np.median(xa)), float(np.median(xb))
    same = sorted(xa.tolist()) == sorted(xb.tolist())
    return {
        "experiment": spec.label,
        "key": " / ".join(map(str, key)),
        "unit": spec.unit,
        "median_a": va,
        "median_b": vb,
        "n_a": len(xa),
        "n_b": len(xb),
        "change_pct": 100 * (vb / va - 1) if va else 0.0,
        "ci_low_pct": None,
        "ci_high_pct": None,
        "drift_pct": None,
        "verdict": "same (computed)" if same else "changed (computed)",
    }


def _percent(text: str) -> float:
    import argparse

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def register(sub) -> None:
    p = sub.add_parser("compare", help="compare two runs, with significance", description=__doc__)
    p.add_argument("run_a", metavar="RUN_A")
    p.add_argument("run_b", metavar="RUN_B")
    p.add_argument("--csv", metavar="FILE", help="also write the comparison as CSV")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument(
        "--threshold",
        type=_percent,
        default=2.0,
        metavar="PCT",
        help="changes smaller than this (percent) are reported as small even when "
        "significant (default 2)",
    )
    p.set_defaults(func=run)


def run(args) -> int:
    if not 0 <= args.threshold < 100:
        raise UserError(f"--threshold {args.threshold!r} must be a percentage from 0 to 100")
    csv_path = files.check_output_file(args.csv, "--csv") if args.csv else None
    rows, changes, structure = compare(
        Path(args.run_a), Path(args.run_b), threshold=args.threshold / 100
    )
    if args.json:
        print(
            json.dumps(
                {"rows": rows, "metadata_changes": changes, "structure_changes": structure},
                indent=2,
            )
        )
    else:
        if changes:
            print("Metadata that differs (may explain the differences):")
            for k, va, vb in changes:
                print(f"  {k}: {va}  ->  {vb}")
        if structure:
            print("Structure that differs (tables, columns, rows, cells):")
            for line in structure:
                print(f"  {line}")
        else:
            print("Structure: the same tables, columns, row counts and cells in both runs.")
        if not rows:
            raise UserError("the two runs have no measurement in common to compare")
        width = max(len(r["key"]) for r in rows)
        print(
            f"{'experiment':<11} {'measurement':<{width}} {'A':>10} {'B':>10} "
            f"{'change':>8} {'95% CI':>18}  verdict"
        )
        for r in rows:
            ci = (
                f"[{r['ci_low_pct']:+.1f}, {r['ci_high_pct']:+.1f}]%"
                if r["ci_low_pct"] is not None
                else "computed"
            )
            print(
                f"{r['experiment']:<11} {r['key']:<{width}} {r['median_a']:>10.4g} "
                f"{r['median_b']:>10.4g} {r['change_pct']:>+7.1f}% {ci:>18}  {r['verdict']}"
            )
    if csv_path is not None:
        text = io.StringIO(newline="")
        w = csv.DictWriter(text, fieldnames=list(rows[0]) if rows else ["experiment"])
        w.writeheader()
        w.writerows(rows)
        files.write_file(csv_path, text.getvalue())
        print(f"written: {args.csv}", file=sys.stderr)
    return 0
