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

from pqlab.experiment import CompareSpec, Experiment
from pqlab.experiments.ttlb import across as _across
from pqlab.experiments.ttlb import plan as _plan
from pqlab.experiments.ttlb import report as _report
from pqlab.experiments.ttlb import run as _run
from pqlab.experiments.ttlb import schema as _schema
from pqlab.experiments.ttlb import sweep as _sweep

KEYS = ("profile", "grp", "chain", "chain_bytes_requested", "data_bytes")


class Ttlb(Experiment):
    name = "ttlb"
    help = "TTFB and TTLB of TLS 1.3 over emulated links (document 003)"
    description = __doc__.split("\n\n")[0]
    needs_net = True
    options = _plan.OPTIONS
    cells = _plan.CELLS
    migrations = _schema.MIGRATIONS
    plan_module, run_module, report_module = _plan, _run, _report
    compare = (
        CompareSpec("ttfb", "ttlb_raw", KEYS, "ttfb_ns / 1e6", "ms"),
        CompareSpec("ttlb", "ttlb_raw", KEYS, "ttlb_ns / 1e6", "ms"),
    )

    def resume_key(self, plan: _plan.Plan) -> dict:
        return {
            "n": plan.n,
            "warmup": plan.warmup,
            "stack": plan.stack,
            "host_pairs": plan.remote.labels() if plan.remote is not None else None,
        }

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
            "stack": plan.stack,
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


EXPERIMENT = Ttlb()
