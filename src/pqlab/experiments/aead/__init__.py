"""The AEAD throughput experiment: matrix, measurement through the engine, and its report.

Cells are (cipher, AES-NI on/off with a CPU mask, mode, direction, record size). The AES-NI
mask is applied by starting the engine with OPENSSL_ia32cap in its environment (OpenSSL
reads it before main); the engine reports the capability vector OpenSSL really uses, and
that is stored with every cell.
"""

from __future__ import annotations

from pqlab import estimate
from pqlab.estimate import Cost
from pqlab.experiment import CompareSpec, Experiment
from pqlab.experiments.aead import plan as _plan
from pqlab.experiments.aead import report as _report
from pqlab.experiments.aead import run as _run
from pqlab.experiments.aead.plan import CELLS, NAME, OPTIONS, Plan

# The estimate's cost of each mode's checks, per timed second (COSTS).
CHECK_COSTS = {
    "fair": "aead.checks_fair_reference",
    "speed-compatible": "aead.checks_speed-compatible",
}


# This experiment's units of work and their costs (`pqlab.estimate`: the model, its shared
# units and the runs the costs were measured from).
COSTS: dict[str, Cost] = {
    # aead: beyond each cell's timed seconds, the checks (per timed second: fair mode compares
    # each batch with its verified reference records, speed-compatible streams run the
    # inverse operation over every record) and each cell's own start and rows.
    "aead.checks_fair_reference": Cost(
        0.14,
        "pqlab-engine aead --mode fair --seconds 0.25, six sizes, both directions (12 cells "
        "each, 2-core Xeon, load 9): aes-128-gcm 0.88 s and chacha20 0.45 s beyond 3.07 and "
        "3.06 timed seconds, less aead.cell: 0.21 and 0.07 a timed second (filling every "
        "slot before its batch and comparing every record after it, in proportion to the "
        "bytes; the faster cipher moves more of them)",
    ),
    "aead.checks_speed-compatible": Cost(
        1.01,
        "DEFAULT's speed-compatible aead step at 0.5 s: 12.6 s beyond 24 cells' 0.5 s, less "
        "aead.cell",
    ),
    "aead.cell": Cost(
        0.02,
        "DEFAULT's first aead step at --seconds 0.25 (240 cells, load 4-5 on 2 cores): "
        "65.9 s measured, 60.2 s timed, less aead.checks_fair_reference",
    ),
    "aead.export": Cost(1.41, "aead: 2.60 s for 264 cells, 1.95 s for 120"),
    "aead.export_cell": Cost(0.0045, "the same two, with aead.export"),
}


class Aead(Experiment):
    name = NAME
    help = "AEAD / cipher throughput, AES-NI on and off"
    description = (
        "AEAD and cipher throughput through OpenSSL, AES-NI on and off. Every record is a full "
        "init-update-final with a fresh nonce by default (fair); --mode speed-compatible "
        "drives OpenSSL as `openssl speed -evp` does, so the two can be compared. Every "
        "record is checked. Results: tables/aead.csv, figures, report section."
    )
    cells = CELLS
    options = OPTIONS
    costs = COSTS
    plan_module, run_module, report_module = _plan, _run, _report
    compare = (
        CompareSpec(
            "aead",
            "aead_windows",
            ("cipher", "aesni", "mode", "direction", "record_bytes"),
            "bytes * 1e3 / ns",
            "MB/s",
            better="higher",
            where="ns > 0",
        ),
    )

    def metadata(self, plan: Plan) -> dict:
        return {"aead_plan": plan.as_dict()}

    def resume_key(self, plan: Plan) -> dict:
        return {"seconds": plan.seconds}

    def work(self, plan: Plan) -> estimate.Work:
        """Per cell --seconds of timed work (fixed by the plan), the checks beside it (in
        proportion to it, at the mode's cost) and the cell's own start and rows."""
        runs = len(plan.environments()) * len(plan.modes) * len(plan.ciphers)
        runs *= len(plan.directions)
        cells = runs * len(plan.sizes)
        work = estimate.Work(
            costs=COSTS, size=f"{estimate.count(cells, 'cell')} x {plan.seconds:g} s", cells=cells
        )
        work.exact_s = cells * plan.seconds
        for mode in plan.modes:  # each mode checks its records its own way
            work.add(CHECK_COSTS[mode], cells // len(plan.modes) * plan.seconds)
        work.add("aead.cell", cells)
        return work


EXPERIMENT = Aead()
