"""Primitive operations: KEM / key-agreement / signature timings per (algorithm, backend).

Measuring runs the engine's `kem` / `sig` subcommands (one cell per algorithm and backend)
and stores every timed run in `primitive_samples`; `export()` recomputes every statistic
from those raw samples (tables/primitives.csv, figures, report section), so
`pqlab report RUN` rebuilds the same numbers at any time. See docs/primitives.md.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass

import numpy as np

from pqlab import catalog, estimate, metadata, procstat, stats, units
from pqlab.algorithms import python as pp
from pqlab.algorithms.selection import (
    SELECTION_OPTIONS,
    Cell,
    selection,
    shared_keygen,
)
from pqlab.errors import EngineError, UserError
from pqlab.experiment import CellId, Cells, CompareSpec, Experiment, Option
from pqlab.experiments import sizes as sizes_exp
from pqlab.experiments.primitives import figures as figs
from pqlab.experiments.primitives import report as primitives_report
from pqlab.experiments.primitives import wolfcrypt as primitives_wolfcrypt
from pqlab.process import EngineProcess, Process
from pqlab.procstat import PeakRss
from pqlab.progress import CellProgress
from pqlab.report.section import Section
from pqlab.stats import Cause, Warning_
from pqlab.store import RunStore

NAME = "primitives"
MACHINE = "__machine__"  # the auxiliary cell holding the machine's warnings
WOLFCRYPT = "__wolfcrypt__"  # the auxiliary cell of wolfCrypt's own benchmark
CELLS = Cells(NAME, ("algorithm", "backend"), aux=(MACHINE, WOLFCRYPT))

SAMPLES_DDL = """
CREATE TABLE IF NOT EXISTS primitive_samples (
    algorithm TEXT, backend TEXT, operation TEXT, i INTEGER, ns BIGINT, cycles BIGINT,
    dropped BOOLEAN)
"""
RUNS_DDL = """
CREATE TABLE IF NOT EXISTS primitive_runs (
    algorithm TEXT, backend TEXT, kind TEXT, operation TEXT, engine_args JSON,
    iterations INTEGER, warmup INTEGER, max_seconds DOUBLE, timed_runs INTEGER,
    kept INTEGER, warmup_runs INTEGER, budget_exhausted BOOLEAN, phase_seconds DOUBLE,
    checks_passed BIGINT, negative_checks JSON, seconds_per_op DOUBLE)
"""
# Every column but `algorithm` (a shared key generation is copied under another name).
SAMPLE_COLUMNS = ("backend", "operation", "i", "ns", "cycles", "dropped")
RUN_COLUMNS = (
    "backend", "kind", "operation", "engine_args", "iterations", "warmup", "max_seconds",
    "timed_runs", "kept", "warmup_runs", "budget_exhausted", "phase_seconds", "checks_passed",
    "negative_checks", "seconds_per_op",
)  # fmt: skip
# Runs made before the fixed-time mode.
MIGRATIONS = (
    "ALTER TABLE IF EXISTS primitive_runs ADD COLUMN IF NOT EXISTS seconds_per_op DOUBLE",
)
# What each cell's measuring process cost the machine (document 000 says the load is
# negligible): wall and CPU time (getrusage of the finished process), its peak resident set,
# and for the python harness its own per-sample floor and library versions.
RESOURCES_DDL = """
CREATE TABLE IF NOT EXISTS primitive_resources (
    algorithm TEXT, backend TEXT, program TEXT, wall_s DOUBLE, cpu_user_s DOUBLE,
    cpu_sys_s DOUBLE, max_rss_kib BIGINT, samples BIGINT, timer_overhead_ns BIGINT,
    harness JSON)
"""
# A temporary table: derived at export time from the raw samples, never stored (exports read
# the run read-only).
SUMMARY_DDL = """
CREATE OR REPLACE TEMP TABLE primitive_summary (
    algorithm TEXT, backend TEXT, operation TEXT, n INTEGER, mean_us DOUBLE, sd_us DOUBLE,
    q1_us DOUBLE, median_us DOUBLE, q3_us DOUBLE, robust_cv DOUBLE, min_us DOUBLE,
    max_us DOUBLE, p90_us DOUBLE, p99_us DOUBLE, ops_per_s DOUBLE, median_cycles DOUBLE,
    kind TEXT, family TEXT, nist_level INTEGER, budget_exhausted BOOLEAN)
"""
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
OPERATIONS = {
    "kem": ("keygen", "encaps", "decaps"),
    "kex": ("keygen", "public_key", "shared_secret"),
    "sig": ("keygen", "sign", "verify"),
}
OP_ORDER = ["keygen", "encaps", "decaps", "public_key", "shared_secret", "sign", "verify"]


def governor_warnings() -> list[Warning_]:
    cpu = metadata.cpu_info()
    gov = cpu.get("governor", "unavailable")
    out = []
    if gov not in ("performance", "unavailable"):
        out.append(
            Warning_(
                Cause.FREQUENCY_SCALING,
                "CPU",
                f"frequency governor is '{gov}'",
                "the clock speed changes under load and skews short timings; pin it with "
                "'cpupower frequency-set -g performance' (or write 'performance' to "
                "/sys/devices/system/cpu/cpu*/cpufreq/scaling_governor) and rerun",
            )
        )
    if cpu.get("turbo") == "on":
        out.append(
            Warning_(
                Cause.TURBO,
                "CPU",
                "turbo/boost is on",
                "boost clocks depend on temperature and load; disable it for stable numbers "
                "(intel_pstate/no_turbo=1 or cpufreq/boost=0), or compare only runs made together",
            )
        )
    return out


# --- measuring -------------------------------------------------------------------------


def skipped_warnings(skipped: list[str], backend: str) -> list[Warning_]:
    if not skipped:
        return []
    where = "no backend of this build" if backend == "all" else f"--backend {backend}"
    return [
        Warning_(
            Cause.NOT_MEASURED,
            "default set",
            f"{', '.join(skipped)} not measured: not provided by {where}",
            "see 'pqlab algorithms' for what each backend provides",
        )
    ]


def run_cells(
    store: RunStore,
    cells: list[Cell],
    iterations: int,
    warmup: int,
    max_seconds: float | None,
    skipped_warning: list[Warning_] = (),
    seconds: float | None = None,
    wolfcrypt: bool = False,
) -> None:
    store.ensure_table(SAMPLES_DDL)
    store.ensure_table(RUNS_DDL)
    store.ensure_table(RESOURCES_DDL)
    store.ensure_table(sizes_exp.SIZES_DDL)
    done = CELLS.done(store)
    shared = shared_keygen(cells)
    # A cell whose key generation another times runs after it (its samples are copied).
    todo = sorted((c for c in cells if c.cell_id not in done), key=lambda c: c.cell_id in shared)
    machine = CELLS.auxiliary(MACHINE)
    if machine not in done:
        with store.cell(NAME, machine, {}):
            store.add_warnings(NAME, machine, governor_warnings() + list(skipped_warning))
    with CellProgress("primitives", len(cells)) as progress:
        progress.advance(len(cells) - len(todo))
        for cell in todo:
            progress.start(f"{cell.algorithm.name} ({cell.backend})")
            measure_cell(
                store, cell, iterations, warmup, max_seconds, seconds, shared.get(cell.cell_id)
            )
            progress.advance()
    bench = CELLS.auxiliary(WOLFCRYPT)
    if wolfcrypt and bench not in done:
        with CellProgress("wolfCrypt benchmark", 1) as progress:
            progress.start("wolfCrypt's own benchmark program")
            with store.cell(NAME, bench, {"args": primitives_wolfcrypt.flags()}):
                primitives_wolfcrypt.measure(store)
            progress.advance()


def _process(cell: Cell, args: list[str]):
    """The measuring process of a cell: the engine, or the python harness (same protocol)."""

    what = f"{'python harness' if cell.backend == 'python' else 'engine'} {args[0]}"
    if cell.backend == "python":
        return Process(pp.command(args), what, env=pp.environment())
    return EngineProcess(args, what)


def _usage(proc, wall_s: float, peak_kib: int | None, samples: int, start_rec: dict) -> dict:
    """What the finished process cost: wall, CPU (its rusage) and peak RSS (VmHWM, KiB)."""

    user, system = procstat.cpu_seconds(proc)
    harness = start_rec.get("harness")
    return {
        "program": "python -m pqlab.algorithms.python" if harness else "pqlab-engine",
        "wall_s": wall_s,
        "cpu_user_s": user,
        "cpu_sys_s": system,
        "max_rss_kib": peak_kib,
        "samples": samples,
        "timer_overhead_ns": (harness or {}).get("timer_overhead_ns"),
        "harness": json.dumps(harness) if harness else None,
    }


def _read_cell(cell: Cell, args: list[str], max_seconds: float | None, seconds: float | None):
    """The measuring process's records for one cell: samples (columns), op_done records, the
    checks and sizes records, and what the process cost; EngineError naming the cell if
    anything is missing or a check failed."""
    import time

    samples: dict[str, list] = {k: [] for k in ("operation", "i", "ns", "cycles", "dropped")}
    op_done, found = [], {}
    # Three timed phases, each bounded by --max-seconds (or a day without one; in fixed-time
    # mode by twice --seconds per operation, and one operation's run beyond it), plus start-up.
    bound = max_seconds or (4 * seconds + 60 if seconds else 86_400)
    timeout = 3 * bound + 600
    started = time.monotonic()
    try:
        proc = _process(cell, args)
        memory = PeakRss(proc.pid)
        try:
            for rec in proc.iter_records(timeout):
                t = rec["type"]
                if t == "sample":
                    samples["operation"].append(rec["op"])
                    samples["i"].append(rec["index"])
                    samples["ns"].append(rec["ns"])
                    samples["cycles"].append(rec.get("cycles"))
                    samples["dropped"].append(bool(rec["dropped"]))
                elif t == "op_done":
                    op_done.append(rec)
                elif t in ("checks", "sizes", "start"):
                    found[t] = rec
            peak = memory.stop()  # before the exit is reaped: the image is still there
            proc.finish(10)
            wall = time.monotonic() - started
        finally:
            memory.stop()
            proc.stop()
    except EngineError as e:
        raise type(e)(f"{cell.algorithm.name} ({cell.backend}): {e}") from None
    if "checks" not in found or "sizes" not in found or not op_done:
        raise EngineError(
            f"{cell.algorithm.name} ({cell.backend}): the measuring process's output is "
            "incomplete (no checks/sizes record)"
        )
    # The process reports its own VmHWM in its last record; sampling from outside can miss a
    # run shorter than the sampling interval (or see only the image just after exec).
    own = found["sizes"].get("vm_hwm_kib")
    peak = max((v for v in (peak, own) if v is not None), default=None)
    usage = _usage(proc, wall, peak, len(samples["i"]), found.get("start", {}))
    return samples, op_done, found["checks"], found["sizes"], usage


def _cell_warnings(cell: Cell, samples: dict, op_done: list[dict]) -> list[Warning_]:
    name, backend = cell.algorithm.name, cell.backend
    warnings = [
        Warning_(
            Cause.BUDGET,
            f"{name} ({backend}) {rec['op']}",
            f"time budget reached after {rec['kept']} of {rec['requested']} samples",
            "raise --max-seconds for more samples of slow operations",
        )
        for rec in op_done
        if rec["budget_exhausted"]
    ]
    for op in OPERATIONS[cell.algorithm.kind]:
        kept = [
            ns
            for o, ns, d in zip(
                samples["operation"], samples["ns"], samples["dropped"], strict=True
            )
            if o == op and not d
        ]
        if kept:
            warnings += stats.noise_warnings(
                f"{name} ({backend}) {op}",
                stats.summarize(kept),
                inherent=stats.inherent_variance(cell.algorithm.family, op),
            )
    return warnings


def measure_cell(
    store: RunStore,
    cell: Cell,
    iterations: int,
    warmup: int,
    max_seconds: float | None,
    seconds: float | None = None,
    keygen_from: Cell | None = None,
) -> None:
    """One cell's engine run and rows. `keygen_from`: the cell whose key generation is this
    one's (`selection.shared_keygen`), already measured: this run skips it and that cell's
    key generation samples and run are recorded under this cell's algorithm too."""
    args = cell.engine_args() + ["--iterations", str(iterations), "--warmup", str(warmup)]
    if max_seconds:
        args += ["--max-seconds", f"{max_seconds:g}"]
    if seconds:
        args += ["--seconds", f"{seconds:g}"]
    if keygen_from is not None:
        args.append("--skip-keygen")
    samples, op_done, checks, size_rec, usage = _read_cell(cell, args, max_seconds, seconds)
    n = len(samples["i"])
    name, backend = cell.algorithm.name, cell.backend
    warnings = _cell_warnings(cell, samples, op_done)
    with store.cell(NAME, cell.cell_id, {"args": args}):
        store.insert(
            "primitive_samples", {"algorithm": [name] * n, "backend": [backend] * n, **samples}
        )
        store.insert_rows(
            "primitive_runs",
            [
                {
                    "algorithm": name,
                    "backend": backend,
                    "kind": cell.algorithm.kind,
                    "operation": r["op"],
                    "engine_args": json.dumps(args),
                    "iterations": iterations,
                    "warmup": warmup,
                    "max_seconds": max_seconds,
                    "timed_runs": r["timed_runs"],
                    "kept": r["kept"],
                    "warmup_runs": r["warmup_runs"],
                    "budget_exhausted": r["budget_exhausted"],
                    "phase_seconds": r["phase_seconds"],
                    "checks_passed": checks["passed"],
                    "negative_checks": json.dumps(checks["negative"]),
                    "seconds_per_op": r.get("seconds_per_op"),
                }
                for r in op_done
            ],
        )
        if keygen_from is not None:
            _copy_keygen(store, keygen_from, name)
        sizes_exp.store_sizes(store, NAME, cell, size_rec)
        store.insert_rows("primitive_resources", [{"algorithm": name, "backend": backend, **usage}])
        store.add_warnings(NAME, cell.cell_id, warnings)


def _copy_keygen(store: RunStore, source: Cell, name: str) -> None:
    """`source`'s key generation samples and run row recorded again as `name`'s (the same
    operation: see the catalogue's `same_keys_as`); the run row keeps the engine arguments
    that made them."""
    where = "WHERE algorithm = ? AND backend = ? AND operation = 'keygen'"
    key = [source.algorithm.name, source.backend]
    with store.stages.stage("database_writes"):
        for table, columns in (
            ("primitive_samples", SAMPLE_COLUMNS),
            ("primitive_runs", RUN_COLUMNS),
        ):
            cols = ", ".join(columns)
            store.con.execute(
                f"INSERT INTO {table} (algorithm, {cols}) SELECT ?, {cols} FROM {table} {where}",
                [name, *key],
            )
    copied = store.query(
        f"SELECT count(*) AS n FROM primitive_runs {where}", [name, source.backend]
    )[0]["n"]
    if copied != 1:
        raise EngineError(
            f"{name} ({source.backend}): {source.algorithm.name}'s key generation, which it "
            "shares, is not in this run"
        )


# --- export ----------------------------------------------------------------------------


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


# --- the experiment ---------------------------------------------------------------------------

DEFAULT_ITERATIONS = 1000
MAX_ITERATIONS = 1_000_000  # samples are kept in memory by the engine (16 bytes each)
MAX_WARMUP = 100_000
MAX_SECONDS = 86_400.0


@dataclass
class Plan:
    cells: list[Cell]
    skipped: list[str]
    backend: str
    iterations: int
    warmup: int
    max_seconds: float | None
    seconds: float | None = None  # fixed-time mode: own seconds per operation
    wolfcrypt: bool = False  # also run wolfCrypt's own benchmark (document 004)


def from_values(values) -> Plan:
    seconds = None
    if getattr(values, "seconds", None) is not None:
        seconds = units.parse_duration(values.seconds, "--seconds")
        if not 0 < seconds <= MAX_SECONDS:
            raise UserError(f"--seconds {values.seconds!r}: above 0 and at most 86400")
    default = MAX_ITERATIONS if seconds else DEFAULT_ITERATIONS
    iterations = units.parse_positive_int(values.iterations or str(default), "--iterations")
    if iterations > MAX_ITERATIONS:
        raise UserError(f"--iterations {values.iterations!r}: at most {MAX_ITERATIONS}")
    warmup = units.parse_positive_int(values.warmup, "--warmup", minimum=0)
    if warmup > MAX_WARMUP:
        raise UserError(f"--warmup {values.warmup!r}: at most {MAX_WARMUP}")
    max_seconds = units.parse_duration(values.max_seconds, "--max-seconds")
    if max_seconds > MAX_SECONDS:
        raise UserError(f"--max-seconds {values.max_seconds!r}: at most 86400 (one day)")
    cells, skipped = selection(values, python_ok=True)
    wolfcrypt = bool(getattr(values, "wolfcrypt_benchmark", False))
    if wolfcrypt:
        primitives_wolfcrypt.program()  # built, or one clear error now
        if not (values.kem or values.sig):
            cells = primitives_wolfcrypt.with_compared(cells, values.backend)
    if seconds and any(c.backend == "python" for c in cells):
        raise UserError(
            "--seconds: the python harness has no fixed-time mode; use --iterations with "
            "--backend python, or --seconds with openssl and liboqs"
        )
    return Plan(
        cells,
        skipped,
        values.backend,
        iterations,
        warmup,
        max_seconds or None,
        seconds,
        wolfcrypt,
    )


def measure(plan: Plan, store) -> None:
    run_cells(
        store,
        plan.cells,
        plan.iterations,
        plan.warmup,
        plan.max_seconds,
        skipped_warnings(plan.skipped, plan.backend),
        plan.seconds,
        plan.wolfcrypt,
    )


class Primitives(Experiment):
    name = NAME
    help = "time KEM and signature operations (keygen, encaps/decaps, sign/verify)"
    description = __doc__.split("\n\n")[0]
    cells = CELLS
    migrations = MIGRATIONS
    options = (
        *SELECTION_OPTIONS,
        Option(
            "iterations",
            f"kept timed runs per operation (one more is made first and dropped; at most "
            f"{MAX_ITERATIONS}; default {DEFAULT_ITERATIONS}, or with --seconds the most "
            "runs allowed)",
            metavar="N",
            short="-n",
        ),
        Option(
            "seconds",
            "fixed-time mode, like liboqs's speed_kem / speed_sig (document 004's table): each "
            "operation runs until it has spent at least S seconds in its own timed runs, as "
            "many runs as fit; tables/primitives_speed.csv has that table's columns",
            metavar="S",
        ),
        Option(
            "wolfcrypt-benchmark",
            "also run wolfCrypt's own benchmark program (built with wolfSSL by 'make engine') for the "
            "algorithms document 004 lists, and set its rows beside pqlab's OpenSSL and liboqs "
            "measurement of the same operation (tables/primitives_wolfcrypt.csv); without "
            "--kem/--sig those algorithms are added to the default set",
            flag=True,
        ),
        Option(
            "warmup",
            "untimed runs per phase before timing (at most 2 s)",
            default="10",
            metavar="N",
        ),
        Option(
            "max-seconds",
            "time budget per phase (key generation; the pair of operations that use a key) "
            "so very slow operations stop early; 0 = none",
            default="60",
            metavar="S",
        ),
    )
    compare = (
        CompareSpec(
            "primitives",
            "primitive_samples",
            ("algorithm", "backend", "operation"),
            "ns / 1e3",
            "us",
            where="NOT coalesce(dropped, FALSE)",
        ),
    )

    def resume_key(self, plan: Plan) -> dict:
        key = {"iterations": plan.iterations, "warmup": plan.warmup, "seconds": plan.seconds}
        if plan.wolfcrypt:
            # Another wolfSSL build is another library: a resume must use the same.
            described = primitives_wolfcrypt.describe()
            key["wolfcrypt"] = {k: described[k] for k in ("version", "build_options")}
        if any(c.backend == "python" for c in plan.cells):
            # The python harness's library is not the engine's: a resume must use the same.
            harness = _python_versions()
            key["python_harness"] = {k: harness[k] for k in ("cryptography", "openssl")}
        return key

    def work(self, plan: Plan) -> estimate.Work:
        """Per cell one engine run: its two phases priced from the algorithm's measured
        operations (`estimate.OPERATIONS`), capped by --max-seconds, and the run's own
        start, checks and rows; wolfCrypt's benchmark once."""
        what = f"{plan.seconds:g} s per operation" if plan.seconds else f"{plan.iterations}"
        size = f"{estimate.count(len(plan.cells), 'cell')} x {what}" + (
            " iterations" if not plan.seconds else ""
        )
        work = estimate.Work(size, cells=len(plan.cells))
        work.add("primitives.cell", len(plan.cells))
        estimate.add_engine_runs(
            work,
            plan.cells,
            plan.iterations,
            plan.warmup,
            plan.max_seconds,
            plan.seconds,
            shared=shared_keygen(plan.cells),
        )
        if plan.wolfcrypt:
            work.size += ", wolfCrypt's benchmark"
            work.add("primitives.wolfcrypt_benchmark", 1)
        return work

    def metadata(self, plan: Plan) -> dict:
        out = {}
        if any(c.backend == "python" for c in plan.cells):
            out["python_harness"] = _python_versions()
        if plan.wolfcrypt:
            out["wolfcrypt_benchmark"] = primitives_wolfcrypt.describe()
        return out


def _python_versions() -> dict:

    return pp.versions()


EXPERIMENT = Primitives()
