"""`pqlab ttlb`: time to first byte (handshake) and time to last byte of TLS 1.3 connections
over emulated links, for key-exchange groups x certificate chains x response sizes (source
document 003). Needs CAP_NET_ADMIN.

Split by job: `plan` (options, validation), `run` (the measuring loop on the TLS runner),
`analyse` (rows, percentiles, the wire model's prediction, increases, warnings), `schema`
(database tables), `report` (tables, figures, report section).
"""

from __future__ import annotations

from pqlab.experiment import CompareSpec, Experiment
from pqlab.experiments.ttlb import plan as _plan
from pqlab.experiments.ttlb import report as _report
from pqlab.experiments.ttlb import run as _run
from pqlab.experiments.ttlb import schema as _schema

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
            "ttlb_sizes": plan.sizes,
            "link_profiles": [p.describe() for p in plan.profiles],
            "profile_warnings": [w for p in plan.profiles for w in p.warnings()],
            "shaper_requested": plan.shaper,
            "stack": plan.stack,
            "remote": plan.remote.describe() if plan.remote is not None else None,
        }

    def summary(self, plan) -> str:
        return "tables/ttlb.csv, tables/ttlb_increase.csv"


EXPERIMENT = Ttlb()
