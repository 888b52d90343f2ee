"""Measuring the primitives experiment: the engine's (or the Python harness's) `kem` / `sig`
run per cell, every timed run stored, the machine's warnings and each process's cost.
"""

from __future__ import annotations

import json

from pqlab import metadata, procstat, stats
from pqlab.algorithms import python as pp
from pqlab.algorithms import sizes as sizes_exp
from pqlab.algorithms.selection import (
    Cell,
    shared_keygen,
)
from pqlab.errors import EngineError
from pqlab.experiments.primitives import wolfcrypt as primitives_wolfcrypt
from pqlab.experiments.primitives.plan import CELLS, MACHINE, NAME, WOLFCRYPT, Plan
from pqlab.experiments.primitives.schema import RESOURCES_DDL, RUNS_DDL, SAMPLES_DDL
from pqlab.process import EngineProcess, Process
from pqlab.procstat import PeakRss
from pqlab.progress import CellProgress
from pqlab.stats import Cause, Warning_
from pqlab.store import RunStore

# Every column but `algorithm` (a shared key generation is copied under another name).
SAMPLE_COLUMNS = ("backend", "operation", "i", "ns", "cycles", "dropped")


RUN_COLUMNS = (
    "backend", "kind", "operation", "engine_args", "iterations", "warmup", "max_seconds",
    "timed_runs", "kept", "warmup_runs", "budget_exhausted", "phase_seconds", "checks_passed",
    "negative_checks", "seconds_per_op",
)  # fmt: skip


OPERATIONS = {
    "kem": ("keygen", "encaps", "decaps"),
    "kex": ("keygen", "public_key", "shared_secret"),
    "sig": ("keygen", "sign", "verify"),
}


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
