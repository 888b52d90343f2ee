"""Key, ciphertext and signature sizes: raw (as the algorithm defines them) and encoded as
in practice (DER SubjectPublicKeyInfo, PKCS#8, DER signatures), with observed min-max where
the encoding varies (RSA private keys, ECDSA signatures, Falcon signatures).

Both `pqlab sizes` and `pqlab primitives` store the engine's `sizes` records in
`primitive_sizes` (one row per algorithm, backend and field); `export()` builds
tables/sizes.csv from all of them.
"""

from __future__ import annotations

from pqlab import estimate
from pqlab.estimate import Cost
from pqlab.experiment import Experiment
from pqlab.experiments.sizes import plan as _plan
from pqlab.experiments.sizes import report as _report
from pqlab.experiments.sizes import run as _run
from pqlab.experiments.sizes.plan import CELLS, NAME, OPTIONS, Plan

# This experiment's units of work and their costs (`pqlab.estimate`: the model, its shared
# units and the runs the costs were measured from).
COSTS: dict[str, Cost] = {
    "sizes.cell": Cost(
        0.054, "DEFAULT's sizes step: (15.71 s - 14.26 s of modelled phases) / 27 cells"
    ),
    "sizes.export": Cost(0.53, "sizes: 0.53 s (DEFAULT and QUICK, 27 cells)"),
}


class Sizes(Experiment):
    name = NAME
    help = "key, ciphertext and signature sizes (raw and DER)"
    description = (
        "Public key, secret key, ciphertext, shared secret and signature sizes, raw and as "
        "encoded in practice (DER SPKI, PKCS#8, DER signatures), with observed ranges."
    )
    cells = CELLS
    options = OPTIONS
    costs = COSTS
    plan_module, run_module, report_module = _plan, _run, _report

    def cell_ids(self, plan: Plan) -> set[str]:
        return {str(c.cell_id) for c in plan.cells}

    def resume_key(self, plan: Plan) -> dict:
        return {"samples": plan.samples}

    def work(self, plan: Plan) -> estimate.Work:
        """Per cell one engine run of --samples iterations and no warm-up (the
        primitives' operations, `estimate.OPERATIONS`), and its own start and rows."""
        size = f"{estimate.count(len(plan.cells), 'cell')} x {plan.samples} samples"
        work = estimate.Work(costs=COSTS, size=size, cells=len(plan.cells))
        work.add("sizes.cell", len(plan.cells))
        estimate.add_engine_runs(work, plan.cells, plan.samples, 0, plan.max_seconds)
        return work


EXPERIMENT = Sizes()
