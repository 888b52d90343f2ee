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
from pqlab.estimate import Cost
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


# `--calibrate`: the link it measures through, and per configuration a server and the
# client's start beyond its connections (calibrate.CONNECTION_S each, counted as fixed).
CALIBRATION_LINK_S = 0.3
CALIBRATION_CONFIGURATION_S = 0.05
CALIBRATION_MEASURED = (
    "pqlab plan --calibrate --shaper userspace against the same plan without it (2-core "
    "Xeon, load 12): 0.4 s more for one configuration, 1.9 s for four, against 0.57 s of "
    "connections each counted as fixed"
)

# This experiment's units of work and their costs (`pqlab.estimate`: the model, its shared
# units and the runs the costs were measured from).
COSTS: dict[str, Cost] = {
    "plan.configuration": Cost(
        0.043,
        "pqlab plan (4 configurations, 12 cells) and a 2-configuration 24-path grid: 0.34 "
        "and 0.42 s",
    ),
    "plan.cell": Cost(0.014, "the same two runs, with plan.configuration"),
    "plan.export": Cost(0.5, "plan: 0.50 s, a 24-cell run (`pqlab plan` with a grid of paths)"),
    "plan.calibration_link": Cost(CALIBRATION_LINK_S, CALIBRATION_MEASURED),
    "plan.calibration_configuration": Cost(CALIBRATION_CONFIGURATION_S, CALIBRATION_MEASURED),
}


class PlanExperiment(Experiment):
    name = "plan"
    help = "predict handshake bytes, segments, round trips and times on a grid of paths"
    description = __doc__.split("\n\n")[0]
    needs_net = False  # but --calibrate does, and says so before anything is created
    options = _plan.OPTIONS
    migrations = _schema.MIGRATIONS
    costs = COSTS
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
            "stack": plan.stack.name,
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
                "stack": plan.stack.name,
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
        work = estimate.Work(
            costs=COSTS, size=" x ".join(estimate.count(*p) for p in parts), cells=plan.cells
        )
        work.add("plan.configuration", len(plan.configs))
        work.add("plan.cell", plan.cells)
        if plan.calibrate:  # one link, then per configuration a server and its connections
            connections = len(plan.configs) * (_calibrate.CONNECTIONS + _calibrate.WARMUP)
            work.add("plan.calibration_link", 1)
            work.add("plan.calibration_configuration", len(plan.configs))
            work.exact_s += connections * _calibrate.CONNECTION_S
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
