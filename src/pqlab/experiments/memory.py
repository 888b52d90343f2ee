"""`pqlab memory`: what a full TLS handshake costs in memory, for client and server
separately, over every (stack, group, server signature, CA signature, client signature)
cell: heap allocated in total, peak heap in use, heap still held after it, allocations and
frees, counted the stack's own way (OpenSSL's allocator hooks) and, for every stack alike,
as every block the handshaking thread takes from the C allocator; and the thread's stack
high-water mark from a painted stack. Also the server's memory per idle established
connection (the slope of its RSS and of its counted heap while it holds N connections).
Across hosts (`--server-host`, `--client-host`, `--inventory --pairs`) each role runs on its
own host, and the idle connections are held on the server's. See docs/memory.md.
"""

from __future__ import annotations

import html
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from pqlab import catalog, engine, estimate, files, units
from pqlab.catalog import Algorithm
from pqlab.errors import CheckError, EngineError
from pqlab.experiment import (
    CellId,
    Cells,
    CompareSpec,
    Experiment,
    Option,
    parse_stacks,
    stack_option,
)
from pqlab.experiments import hosts as remote_hosts
from pqlab.experiments import memory_tracker
from pqlab.net.shaping import build_hosts
from pqlab.process import EngineProcess, InFile
from pqlab.progress import CellProgress
from pqlab.report.section import Section, template
from pqlab.tls import stacks
from pqlab.tls.chains import make_chain

NAME = "memory"
CELLS = Cells(NAME, ("group", "server_sig", "ca_sig", "client_sig"), tls=True)
DEFAULT_GROUPS = "X25519,X25519MLKEM768"
DEFAULT_SIGS = "ECDSA-P256,ML-DSA-44"
MAX_N = 10_000
MAX_WARMUP = 100
MAX_IDLE = 1024
NONE = "none"
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

RAW_DDL = """
CREATE TABLE IF NOT EXISTS memory_raw (
    cell_id TEXT, stack TEXT, stack_impl TEXT, role TEXT, "group" TEXT, server_sig TEXT,
    ca_sig TEXT, client_sig TEXT, idx INTEGER, warmup BOOLEAN,
    heap_total_bytes BIGINT, heap_peak_bytes BIGINT, heap_retained_bytes BIGINT,
    allocations BIGINT, frees BIGINT, reallocations BIGINT, stack_bytes BIGINT,
    stack_base_bytes BIGINT, stack_overflowed_paint BOOLEAN, handshake_ns BIGINT,
    negotiated_group TEXT, negotiated_sigalg TEXT, negotiated_client_sigalg TEXT,
    record JSON, heap_counting TEXT, malloc_total_bytes BIGINT, malloc_peak_bytes BIGINT,
    malloc_retained_bytes BIGINT, malloc_allocations BIGINT, malloc_frees BIGINT,
    fixed_random BOOLEAN, host_pair TEXT)
"""
IDLE_DDL = """
CREATE TABLE IF NOT EXISTS memory_idle_raw (
    cell_id TEXT, stack TEXT, stack_impl TEXT, "group" TEXT, server_sig TEXT, ca_sig TEXT,
    client_sig TEXT, idx INTEGER, connections_open INTEGER, heap_in_use_bytes BIGINT,
    vm_rss_bytes BIGINT, record JSON, heap_counting TEXT, malloc_in_use_bytes BIGINT,
    host_pair TEXT)
"""
ADDED = {
    "memory_raw": [
        ("heap_counting", "TEXT"),
        ("malloc_total_bytes", "BIGINT"),
        ("malloc_peak_bytes", "BIGINT"),
        ("malloc_retained_bytes", "BIGINT"),
        ("malloc_allocations", "BIGINT"),
        ("malloc_frees", "BIGINT"),
        ("fixed_random", "BOOLEAN"),
        # Runs made before host pairs: the pair a row ran on (None: this machine).
        ("host_pair", "TEXT"),
    ],
    "memory_idle_raw": [
        ("heap_counting", "TEXT"),
        ("malloc_in_use_bytes", "BIGINT"),
        ("host_pair", "TEXT"),
    ],
}
MIGRATIONS = tuple(
    f"ALTER TABLE IF EXISTS {table} ADD COLUMN IF NOT EXISTS {name} {kind}"
    for table, cols in ADDED.items()
    for name, kind in cols
)


@dataclass
class Plan:
    groups: list[Algorithm]
    server_sigs: list[Algorithm]
    ca_sigs: list[Algorithm]
    client_sigs: list[Algorithm | None]  # None: no client certificate
    n: int
    warmup: int
    idle: int  # connections held for the idle measurement; 0: none
    stacks: tuple[str, ...] = (stacks.DEFAULT_STACK,)
    certs: Path | None = None  # certificates reused across runs (default_certs_dir())
    fixed_random: bool = True  # the engine's --fixed-random, on stacks that can
    library_tracker: bool = True  # also run the library's own tracker where it has one
    remote: object | None = None  # pqlab.net.remote.RemotePlan: the host pairs

    @property
    def pairs(self) -> list:
        """The host pairs the cells run on (None: this machine, both roles in one process)."""
        return list(self.remote.pairs) if self.remote is not None else [None]

    def tracker(self, stack) -> bool:
        """Whether cells on `stack` also run the library's own memory tracker: on one
        machine only (its example programs are this machine's, run over its loopback)."""
        return self.library_tracker and self.remote is None and memory_tracker.applies(stack)

    def cells(self):
        for st in self.stacks:
            for g in self.groups:
                for s in self.server_sigs:
                    for c in self.ca_sigs:
                        for cl in self.client_sigs:
                            yield st, g, s, c, cl

    def cell_id(self, st, g, s, c, cl, pair=None) -> CellId:
        # Several pairs: each cell once per pair (one pair: the cell ids of one machine).
        several = pair is not None and len(self.pairs) > 1
        return CELLS.id(g, s, c, cl or NONE, stack=st, pair=pair.label if several else None)

    def as_dict(self) -> dict:
        return {
            "groups": [a.name for a in self.groups],
            "server_sigs": [a.name for a in self.server_sigs],
            "ca_sigs": [a.name for a in self.ca_sigs],
            "client_sigs": [a.name if a else NONE for a in self.client_sigs],
            "n": self.n,
            "warmup": self.warmup,
            "idle": self.idle,
            "stacks": list(self.stacks),
            "certs": str(self.certs) if self.certs else None,
            "fixed_random": self.fixed_random,
            "library_tracker": self.library_tracker and self.remote is None,
        }


def _client_sigs(text: str, chosen) -> list[Algorithm | None]:
    names = units.parse_list(text, "--client-sig", example="none,ECDSA-P256")
    out: list[Algorithm | None] = []
    for name in names:
        if name.lower() == NONE:
            out.append(None)
            continue
        alg = catalog.resolve(name, "sig")
        for stack in chosen:
            stacks.require([alg], stack, "client", "--client-sig")
        out.append(alg)
    return out


def from_values(values) -> Plan:
    """Every check before anything is created (every cell on every stack)."""
    chosen = parse_stacks(values)
    groups = catalog.resolve_list(units.parse_list(values.groups, "--groups"), "kem")
    server_sigs = catalog.resolve_list(units.parse_list(values.server_sig, "--server-sig"), "sig")
    ca_sigs = catalog.resolve_list(units.parse_list(values.ca_sig, "--ca-sig"), "sig")
    for stack in chosen:
        stacks.require(groups, stack, "group", "--groups")
        stacks.require(server_sigs, stack, "server", "--server-sig")
        stacks.require(ca_sigs, stack, "ca", "--ca-sig")
        stacks.require_chains(server_sigs, ca_sigs, stack)
    plan = Plan(
        groups=groups,
        server_sigs=server_sigs,
        ca_sigs=ca_sigs,
        client_sigs=_client_sigs(values.client_sig or NONE, chosen),
        n=units.parse_positive_int(values.n, "-n", maximum=MAX_N),
        warmup=units.parse_positive_int(values.warmup, "--warmup", minimum=1, maximum=MAX_WARMUP),
        idle=units.parse_positive_int(values.idle, "--idle", minimum=0, maximum=MAX_IDLE),
        stacks=tuple(st.name for st in chosen),
        certs=_certs_dir(values.certs),
        fixed_random=not values.system_random,
        library_tracker=not values.no_library_tracker,
    )
    plan.remote = remote_hosts.plan(values, needs_capture=False, what="memory")
    tracked = [st.name for st in chosen if memory_tracker.applies(st)]
    if plan.remote is not None and plan.library_tracker and tracked:
        print(
            f"memory: across hosts the {', '.join(tracked)} library's own memory tracker is "
            "not run (its example programs run on this machine only); run without host "
            "options for it",
            file=sys.stderr,
        )
    return plan


def default_certs_dir() -> Path:
    """Where `pqlab memory` keeps its chains between runs when --certs is not given: the
    user's cache ($XDG_CACHE_HOME/pqlab/memory-certs). The same keys in every run are what
    make an ML-DSA signer's allocation counts repeat (its rejection-sampling loop depends on
    the key and the signed transcript); the keys are throwaway test keys, 0600 in 0700
    directories, trusted by nothing else."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "pqlab" / "memory-certs"


def _certs_dir(text: str | None) -> Path:
    """Where the chains are kept: a directory pqlab may write (checked now, before the run
    directory exists: a read-only one is refused here, not after the first cell)."""
    path = Path(text).expanduser() if text else default_certs_dir()
    return files.check_writable(path, "--certs").resolve()


@dataclass
class Cell:
    stack: str
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


def _tls_args(st, cell: Cell, client_side: bool = False) -> list[str]:
    """--groups and --sigalgs of a cell; a client with a certificate also offers its own
    scheme (libssl signs only with schemes of the client's own list)."""
    sigalgs = st.sigalg_name(cell.server_sig)
    if client_side and cell.client_sig is not None:
        sigalgs += ":" + st.sigalg_name(cell.client_sig)
    return ["--groups", st.group_name(cell.group), "--sigalgs", sigalgs, "--events", "off"]


def role_argv(st, cell: Cell, certs, plan: Plan, role: str = "both", address=None) -> list:
    """`pqlab-engine tls memory` for one cell: both roles in one process, or the `server`
    role (listening on `address`) or the `client` role (connecting to it), each given only
    its own files (marked for the host that runs it). `certs` is (server chain, client
    chain|None). The client checks the name `localhost`, which every chain carries, so a
    cell's chains and ClientHello are the same on one machine and across hosts."""
    chain, client = certs
    serves, connects = role in ("both", "server"), role in ("both", "client")
    argv: list = ["tls", "memory", "--role", role]
    if serves:
        argv += ["--cert-chain", InFile(chain.chain), "--key", InFile(chain.key)]
    if connects:
        argv += ["--ca", InFile(chain.root)]
    if role != "both":
        argv += ["--listen" if serves else "--connect", address]
    argv += [*_tls_args(st, cell), "-n", plan.n, "--warmup", plan.warmup, "--stack", st.name]
    if plan.fixed_random and st.fixed_random:
        argv.append("--fixed-random")
    if client is not None:
        if connects:
            argv += ["--client-cert-chain", InFile(client.chain)]
            argv += ["--client-key", InFile(client.key)]
        if serves:
            argv += ["--client-ca", InFile(client.root)]
        argv += ["--client-sigalg", st.sigalg_name(cell.client_sig)]
    return argv


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
        return engine.run([str(a) for a in role_argv(st, cell, certs, plan)], timeout=budget)
    listen = f"{hosts.server_ip}:0"
    with EngineProcess(
        role_argv(st, cell, certs, plan, "server", listen),
        "memory server role",
        topo=hosts,
        side="server",
        lifetime=budget + 120,
    ) as server:
        port = server.wait_for("memory_setup", 60)["address"].rsplit(":", 1)[1]
        with EngineProcess(
            role_argv(st, cell, certs, plan, "client", f"{hosts.server_ip}:{port}"),
            "memory client role",
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
    tls = _tls_args(st, cell)
    server = ["tls", "server", "--listen", "127.0.0.1:0", "--stack", st.name]
    server += ["--cert-chain", InFile(chain.chain)]
    server += ["--key", InFile(chain.key), *tls, "--concurrent", "--max-concurrent", plan.idle + 8]
    server += ["--response-mode", "none", "--count-heap", "--max-connections", plan.idle]
    hold = ["tls", "hold", "--stack", st.name, "--ca", InFile(chain.root)]
    hold += [*_tls_args(st, cell, True), "-n", plan.idle, "--gap-ms", IDLE_GAP_MS]
    if client is not None:
        server += ["--client-ca", InFile(client.root)]
        server += ["--client-sigalgs", st.sigalg_name(cell.client_sig)]
        hold += ["--cert-chain", InFile(client.chain), "--key", InFile(client.key)]
    budget = 60 + plan.idle * (1 + IDLE_GAP_MS / 1000)
    on_server = {"topo": hosts, "side": "server", "lifetime": 240 + budget}
    with EngineProcess(server, "memory idle server", **on_server) as proc:
        port = proc.wait_for("listening", 30)["port"]
        hold += ["--connect", f"127.0.0.1:{port}"]
        with EngineProcess(hold, "memory idle client", **on_server) as holder:
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
            _measure_cell(store, plan, stacks.get(cell.stack), cell)
            progress.advance()
        return
    with build_hosts(None, pair=pair, ssh_config=plan.remote.config) as hosts:
        hosts.record(store)
        for cell in cells:
            progress.start(f"{cell.cell_id.label()} ({pair.label})")
            _measure_cell(store, plan, stacks.get(cell.stack), cell, hosts)
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


KEYS = 'stack_impl, role, "group", server_sig, ca_sig, client_sig'
TABLE_SQL = f"""
SELECT {KEYS}, any_value(stack) AS stack, any_value(heap_counting) AS heap_counting,
       CAST(median(heap_total_bytes) AS BIGINT) AS heap_total_bytes,
       CAST(median(heap_peak_bytes) AS BIGINT) AS heap_peak_bytes,
       CAST(median(heap_retained_bytes) AS BIGINT) AS heap_retained_bytes,
       CAST(median(allocations) AS BIGINT) AS allocations,
       CAST(median(frees) AS BIGINT) AS frees,
       CAST(median(reallocations) AS BIGINT) AS reallocations,
       CAST(median(stack_bytes) AS BIGINT) AS stack_bytes,
       count(*) AS n,
       min(allocations) AS allocations_min, max(allocations) AS allocations_max,
       min(heap_peak_bytes) AS heap_peak_bytes_min, max(heap_peak_bytes) AS heap_peak_bytes_max,
       min(heap_total_bytes) AS heap_total_bytes_min,
       max(heap_total_bytes) AS heap_total_bytes_max,
       max(stack_bytes) AS stack_bytes_max,
       bool_or(stack_overflowed_paint) AS stack_paint_overflowed,
       CAST(median(malloc_total_bytes) AS BIGINT) AS malloc_total_bytes,
       CAST(median(malloc_peak_bytes) AS BIGINT) AS malloc_peak_bytes,
       CAST(median(malloc_retained_bytes) AS BIGINT) AS malloc_retained_bytes,
       CAST(median(malloc_allocations) AS BIGINT) AS malloc_allocations,
       bool_and(fixed_random) AS fixed_random,
       host_pair
FROM memory_raw WHERE NOT warmup
GROUP BY {KEYS}, host_pair
ORDER BY role, "group", server_sig, ca_sig, client_sig, stack_impl, host_pair
"""
IDLE_SQL = """
SELECT stack_impl, "group", server_sig, ca_sig, client_sig,
       max(connections_open) AS connections,
       CAST(regr_slope(vm_rss_bytes, connections_open) AS BIGINT) AS rss_bytes_per_connection,
       CAST(regr_slope(heap_in_use_bytes, connections_open) AS BIGINT)
           AS heap_bytes_per_connection,
       round(regr_r2(vm_rss_bytes, connections_open), 3) AS rss_r2,
       round(regr_r2(heap_in_use_bytes, connections_open), 3) AS heap_r2,
       min(vm_rss_bytes) AS rss_bytes_first, max(vm_rss_bytes) AS rss_bytes_last,
       any_value(heap_counting) AS heap_counting,
       CAST(regr_slope(malloc_in_use_bytes, connections_open) AS BIGINT)
           AS malloc_bytes_per_connection,
       host_pair
FROM memory_idle_raw
GROUP BY stack_impl, "group", server_sig, ca_sig, client_sig, host_pair
ORDER BY "group", server_sig, ca_sig, client_sig, host_pair
"""


def export(store):

    if not store.has_table("memory_raw"):
        return None
    tracked = store.has_table("memory_tracker_raw") and bool(
        store.query("SELECT 1 FROM memory_tracker_raw LIMIT 1")
    )
    table = store.export_table(
        "memory", memory_tracker.with_tracker(TABLE_SQL) if tracked else TABLE_SQL
    )
    s = Section(
        title="Memory per handshake and per idle connection", intro=template("memory_intro")
    )
    s.table(table, "Heap and stack per full handshake, per role (medians; min/max show spread)")
    if tracked:
        _export_tracker(store, s)
    if store.has_table("memory_idle_raw") and store.query("SELECT 1 FROM memory_idle_raw LIMIT 1"):
        idle = store.export_table("memory_idle", IDLE_SQL)
        s.table(idle, "Server memory per idle established connection (least-squares slopes)")
    pairs = store.query(
        "SELECT DISTINCT host_pair FROM memory_raw WHERE host_pair IS NOT NULL ORDER BY 1"
    )
    if pairs:
        names = ", ".join(html.escape(p["host_pair"]) for p in pairs)
        s.text(
            f"<p>Across hosts ({names}, the <code>host_pair</code> column): each role ran on "
            "its own host, its handshakes counted on its own thread there; the idle "
            "connections were held on the server's host, over its loopback; the library's "
            "own tracker was not run (it runs on one machine only).</p>"
        )
    return s


def _export_tracker(store, s: Section) -> None:
    """The library's own tracker beside pqlab's count (document 004's heap and stack)."""
    rows = store.query(memory_tracker.comparison_sql(TABLE_SQL))
    if rows:
        table = store.export_table("memory_tracker", memory_tracker.comparison_sql(TABLE_SQL))
        s.table(
            table,
            "wolfSSL's own memory tracker and stack check (its example server and client, as "
            "document 004 ran them) beside pqlab's count of the same cell on every stack: "
            "allocations and bytes per connection from the tracker's 1- and N-connection "
            "runs; peak and stack of its one-connection process (docs/memory.md explains "
            "each column's difference)",
        )
    for row in store.query(memory_tracker.UNAVAILABLE_SQL):
        s.text(
            f"<p>{html.escape(row['stack_impl'])} {html.escape(row['group'])} / "
            f"{html.escape(row['server_sig'])}: no tracker figures "
            f"({html.escape(row['note'])}).</p>"
        )


class Memory(Experiment):
    name = NAME
    help = "heap and stack per TLS handshake (client, server), memory per idle connection"
    description = __doc__.split("\n\n")[0]
    cells = CELLS
    migrations = MIGRATIONS
    options = (
        Option("groups", "key-exchange groups", default=DEFAULT_GROUPS, metavar="LIST"),
        Option("server-sig", "server signature algorithms", default=DEFAULT_SIGS, metavar="LIST"),
        Option("ca-sig", "CA signature algorithms", default="ECDSA-P256", metavar="LIST"),
        Option(
            "client-sig",
            "client certificate algorithms for mutual TLS; 'none' = no client certificate",
            default=NONE,
            metavar="LIST",
        ),
        Option("n", f"measured handshakes per cell (1-{MAX_N})", default="20", short="-n"),
        Option(
            "warmup",
            f"handshakes per cell before the measured ones, dropped (1-{MAX_WARMUP})",
            default="2",
        ),
        Option(
            "idle",
            f"idle connections the server holds per cell, for the per-connection slope "
            f"(0-{MAX_IDLE}; 0: skip)",
            default="32",
        ),
        Option(
            "certs",
            "directory for the certificate chains, reused when they are there (the same keys "
            "make ML-DSA signing, and its allocations, repeat exactly across runs); "
            "default: $XDG_CACHE_HOME/pqlab/memory-certs (~/.cache/pqlab/memory-certs)",
            metavar="DIR",
        ),
        Option(
            "system-random",
            "use OpenSSL's normal DRBG instead of the fixed-seed generator (allocation counts "
            "of randomised signing then vary between handshakes; stacks whose randomness "
            "cannot be fixed always use their own)",
            flag=True,
        ),
        Option(
            "no-library-tracker",
            "do not also run the TLS library's own memory tracker (wolfSSL's example server "
            "and client with mem_track.h) for the cells of stacks that have one",
            flag=True,
        ),
        stack_option(several=True),
        *remote_hosts.OPTIONS,
    )
    compare = tuple(
        CompareSpec(
            f"memory {metric}",
            "memory_raw",
            ("role", "group", "server_sig", "ca_sig", "client_sig", "stack"),
            metric,
            "bytes" if metric.endswith("bytes") else "count",
            where="NOT warmup",
        )
        for metric in (
            "heap_peak_bytes",
            "heap_total_bytes",
            "allocations",
            "stack_bytes",
            "malloc_peak_bytes",
        )
    )

    def metadata(self, plan: Plan) -> dict:
        return {
            "memory": plan.as_dict(),
            "remote": plan.remote.describe() if plan.remote is not None else None,
        }

    def resume_key(self, plan: Plan) -> dict:
        return {
            "n": plan.n,
            "warmup": plan.warmup,
            "idle": plan.idle,
            "fixed_random": plan.fixed_random,
            "host_pairs": plan.remote.labels() if plan.remote is not None else None,
        }

    def work(self, plan: Plan) -> estimate.Work:
        """Per cell one engine run of warm-up + -n handshakes (both roles, heap counted;
        their operations from `estimate.OPERATIONS`), --idle connections held, and on a
        stack with the library's own tracker its example programs."""
        cells = list(plan.cells())
        pairs = len(plan.pairs)
        work = estimate.Work("", cells=len(cells) * pairs)
        each = plan.n + plan.warmup
        for name, group, server, ca, client in cells:
            work.add("memory.cell", pairs)
            work.add("memory.handshake", each * pairs)
            cpu = estimate.handshake_operations_s(group, server, ca, client)
            work.add("operation_seconds", cpu * each * pairs)
            if plan.idle:
                work.add("memory.idle", pairs)
                work.add("memory.idle_connection", plan.idle * pairs)
            if plan.tracker(stacks.get(name)):
                work.add("memory.tracker_cell", 1)
        work.size = (
            f"{estimate.count(len(cells) * pairs, 'cell')} x {plan.n} handshakes (+{plan.warmup} warm-up), "
            f"{plan.idle} idle connections"
        )
        return work

    def summary(self, plan: Plan) -> str | None:
        return "memory: tables/memory.csv (per handshake), tables/memory_idle.csv (per idle connection)"


EXPERIMENT = Memory()
