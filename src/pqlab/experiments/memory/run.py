"""Measuring the memory experiment: per cell the engine's `tls memory` on each role (heap
counted the stack's way and at the C allocator, stack high-water mark), and the server's
memory per idle connection.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from pqlab import engine
from pqlab.catalog import Algorithm
from pqlab.errors import CheckError, EngineError
from pqlab.experiment import (
    CellId,
)
from pqlab.experiments.memory import tracker as memory_tracker
from pqlab.experiments.memory.plan import CELLS, NAME, NONE, Plan, default_certs_dir
from pqlab.experiments.memory.schema import IDLE_DDL, RAW_DDL
from pqlab.net.shaping import build_hosts
from pqlab.process import EngineProcess
from pqlab.progress import CellProgress
from pqlab.tls import runner, stacks
from pqlab.tls.chains import make_chain

ROLES = ("client", "server")


METRICS = (
    "heap_total_bytes",
    "heap_peak_bytes",
    "heap_retained_bytes",
    "allocations",
    "frees",
    "reallocations",
    "stack_bytes",
    "malloc_total_bytes",
    "malloc_peak_bytes",
    "malloc_retained_bytes",
    "malloc_allocations",
    "malloc_frees",
)


@dataclass
class Cell:
    stack: stacks.Stack
    group: Algorithm
    server_sig: Algorithm
    ca_sig: Algorithm
    client_sig: Algorithm | None
    cell_id: CellId

    def keys(self) -> dict:
        return {
            "group": self.group.name,
            "server_sig": self.server_sig.name,
            "ca_sig": self.ca_sig.name,
            "client_sig": self.client_sig.name if self.client_sig else NONE,
        }


def _tls(st, cell: Cell, client_side: bool = False) -> runner.Tls:
    """A cell's groups and schemes, no message events; a client with a certificate also
    offers its own scheme (libssl signs only with schemes of the client's own list)."""
    sigalgs = (cell.server_sig,)
    if client_side and cell.client_sig is not None:
        sigalgs += (cell.client_sig,)
    return runner.Tls(stack=st, groups=(cell.group,), sigalgs=sigalgs, events=False)


def role_spec(st, cell: Cell, certs, plan: Plan, role: str = "both", address=None):
    """`pqlab-engine tls memory` for one cell (`runner.MemorySpec`): both roles in one
    process, or the `server` role (listening on `address`) or the `client` role
    (connecting to it), each given only its own files. `certs` is (server chain, client
    chain|None). The client checks the name `localhost`, which every chain carries, so a
    cell's chains and ClientHello are the same on one machine and across hosts."""
    chain, client = certs
    return runner.MemorySpec(
        tls=_tls(st, cell),
        chain=chain,
        role=role,
        listen=address if role == "server" else None,
        connect=address if role == "client" else None,
        n=plan.n,
        warmup=plan.warmup,
        fixed_random=plan.fixed_random and st.fixed_random,
        client_chain=client,
        client_sig=cell.client_sig if client is not None else None,
    )


def _raw_row(cell: Cell, st, rec: dict, fixed_random: bool, pair: str | None) -> dict:
    neg = rec.get("negotiated") or {}
    row = {
        "cell_id": str(cell.cell_id),
        "stack": st.name,
        "stack_impl": st.implementation,
        "role": rec["role"],
        **cell.keys(),
        "idx": rec["index"],
        "warmup": bool(rec["warmup"]),
        "stack_base_bytes": rec.get("stack_base_bytes"),
        "stack_overflowed_paint": rec.get("stack_overflowed_paint"),
        "handshake_ns": rec.get("handshake_ns"),
        "negotiated_group": neg.get("group"),
        "negotiated_sigalg": neg.get("sigalg"),
        "negotiated_client_sigalg": neg.get("client_sigalg"),
        "record": json.dumps(rec, sort_keys=True),
        "heap_counting": rec.get("heap_counting"),
        "fixed_random": fixed_random,
        "host_pair": pair,
    }
    for m in METRICS:
        row[m] = rec.get(m)
    return row


def _handshakes(st, cell: Cell, certs, plan: Plan, hosts) -> list[dict]:
    """The cell's engine records: both roles in one process on this machine (no hosts),
    or the server role on the server's host and the client role on the client's."""
    budget = 120 + 2 * plan.n
    if hosts is None:
        spec = role_spec(st, cell, certs, plan)
        return engine.run(spec.args(), timeout=budget, program=spec.program)
    server_spec = role_spec(st, cell, certs, plan, "server", f"{hosts.server_ip}:0")
    with EngineProcess(
        server_spec.argv(),
        "memory server role",
        server_spec.program,
        topo=hosts,
        side="server",
        lifetime=budget + 120,
    ) as server:
        port = server.wait_for("memory_setup", 60)["address"].rsplit(":", 1)[1]
        client_spec = role_spec(st, cell, certs, plan, "client", f"{hosts.server_ip}:{port}")
        with EngineProcess(
            client_spec.argv(),
            "memory client role",
            client_spec.program,
            topo=hosts,
            side="client",
            lifetime=budget + 120,
        ) as client:
            client_records = client.finish(budget)
        return server.finish(60) + client_records


# The idle measurement's client pauses this long after each connection, so the server
# finishes that handshake before the next one starts; a point taken during another
# handshake anyway is refused, and the measurement repeated (at most IDLE_ATTEMPTS times).
# Measured on the 2-core development machine (load 2, openssl, wolfssl and rustls, mutual
# TLS with ML-DSA-44 certificates and without): the server's heap point comes at most 4.3 ms
# after the client is done, and the next connection is accepted at least 5.8 ms after it.
IDLE_GAP_MS = 8


IDLE_ATTEMPTS = 3


def overlapping(heap: list[dict], connections: list[dict]) -> list[int]:
    """The server's heap records taken while another connection was between its accept
    and the end of its handshake: the process-wide count then holds part of that
    handshake too, so the point is not N idle connections. Both from the server's records
    (one clock)."""
    busy = []
    for h in heap:
        others = (c for c in connections if c["index"] != h["index"])
        if any(c["t_accept"] <= h["t"] < c["t_handshake_done"] for c in others):
            busy.append(h["index"])
    return busy


def _hold(st, cell: Cell, certs, plan: Plan, hosts) -> tuple[list[dict], list[dict]]:
    """One idle measurement: a `tls server --count-heap` holding plan.idle connections of a
    `tls hold`; the server's heap and connection records."""
    chain, client = certs
    auth, identity = None, None
    if client is not None:
        auth, identity = runner.mutual(client, cell.client_sig, st)
    server = runner.ServerSpec(
        tls=_tls(st, cell),
        chain=chain,
        listen="127.0.0.1:0",
        max_connections=plan.idle,
        response_mode="none",
        concurrent=True,
        max_concurrent=plan.idle + 8,
        client_auth=auth,
        count_heap=True,
    )
    budget = 60 + plan.idle * (1 + IDLE_GAP_MS / 1000)
    on_server = {"topo": hosts, "side": "server", "lifetime": 240 + budget}
    with EngineProcess(server.argv(), "memory idle server", st.program, **on_server) as proc:
        port = proc.wait_for("listening", 30)["port"]
        hold = runner.HoldSpec(
            tls=_tls(st, cell, client_side=True),
            connect=f"127.0.0.1:{port}",
            ca=chain.root,
            n=plan.idle,
            identity=identity,
            gap_ms=IDLE_GAP_MS,
        )
        with EngineProcess(hold.argv(), "memory idle client", st.program, **on_server) as holder:
            holder.finish(budget)
        proc.finish(60)
        return proc.take("heap"), proc.take("connection")


def _measure_idle(st, cell: Cell, certs, plan: Plan, hosts=None) -> list[dict]:
    """Hold plan.idle connections to a `tls server --count-heap`; its heap records. Both
    run on the server's host (this machine without hosts) over its loopback: the figure is
    the server's memory per connection, which the network does not change."""
    busy: list[int] = []
    for _ in range(IDLE_ATTEMPTS):
        heap, connections = _hold(st, cell, certs, plan, hosts)
        if len(heap) != plan.idle or len(connections) != plan.idle:
            raise EngineError(
                f"memory {cell.cell_id}: the idle server wrote {len(heap)} heap and "
                f"{len(connections)} connection records of {plan.idle}"
            )
        busy = overlapping(heap, connections)
        if not busy:
            return heap
    raise CheckError(
        f"memory {cell.cell_id}: in {IDLE_ATTEMPTS} attempts the idle server never counted "
        f"its heap without another handshake under way (points {busy}); the machine is too "
        "busy for the idle measurement: rerun when it is quiet, or with --idle 0"
    )


def _idle_rows(cell: Cell, st, records: list[dict], pair: str | None) -> list[dict]:
    return [
        {
            "cell_id": str(cell.cell_id),
            "stack": st.name,
            "stack_impl": st.implementation,
            **cell.keys(),
            "idx": r["index"],
            "connections_open": r["connections_open"],
            "heap_in_use_bytes": r["heap_in_use_bytes"],
            "vm_rss_bytes": r.get("vm_rss_bytes"),
            "record": json.dumps(r, sort_keys=True),
            "heap_counting": r.get("heap_counting"),
            "malloc_in_use_bytes": r.get("malloc_in_use_bytes"),
            "host_pair": pair,
        }
        for r in records
    ]


def _measure_cell(store, plan: Plan, st, cell: Cell, hosts=None) -> None:
    cert_dir = plan.certs or default_certs_dir()
    chain = make_chain(cert_dir, cell.ca_sig, cell.server_sig, st.name)
    client = None
    if cell.client_sig is not None:
        client = make_chain(cert_dir, cell.ca_sig, cell.client_sig, st.name, purpose="client")
    certs = (chain, client)
    pair = hosts.pair.label if hosts is not None else None
    records = _handshakes(st, cell, certs, plan, hosts)
    fixed = plan.fixed_random and st.fixed_random
    rows = [_raw_row(cell, st, r, fixed, pair) for r in records if r.get("type") == "memory"]
    for role in ROLES:
        got = sum(r["role"] == role for r in rows)
        if got != plan.n + plan.warmup:
            raise EngineError(
                f"memory {cell.cell_id}: the engine wrote {got} {role} records of "
                f"{plan.n + plan.warmup}"
            )
    idle = []
    if plan.idle:
        idle = _idle_rows(cell, st, _measure_idle(st, cell, certs, plan, hosts), pair)
    tracker = memory_tracker.measure_cell(st, cell, chain, client) if plan.tracker(st) else []
    params = cell.keys() | ({"host_pair": pair} if pair else {})
    with store.cell(NAME, cell.cell_id, params):
        store.insert_rows("memory_raw", rows)
        store.insert_rows("memory_idle_raw", idle)
        store.insert_rows("memory_tracker_raw", tracker)


def _measure_pair(store, plan: Plan, pair, cells: list[Cell], progress) -> None:
    """The cells of one host pair (None: this machine)."""
    if pair is None:
        for cell in cells:
            progress.start(cell.cell_id.label())
            _measure_cell(store, plan, cell.stack, cell)
            progress.advance()
        return
    with build_hosts(None, pair=pair, ssh_config=plan.remote.config) as hosts:
        hosts.record(store)
        for cell in cells:
            progress.start(f"{cell.cell_id.label()} ({pair.label})")
            _measure_cell(store, plan, cell.stack, cell, hosts)
            progress.advance()


def measure(plan: Plan, store) -> None:

    store.ensure_table(RAW_DDL)
    store.ensure_table(IDLE_DDL)
    store.ensure_table(memory_tracker.DDL)
    done = CELLS.done(store)
    todo = [
        (pair, Cell(name, g, s, c, cl, plan.cell_id(name, g, s, c, cl, pair)))
        for pair in plan.pairs
        for name, g, s, c, cl in plan.cells()
    ]
    todo = [(pair, cell) for pair, cell in todo if cell.cell_id not in done]
    if not todo:
        return
    with CellProgress("memory", len(todo)) as progress:
        for pair in plan.pairs:
            cells = [cell for p, cell in todo if p is pair]
            if cells:
                _measure_pair(store, plan, pair, cells, progress)
