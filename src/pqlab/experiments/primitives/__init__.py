"""Primitive operations: KEM / key-agreement / signature timings per (algorithm, backend).

Measuring runs the engine's `kem` / `sig` subcommands (one cell per algorithm and backend)
and stores every timed run in `primitive_samples`; `export()` recomputes every statistic
from those raw samples (tables/primitives.csv, figures, report section), so
`pqlab report RUN` rebuilds the same numbers at any time. See docs/primitives.md.
"""

from __future__ import annotations

from pqlab import estimate
from pqlab.algorithms import python as pp
from pqlab.algorithms.selection import (
    shared_keygen,
)
from pqlab.estimate import Cost
from pqlab.experiment import CompareSpec, Experiment
from pqlab.experiments.primitives import plan as _plan
from pqlab.experiments.primitives import report as _report
from pqlab.experiments.primitives import run as _run
from pqlab.experiments.primitives import wolfcrypt as primitives_wolfcrypt
from pqlab.experiments.primitives.plan import CELLS, NAME, OPTIONS, Plan
from pqlab.experiments.primitives.schema import MIGRATIONS

# This experiment's units of work and their costs (`pqlab.estimate`: the model, its shared
# units and the runs the costs were measured from).
COSTS: dict[str, Cost] = {
    "primitives.cell": Cost(
        0.074,
        "DEFAULT's primitives step: (295.7 s - 22.0 s of wolfCrypt's benchmark - 271.1 s of "
        "modelled phases) / 34 cells",
    ),
    "primitives.wolfcrypt_benchmark": Cost(
        22.0, "DEFAULT's primitives step: the benchmark program's wall_s"
    ),
    "primitives.export": Cost(
        14.3, "primitives, figures drawn by workers: 14.1 s (DEFAULT), 14.5 s (QUICK)"
    ),
}


class Primitives(Experiment):
    name = NAME
    help = "time KEM and signature operations (keygen, encaps/decaps, sign/verify)"
    description = __doc__.split("\n\n")[0]
    cells = CELLS
    migrations = MIGRATIONS
    options = OPTIONS
    costs = COSTS
    plan_module, run_module, report_module = _plan, _run, _report
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

    def cell_ids(self, plan: Plan) -> set[str]:
        return {str(c.cell_id) for c in plan.cells}

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
        work = estimate.Work(costs=COSTS, size=size, cells=len(plan.cells))
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
