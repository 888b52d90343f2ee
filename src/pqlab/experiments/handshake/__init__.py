"""`pqlab handshake`: TLS 1.3 handshakes over a matrix of key-exchange groups, server
signature algorithms and CA signature algorithms, captured on both hosts and broken down
message by message (document 000, section 4-3). Needs CAP_NET_ADMIN (network namespaces).

The package is split by job: `plan` (options and validation), `run` (the measuring loop on
the TLS runner), `analyse` (engine records and captures to rows), `phases` (one handshake
taken apart), `schema` (database tables), `report` (tables, figures, report section).
"""

from __future__ import annotations

from pqlab import estimate
from pqlab.estimate import Cost
from pqlab.experiment import CompareSpec, Experiment
from pqlab.experiments.handshake import plan as _plan
from pqlab.experiments.handshake import report as _report
from pqlab.experiments.handshake import run as _run
from pqlab.experiments.handshake import schema as _schema

# This experiment's units of work and their costs (`pqlab.estimate`: the model, its shared
# units and the runs the costs were measured from).
COSTS: dict[str, Cost] = {
    "handshake.batch": Cost(
        1.1,
        "DEFAULT's handshake steps of 3 to 6 cells (one batch each): 1.45-2.42 s, less "
        "their cells and handshakes (worker processes, namespaces, the batch's start)",
    ),
    "handshake.cell": Cost(
        0.08,
        "DEFAULT's 80-cell handshake step: 12.4 s outside the handshakes stage, less two "
        "batches and 8000 measured handshakes",
    ),
    "handshake.handshake": Cost(
        0.0011,
        "the handshakes stage of DEFAULT's 80-cell step (19.1 s for 11040) and of MATRIX "
        "(160.4 s for 83040), less their operations: 1.04 and 1.23 ms per handshake",
    ),
    "handshake.measured": Cost(
        0.00048,
        "stages after the handshakes (reading captures, matching, analysis, database "
        "writes) of MATRIX (47.1 s) and DEFAULT's 80-cell step (12.4 s): 34.7 s more for "
        "72000 more measured handshakes",
    ),
    "handshake.export": Cost(
        2.39, "handshake, figures drawn by workers: 26.5 s for 99 cells, 3.4 s for 4"
    ),
    "handshake.export_cell": Cost(0.243, "the same two, with handshake.export"),
}


class Handshake(Experiment):
    name = "handshake"
    help = "TLS 1.3 handshakes, per-message phases from captures"
    description = __doc__.split("\n\n")[0]
    needs_net = True
    options = _plan.OPTIONS
    costs = COSTS
    cells = _plan.CELLS
    migrations = _schema.MIGRATIONS
    plan_module, run_module, report_module = _plan, _run, _report
    compare = (
        CompareSpec(
            "handshake",
            "handshake_raw",
            ("group", "server_sig", "ca_sig", "chain_bytes_requested"),
            "handshake_ns / 1e6",
            "ms",
            round_column="round",
        ),
    )

    def cell_ids(self, plan: _plan.Plan) -> set[str]:
        return {str(plan.cell_id(*cell, pair)) for pair in plan.pairs for cell in plan.cells()}

    def resume_key(self, plan: _plan.Plan) -> dict:
        return {
            "n": plan.n,
            "warmup": plan.warmup,
            "send_root": plan.send_root,
            "stack": plan.stack.name,
            "profile": getattr(plan.profile, "spec", None) or plan.profile_name,
            "host_pairs": plan.remote.labels() if plan.remote is not None else None,
        }

    def work(self, plan: _plan.Plan) -> estimate.Work:
        """Per cell its handshakes (warm-ups of every round included), their cryptographic
        operations and, over a link profile, the wire model's time; per chain its key; per
        batch its processes."""
        cells = list(plan.cells())
        pairs = len(plan.pairs)
        work = estimate.Work(costs=COSTS, size="", cells=len(cells) * pairs)
        made = set()
        for batch in plan.batches(cells):
            rounds = plan.rounds_for(len(batch))
            each = sum(w + m for w, m in plan.round_sizes(rounds))
            work.add("handshake.batch", pairs)
            for group, server, ca, chain_bytes, client in batch:
                work.add("handshake.cell", pairs)
                work.add("handshake.handshake", each * pairs)
                work.add("handshake.measured", plan.n * pairs)
                cpu = estimate.handshake_operations_s(group, server, ca, client, plan.client_ca)
                work.add("operation_seconds", cpu * each * pairs)
                for key in ((ca, server, chain_bytes), (plan.client_ca or ca, client, "client")):
                    name = tuple(getattr(a, "name", a) for a in key)
                    if key[1] is not None and name not in made:
                        made.add(name)
                        work.add("chain", 1)
                        work.add("operation_seconds", estimate.keygen_s(key[1]))
                if plan.profile is not None:
                    der = estimate.chain_der(server, ca, plan.send_root, chain_bytes)
                    predicted = estimate.connection(
                        plan.stack, group, server, der, plan.profile, _run.response_bytes(client)
                    )
                    work.add("link_seconds", estimate.link_seconds(predicted) * each * pairs)
        first = plan.round_sizes(plan.rounds_for(min(len(cells), _plan.MAX_BATCH)))
        warm = sum(w for w, _ in first)  # per cell, in its rounds (a last small batch: fewer)
        work.size = f"{estimate.count(work.cells, 'cell')} x {plan.n} handshakes (+{warm} warm-up)"
        if plan.remote is not None:
            work.notes.append("the network between the hosts is not in the estimate")
        return work

    def metadata(self, plan: _plan.Plan) -> dict:
        cells = len(list(plan.cells()))
        return {
            "handshake": {
                "cells": cells,
                "n": plan.n,
                "warmup": plan.warmup,
                "initcwnd": plan.initcwnd,
                "congestion_control": plan.congestion_control,
                "profile": plan.profile_name,
                "shaper": plan.shaper if plan.profile else None,
                "stack": plan.stack.name,
                "keep_pcap": plan.keep_pcap,
                "send_root": plan.send_root,
                "chain_bytes": plan.chain_bytes,
                "messages": plan.messages,
                "cpus": {"server": plan.cpus[0], "client": plan.cpus[1]} if plan.cpus else None,
            },
            "remote": plan.remote.describe() if plan.remote is not None else None,
        }


EXPERIMENT = Handshake()
