"""Running the handshake matrix: per cell, captures in both namespaces, the TLS server and
one client, the client's warm-up + N handshakes in rounds; per batch of cells, then their
analysis and one commit.

Everything is started through the TLS runner (`pqlab.tls.runner`) on one topology built by
`pqlab.net.shaping.build_hosts`; every process is stopped whatever happens. What runs when
(docs/handshake.md, "What runs when"): a batch's processes are all started before its first
round; while a round runs, the lab and every other process of the batch wait without waking
(the servers and clients hold their records, idle captures sleep); records are read between
rounds, captures read and cells analysed and committed after the batch's last round. Each
stage's wall time is kept in the run's metadata (`pqlab.stages`).
"""

from __future__ import annotations

import json
import random
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from pqlab import files, process, procstat, stats
from pqlab.errors import EngineError, UserError
from pqlab.experiments.handshake import analyse, clocks, predicted, schema, worker
from pqlab.experiments.handshake.plan import CELLS, DEFAULT_INITCWND, Plan
from pqlab.net.shaping import build_hosts
from pqlab.net.topology import TcpSettings
from pqlab.progress import CellProgress
from pqlab.tls import runner
from pqlab.tls.chains import Chain, make_chain
from pqlab.tls.negotiation import Expected
from pqlab.workers import Workers

EXPERIMENT = "handshake"
# In mutual TLS, after each handshake the client sends pqlab's request (`GET 22\n`) and reads
# a 22-byte answer, the size of document 004's reply ("I hear you fa shizzle!"): the
# connection's bytes on the wire are then document 004's (`wire_bytes.csv`). Both come after
# the client's Finished: no measured phase contains them. A cell without a client
# certificate measures no bytes after the handshake, and its connections carry none: the
# request's round trip cost some 0.1 ms a connection (8 s of the default matrix) and moved
# nothing any table reads.
RESPONSE_BYTES = 22
WORK = ".work"


def response_bytes(client_sig) -> int | None:
    """What a cell's connections ask for after the handshake (`client_sig`: the client's
    signer, None without a client certificate): document 004's reply in mutual TLS,
    nothing otherwise."""
    return RESPONSE_BYTES if client_sig is not None else None


def cell_budget(plan: Plan, handshakes: int | None = None) -> float:
    """A generous bound on one cell's handshakes (seconds; all of them by default): a
    handshake takes 2 RTTs plus processing."""
    if handshakes is None:
        handshakes = plan.warmup + plan.n
    return 120 + handshakes * (0.2 + 4 * plan.rtt_s)


def _cell_files(store, plan: Plan, name: str, work: files.Dir):
    """The cell's capture paths and its key log (made 0600 by the server), kept under pcap/
    (0700) with --keep-pcap, and the files of the client's and the server's connection
    records (in `work`). Each name is free: what a cell measured again left there (or a link
    planted there) is removed, never written through."""
    pcap_dir = store.dir.sub("pcap", private=True) if plan.keep_pcap else work
    names = [f"{name}.client.pcap", f"{name}.server.pcap"]
    if plan.keep_pcap or plan.needs_keylog:
        names.append(f"{name}.keys.log")
    for stale in names:
        pcap_dir.remove(stale)
    client_pcap, server_pcap, *keylog = [pcap_dir.path_of(n) for n in names]
    records = (work.path_of(f"{name}.client.jsonl"), work.path_of(f"{name}.server.jsonl"))
    return (client_pcap, server_pcap, keylog[0] if keylog else None), records


@dataclass
class _Live:
    """One cell of a batch while the batch runs: its server, captures and client run for
    the whole batch, the client told when to run each of its rounds."""

    algs: tuple  # group, server and CA signatures, chain bytes or None, client signature or None
    chain: Chain
    pair: object
    cid: str
    port: int
    files: tuple  # client pcap, server pcap, key log (or None)
    records: tuple  # the client's and the server's connection records (JSON lines)
    expected: Expected
    caps: dict = field(default_factory=dict)
    server: process.EngineProcess | None = None
    client: process.EngineProcess | None = None
    connections: int = 0  # made so far, warm-ups included
    order: list = field(default_factory=list)  # handshake_order rows
    peaks: dict = field(default_factory=dict)  # side -> peak RSS (KiB)
    busy_s: float = 0.0  # wall time of its rounds
    hooks: int = 0  # times its captures were hooked (0: they capture all along)
    model: predicted.CellModel | None = None  # the wire model's view of the cell
    client_auth: runner.ClientAuth | None = None  # mutual TLS: what the server asks for
    identity: runner.Identity | None = None  # mutual TLS: what the client presents


# Chains made at once (each an engine process generating keys, mostly: two CPUs take them
# side by side). The batch's servers, clients and captures are started from the lab's own
# thread: an engine process ends with the thread that started it (PR_SET_PDEATHSIG), so a
# helper thread's would die with the helper.
SIDE_BY_SIDE = 4


def _server_chain(store, hosts, plan: Plan, pair, cell) -> Chain:
    """The server chain of a cell (made once per run: later cells with it find it)."""
    _, server_sig, ca_sig, chain_bytes, _ = cell
    return make_chain(
        store.path / "certs",
        ca_sig,
        server_sig,
        plan.stack.name,
        send_root=plan.send_root,
        server_address=hosts.server_ip if pair is not None else None,
        chain_bytes=chain_bytes,
    )


def _chain_key(cell) -> tuple:
    """What tells a cell's server chain from another's: server and CA algorithms, size."""
    return (cell[1].name, cell[2].name, cell[3])


def _make_chains(store, hosts, plan: Plan, pair, cells: list) -> dict[tuple, Chain]:
    """The batch's server chains (`_chain_key` -> chain) made side by side: first one for
    each CA (which makes the CA's root, shared by all its chains), then the rest under
    those roots."""
    chains = {_chain_key(c): c for c in cells}  # one cell per chain
    first, rest = {}, []
    for key, cell in chains.items():
        if cell[2].name not in first:
            first[cell[2].name] = key
        else:
            rest.append(key)
    made = {}
    with ThreadPoolExecutor(SIDE_BY_SIDE) as ex:
        for wave in (list(first.values()), rest):
            done = ex.map(lambda k: _server_chain(store, hosts, plan, pair, chains[k]), wave)
            made.update(zip(wave, done, strict=True))
    return made


def _prepare(
    store, hosts, plan: Plan, pair, index: int, cell, work: files.Dir, chain: Chain
) -> _Live:
    """Ports and files of the batch's cell `index`, with its server chain (`_make_chains`;
    nothing started)."""
    group, server_sig, ca_sig, chain_bytes, client = cell
    name = f"{group.name}_{server_sig.name}_{ca_sig.name}".replace("/", "_")
    name += f"_{chain_bytes}B" if chain_bytes is not None else ""
    name += f"_client_{client.name}".replace("/", "_") if client is not None else ""
    if len(plan.pairs) > 1:
        name += "_" + "".join(c if c.isalnum() or c in ".-" else "_" for c in pair.label)
    paths, records = _cell_files(store, plan, name, work)
    client_chain = client_auth = identity = None
    if client is not None:
        with store.stages.stage("chains"):
            client_chain = make_chain(
                store.path / "certs",
                plan.client_ca or ca_sig,
                client,
                plan.stack.name,
                purpose="client",
            )
        client_auth, identity = runner.mutual(client_chain, client, plan.stack)
    return _Live(
        algs=cell,
        chain=chain,
        pair=pair,
        cid=str(plan.cell_id(group, server_sig, ca_sig, chain_bytes, client, pair)),
        port=plan.port + index,
        files=paths,
        records=records,
        expected=Expected(group=group, sigalg=server_sig, client_sigalg=client),
        client_auth=client_auth,
        identity=identity,
        model=predicted.cell_model(
            plan.stack,
            group,
            server_sig,
            chain,
            hosts.server_ip,
            plan.profile,
            hosts.tcp.initcwnd or DEFAULT_INITCWND,
            client=(client, client_chain) if client is not None else None,
        ),
    )


def _tls(plan: Plan, cell: _Live, keylog: Path | None = None) -> runner.Tls:
    group, server_sig, client = cell.algs[0], cell.algs[1], cell.algs[4]
    # A client with a certificate offers its own scheme too (stacks sign only with their
    # own list's schemes).
    sigalgs = (server_sig,) if client is None else (server_sig, client)
    # Of each side's events the analysis reads what that side sent (its records, messages
    # and writes; what it received is in its peer's): half the events, half the records.
    return runner.Tls(
        stack=plan.stack, groups=(group,), sigalgs=sigalgs, keylog=keylog, events="sent"
    )


def _start(hosts, plan: Plan, cell: _Live, rounds: list, budget: float, procs: list) -> None:
    """The cell's captures on both hosts, its server and its client (for all its rounds),
    started (the client to wait for its first round); `runner.await_ready` on `procs`
    waits until they are ready, the batch's processes side by side."""
    # Headers suffice for the callback analysis; the key-log source and Wireshark need
    # whole packets.
    snaplen = 262144 if plan.keep_pcap or plan.needs_keylog else 128
    for side, path in (("client", cell.files[0]), ("server", cell.files[1])):
        cell.caps[side] = runner.start_capture(
            hosts, side, cell.port, path, snaplen, budget, unhooked=_unhooked(plan), wait=False
        )
        procs.append(cell.caps[side])
    warmups, measured = sum(w for w, _ in rounds), sum(n for _, n in rounds)
    spec = runner.ServerSpec(
        tls=_tls(plan, cell, keylog=cell.files[2]),
        chain=cell.chain,
        listen=f"{hosts.server_ip}:{cell.port}",
        max_connections=warmups + measured,
        response_mode="echo-size",
        hold_records=True,
        connection_records=cell.records[1],
        client_auth=cell.client_auth,
    )
    server_cpu = plan.cpus[0] if plan.cpus else None
    # A remote server ends by itself after the batch's budget, whatever happens here.
    cell.server = runner.start_server(
        spec, hosts, cpu=server_cpu, lifetime=budget + 120, wait=False
    )
    procs.append(cell.server)
    client = runner.ClientSpec(
        tls=_tls(plan, cell),
        connect=f"{hosts.server_ip}:{cell.port}",
        ca=cell.chain.root,
        servername=None,
        n=measured,
        warmup=warmups,
        time_limit=int(budget),
        expected=cell.expected,
        rounds=tuple(rounds),
        connection_records=cell.records[0],
        identity=cell.identity,
        request_bytes=response_bytes(cell.algs[4]),
    )
    client_cpu = plan.cpus[1] if plan.cpus else None
    cell.client = runner.start_client(client, hosts, cpu=client_cpu, wait=False)
    procs.append(cell.client)


def _unhooked(plan: Plan) -> bool:
    """Whether the cells' captures are hooked for their rounds only: on this machine's
    namespaces, where the kernel would otherwise run every capture's filter of the batch on
    every timed packet (measured: the 80-cell matrix's handshakes 11 % slower with 48 cells'
    captures hooked than with 8); across hosts (batches of 4) signalling them costs a round
    trip each and they stay hooked."""
    return plan.remote is None


def _run_round(plan: Plan, cell: _Live, rnd: tuple, position: int) -> None:
    """One round of one cell: its captures hooked, its client makes its share of the
    handshakes, its captures unhooked. Nothing else of the lab runs meanwhile; the peak
    memory of both ends is read after it."""
    number, (warmup, n) = rnd
    caps = list(cell.caps.values())
    if _unhooked(plan):
        cell.hooks += 1
        runner.hook_captures(caps, cell.hooks)
    done = runner.next_round(cell.client, number, cell_budget(plan, warmup + n))
    if _unhooked(plan):
        runner.unhook_captures(caps)
    if (done["round"], done["warmup"], done["count"]) != (number, warmup, n):
        raise EngineError(f"round {number} of {warmup} + {n} connections, the client ran {done}")
    cell.connections += warmup + n
    # VmHWM is a high-water mark: read between rounds it misses nothing but a last
    # round's growth (a remote server's /proc is not this machine's).
    peaks = {"client": done.get("vm_hwm_kib")}
    if cell.server.local:
        peaks["server"] = procstat.vm_hwm_kib(cell.server.pid)
    for side, peak in peaks.items():
        if peak is not None:
            cell.peaks[side] = max(peak, cell.peaks.get(side) or 0)
    cell.busy_s += done["seconds"]
    cell.order.append(
        {
            "cell_id": cell.cid,
            "round": number,
            "position": position,
            "seed": plan.seed,
            "warmup": warmup,
            "handshakes": n,
            "started_unix_ns": done["t_start"],
            "seconds": done["seconds"],
            "host_pair": cell.pair.label if cell.pair is not None else None,
            "port": cell.port,
        }
    )


def schedule(cells: int, rounds: int, seed: int) -> list[tuple[int, int]]:
    """(round, cell index) in running order: every round gives every cell one turn, in an
    order shuffled anew for each round (by `seed`, so an order can be run again)."""
    rng = random.Random(seed)
    out = []
    for r in range(rounds):
        order = list(range(cells))
        rng.shuffle(order)
        out += [(r, i) for i in order]
    return out


def _stop(live: list[_Live]) -> list[dict]:
    """Every cell's client and server ended (each by itself after its last connection),
    then all the batch's captures stopped side by side: per cell, its captures' summaries
    by side."""
    for cell in live:
        cell.client.finish(30)
        cell.server.finish(30)
        bad = runner.connection_errors(cell.client, cell.server)
        if bad:
            raise EngineError(f"{len(bad)} connection(s) failed: {bad[0].get('message')}")
    summaries = iter(runner.stop_captures([cap for cell in live for cap in cell.caps.values()]))
    return [{side: next(summaries) for side in cell.caps} for cell in live]


def _labels(plan: Plan, cell: _Live) -> tuple[dict, dict]:
    """The cell's columns in every table, and those handshake_raw adds."""
    group, server_sig, ca_sig, chain_bytes, client = cell.algs
    labels = {
        "cell_id": cell.cid,
        "group": group.name,
        "server_sig": server_sig.name,
        "ca_sig": ca_sig.name,
        "stack": plan.stack.name,
        "client_sig": client.name if client is not None else "none",
    }
    raw = {
        "chain_sent": "server+root" if plan.send_root else "server",
        "message_source": plan.messages,
        "host_pair": cell.pair.label if cell.pair is not None else None,
        "chain_bytes_requested": chain_bytes,
        "chain_der_bytes": cell.chain.sent_der_bytes,
        "shaped": plan.profile is not None,
    }
    return labels, raw


def _job(hosts, plan: Plan, cell: _Live, host_clocks) -> worker.Job:
    """What a worker needs to analyse the cell."""
    client_pcap, server_pcap, keylog = cell.files
    labels, raw_columns = _labels(plan, cell)
    return worker.Job(
        cid=cell.cid,
        pair=cell.pair.label if cell.pair is not None else None,
        port=cell.port,
        client_pcap=client_pcap,
        server_pcap=server_pcap,
        keylog=keylog,
        client_records=cell.records[0],
        server_records=cell.records[1],
        expected=cell.expected,
        stack=plan.stack,
        congestion_control=hosts.tcp.congestion_control,
        initcwnd=hosts.tcp.initcwnd or DEFAULT_INITCWND,
        messages=plan.messages,
        clocks=host_clocks,
        labels=labels,
        raw_columns=raw_columns,
        shaped=plan.profile is not None,
        model=cell.model,
    )


def _finish(store, hosts, plan: Plan, live: list[_Live], pool, progress) -> None:
    """Every cell of the batch stopped, then analysed by the workers side by side, its rows
    written as its result comes, and the batch committed in one transaction (a commit
    costs some 30 ms whatever it holds, a checkpoint of the database more: per cell they
    were most of the time between the last round and the end). The batch is measured as
    one, its cells' rounds interleaved: an interruption before its commit loses all of it,
    as one during its rounds does, and a resume measures it again."""
    stage = store.stages.stage
    with stage("stopping"):
        summaries = _stop(live)
    with stage("analysis"):
        host_clocks = clocks.host_clocks(hosts)
        results = pool.map(worker.run, [_job(hosts, plan, c, host_clocks) for c in live])
    # One topology for the whole batch: described once.
    topology = json.dumps(hosts.describe(), default=str)
    # The small tables' rows of the whole batch, each table written once (an insert costs
    # a few milliseconds however few its rows); the handshakes' and phases' rows a few
    # cells at a time.
    small: dict[str, list[dict]] = {}
    large = _Inserts(store)
    with store.cells(EXPERIMENT) as mark:
        for cell, summary in zip(live, summaries, strict=True):
            with stage("analysis"):
                result = next(results)
            store.stages.add_parallel(result.seconds)
            if result.connections != cell.connections:
                raise EngineError(
                    f"{cell.cid}: the rounds made {cell.connections} connections, the client "
                    f"recorded {result.connections}"
                )
            if result.corrected_pcap is not None:
                cell.files = (*cell.files, result.corrected_pcap)
            for table, rows in _write(store, plan, cell, result, summary, topology).items():
                small.setdefault(table, []).extend(rows)
            large.add(result)
            mark(cell.cid, _params(plan, cell, result))
            progress.advance()
        large.flush()
        for table, rows in small.items():
            store.insert_rows(table, rows)


class _Inserts:
    """The cells' handshake_raw and handshake_phase rows (Arrow tables), inserted together
    once they hold INSERT_ROWS phase rows: DuckDB spends a third less CPU on 8 cells' rows
    in one insert than on them cell by cell, while the workers still analyse the rest."""

    INSERT_ROWS = 200_000

    def __init__(self, store):
        self.store = store
        self.parts: dict[str, list[pa.Table]] = {"handshake_raw": [], "handshake_phase": []}

    def add(self, result: worker.Result) -> None:
        for table, rows in (("handshake_raw", result.raw), ("handshake_phase", result.phases)):
            if rows is not None:
                self.parts[table].append(rows)
        if sum(t.num_rows for t in self.parts["handshake_phase"]) >= self.INSERT_ROWS:
            self.flush()

    def flush(self) -> None:
        for table, parts in self.parts.items():
            if parts:
                # A column all null in one cell (no value measured) takes the others' type.
                self.store.insert(table, pa.concat_tables(parts, promote_options="default"))
                parts.clear()


def run_batch(store, hosts, plan: Plan, pair, cells: list, work: files.Dir, progress, pool) -> None:
    """Measure a batch of cells side by side: every cell's captures, server and client
    started, then the rounds (each cell's client told to run its share, the cells in a
    shuffled order), then the cells analysed by the worker processes (`pool`) and
    committed. Everything started is stopped whatever happens."""
    rounds = plan.round_sizes(plan.rounds_for(len(cells)))
    per_cell = sum(w + n for w, n in rounds)
    budget = len(cells) * cell_budget(plan, per_cell)
    live: list[_Live] = []
    procs: list[process.EngineProcess] = []
    where = f" ({pair.label})" if pair is not None and len(plan.pairs) > 1 else ""
    stage = store.stages.stage
    try:
        progress.start(f"certificate chains for {len(cells)} cells{where}")
        with stage("chains"):
            chains = _make_chains(store, hosts, plan, pair, cells)
        for i, cell in enumerate(cells):
            chain = chains[_chain_key(cell)]
            live.append(_prepare(store, hosts, plan, pair, i, cell, work, chain))
        progress.start(f"starting {len(cells)} cells' servers, clients and captures{where}")
        with stage("starting_servers_and_captures"):
            for cell in live:
                _start(hosts, plan, cell, rounds, budget, procs)
            runner.await_ready(procs)
            # The analysis's workers, started with the run, are up (idle) before any
            # handshake: nothing of their start runs beside the rounds.
            pool.wait_started()
        for position, (number, i) in enumerate(schedule(len(live), len(rounds), plan.seed)):
            group, ssig, csig = live[i].algs[:3]
            progress.start(
                f"round {number + 1}/{len(rounds)}: {group.name} / {ssig.name} / CA "
                f"{csig.name}{where}"
            )
            with stage("handshakes"):
                _run_round(plan, live[i], (number, rounds[number]), position)
        progress.start(f"analysing {len(live)} cells{where}")
        _finish(store, hosts, plan, live, pool, progress)
    finally:
        with stage("stopping"):
            for p in reversed(procs):
                p.stop()
        for cell in live:  # in `work`: the records, and the captures not kept
            for f in (*cell.records, *(cell.files if not plan.keep_pcap else ())):
                if f is not None:
                    work.remove(f.name)


def _params(plan: Plan, cell: _Live, result: worker.Result) -> dict:
    """The cell's parameters, kept with its done-mark."""
    labels, _ = _labels(plan, cell)
    clock_row = result.clock_row
    return {
        **labels,
        "n": plan.n,
        "warmup": plan.warmup,
        "port": cell.port,
        "rounds": len(cell.order),
        "seed": plan.seed,
        "profile": plan.profile_name,
        "send_root": plan.send_root,
        "chain_bytes": cell.algs[3],
        "stack": plan.stack.name,
        "host_pair": clock_row["host_pair"],
        "clock_offset_ns": clock_row["offset_ns"],
        "clock_uncertainty_ns": clock_row["uncertainty_ns"],
        "clock_applied": clock_row["applied"],
    }


def _write(
    store, plan: Plan, cell: _Live, result: worker.Result, summaries, topology
) -> dict[str, list[dict]]:
    """The cell's warnings written into the batch's transaction; the rows of the small
    tables returned (table -> rows) for the batch to write at once (its handshakes' and
    phases' rows go in with other cells', `_Inserts`)."""
    cid = cell.cid
    pair = result.clock_row["host_pair"]
    labels, _ = _labels(plan, cell)
    load = analyse.load_rows(
        {"server": cell.server, "client": cell.client}, cell.peaks, cell.busy_s, cell.connections
    )
    pcaps = {"client": cell.files[0], "server": cell.files[1]}
    small = {
        "handshake_load": [{**labels, **row} for row in load],
        "handshake_capture": [
            {
                "cell_id": cid,
                "side": side,
                "packets": s["packets"],
                "kernel_packets": s["kernel_packets"],
                "kernel_drops": s["kernel_drops"],
                "userspace_timestamps": s["userspace_timestamps"],
                "pcap": str(pcaps[side]) if plan.keep_pcap else None,
                "seconds": cell.busy_s,
                "handshakes": cell.connections,
                "topology": topology,
                "host_pair": pair,
            }
            for side, s in summaries.items()
        ],
        "handshake_clock": [result.clock_row],
        "handshake_order": list(cell.order),
        "handshake_cliffs": result.cliffs,
    }
    drops = sum(s["kernel_drops"] for s in summaries.values())
    if drops:
        result.warnings.append(
            stats.Warning_(
                stats.Cause.CAPTURE_DROPS,
                cid,
                f"the kernel dropped {drops} captured packets",
                "rerun the cell with fewer parallel jobs on the machine",
            )
        )
    store.add_warnings(EXPERIMENT, cid, result.warnings)
    return small


def measure(plan: Plan, store) -> None:
    """Every cell of the plan not yet done in `store`: per host pair (this machine's
    namespaces without one) one topology and its cells."""

    schema.ensure(store)
    clocks.ensure(store)
    done = CELLS.done(store)

    # Cells with and without the root would share the document's figures; mutually
    # authenticated cells (document 004's, their own figures and tables) may differ.
    def mutual(c) -> bool:
        return any(o.startswith("client-") for o in c.options)

    other = {c for c in done if ("root" in c.options) != plan.send_root and not mutual(c)}
    if other and any(cell[4] is None for cell in plan.cells()):
        raise UserError(
            f"this run directory holds cells {'without' if plan.send_root else 'with'} "
            "--send-root; use another --out to compare the two"
        )
    todo = [
        (pair, cell)
        for pair in plan.pairs
        for cell in plan.cells()
        if plan.cell_id(*cell, pair) not in done
    ]
    if not todo:
        return
    # The run's scratch directory (connection records; captures without --keep-pcap): 0700,
    # it holds key logs. Made afresh: a killed run's leftovers, or anything planted there,
    # removed first (never followed).
    store.dir.remove_tree(WORK)
    work = store.dir.sub(WORK, private=True)
    try:
        with (
            CellProgress("handshake", len(todo), ticking=False) as progress,
            Workers() as pool,
        ):
            pool.start_soon()  # ready for the first batch's analysis, started meanwhile
            for pair in plan.pairs:
                cells = [cell for p, cell in todo if p is pair]
                if cells:
                    _measure_pair(store, plan, pair, cells, (work, progress, pool))
        clocks.record_metadata(store)
    finally:
        store.dir.remove_tree(WORK)


def _measure_pair(store, plan: Plan, pair, cells, context) -> None:
    """The cells of one host pair (None: this machine's namespaces) on one topology, batch
    by batch; `context`: the work directory, the progress display, the worker pool."""
    work, progress, pool = context
    tcp = TcpSettings(congestion_control=plan.congestion_control, initcwnd=plan.initcwnd)
    config = plan.remote.config if plan.remote is not None else ()
    hosts_cm = build_hosts(plan.profile, plan.shaper, tcp, pair, config)
    with store.stages.around(hosts_cm, "namespaces_and_links", "stopping") as hosts:
        if pair is not None:
            progress.log(f"{pair.label}: {hosts.link.choice}")
            hosts.record(store)
        for batch in plan.batches(cells):
            run_batch(store, hosts, plan, pair, batch, work, progress, pool)
