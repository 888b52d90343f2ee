"""`pqlab capacity`: how many full TLS handshakes per second one server sustains, and the
latency at each offered load. The server runs in its namespace pinned to its CPUs; the
engine's load generator in the other namespace makes full handshakes, closed loop (C clients
back to back) and open loop (a fixed arrival rate, latency from the scheduled start).
Needs CAP_NET_ADMIN (network namespaces); with --server-host / --client-host the two sides
run on those hosts instead.

Split by job: `plan` (options, validation, hosts, CPUs), `run` (server, load points, each
host's CPU accounting), `analyse` (pure statistics), `schema`, `report`.
"""

from __future__ import annotations

from pqlab import estimate
from pqlab.estimate import Cost
from pqlab.experiment import CompareSpec, Experiment
from pqlab.experiments.capacity import plan as _plan
from pqlab.experiments.capacity import report as _report
from pqlab.experiments.capacity import run as _run
from pqlab.experiments.capacity import schema as _schema

# This experiment's units of work and their costs (`pqlab.estimate`: the model, its shared
# units and the runs the costs were measured from).
COSTS: dict[str, Cost] = {
    "capacity.cell": Cost(
        0.10,
        "capacity (X25519, ECDSA-P256) --mode closed --duration 1s with --clients 1 and "
        "--clients 1,2,4,8: 1.22 and 4.58 s",
    ),
    "capacity.point": Cost(0.12, "the same two runs, with capacity.cell"),
    "capacity.open_point": Cost(
        0.26,
        "DEFAULT's capacity step: 9.4 s beyond its 96 s of windows, less its cells and "
        "points, over its 20 open-loop points (their backlog drains after the window)",
    ),
    "capacity.export": Cost(0.53, "capacity: 0.54 s (4 cells), 0.51 s (2)"),
}


class Capacity(Experiment):
    name = "capacity"
    help = "handshakes per second at saturation, latency per offered load"
    description = __doc__.split("\n\n")[0]
    needs_net = True
    options = _plan.OPTIONS
    costs = COSTS
    cells = _plan.CELLS
    migrations = _schema.MIGRATIONS
    plan_module, run_module, report_module = _plan, _run, _report
    compare = (
        CompareSpec(
            "capacity latency",
            "capacity_raw",
            (
                "group",
                "server_sig",
                "ca_sig",
                "client_sig",
                "server_threads",
                "mode",
                "clients_or_rate",
            ),
            "(done_ns - scheduled_ns) / 1e6",
            "ms",
            where="mode = 'closed'",
        ),
    )

    def resume_key(self, plan: _plan.Plan) -> dict:
        return {
            "duration_s": plan.duration_s,
            "max_handshakes": plan.max_handshakes,
            "warmup": plan.warmup,
            "clients": plan.clients,
            "rates": [r.label for r in plan.rates],
            "open_workers": plan.open_workers,
            "stack": plan.stack.name,
            "host_pairs": plan.remote.labels() if plan.remote is not None else None,
        }

    def work(self, plan: _plan.Plan) -> estimate.Work:
        """Per cell a server and its load points (a closed-loop point per client count, an
        open-loop point per rate), each --duration long (fixed by the plan) with its
        load generator's start, warm-up and drain."""
        cells = len(list(plan.cells())) * len(plan.pairs)
        closed = len(plan.clients) * ("closed" in plan.modes)
        opened = len(plan.rates) * ("open" in plan.modes)
        points = closed + opened
        work = estimate.Work(
            costs=COSTS,
            size=f"{estimate.count(cells, 'cell')} x {points} points x {plan.duration_s:g} s",
            cells=cells,
        )
        work.exact_s = cells * points * plan.duration_s
        work.add("capacity.cell", cells)
        work.add("capacity.point", cells * points)
        work.add("capacity.open_point", cells * opened)
        work.add("chain", len({(s.name, getattr(c, "name", c)) for _, s, c, *_ in plan.cells()}))
        return work

    def metadata(self, plan: _plan.Plan) -> dict:
        return {
            "capacity": {
                "modes": plan.modes,
                "clients": plan.clients,
                "rates": [r.label for r in plan.rates],
                "open_workers": plan.open_workers,
                "server_threads": plan.server_threads,
                "duration_s": plan.duration_s,
                "max_handshakes": plan.max_handshakes,
                "warmup_per_worker": plan.warmup,
                "stack": plan.stack.name,
                "cpus": plan.describe_cpus(),
                "client_sigs": [c.name if c else "none" for c in plan.client_sigs],
                "client_ca_sig": plan.client_ca.name if plan.client_ca else None,
            },
            "remote": plan.remote.describe() if plan.remote is not None else None,
        }

    def verdict(self, plan: _plan.Plan, store) -> None:
        """Each cell's closed-loop maximum and what limited it; a warning when it did not
        saturate the server (the run itself succeeded)."""
        _report.print_maxima(store)

    def summary(self, plan) -> str | None:
        return "capacity: tables/capacity.csv, figures/capacity_latency_vs_load.png"


EXPERIMENT = Capacity()
