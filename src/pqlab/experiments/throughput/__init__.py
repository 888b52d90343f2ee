"""`pqlab throughput`: bulk transfer after one handshake, each way, as wolfSSL's tls_bench
does, for each TLS stack, key-exchange group and TLS 1.3 cipher suite: the client pushes N
bytes to the server and pulls M bytes back on the same connection; every read is checked
against a position-dependent pattern on both ends. Tx and Rx in MB/s, and the client's
handshake time. Where a stack's build has wolfSSL's own tls_bench, it runs too and its rows
stand beside pqlab's (`throughput_tls_bench`). Needs CAP_NET_ADMIN.
"""

from __future__ import annotations

from pqlab import estimate, units
from pqlab.estimate import Cost
from pqlab.experiment import CompareSpec, Experiment
from pqlab.experiments.throughput import plan as _plan
from pqlab.experiments.throughput import report as _report
from pqlab.experiments.throughput import run as _run
from pqlab.experiments.throughput import tls_bench as throughput_tls_bench
from pqlab.experiments.throughput.plan import CELLS, NAME, OPTIONS, Plan
from pqlab.experiments.throughput.schema import MIGRATIONS
from pqlab.options.tls import NO_CLIENT
from pqlab.tls import wolfssl_tools

# This experiment's units of work and their costs (`pqlab.estimate`: the model, its shared
# units and the runs the costs were measured from).
COSTS: dict[str, Cost] = {
    "throughput.topology": Cost(
        0.09,
        "throughput --stack openssl --bytes 1KiB -n 1, one cell and six: 0.13 and 0.31 s",
    ),
    "throughput.cell": Cost(0.036, "the same two runs, with throughput.topology"),
    "throughput.connection": Cost(
        0.001, "DEFAULT's throughput step: the client's handshake_ns, 1 ms per connection"
    ),
    "throughput.byte": Cost(
        1.64e-9,
        "DEFAULT's throughput step: push_ns + pull_ns of its 36 measured transfers, 3.88 s "
        "for 2.42 GB",
    ),
    "throughput.tls_bench_group": Cost(
        1.18,
        "DEFAULT's throughput step: three tls_bench runs of 11 groups x 1 s took 24 s each",
    ),
    "throughput.export": Cost(0.11, "throughput: 0.29 s for 12 cells, 0.14 s for 2"),
    "throughput.export_cell": Cost(0.015, "the same two, with throughput.export"),
}
# The groups wolfSSL's tls_bench runs through (`-g`) in this build: DEFAULT's runs printed
# rows for 11 (of the 13 tls_bench names, `wolfssl_tools.TLS_BENCH_GROUPS`).
TLS_BENCH_GROUPS = 11


class Throughput(Experiment):
    name = NAME
    help = "bulk transfer after the handshake, each way, per group and cipher suite"
    description = __doc__.split("\n\n")[0]
    needs_net = True
    cells = CELLS
    options = OPTIONS
    costs = COSTS
    plan_module, run_module, report_module = _plan, _run, _report
    migrations = MIGRATIONS
    compare = (
        CompareSpec(
            "throughput rx",
            "throughput_raw",
            ("group", "cipher_suite", "server_sig", "client_sig"),
            "pull_bytes / pull_ns * 1e3",
            "MB/s",
            better="higher",
        ),
        CompareSpec(
            "throughput tx",
            "throughput_raw",
            ("group", "cipher_suite", "server_sig", "client_sig"),
            "push_bytes / push_ns * 1e3",
            "MB/s",
            better="higher",
        ),
    )

    def resume_key(self, plan: Plan) -> dict:
        return {
            "bytes": plan.nbytes,
            "n": plan.n,
            "warmup": plan.warmup,
            "mtu": plan.mtu,
            "echo_bytes": plan.echo_bytes,
        }

    def work(self, plan: Plan) -> estimate.Work:
        """Per cell a server and warm-up + -n connections, each a handshake, --bytes each
        way and the echo's --echo-bytes; per stack whose build has tls_bench and suite it
        knows, one tls_bench run of every group it has for --tls-bench-seconds each (fixed
        by the plan)."""
        cells = list(plan.cells())
        work = estimate.Work(
            costs=COSTS,
            size=f"{estimate.count(len(cells), 'cell')} x {plan.n} transfers of {units.format_bytes(plan.nbytes)}",
            cells=len(cells),
        )
        each = plan.n + plan.warmup
        work.add("throughput.topology", 1)
        work.add("throughput.cell", len(cells))
        work.add("throughput.connection", each * len(cells))
        # The echo moves its bytes each way too (a round trip per record: slower per byte).
        work.add("throughput.byte", 2 * (plan.nbytes + plan.echo_bytes) * each * len(cells))
        work.add("chain", len(plan.stacks))
        runs = 0
        for stack in plan.stacks:
            if plan.tls_bench_seconds and wolfssl_tools.has_tools(stack, "tls_bench"):
                runs += len([s for s in plan.suites if s in throughput_tls_bench.SUITES])
        if runs:
            groups = TLS_BENCH_GROUPS
            work.exact_s += runs * groups * plan.tls_bench_seconds
            work.add("throughput.tls_bench_group", runs * groups)
            work.size += f", {estimate.count(runs, 'tls_bench run')}"
        return work

    def metadata(self, plan: Plan) -> dict:
        return {
            "throughput": {
                "groups": [g.name for g in plan.groups],
                "ciphersuites": plan.suites,
                "server_sig": plan.server_sig.name,
                "bytes": plan.nbytes,
                "n": plan.n,
                "warmup": plan.warmup,
                "stacks": [s.name for s in plan.stacks],
                "tls_bench_seconds": plan.tls_bench_seconds,
                "mtu": plan.mtu,
                "echo_bytes": plan.echo_bytes,
                "client_sigs": [c.name if c else NO_CLIENT for c in plan.client_sigs],
                "client_ca_sig": plan.client_ca.name if plan.client_ca else None,
            }
        }


EXPERIMENT = Throughput()
