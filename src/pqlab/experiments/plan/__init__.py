"""`pqlab plan`: predict a TLS 1.3 handshake's bytes, segments, round trips and time, and
TTLB for given responses, on a grid of paths, without running it: from the catalogue's
sizes, the certificate builder's chains, the stack's ClientHello and write model, and the
wire model (`pqlab.tls.predict`). Also where each extra round trip begins as the chain
grows (the cliffs) and, with --from/--to, a migration table. Needs no privileges.

Split by job: `plan` (options and validation), `run` (the predictions, cell by cell),
`schema` (database tables), `report` (tables, figures, report section, terminal lines).
"""

from __future__ import annotations

import sys

from pqlab import estimate
from pqlab.experiment import CompareSpec, Experiment
from pqlab.experiments.plan import calibrate as _calibrate
from pqlab.experiments.plan import plan as _plan
from pqlab.experiments.plan import report as _report
from pqlab.experiments.plan import run as _run
from pqlab.experiments.plan import schema as _schema

# A prediction's key: the configuration, the chain, the path and the signature size.
KEYS = (
    "stack", "group", "server_sig", "ca_sig", "intermediates", "client_sig", "chain", "path",
    "variant",
)  # fmt: skip


class PlanExperiment(Experiment):
    name = "plan"
    help = "predict handshake bytes, segments, round trips and times on a grid of paths"
    description = __doc__.split("\n\n")[0]
    needs_net = False  # but --calibrate does, and says so before anything is created
    options = _plan.OPTIONS
    migrations = _schema.MIGRATIONS
    cells = _plan.CELLS
    plan_module, run_module, report_module = _plan, _run, _report
    compare = tuple(
        CompareSpec(label, "plan_cells", KEYS, value, unit, exact=True)
        for label, value, unit in (
            ("plan TTFB", "ttfb_ms", "ms"),
            ("plan round trips", "round_trips", "RTT"),
            ("plan flight", "server_flight_bytes", "B"),
        )
    )

    def resume_key(self, plan: _plan.Plan) -> dict:
        return {
            "stack": plan.stack,
            "send_root": plan.send_root,
            "mss": plan.mss,
            "calibrate": plan.calibrate,
        }

    def metadata(self, plan: _plan.Plan) -> dict:
        return {
            "plan": {
                "configurations": [c.label() for c in plan.configs],
                "chain_bytes": plan.chain_bytes,
                "paths": [p.describe() for p in plan.paths],
                "mss": plan.mss,
                "sizes": plan.sizes,
                "send_root": plan.send_root,
                "stack": plan.stack,
                "migration": [c.label() for c in plan.migration] if plan.migration else None,
                "calibrate": plan.shaper if plan.calibrate else None,
            }
        }

    def work(self, plan: _plan.Plan) -> estimate.Work:
        """Per configuration its chain and its stack's ClientHello (engine runs); per cell
        the wire model's predictions and cliffs."""
        parts = (
            (len(plan.configs), "configuration"),
            (len(plan.chain_points()), "chain"),
            (len(plan.paths), "path"),
        )
        work = estimate.Work(" x ".join(estimate.count(*p) for p in parts), cells=plan.cells)
        work.add("plan.configuration", len(plan.configs))
        work.add("plan.cell", plan.cells)
        if plan.calibrate:  # one topology, then per configuration a ttlb cell of size 0
            connections = len(plan.configs) * (_calibrate.CONNECTIONS + _calibrate.WARMUP)
            work.add("ttlb.profile", 1)
            work.add("ttlb.cell", len(plan.configs))
            work.add("ttlb.connection", connections)
            work.exact_s += connections * _calibrate.GAP_MS / 1e3
        return work

    def summary(self, plan: _plan.Plan) -> str:
        extra = ", tables/plan_migration.csv" if plan.migration else ""
        return f"tables/plan.csv, tables/plan_cliffs.csv{extra}"

    def verdict(self, plan: _plan.Plan, store) -> None:
        """Print the predictions (and the migration table) in the terminal."""
        cells = [
            str(plan.cell_id(c, p, path))
            for c in plan.configs
            for p in plan.chain_points()
            for path in plan.paths
        ]
        migration = (
            (plan.migration[0].label(), plan.migration[1].label()) if plan.migration else None
        )
        for line in _report.terminal_lines(store, cells, migration):
            print(line)
        sys.stdout.flush()


EXPERIMENT = PlanExperiment()
