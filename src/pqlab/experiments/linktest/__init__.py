"""Physics checks of an emulated link: does the link do what its profile says?

Over real TCP and UDP between the two namespaces:
- rtt: the TCP connect time (SYN to SYN-ACK, what TCP sees as its first RTT sample) matches
  the configured RTT plus the SYN and SYN-ACK serialisation, within 2 % + 0.5 ms (with
  jitter, the expected median comes from netem's tables);
- rate: a bulk TCP transfer server -> client takes what serialisation of its bytes on the
  wire predicts, within 3 % (measured over the last 75 % of the bytes, after slow start);
- loss: the share of UDP probes lost per direction lies in the 99 % Wilson interval around
  the measured share;
- delay: the one-way delay quantiles of the UDP probes (p10..p90) fall inside the band that
  netem's own algorithm gives for the same send times, drawn from the same tables.
"""

from __future__ import annotations

import sys

from pqlab import estimate
from pqlab.errors import CheckError
from pqlab.estimate import Cost
from pqlab.experiment import Experiment
from pqlab.experiments.linktest import plan as _plan
from pqlab.experiments.linktest import report as _report
from pqlab.experiments.linktest import run as _run
from pqlab.experiments.linktest.plan import (
    CELLS,
    NAME,
    OPTIONS,
    Plan,
    connect_gap_ms,
    rate_bytes,
    udp_idle_s,
    udp_interval_us,
)

# This experiment's units of work and their costs (`pqlab.estimate`: the model, its shared
# units and the runs the costs were measured from).
COSTS: dict[str, Cost] = {
    "linktest.profile": Cost(
        1.2,
        "linktest --profile lan and --profile lan --profile 1mbps-35ms: 4.14 and 14.86 s, "
        "of which the checks' own times are 2.71 and 12.47 s",
    ),
    "linktest.export": Cost(0.26, "linktest: 0.26 s for two profiles"),
}


class Linktest(Experiment):
    name = NAME
    help = "physics checks of an emulated link profile"
    description = (
        "Check that an emulated link does what its profile says (RTT seen by TCP, transfer "
        "time at the configured rate, loss, one-way delay distribution). Needs CAP_NET_ADMIN."
    )
    needs_net = True
    cells = CELLS
    options = OPTIONS
    costs = COSTS
    plan_module, run_module, report_module = _plan, _run, _report

    def metadata(self, plan: Plan) -> dict:
        return {
            "link_profiles": [p.describe() for p in plan.profiles],
            "profile_warnings": [w for p in plan.profiles for w in p.warnings()],
            "shaper_requested": plan.shaper,
        }

    def resume_key(self, plan: Plan) -> dict:
        return {
            "probes": plan.probes,
            "connects": plan.connects,
            "rate_seconds": plan.rate_seconds,
        }

    def work(self, plan: Plan) -> estimate.Work:
        """Per profile its topology and its checks, whose times the link fixes: --connects
        connects a round trip and a pause apart, the rate check's bytes at the link's rate,
        --probes UDP probes each way at their interval and the sink's wait after them."""
        work = estimate.Work(
            costs=COSTS,
            size=f"{estimate.count(len(plan.profiles), 'link')} x {plan.connects} connects, "
            f"{plan.probes} probes each way",
            cells=len(plan.profiles),
        )
        for profile in plan.profiles:
            work.add("linktest.profile", 1)
            work.exact_s += plan.connects * (profile.rtt_s + connect_gap_ms(profile) / 1e3)
            nbytes = rate_bytes(profile, plan.rate_seconds)
            if nbytes is not None:
                work.exact_s += nbytes * 8 / profile.s2c.rate_bps + 3 * profile.rtt_s
            for d in (profile.c2s, profile.s2c):
                work.exact_s += plan.probes * udp_interval_us(d) / 1e6 + d.delay_s
                if d.loss_pct:  # the sink waits for probes that never come
                    work.exact_s += udp_idle_s(d)
        return work

    def verdict(self, plan: Plan, store) -> None:
        """Print every check of this plan's profiles; fail (exit 5) if any failed."""
        names = [p.name for p in plan.profiles]
        rows = [
            r for r in store.query("SELECT * FROM linktest ORDER BY rowid") if r["profile"] in names
        ]
        for r in rows:
            mark = "ok  " if r["passed"] else "FAIL"
            print(
                f"{mark} {r['profile']} [{r['shaper']}] {r['check_name']} {r['direction']}: "
                f"measured {r['measured']:.3f} {r['unit']}, expected {r['expected']:.3f} "
                f"(accepted {r['low']:.3f}..{r['high']:.3f})",
                file=sys.stderr,
            )
        failed = [r for r in rows if not r["passed"]]
        if failed:
            raise CheckError(
                f"linktest: {len(failed)} of {len(rows)} checks failed; see tables/linktest.csv"
            )


EXPERIMENT = Linktest()
