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
from pqlab.experiment import (
    CompareSpec,
    Experiment,
)
from pqlab.experiments.memory import plan as _plan
from pqlab.experiments.memory import report as _report
from pqlab.experiments.memory import run as _run
from pqlab.experiments.memory.plan import CELLS, NAME, OPTIONS, Plan
from pqlab.experiments.memory.schema import MIGRATIONS
from pqlab.tls import stacks


class Memory(Experiment):
    name = NAME
    help = "heap and stack per TLS handshake (client, server), memory per idle connection"
    description = __doc__.split("\n\n")[0]
    cells = CELLS
    migrations = MIGRATIONS
    options = OPTIONS
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
        work = estimate.Work("", cells=len(cells) * pairs)
        each = plan.n + plan.warmup
        for name, group, server, ca, client in cells:
            work.add("memory.cell", pairs)
            work.add("memory.handshake", each * pairs)
            cpu = estimate.handshake_operations_s(group, server, ca, client)
            work.add("operation_seconds", cpu * each * pairs)
            if plan.idle:
                work.add("memory.idle", pairs)
                work.add("memory.idle_connection", plan.idle * pairs)
            if plan.tracker(stacks.get(name)):
                work.add("memory.tracker_cell", 1)
        work.size = (
            f"{estimate.count(len(cells) * pairs, 'cell')} x {plan.n} handshakes (+{plan.warmup} warm-up), "
            f"{plan.idle} idle connections"
        )
        return work

    def summary(self, plan: Plan) -> str | None:
        return "memory: tables/memory.csv (per handshake), tables/memory_idle.csv (per idle connection)"


EXPERIMENT = Memory()
