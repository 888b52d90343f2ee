"""The AEAD throughput experiment: matrix, measurement through the engine, and its report.

Cells are (cipher, AES-NI on/off with a CPU mask, mode, direction, record size). The AES-NI
mask is applied by starting the engine with OPENSSL_ia32cap in its environment (OpenSSL
reads it before main); the engine reports the capability vector OpenSSL really uses, and
that is stored with every cell.
"""

from __future__ import annotations

from pqlab import estimate
from pqlab.experiment import CompareSpec, Experiment
from pqlab.experiments.aead import plan as _plan
from pqlab.experiments.aead import report as _report
from pqlab.experiments.aead import run as _run
from pqlab.experiments.aead.plan import CELLS, NAME, OPTIONS, Plan

# The estimate's cost of each mode's checks, per timed second (pqlab.estimate.COSTS).
CHECK_COSTS = {
    "fair": "aead.checks_fair_reference",
    "speed-compatible": "aead.checks_speed-compatible",
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
        work = estimate.Work(f"{estimate.count(cells, 'cell')} x {plan.seconds:g} s", cells=cells)
        work.exact_s = cells * plan.seconds
        for mode in plan.modes:  # each mode checks its records its own way
            work.add(CHECK_COSTS[mode], cells // len(plan.modes) * plan.seconds)
        work.add("aead.cell", cells)
        return work


EXPERIMENT = Aead()
