"""The primitives experiment's tables, figures and report section, every statistic recomputed
from the raw samples.
"""

from __future__ import annotations

import html

import numpy as np

from pqlab import catalog, stats
from pqlab.algorithms import sizes as sizes_exp
from pqlab.errors import UserError
from pqlab.experiment import CellId
from pqlab.experiments.primitives import figures as figs
from pqlab.experiments.primitives import findings as primitives_report
from pqlab.experiments.primitives import wolfcrypt as primitives_wolfcrypt
from pqlab.experiments.primitives.plan import NAME
from pqlab.experiments.primitives.schema import SUMMARY_DDL
from pqlab.report.section import Section
from pqlab.store import RunStore

SUMMARY_COLUMNS = [
    "algorithm",
    "backend",
    "operation",
    "n",
    "mean_us",
    "sd_us",
    "q1_us",
    "median_us",
    "q3_us",
    "robust_cv",
    "min_us",
    "max_us",
    "p90_us",
    "p99_us",
    "ops_per_s",
]


OP_ORDER = ["keygen", "encaps", "decaps", "public_key", "shared_secret", "sign", "verify"]


def _op_rank(op: str) -> int:
    return OP_ORDER.index(op) if op in OP_ORDER else len(OP_ORDER)


def summaries(store: RunStore) -> list[dict]:
    """One row per (algorithm, backend, operation), computed from the kept raw samples."""
    rows = store.query(
        "SELECT algorithm, backend, operation, list(ns ORDER BY i) AS ns, "
        "list(cycles ORDER BY i) AS cycles FROM primitive_samples WHERE NOT dropped "
        "GROUP BY algorithm, backend, operation"
    )
    budget = {
        (r["algorithm"], r["backend"], r["operation"]): r["b"]
        for r in store.query(
            "SELECT algorithm, backend, operation, bool_or(budget_exhausted) AS b "
            "FROM primitive_runs GROUP BY ALL"
        )
    }
    out = []
    for r in rows:
        us = np.asarray(r["ns"], dtype=float) / 1000.0
        s = stats.summarize(us)
        cyc = [c for c in r["cycles"] if c is not None]
        try:
            alg = catalog.resolve(r["algorithm"])
            kind, family, level = alg.kind, alg.family, alg.nist_level
        except UserError:
            kind, family, level = None, None, None
        out.append(
            {
                "algorithm": r["algorithm"],
                "backend": r["backend"],
                "operation": r["operation"],
                "n": s["n"],
                "mean_us": s["mean"],
                "sd_us": s["sd"],
                "q1_us": s["q1"],
                "median_us": s["median"],
                "q3_us": s["q3"],
                "robust_cv": s["robust_cv"],
                "min_us": s["min"],
                "max_us": s["max"],
                "p90_us": s["p90"],
                "p99_us": s["p99"],
                "ops_per_s": 1e6 / s["mean"] if s["mean"] > 0 else None,
                "median_cycles": float(np.median(cyc)) if cyc else None,
                "kind": kind,
                "family": family,
                "nist_level": level,
                "budget_exhausted": bool(
                    budget.get((r["algorithm"], r["backend"], r["operation"]))
                ),
                "_us": us,
            }
        )
    order = {}
    for r in store.query(
        "SELECT cell_id, min(rowid) AS k FROM cells WHERE experiment = ? GROUP BY cell_id",
        [NAME],
    ):
        order[r["cell_id"]] = r["k"]
    out.sort(
        key=lambda r: (
            order.get(str(CellId((r["algorithm"], r["backend"]))), 1 << 30),
            r["algorithm"],
            r["backend"],
            _op_rank(r["operation"]),
        )
    )
    return out


def backend_ratios(rows: list[dict]) -> list[dict]:
    """OpenSSL median / liboqs median for every algorithm and operation measured on both."""
    by = {(r["algorithm"], r["operation"], r["backend"]): r for r in rows}
    out = []
    for (alg, op, backend), r in by.items():
        other = by.get((alg, op, "liboqs"))
        if backend == "openssl" and other:
            out.append(
                {
                    "algorithm": alg,
                    "operation": op,
                    "openssl_median_us": r["median_us"],
                    "liboqs_median_us": other["median_us"],
                    "openssl_over_liboqs": r["median_us"] / other["median_us"],
                }
            )
    out.sort(key=lambda x: (x["algorithm"], _op_rank(x["operation"])))
    return out


def export(store: RunStore) -> Section | None:
    if not store.has_table("primitive_samples"):
        return None
    rows = summaries(store)
    store.con.execute(SUMMARY_DDL)
    if rows:
        store.insert_rows(
            "primitive_summary", [{k: v for k, v in r.items() if k != "_us"} for r in rows]
        )
    cols = ", ".join(SUMMARY_COLUMNS + ["median_cycles", "kind", "budget_exhausted"])
    csv_path = store.export_table(
        "primitives", f"SELECT {cols} FROM primitive_summary ORDER BY rowid"
    )
    ratios = backend_ratios(rows)
    store.con.execute(
        "CREATE OR REPLACE TEMP TABLE primitive_backend_ratios (algorithm TEXT, operation TEXT, "
        "openssl_median_us DOUBLE, liboqs_median_us DOUBLE, "
        "openssl_over_liboqs DOUBLE)"
    )
    if ratios:
        store.insert_rows("primitive_backend_ratios", ratios)
    ratio_csv = store.export_table(
        "primitive_backend_ratios", "SELECT * FROM primitive_backend_ratios ORDER BY rowid"
    )

    section = Section(
        "Primitive operations",
        intro=(
            "<p>Time of each key generation, encapsulation and decapsulation (key agreements: "
            "key generation, <i>public key</i> = exporting the key share and importing it as "
            "the peer does, <i>shared secret</i> = derive), and of each key generation, "
            "signature and verification, per algorithm and backend. Every timed operation "
            "was checked (decapsulation returned the encapsulated secret, both sides derived "
            "the same secret, every signature verified). Per operation the engine makes one "
            "extra timed run first and drops it, as the documents did; <b>n</b> counts the kept "
            "runs. Robust CV = IQR / median; above 10% the numbers are noisy. ops/s = 1 / mean. "
            "Prefer medians for comparisons: means are pulled up by interrupts and, for RSA key "
            "generation and ML-DSA signing, by the algorithms' own retry loops.</p>"
        ),
    )
    section.table(csv_path, "Summary per algorithm, backend and operation (microseconds)")
    speed = speed_table(store)
    if speed is not None:
        section.table(speed, SPEED_CAPTION)
    if ratios:
        items = "".join(
            f"<li>{html.escape(r['algorithm'])} {html.escape(r['operation'])}: OpenSSL "
            f"{r['openssl_median_us']:.1f} us, liboqs {r['liboqs_median_us']:.1f} us "
            f"(<b>{_ratio_text(r['openssl_over_liboqs'])}</b>)</li>"
            for r in ratios
        )
        section.text(
            "<p><b>The same algorithm in two libraries.</b> OpenSSL and liboqs implement "
            "ML-KEM and ML-DSA independently; liboqs uses AVX2 code where the CPU has it, "
            "OpenSSL 3.5 portable C, so their times differ several-fold. Numbers for one "
            "library do not carry over to the other.</p><ul>" + items + "</ul>"
        )
        section.table(ratio_csv, "Median time, OpenSSL / liboqs")

    primitives_report.add_to(section, store, rows)
    primitives_wolfcrypt.add_to(section, store, rows)
    for png, caption in figs.draw_all(store, rows, ratios):
        section.figure(png, caption)
    if "sizes" not in store.experiments():
        sizes_section = sizes_exp.export(store)
        if sizes_section is not None:
            section.blocks += sizes_section.blocks
    return section


def summarize(store: RunStore):
    """The experiment's part of the report's summary (see `primitives_report.summarize`)."""
    return primitives_report.summarize(store)


# Document 004's liboqs benchmark table (speed_kem / speed_sig output), derived from the
# kept raw samples: iterations, total time, mean and population standard deviation of the
# time and of the CPU cycles; pqlab's median and robust CV beside them.
SPEED_SQL = """
WITH runs AS (
    SELECT algorithm, backend, operation, any_value(seconds_per_op) AS seconds_per_op
    FROM primitive_runs GROUP BY ALL)
SELECT s.algorithm, s.backend, s.operation,
       count(*) AS iterations,
       round(sum(s.ns) / 1e9, 3) AS total_time_s,
       round(avg(s.ns) / 1e3, 3) AS mean_us,
       round(stddev_pop(s.ns) / 1e3, 3) AS pop_stdev_us,
       round(avg(s.cycles)) AS mean_cycles,
       round(stddev_pop(s.cycles)) AS pop_stdev_cycles,
       round(median(s.ns) / 1e3, 3) AS median_us,
       round((quantile_cont(s.ns, 0.75) - quantile_cont(s.ns, 0.25)) / median(s.ns), 4)
           AS robust_cv,
       any_value(r.seconds_per_op) AS seconds_per_op
FROM primitive_samples s LEFT JOIN runs r USING (algorithm, backend, operation)
WHERE NOT s.dropped
GROUP BY s.algorithm, s.backend, s.operation
ORDER BY min(s.rowid)
"""


SPEED_CAPTION = (
    "As liboqs's speed_kem / speed_sig print it (document 004's table of liboqs's KEMs): "
    "iterations, total time of the operation's own timed runs, mean and population standard "
    "deviation of time and CPU cycles, then pqlab's median and robust CV; seconds_per_op is "
    "set for a fixed-time run (--seconds, each operation timed for that long as liboqs "
    "does). For the round-3 Kyber rows document 004 printed (pqlab primitives --kem "
    "Kyber512,Kyber768,Kyber1024 --backend liboqs --seconds 3), its iterations, mean and "
    "mean cycles stand beside (document_*; Intel Core i7-1165G7, liboqs of 2022)"
)


SPEED_DOCUMENT = ("iterations", "mean_us", "mean_cycles")


def speed_table(store: RunStore):
    """tables/primitives_speed.csv: SPEED_SQL's rows with document 004's row of the same
    algorithm and operation beside (liboqs rows only: the document ran liboqs)."""
    document = primitives_wolfcrypt.liboqs_table()
    rows = []
    for r in store.query(SPEED_SQL):
        doc = document.get((r["algorithm"], r["operation"])) if r["backend"] == "liboqs" else None
        rows.append(r | {f"document_{k}": (doc or {}).get(k) for k in SPEED_DOCUMENT})
    columns = list(rows[0]) if rows else None
    return store.export_rows("primitives_speed", rows, columns)


def _ratio_text(r: float) -> str:
    if r >= 1:
        return f"OpenSSL {r:.1f}x slower"
    return f"OpenSSL {1 / r:.1f}x faster"
