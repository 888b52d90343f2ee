"""Running the capacity cells: per cell one server (pinned to its CPUs, --threads), then
every load point from the load generator pinned to the other CPUs; the server's own CPU
time read from /proc around each point; everything committed with the cell."""

from __future__ import annotations

import json
import time

from pqlab.errors import CheckError, EngineError
from pqlab.experiments.capacity import analyse, schema
from pqlab.experiments.capacity.plan import CELLS, Plan, cpu_list, pick_cpus
from pqlab.net.shaping import build_hosts
from pqlab.progress import CellProgress
from pqlab.tls import negotiation, runner, stacks
from pqlab.tls.chains import make_chain

EXPERIMENT = "capacity"


class Point:
    """One load point of a cell: closed with C clients, or open at a rate."""

    def __init__(self, mode: str, clients: int, rate: float | None, label: str):
        self.mode, self.clients, self.rate, self.label = mode, clients, rate, label

    @property
    def clients_or_rate(self) -> str:
        return str(self.clients) if self.mode == "closed" else f"{self.rate:.6g}"


def _load_spec(plan: Plan, hosts, server, tls, chain, expected, point: Point) -> runner.LoadSpec:
    client = runner.ClientSpec(
        tls=tls,
        connect=f"{hosts.server_ip}:{server.listening['port']}",
        ca=chain.root,
        servername=None,
        n=plan.max_handshakes,
        warmup=plan.warmup,
        time_limit=int(plan.point_budget_s()),
        expected=expected,
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


def run_point(plan: Plan, hosts, server, cell: dict, point: Point, cpus) -> tuple[dict, dict]:
    """Run one load point; (point row, raw sample columns)."""
    tls, chain, expected = cell["tls"], cell["chain"], cell["expected"]
    spec = _load_spec(plan, hosts, server, tls, chain, expected, point)
    stack = stacks.get(plan.stack)
    before = len(server.take("connection", "connection_error"))
    cpu0 = analyse.proc_cpu_seconds(server.pid)
    result = runner.run_load(
        spec,
        hosts,
        cpu=cpu_list(cpus[1]) if plan.pinning else None,
        timeout=plan.point_budget_s() + 30,
    )
    negotiation.check(result, expected, stack, what=f"{cell['id']} {point.label}")
    served = plan.warmup * point.clients + result["completed"] + result["errors"]
    srv = _server_records(server, before, served, 30)
    for r in srv:
        if r["type"] == "connection":
            negotiation.check(r, expected, stack, what=f"{cell['id']} server connection")
    cpu1 = analyse.proc_cpu_seconds(server.pid)
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
        "server_cpu_s": (cpu1 - cpu0) if cpu0 is not None and cpu1 is not None else None,
        "server_connections": len(srv),
        "server_connection_errors": sum(r["type"] != "connection" for r in srv),
        "t_start": result["t_start"],
    }
    raw = {
        "worker": s["worker"],
        "scheduled_ns": s["scheduled_ns"],
        "start_ns": s["start_ns"],
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


def run_cell(store, hosts, plan: Plan, algs, threads: int, chain) -> None:
    group, ssig, csig = algs
    cid = str(plan.cell_id(group, ssig, csig, threads))
    stack = stacks.get(plan.stack)
    cpus = pick_cpus(threads)
    tls = runner.Tls(stack=plan.stack, groups=(group,), sigalgs=(ssig,), events=False)
    expected = negotiation.Expected(group=group, sigalg=ssig)
    cell = {"id": cid, "tls": tls, "chain": chain, "expected": expected}
    server_spec = runner.ServerSpec(
        tls=tls,
        chain=chain,
        listen=f"{hosts.server_ip}:{plan.port}",
        response_mode="none",
        threads=threads,
    )
    rows, raws = [], []
    started = time.monotonic()
    server_cpu = cpu_list(cpus[0]) if plan.pinning else None
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
        "stack": plan.stack,
        "stack_impl": stack.implementation,
        "group": group.name,
        "server_sig": ssig.name,
        "ca_sig": csig.name,
        "server_threads": threads,
    }
    extra = {
        "open_workers": plan.open_workers,
        "warmup_per_worker": plan.warmup,
        "server_cpus": cpu_list(cpus[0]) if plan.pinning else None,
        "client_cpus": cpu_list(cpus[1]) if plan.pinning else None,
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


def measure(plan: Plan, store) -> None:

    schema.ensure(store)
    done = CELLS.done(store)
    todo = [c for c in plan.cells() if plan.cell_id(*c) not in done]
    if not todo:
        return
    cert_dir = store.path / "certs"
    with build_hosts(None) as hosts, CellProgress("capacity", len(todo)) as progress:
        for group, ssig, csig, threads in todo:
            progress.start(f"{group.name} / {ssig.name} / CA {csig.name} / {threads} thread(s)")
            chain = make_chain(cert_dir, csig, ssig, plan.stack)
            run_cell(store, hosts, plan, (group, ssig, csig), threads, chain)
            progress.advance()
