"""`pqlab memory`: what a full TLS handshake costs in memory, for client and server
separately, over every (stack, group, server signature, CA signature, client signature)
cell: heap allocated in total, peak heap in use, heap still held after it, allocations and
frees, counted the stack's own way (OpenSSL's allocator hooks) and, for every stack alike,
as every block the handshaking thread takes from the C allocator; and the thread's stack
high-water mark from a painted stack. Also the server's memory per idle established
connection (the slope of its RSS and of its counted heap while it holds N connections).
Across hosts (`--server-host`, `--client-host`, `--inventory --pairs`) each role runs on its
own host, and the idle connections are held on the server's. See docs/memory.md.
"""

from __future__ import annotations

from pqlab import estimate
from pqlab.estimate import Cost
from pqlab.experiment import (
    CompareSpec,
    Experiment,
)
from pqlab.experiments.memory import plan as _plan
from pqlab.experiments.memory import report as _report
from pqlab.experiments.memory import run as _run
from pqlab.experiments.memory.plan import CELLS, NAME, OPTIONS, Plan
from pqlab.experiments.memory.schema import MIGRATIONS

# This experiment's units of work and their costs (`pqlab.estimate`: the model, its shared
# units and the runs the costs were measured from).
COSTS: dict[str, Cost] = {
    "memory.cell": Cost(
        0.08,
        "memory --stack openssl (X25519, ECDSA-P256) -n 5 --idle 0: 0.09 s for one cell; "
        "4 cells: 0.32 s",
    ),
    "memory.handshake": Cost(
        0.0027,
        "the same cell with -n 200: 0.59 s more for 195 handshakes, less their operations",
    ),
    "memory.idle": Cost(
        0.25, "the same cell with --idle 8, 32 and 128: 0.50, 0.99 and 3.06 s (a line)"
    ),
    "memory.idle_connection": Cost(
        0.0084,
        "the same three runs, with memory.idle: 0.0204 s with the client's 20 ms pause after "
        "each connection then; the pause is 8 ms now",
    ),
    "memory.tracker_cell": Cost(
        0.08, "the same cell on the wolfssl stack (its memory tracker's programs): 0.17 s"
    ),
    "memory.export": Cost(0.05, "memory: 0.04-0.07 s (48 cells), 0.02 s (4)"),
}


class Memory(Experiment):
    name = NAME
    help = "heap and stack per TLS handshake (client, server), memory per idle connection"
    description = __doc__.split("\n\n")[0]
    cells = CELLS
    migrations = MIGRATIONS
    options = OPTIONS
    costs = COSTS
    plan_module, run_module, report_module = _plan, _run, _report
    compare = tuple(
        CompareSpec(
            f"memory {metric}",
            "memory_raw",
            ("role", "group", "server_sig", "ca_sig", "client_sig"),
            metric,
            "bytes" if metric.endswith("bytes") else "count",
            where="NOT warmup",
        )
        for metric in (
            "heap_peak_bytes",
            "heap_total_bytes",
            "allocations",
            "stack_bytes",
            "malloc_peak_bytes",
        )
    )

    def metadata(self, plan: Plan) -> dict:
        return {
            "memory": plan.as_dict(),
            "remote": plan.remote.describe() if plan.remote is not None else None,
        }

    def resume_key(self, plan: Plan) -> dict:
        return {
            "n": plan.n,
            "warmup": plan.warmup,
            "idle": plan.idle,
            "fixed_random": plan.fixed_random,
            "host_pairs": plan.remote.labels() if plan.remote is not None else None,
        }

    def work(self, plan: Plan) -> estimate.Work:
        """Per cell one engine run of warm-up + -n handshakes (both roles, heap counted;
        their operations from `estimate.OPERATIONS`), --idle connections held, and on a
        stack with the library's own tracker its example programs."""
        cells = list(plan.cells())
        pairs = len(plan.pairs)
        work = estimate.Work(costs=COSTS, size="", cells=len(cells) * pairs)
        each = plan.n + plan.warmup
        for stack, group, server, ca, client in cells:
            work.add("memory.cell", pairs)
            work.add("memory.handshake", each * pairs)
            cpu = estimate.handshake_operations_s(group, server, ca, client)
            work.add("operation_seconds", cpu * each * pairs)
            if plan.idle:
                work.add("memory.idle", pairs)
                work.add("memory.idle_connection", plan.idle * pairs)
            if plan.tracker(stack):
                work.add("memory.tracker_cell", 1)
        work.size = (
            f"{estimate.count(len(cells) * pairs, 'cell')} x {plan.n} handshakes (+{plan.warmup} warm-up), "
            f"{plan.idle} idle connections"
        )
        return work

    def summary(self, plan: Plan) -> str | None:
        return "memory: tables/memory.csv (per handshake), tables/memory_idle.csv (per idle connection)"


EXPERIMENT = Memory()
