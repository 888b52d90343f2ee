"""The TLS 1.2 key-exchange study (document 002) and its TLS 1.3 counterparts.

Each cell is (TLS version, key exchange, server certificate): a pqlab-engine TLS server in
the server namespace and the engine client in the client namespace, AES-128-GCM fixed,
`-n` fresh full handshakes, each verified by the client (chain, host name, version, group)
and here again (suite, group, DH size). The sample is the client's time from the start of
the TCP connect to handshake complete. Cells that TLS 1.2 does not define (RSA key
exchange or DHE with an ECDSA certificate) are listed in the table with n = 0 and a note.
"""

from __future__ import annotations

from pqlab import estimate
from pqlab.experiment import CompareSpec, Experiment
from pqlab.experiments.tls12 import plan as _plan
from pqlab.experiments.tls12 import report as _report
from pqlab.experiments.tls12 import run as _run
from pqlab.experiments.tls12.plan import CELLS, NAME, OPTIONS, Plan
from pqlab.experiments.tls12.schema import MIGRATIONS


class Tls12(Experiment):
    name = NAME
    help = "TLS 1.2 key exchange study (and TLS 1.3 counterparts)"
    description = (
        "TLS 1.2 handshake time per key exchange (RSA, DHE, ECDHE) and server certificate "
        "(RSA-2048, ECDSA P-256), AES-128-GCM fixed, with the TLS 1.3 counterparts (FFDHE and "
        "the same ECDHE curves), between two network namespaces (document 002). Needs root "
        "(CAP_NET_ADMIN). Results: tables/tls12.csv, a figure, a report section."
    )
    needs_net = True
    cells = CELLS
    migrations = MIGRATIONS
    options = OPTIONS
    plan_module, run_module, report_module = _plan, _run, _report
    compare = (
        CompareSpec(
            "tls12",
            "tls12_handshakes",
            ("version", "kex", "cert"),
            "connect_to_handshake_ns / 1e6",
            "ms",
        ),
    )

    def resume_key(self, plan: Plan) -> dict:
        return {
            "n": plan.n,
            "warmup": plan.warmup,
            "server_cpu": plan.server_cpu,
            "profile": getattr(plan.profile, "spec", None) or None,
            "host_pairs": plan.remote.labels() if plan.remote is not None else None,
            "dh_params": plan.dh_sources,
        }

    def work(self, plan: Plan) -> estimate.Work:
        """Per defined cell a server and a client run of warm-up + -n handshakes, each priced
        from the measured table of this experiment's handshakes
        (`estimate.TLS12_HANDSHAKES`; over a link profile plus its round trips)."""
        cells = [c for c in plan.cells() if c.suite is not None]
        pairs = len(plan.pairs)
        work = estimate.Work("", cells=len(plan.cells()) * pairs)
        each = plan.n + plan.warmup
        work.add("tls12.cell", len(cells) * pairs)
        rtt = plan.profile.rtt_s if plan.profile is not None else 0.0
        for spec in cells:
            seconds = estimate.tls12_handshake_s(spec.version, spec.kex, spec.cert)
            if plan.server_cpu:
                seconds /= plan.server_cpu  # the server gets that share of a CPU
            work.add("handshake_seconds", seconds * each * pairs)
            # over a link profile: TCP's round trip, then TLS 1.2's two or TLS 1.3's one
            work.exact_s += (3 if spec.version == "1.2" else 2) * rtt * each * pairs
        work.size = f"{estimate.count(len(cells) * pairs, 'cell')} x {plan.n} handshakes (+{plan.warmup} warm-up)"
        if plan.remote is not None:
            work.notes.append("the network between the hosts is not in the estimate")
        return work

    def metadata(self, plan: Plan) -> dict:
        return {
            "tls12_plan": {
                "versions": plan.versions,
                "kex": plan.kexes,
                "certs": plan.certs,
                "n": plan.n,
                "warmup": plan.warmup,
                "server_cpu": plan.server_cpu,
                "profile": getattr(plan.profile, "spec", None) or None,
            },
            "remote": plan.remote.describe() if plan.remote is not None else None,
        }


EXPERIMENT = Tls12()
