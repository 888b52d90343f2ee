"""`pqlab ttlb`: time to first byte (handshake) and time to last byte of TLS 1.3 connections
over emulated links, for key-exchange groups x certificate chains x response sizes (source
document 003). Needs CAP_NET_ADMIN.

Split by job: `plan` (options, validation), `run` (the measuring loop on the TLS runner),
`analyse` (rows, percentiles, the wire model's prediction and cliffs, increases, warnings),
`across` (document 003's figure 1 pooled over profiles, the degradation against the clean
link), `sweep` (a --chain-bytes sweep's steps beside the predicted cliffs), `document` (the
document's own numbers), `schema` (database tables), `summary` (its summary lines),
`report` (tables, figures, report section).
"""

from __future__ import annotations

from pqlab import estimate
from pqlab.estimate import Cost
from pqlab.experiment import CompareSpec, Experiment
from pqlab.experiments.ttlb import across as _across
from pqlab.experiments.ttlb import plan as _plan
from pqlab.experiments.ttlb import report as _report
from pqlab.experiments.ttlb import run as _run
from pqlab.experiments.ttlb import schema as _schema
from pqlab.experiments.ttlb import sweep as _sweep

KEYS = ("profile", "grp", "chain", "chain_bytes_requested", "data_bytes")


# This experiment's units of work and their costs (`pqlab.estimate`: the model, its shared
# units and the runs the costs were measured from).
COSTS: dict[str, Cost] = {
    "ttlb.profile": Cost(
        1.2,
        "least squares over DEFAULT's ttlb steps and nine small runs (lan, rtt=200ms and "
        "1mbps-200ms; 1-8 cells, 1-201 connections) of each step's seconds beyond its "
        "connections and pauses, with ttlb.cell and TTLB_CELL_ROUND_TRIPS",
    ),
    "ttlb.cell": Cost(
        0.08, "ttlb --profile lan, 8 cells against 1: 0.65 s more beyond their connections"
    ),
    "ttlb.connection": Cost(
        0.0007,
        "ttlb --profile lan -n 200 against -n 10: 0.13 s more beyond the connections' time",
    ),
    # What a lost packet costs a connection (its mean TTLB beyond the wire model's, over
    # the packets it is expected to lose), from DEFAULT's lossy-10pct cells (RTT 200 ms)
    # and ttlb --profile lossy-5pct-1gbps --sizes 0,200KiB -n 10 (RTT 35 ms):
    "ttlb.lost_handshake_packet": Cost(
        0.24,
        "a handshake packet (retransmitted after a timeout): the three cells of size 0, "
        "0.58 s beyond the wire model over the 2.45 packets the model expects them to lose",
    ),
    "ttlb.lost_response_round_trip": Cost(
        1.5,
        "a response segment, in round trips of the link (fast retransmit, a smaller "
        "window): the two 200 KiB cells, 1.72 round trips at 200 ms, 1.35 at 35 ms",
    ),
    "ttlb.export": Cost(1.39, "ttlb: 3.6 s for 51 cells, 1.9 s for 12"),
    "ttlb.export_cell": Cost(0.0428, "the same two, with ttlb.export"),
}
# Beyond its connections, a ttlb cell took about this many of its link's round trips: least
# squares over the same runs as ttlb.profile (its client's start and last connection's end).
TTLB_CELL_ROUND_TRIPS = 2.5


class Ttlb(Experiment):
    name = "ttlb"
    help = "TTFB and TTLB of TLS 1.3 over emulated links (document 003)"
    description = __doc__.split("\n\n")[0]
    needs_net = True
    options = _plan.OPTIONS
    costs = COSTS
    cells = _plan.CELLS
    migrations = _schema.MIGRATIONS
    plan_module, run_module, report_module = _plan, _run, _report
    compare = (
        CompareSpec("ttfb", "ttlb_raw", KEYS, "ttfb_ns / 1e6", "ms"),
        CompareSpec("ttlb", "ttlb_raw", KEYS, "ttlb_ns / 1e6", "ms"),
    )

    def cell_ids(self, plan: _plan.Plan) -> set[str]:
        return {
            str(plan.cell_id(profile, g, c, s, b, cl))
            for profile in plan.profiles
            for g in plan.groups
            for c in plan.chains
            for b in plan.chain_points()
            for cl in plan.clients_of(c)
            for s in plan.sizes
        }

    def resume_key(self, plan: _plan.Plan) -> dict:
        return {
            "n": plan.n,
            "warmup": plan.warmup,
            "warmup_bytes": plan.warmup_bytes,
            "stack": plan.stack.name,
            "host_pairs": plan.remote.labels() if plan.remote is not None else None,
        }

    def work(self, plan: _plan.Plan) -> estimate.Work:
        """Per link profile its topology; per cell a client run of warm-up + -n
        connections, each the wire model's time to its last byte over the profile's link,
        the client's pause between connections (fixed by the plan) and the packets the
        link's loss is expected to cost."""
        work = estimate.Work(costs=COSTS, size="", cells=plan.cells)
        chains = [(c, b) for c in plan.chains for b in plan.chain_points()]
        work.add("chain", len(chains))
        for alg, _ in chains:
            work.add("operation_seconds", estimate.keygen_s(alg))
        for profile in plan.profiles:
            work.add("ttlb.profile", 1)
            for group in plan.groups:
                for alg, chain_bytes in chains:
                    der = estimate.chain_der(alg, alg, True, chain_bytes)
                    for size in plan.sizes * len(plan.client_sigs):
                        _cell_work(work, plan, profile, (group, alg, der), size)
        links = estimate.count(len(plan.profiles), "link")
        warm = "" if plan.warmup_bytes is None else f" of {plan.warmup_bytes} B"
        work.size = (
            f"{estimate.count(plan.cells, 'cell')} on {links} x {plan.n} connections "
            f"(+{plan.warmup} warm-up{warm})"
        )
        if plan.remote is not None:
            work.notes.append("the network between the hosts is not in the estimate")
        return work

    def metadata(self, plan: _plan.Plan) -> dict:
        return {
            "ttlb_groups": [g.name for g in plan.groups],
            "ttlb_chains": [c.name for c in plan.chains],
            "ttlb_chain_bytes": plan.chain_bytes,
            "ttlb_client_sigs": [getattr(c, "name", c) or "none" for c in plan.client_sigs],
            "ttlb_sizes": plan.sizes,
            "link_profiles": [p.describe() for p in plan.profiles],
            "profile_warnings": [w for p in plan.profiles for w in p.warnings()],
            "shaper_requested": plan.shaper,
            "stack": plan.stack.name,
            "remote": plan.remote.describe() if plan.remote is not None else None,
        }

    def summary(self, plan) -> str:
        tables = ["ttlb", "ttlb_increase"]
        descs = {p.name: p.describe() for p in plan.profiles if getattr(p, "pair", None) is None}
        if _across.pools(descs):
            tables.append("ttlb_pooled_ttfb")
        if _across.references(descs):
            tables.append("ttlb_degradation")
        if len(plan.chain_bytes or ()) >= _sweep.MIN_POINTS:
            tables.append("ttlb_chain_steps")
        return ", ".join(f"tables/{t}.csv" for t in tables)


def _cell_work(work: estimate.Work, plan: _plan.Plan, profile, cell: tuple, size: int) -> None:
    """One cell's connections into `work`: over a real network (a host pair) only their
    number, the link being the user's."""
    group, alg, der = cell
    each = plan.n + plan.warmup
    work.add("ttlb.cell", 1)
    work.add("ttlb.connection", each)
    work.exact_s += _run.gap_ms(profile) / 1e3 * (each - 1)
    if getattr(profile, "pair", None) is not None:
        return
    work.exact_s += TTLB_CELL_ROUND_TRIPS * profile.rtt_s
    # The measured connections fetch the cell's size, the warm-ups --warmup-bytes if given.
    if plan.warmup_bytes is None or plan.warmup_bytes == size:
        runs = ((each, size),)
    else:
        runs = ((plan.n, size), (plan.warmup, plan.warmup_bytes))
    for count, fetched in runs:
        predicted = estimate.connection(plan.stack, group, alg, der, profile, fetched)
        work.add("link_seconds", count * estimate.link_seconds(predicted))
        handshake, response = estimate.lost_packets(profile, predicted)
        work.add("ttlb.lost_handshake_packet", count * handshake)
        work.add("ttlb.lost_response_round_trip", count * response * profile.rtt_s)


EXPERIMENT = Ttlb()
