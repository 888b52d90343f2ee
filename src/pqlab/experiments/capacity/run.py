"""Running the capacity cells: per cell one server pinned to its CPUs, serving every
connection in flight on a thread of its own, then every load point from the load generator
pinned to the other CPUs (across hosts: the server on its host, pinned there when the host
has the CPUs, the load generator on its own). Who was busy during each point: the server's
CPU time from its connection records, the load generator's own and its machine's CPUs from
its result, and across hosts the server's host's CPUs from its /proc/stat, read over the
pair's connection before and after the point. Everything is committed with the cell."""

from __future__ import annotations

import json
import time

from pqlab.errors import CheckError, EngineError
from pqlab.experiments.capacity import analyse, report, schema
from pqlab.experiments.capacity.plan import CELLS, Pinning, Plan, cpu_list
from pqlab.net.remote import RemoteHosts
from pqlab.net.shaping import build_hosts
from pqlab.options.tls import NO_CLIENT
from pqlab.progress import CellProgress
from pqlab.tls import negotiation, runner
from pqlab.tls.chains import make_chain

EXPERIMENT = "capacity"
SERVER_CONNECTIONS = 4096  # the most the engine's --max-concurrent takes


class Point:
    """One load point of a cell: closed with C clients, or open at a rate."""

    def __init__(self, mode: str, clients: int, rate: float | None, label: str):
        self.mode, self.clients, self.rate, self.label = mode, clients, rate, label

    @property
    def clients_or_rate(self) -> str:
        return str(self.clients) if self.mode == "closed" else f"{self.rate:.6g}"


def _load_spec(plan: Plan, hosts, server, cell: dict, point: Point) -> runner.LoadSpec:
    tls, chain, expected = cell["tls"], cell["chain"], cell["expected"]
    client = runner.ClientSpec(
        tls=tls,
        connect=f"{hosts.server_ip}:{server.listening['port']}",
        ca=chain.root,
        servername=None,
        n=plan.max_handshakes,
        warmup=plan.warmup,
        time_limit=int(plan.point_budget_s()),
        expected=expected,
        identity=cell["identity"],
    )
    return runner.LoadSpec(
        client=client,
        mode=point.mode,
        clients=point.clients,
        duration_ms=round(plan.duration_s * 1000),
        rate=point.rate,
    )


def _server_records(server, before: int, expected_count: int, timeout: float) -> list[dict]:
    """The server's connection records of this point (they may trail the client's)."""
    types = ("connection", "connection_error")
    recs = server.wait_count(types, before + expected_count, timeout)
    return recs[before:]


# The server's host's CPU counters (another host than the load generator's).
STAT_SCRIPT = "getconf CLK_TCK; cat /proc/stat"


def _server_host_stat(hosts) -> dict | None:
    """A snapshot of the server's host's CPUs when it is not the load generator's machine
    (a remote pair); None on one machine, where the load generator's report covers it."""
    if not isinstance(hosts, RemoteHosts):
        return None
    return analyse.proc_stat(hosts.script("server", STAT_SCRIPT))


def run_point(plan: Plan, hosts, server, cell: dict, point: Point, cpus: Pinning):
    """Run one load point; (point row, raw sample columns)."""
    expected = cell["expected"]
    spec = _load_spec(plan, hosts, server, cell, point)
    stack = plan.stack
    before = len(server.take("connection", "connection_error"))
    stat0 = _server_host_stat(hosts)
    result = runner.run_load(
        spec,
        hosts,
        cpu=cpu_list(cpus.client) if cpus.client else None,
        timeout=plan.point_budget_s() + 30,
    )
    stat1 = _server_host_stat(hosts)
    negotiation.check(result, expected, stack, what=f"{cell['id']} {point.label}")
    warmups = plan.warmup * point.clients
    served = warmups + result["completed"] + result["errors"]
    srv = _server_records(server, before, served, 30)
    for r in srv:
        if r["type"] == "connection":
            negotiation.check(r, expected, stack, what=f"{cell['id']} server connection")
    window = analyse.server_window(srv, warmups)
    loadgen = result.get("cpu") or {}
    s = result["samples"]
    if len(s["scheduled_ns"]) != result["completed"]:
        raise EngineError("the load generator's sample columns do not match its count")
    row = {
        "mode": point.mode,
        "clients": point.clients,
        "rate": point.rate,
        "rate_label": point.label,
        "clients_or_rate": point.clients_or_rate,
        "duration_ms": result["duration_ms"],
        "window_ns": result["window_ns"],
        "completed": result["completed"],
        "errors": result["errors"],
        "error_messages": json.dumps(result["error_messages"]),
        "arrivals": result["arrivals"],
        "abandoned": result["abandoned"],
        "server_cpu_s": window["cpu_s"],
        "server_span_ns": window["span_ns"],
        "server_connections": window["connections"],
        "server_connection_errors": sum(r["type"] != "connection" for r in srv),
        "server_output_blocked_ns": window.get("output_blocked_ns"),
        "loadgen_cpu_s": loadgen["process_cpu_ns"] / 1e9 if "process_cpu_ns" in loadgen else None,
        "loadgen_span_ns": loadgen.get("span_ns"),
        "machine_cpu": json.dumps(loadgen.get("machine")) if loadgen.get("machine") else None,
        "server_machine_cpu": json.dumps(analyse.stat_delta(stat0, stat1)) if stat0 else None,
        "client_cpus": cpu_list(cpus.client_cpus or loadgen.get("cpus_allowed") or []) or None,
        "t_start": result["t_start"],
    }
    raw = {
        "worker": s["worker"],
        "scheduled_ns": s["scheduled_ns"],
        "start_ns": s["start_ns"],
        "connected_ns": s["connected_ns"],
        "done_ns": s["handshake_done_ns"],
        "end_ns": s["end_ns"],
    }
    return row, raw


def _points(plan: Plan, closed_rows: list[dict]) -> list[Point]:
    """Open-loop points; percentages are of the highest closed-loop rate measured."""
    best = max(
        (r["completed"] / (r["window_ns"] / 1e9) for r in closed_rows if r["window_ns"]),
        default=None,
    )
    out = []
    for rate in plan.rates:
        if rate.relative:
            if not best:
                raise CheckError("no closed-loop rate to take the open-loop percentages of")
            out.append(Point("open", plan.open_workers, rate.value * best, rate.label))
        else:
            out.append(Point("open", plan.open_workers, rate.value, rate.label))
    return out


def run_cell(store, hosts, plan: Plan, algs, threads: int, chains, pair=None) -> None:
    group, ssig, csig, client = algs
    chain, (client_auth, identity) = chains
    cid = str(plan.cell_id(group, ssig, csig, threads, client, pair))
    stack = plan.stack
    cpus = plan.cpus(threads, pair)
    # A client with a certificate offers its own scheme too (stacks sign only with their own
    # list's schemes).
    sigalgs = (ssig,) if client is None else (ssig, client)
    tls = runner.Tls(stack=plan.stack, groups=(group,), sigalgs=sigalgs, events=False)
    expected = negotiation.Expected(group=group, sigalg=ssig, client_sigalg=client)
    cell = {"id": cid, "tls": tls, "chain": chain, "expected": expected, "identity": identity}
    # A server that serves one connection at a time idles while that connection waits
    # for its client (the client's half of the handshake, its close): its rate is then one
    # connection's latency, not its CPUs' capacity. Like a thread-per-connection server,
    # every connection in flight gets a thread. A client counts a connection done when it
    # has sent its Finished and close_notify, so under load the server holds more
    # connections than the load generator (their last records still to read): no cap
    # below the engine's own.
    server_spec = runner.ServerSpec(
        tls=tls,
        chain=chain,
        listen=f"{hosts.server_ip}:{plan.port}",
        response_mode="none",
        concurrent=True,
        max_concurrent=SERVER_CONNECTIONS,
        client_auth=client_auth,
    )
    rows, raws = [], []
    started = time.monotonic()
    server_cpu = cpu_list(cpus.server) if cpus.server else None
    with runner.start_server(server_spec, hosts, cpu=server_cpu, batch_s=0.05) as server:
        points = [Point("closed", c, None, f"{c} clients") for c in plan.clients]
        for p in points:
            row, raw = run_point(plan, hosts, server, cell, p, cpus)
            rows.append(row)
            raws.append(raw)
        for p in _points(plan, rows):
            row, raw = run_point(plan, hosts, server, cell, p, cpus)
            rows.append(row)
            raws.append(raw)
    labels = {
        "cell_id": cid,
        "stack": plan.stack.name,
        "stack_impl": stack.implementation,
        "group": group.name,
        "server_sig": ssig.name,
        "ca_sig": csig.name,
        "client_sig": client.name if client is not None else NO_CLIENT,
        "server_threads": threads,
        "host_pair": pair.label if pair is not None else None,
    }
    extra = {
        "open_workers": plan.open_workers,
        "warmup_per_worker": plan.warmup,
        "server_cpus": cpu_list(cpus.server_cpus) if cpus.server_cpus else None,
        "seconds": time.monotonic() - started,
    }
    params = {**labels, "duration_s": plan.duration_s, "max_handshakes": plan.max_handshakes}
    with store.cell(EXPERIMENT, cid, params):
        for i, (row, raw) in enumerate(zip(rows, raws, strict=True)):
            store.insert_rows("capacity_points", [{**labels, **extra, "point": i, **row}])
            n = len(raw["worker"])
            cols = {k: [v] * n for k, v in labels.items()}
            cols.update(
                {
                    "point": [i] * n,
                    "mode": [row["mode"]] * n,
                    "clients_or_rate": [row["clients_or_rate"]] * n,
                }
            )
            store.insert("capacity_raw", {**cols, **raw})
        store.add_warnings(EXPERIMENT, cid, report.not_saturated(report.rows(store, cid)))


def _measure_pair(store, plan: Plan, pair, cells, progress) -> None:
    """The cells of one host pair (None: this machine's two namespaces)."""
    config = plan.remote.config if plan.remote is not None else ()
    with build_hosts(None, pair=pair, ssh_config=config) as hosts:
        where = ""
        if pair is not None:
            hosts.record(store)
            where = f" ({pair.label})"
        for group, ssig, csig, threads, client in cells:
            mtls = f" / client {client.name}" if client is not None else ""
            progress.start(
                f"{group.name} / {ssig.name} / CA {csig.name}{mtls} / {threads} server "
                f"CPU(s){where}"
            )
            # Across hosts the certificate names the address the load generator connects to.
            address = hosts.server_ip if pair is not None else None
            certs = store.path / "certs"
            chain = make_chain(certs, csig, ssig, plan.stack.name, server_address=address)
            mutual = runner.client_certificate(certs, csig, client, plan.client_ca, plan.stack)
            run_cell(
                store, hosts, plan, (group, ssig, csig, client), threads, (chain, mutual), pair
            )
            progress.advance()


def measure(plan: Plan, store) -> None:

    schema.ensure(store)
    done = CELLS.done(store)
    todo = [(p, c) for p in plan.pairs for c in plan.cells() if plan.cell_id(*c, p) not in done]
    if not todo:
        return
    with CellProgress("capacity", len(todo)) as progress:
        for pair in plan.pairs:
            cells = [c for p, c in todo if p is pair]
            if cells:
                _measure_pair(store, plan, pair, cells, progress)
