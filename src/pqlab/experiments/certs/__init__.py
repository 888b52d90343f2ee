"""`pqlab certs`: a root CA and a server certificate per (CA algorithm, server algorithm)
pair, made by the engine's certificate builder (`pqlab.tls.chains`), and their DER sizes
(the source document's tables 14 and 15), with whether the chosen TLS stack can serve each
chain and, when it cannot, why.
"""

from __future__ import annotations

from pqlab import estimate
from pqlab.experiment import Experiment
from pqlab.experiments.certs import plan as _plan
from pqlab.experiments.certs import report as _report
from pqlab.experiments.certs import run as _run
from pqlab.experiments.certs.plan import CELLS, NAME, OPTIONS, Plan
from pqlab.experiments.certs.schema import MIGRATIONS


class Certs(Experiment):
    name = NAME
    help = "certificate sizes per CA x server signature algorithm"
    description = __doc__.split("\n\n")[0]
    cells = CELLS
    migrations = MIGRATIONS
    options = OPTIONS
    plan_module, run_module, report_module = _plan, _run, _report

    def work(self, plan: Plan) -> estimate.Work:
        """Per (CA, server) pair one chain (an engine run and the server's key), per CA
        its root's key."""
        cells = len(plan.ca_sigs) * len(plan.server_sigs)
        size = estimate.count(len(plan.ca_sigs), "CA") + " x "
        size += estimate.count(len(plan.server_sigs), "server algorithm")
        work = estimate.Work(size, cells=cells)
        work.add("chain", cells)
        for alg in plan.ca_sigs:
            work.add("operation_seconds", estimate.keygen_s(alg))
        for alg in plan.server_sigs:
            work.add("operation_seconds", len(plan.ca_sigs) * estimate.keygen_s(alg))
        return work


EXPERIMENT = Certs()
