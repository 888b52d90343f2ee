"""`pqlab probe HOST:PORT`: any TLS server's post-quantum handshake, taken apart from the
client's side: which groups it accepts, refuses or answers with a HelloRetryRequest, the
chain it sends, every handshake message's size and arrival time from a capture decrypted
with the client's key log, the server's flight in bytes and TCP segments, the round trips,
and whether the flight waited for an ACK; TTFB and, with --path, TTLB.

Split by job: `plan` (options, target, client configurations), `run` (capture, client,
verdict lines), `wire` (a connection from the capture or the client's events), `chain`
(the certificates), `analyse` (rows and outcomes), `verdict` (the lines), `schema`
(database tables), `report` (tables, figure, report section).
"""

from __future__ import annotations

from pqlab import estimate
from pqlab.estimate import Cost
from pqlab.experiment import CompareSpec, Experiment
from pqlab.experiments.probe import plan as _plan
from pqlab.experiments.probe import report as _report
from pqlab.experiments.probe import run as _run
from pqlab.experiments.probe import schema as _schema

KEYS = ("probe", "config", "sig", "stack")
COMPLETED = "outcome IN ('accepted', 'hello-retry')"


# This experiment's units of work and their costs (`pqlab.estimate`: the model, its shared
# units and the runs the costs were measured from).
COSTS: dict[str, Cost] = {
    "probe.cell": Cost(
        0.059,
        "probe of a local `pqlab serve` (5 configurations) with -n 2 and -n 20: 0.31 and 0.46 s",
    ),
    "probe.connection": Cost(0.0017, "the same two runs, with probe.cell"),
    "probe.export": Cost(0.4, "probe: 0.40 s, 5 configurations against a local server"),
}


class Probe(Experiment):
    name = _plan.NAME
    help = "any TLS server's post-quantum handshake, taken apart from the client's side"
    description = __doc__.split("\n\n")[0]
    needs_net = False  # a capture needs CAP_NET_RAW; without it the probe still runs
    options = _plan.OPTIONS
    costs = COSTS
    cells = _plan.CELLS
    migrations = _schema.MIGRATIONS
    plan_module, run_module, report_module = _plan, _run, _report
    compare = (
        CompareSpec("probe ttfb", "probe_raw", KEYS, "ttfb_ms", "ms", where=COMPLETED),
        CompareSpec("probe ttlb", "probe_raw", KEYS, "ttlb_ms", "ms", where="ttlb_ms IS NOT NULL"),
        CompareSpec(
            "probe flight",
            "probe_raw",
            KEYS,
            "server_flight_bytes",
            "bytes",
            where="server_flight_bytes IS NOT NULL",
        ),
    )

    def resume_key(self, plan: _plan.Plan) -> dict:
        return {
            "n": plan.n,
            "path": plan.path,
            "servername": plan.servername,
            "timeout": plan.timeout,
        }

    def work(self, plan: _plan.Plan) -> estimate.Work:
        """Per configuration a capture and a client run of -n connections, each waiting
        up to a second for the server's close; the network to the target is the user's."""
        cells = len(plan.cells)
        size = f"{estimate.count(cells, 'configuration')} x {estimate.count(plan.n, 'connection')}"
        work = estimate.Work(costs=COSTS, size=size, cells=cells)
        work.add("probe.cell", cells)
        work.add("probe.connection", cells * plan.n)
        work.notes.append("the round trips to the target are not in the estimate")
        return work

    def metadata(self, plan: _plan.Plan) -> dict:
        return {
            "probe": {
                "name": plan.name,
                "target": plan.target.text,
                "address": plan.target.connect,
                "servername": plan.servername,
                "ca": str(plan.ca),
                "path": plan.path,
                "n": plan.n,
                "timeout": plan.timeout,
                "capture_interface": plan.capture,
                "not_captured_because": plan.no_capture_reason,
                "configurations": sorted({c.config.name for c in plan.cells}),
                "stacks": sorted({c.stack.name for c in plan.cells}),
                "skipped": plan.skipped,
            }
        }

    def summary(self, plan) -> str:
        return "tables/probe.csv, captures/*.pcap with their key logs"


EXPERIMENT = Probe()
