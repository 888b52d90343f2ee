"""`pqlab certs`: a root CA and a server certificate per (CA algorithm, server algorithm)
pair, made by the engine's certificate builder (`pqlab.tls.chains`), and their DER sizes
(the source document's tables 14 and 15), with whether the chosen TLS stack can serve each
chain and, when it cannot, why.
"""

from __future__ import annotations

from pqlab import estimate
from pqlab.estimate import Cost
from pqlab.experiment import Experiment
from pqlab.experiments.certs import plan as _plan
from pqlab.experiments.certs import report as _report
from pqlab.experiments.certs import run as _run
from pqlab.experiments.certs.plan import CELLS, NAME, OPTIONS, Plan
from pqlab.experiments.certs.schema import MIGRATIONS

# This experiment's units of work and their costs (`pqlab.estimate`: the model, its shared
# units and the runs the costs were measured from).
COSTS: dict[str, Cost] = {
    "certs.export": Cost(0.01, "certs: 0.01 s (64 and 16 cells)"),
}


class Certs(Experiment):
    name = NAME
    help = "certificate sizes per CA x server signature algorithm"
    description = __doc__.split("\n\n")[0]
    cells = CELLS
    migrations = MIGRATIONS
    options = OPTIONS
    costs = COSTS
    plan_module, run_module, report_module = _plan, _run, _report

    def work(self, plan: Plan) -> estimate.Work:
        """Per (CA, server) pair one chain (an engine run and the server's key), per CA
        its root's key."""
        cells = len(plan.ca_sigs) * len(plan.server_sigs)
        size = estimate.count(len(plan.ca_sigs), "CA") + " x "
        size += estimate.count(len(plan.server_sigs), "server algorithm")
        work = estimate.Work(costs=COSTS, size=size, cells=cells)
        work.add("chain", cells)
        for alg in plan.ca_sigs:
            work.add("operation_seconds", estimate.keygen_s(alg))
        for alg in plan.server_sigs:
            work.add("operation_seconds", len(plan.ca_sigs) * estimate.keygen_s(alg))
        return work


EXPERIMENT = Certs()
