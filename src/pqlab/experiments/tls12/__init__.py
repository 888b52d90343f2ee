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
from pqlab.estimate import Cost
from pqlab.experiment import CompareSpec, Experiment
from pqlab.experiments.tls12 import plan as _plan
from pqlab.experiments.tls12 import report as _report
from pqlab.experiments.tls12 import run as _run
from pqlab.experiments.tls12.plan import CELLS, NAME, OPTIONS, Plan
from pqlab.experiments.tls12.schema import MIGRATIONS

# This experiment's units of work and their costs (`pqlab.estimate`: the model, its shared
# units and the runs the costs were measured from).
COSTS: dict[str, Cost] = {
    "tls12.cell": Cost(
        0.089,
        "DEFAULT's tls12 step: (25.31 s - 22.20 s of handshakes at TLS12_HANDSHAKES) / 35 cells",
    ),
    "tls12.export": Cost(0.7, "tls12: 0.86 s (44 cells) and 0.50 s (36 cells)"),
}
# Measured from DEFAULT's tls12 step (-n 100 --warmup 3, DHE's RFC and generated
# parameters): per (version, key exchange, certificate) the mean of the client's time from
# the start of its TCP connect to the handshake's end (`connect_to_handshake_ns`), seconds.
TLS12_HANDSHAKES: dict[tuple[str, str, str], float] = {
    ("1.2", "RSA", "RSA-2048"): 835e-6,
    ("1.2", "DHE-1024", "RSA-2048"): 1283e-6,
    ("1.2", "DHE-1024-generated", "RSA-2048"): 2015e-6,
    ("1.2", "DHE-2048", "RSA-2048"): 2196e-6,
    ("1.2", "DHE-2048-generated", "RSA-2048"): 9256e-6,
    ("1.2", "DHE-3072", "RSA-2048"): 3842e-6,
    ("1.2", "DHE-3072-generated", "RSA-2048"): 27811e-6,
    ("1.2", "DHE-4096", "RSA-2048"): 7201e-6,
    ("1.2", "DHE-4096-generated", "RSA-2048"): 65910e-6,
    ("1.2", "ECDHE-P-256", "RSA-2048"): 1292e-6,
    ("1.2", "ECDHE-P-256", "ECDSA-P-256"): 992e-6,
    ("1.2", "ECDHE-P-384", "RSA-2048"): 4692e-6,
    ("1.2", "ECDHE-P-384", "ECDSA-P-256"): 4883e-6,
    ("1.2", "ECDHE-P-521", "RSA-2048"): 9943e-6,
    ("1.2", "ECDHE-P-521", "ECDSA-P-256"): 9500e-6,
    ("1.2", "ECDHE-X25519", "RSA-2048"): 954e-6,
    ("1.2", "ECDHE-X25519", "ECDSA-P-256"): 827e-6,
    ("1.2", "ECDHE-X448", "RSA-2048"): 1649e-6,
    ("1.2", "ECDHE-X448", "ECDSA-P-256"): 1555e-6,
    ("1.3", "FFDHE-2048", "RSA-2048"): 2174e-6,
    ("1.3", "FFDHE-2048", "ECDSA-P-256"): 2174e-6,
    ("1.3", "FFDHE-3072", "RSA-2048"): 4376e-6,
    ("1.3", "FFDHE-3072", "ECDSA-P-256"): 3913e-6,
    ("1.3", "FFDHE-4096", "RSA-2048"): 7200e-6,
    ("1.3", "FFDHE-4096", "ECDSA-P-256"): 7293e-6,
    ("1.3", "ECDHE-P-256", "RSA-2048"): 914e-6,
    ("1.3", "ECDHE-P-256", "ECDSA-P-256"): 812e-6,
    ("1.3", "ECDHE-P-384", "RSA-2048"): 4303e-6,
    ("1.3", "ECDHE-P-384", "ECDSA-P-256"): 4113e-6,
    ("1.3", "ECDHE-P-521", "RSA-2048"): 8142e-6,
    ("1.3", "ECDHE-P-521", "ECDSA-P-256"): 8740e-6,
    ("1.3", "ECDHE-X25519", "RSA-2048"): 977e-6,
    ("1.3", "ECDHE-X25519", "ECDSA-P-256"): 774e-6,
    ("1.3", "ECDHE-X448", "RSA-2048"): 1485e-6,
    ("1.3", "ECDHE-X448", "ECDSA-P-256"): 1480e-6,
}


def tls12_handshake_s(version: str, kex, cert: str) -> float:
    """One handshake of the tls12 experiment's cell (`pqlab.experiments.tls12.Kex`), as
    measured (`TLS12_HANDSHAKES`), else the mean of its key exchange family's."""
    key = (version, kex.label, cert)
    if key in TLS12_HANDSHAKES:
        return TLS12_HANDSHAKES[key]
    same = [
        v
        for (ver, label, _), v in TLS12_HANDSHAKES.items()
        if ver == version and label.split("-")[0] == kex.label.split("-")[0]
    ]
    pool = same or list(TLS12_HANDSHAKES.values()) or [0.002]
    return sum(pool) / len(pool)


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
    costs = COSTS
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
        (`TLS12_HANDSHAKES`; over a link profile plus its round trips)."""
        cells = [c for c in plan.cells() if c.suite is not None]
        pairs = len(plan.pairs)
        work = estimate.Work(costs=COSTS, size="", cells=len(plan.cells()) * pairs)
        each = plan.n + plan.warmup
        work.add("tls12.cell", len(cells) * pairs)
        rtt = plan.profile.rtt_s if plan.profile is not None else 0.0
        for spec in cells:
            seconds = tls12_handshake_s(spec.version, spec.kex, spec.cert)
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
