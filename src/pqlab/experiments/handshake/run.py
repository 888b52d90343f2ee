"""Running the handshake matrix: per cell, captures in both namespaces, the TLS server, the
client's warm-up + N handshakes, then analysis and one committed cell.

Everything is started through the TLS runner (`pqlab.tls.runner`) on one topology built by
`pqlab.net.shaping.build_hosts`; every process is stopped whatever happens.
"""

from __future__ import annotations

import contextlib
import json
import random
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

from pqlab import process, procstat, stats
from pqlab.errors import EngineError, UserError
from pqlab.experiments.handshake import analyse, clocks, predicted, schema
from pqlab.experiments.handshake.plan import CELLS, DEFAULT_INITCWND, Plan
from pqlab.net.shaping import build_hosts
from pqlab.net.topology import TcpSettings
from pqlab.procstat import PeakRss
from pqlab.progress import CellProgress
from pqlab.tls import runner, stacks
from pqlab.tls.chains import Chain, make_chain, private_dir, secret_file
from pqlab.tls.negotiation import Expected

EXPERIMENT = "handshake"
# A cell whose median moved this much (relative) between its earlier and later rounds is
# named in the warnings; comparisons use the drift whatever its size.
DRIFT_WARNING = 0.05
# After each handshake the client sends pqlab's request (`GET 22\n`) and reads a 22-byte
# answer, the size of document 004's reply ("I hear you fa shizzle!"): the connection's bytes
# on the wire are then document 004's (`handshake_wire_bytes.csv`). Both come after the
# client's Finished: no measured phase contains them.
RESPONSE_BYTES = 22


def _columns(rows: list[dict], extra: dict) -> dict[str, list]:
    if not rows:
        return {}
    keys = list(extra) + list(rows[0])
    return {k: [extra[k]] * len(rows) if k in extra else [r[k] for r in rows] for k in keys}


def cell_budget(plan: Plan, handshakes: int | None = None) -> float:
    """A generous bound on one cell's handshakes (seconds; all of them by default): a
    handshake takes 2 RTTs plus processing."""
    if handshakes is None:
        handshakes = plan.warmup + plan.n
    return 120 + handshakes * (0.2 + 4 * plan.rtt_s)


def _cell_files(store, plan: Plan, name: str, work: Path):
    """The cell's capture paths and its key log (0600), kept under pcap/ with --keep-pcap."""
    pcap_dir = private_dir(store.path / "pcap") if plan.keep_pcap else work
    client_pcap, server_pcap = pcap_dir / f"{name}.client.pcap", pcap_dir / f"{name}.server.pcap"
    keylog = pcap_dir / f"{name}.keys.log" if plan.keep_pcap or plan.needs_keylog else None
    if keylog is not None:
        secret_file(keylog)
    return client_pcap, server_pcap, keylog


@dataclass
class _Live:
    """One cell of a batch while the batch runs: its server and captures run for the whole
    batch, a new client for each of its rounds."""

    algs: tuple  # group, server and CA signatures, chain bytes or None, client signature or None
    chain: Chain
    pair: object
    cid: str
    port: int
    files: tuple  # client pcap, server pcap, key log (or None)
    expected: Expected
    caps: dict = field(default_factory=dict)
    server: process.EngineProcess | None = None
    records: list = field(default_factory=list)  # client connection records, in order
    order: list = field(default_factory=list)  # handshake_order rows
    cpu: list = field(default_factory=lambda: [0.0, 0.0])  # the clients' user, system s
    peaks: dict = field(default_factory=dict)  # side -> peak RSS (KiB)
    busy_s: float = 0.0  # wall time of its rounds
    model: predicted.CellModel | None = None  # the wire model's view of the cell
    client_auth: runner.ClientAuth | None = None  # mutual TLS: what the server asks for
    identity: runner.Identity | None = None  # mutual TLS: what the client presents


class _Clients:
    """The CPU of a cell's client processes together, as `procstat.cpu_seconds` reads it."""

    def __init__(self, user: float, system: float):
        self.rusage = SimpleNamespace(ru_utime=user, ru_stime=system)


def _prepare(store, hosts, plan: Plan, pair, index: int, cell, work: Path) -> _Live:
    """Chain, ports and files of the batch's cell `index` (nothing started)."""
    group, server_sig, ca_sig, chain_bytes, client = cell
    chain = make_chain(
        store.path / "certs",
        ca_sig,
        server_sig,
        plan.stack,
        send_root=plan.send_root,
        server_address=hosts.server_ip if pair is not None else None,
        chain_bytes=chain_bytes,
    )
    name = f"{group.name}_{server_sig.name}_{ca_sig.name}".replace("/", "_")
    name += f"_{chain_bytes}B" if chain_bytes is not None else ""
    name += f"_client_{client.name}".replace("/", "_") if client is not None else ""
    if len(plan.pairs) > 1:
        name += "_" + "".join(c if c.isalnum() or c in ".-" else "_" for c in pair.label)
    client_chain = client_auth = identity = None
    if client is not None:
        client_chain = make_chain(
            store.path / "certs", plan.client_ca or ca_sig, client, plan.stack, purpose="client"
        )
        client_auth, identity = runner.mutual(client_chain, client)
    return _Live(
        algs=cell,
        chain=chain,
        pair=pair,
        cid=str(plan.cell_id(group, server_sig, ca_sig, chain_bytes, client, pair)),
        port=plan.port + index,
        files=_cell_files(store, plan, name, work),
        expected=Expected(group=group, sigalg=server_sig, client_sigalg=client),
        client_auth=client_auth,
        identity=identity,
        model=predicted.cell_model(
            stacks.get(plan.stack),
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
    return runner.Tls(stack=plan.stack, groups=(group,), sigalgs=sigalgs, keylog=keylog)


def _start(hosts, plan: Plan, cell: _Live, handshakes: int, budget: float, procs: list) -> None:
    """The cell's captures on both hosts and its server (for all its rounds)."""
    # Headers suffice for the callback analysis; the key-log source and Wireshark need
    # whole packets.
    snaplen = 262144 if plan.keep_pcap or plan.needs_keylog else 128
    for side, path in (("client", cell.files[0]), ("server", cell.files[1])):
        cell.caps[side] = runner.start_capture(hosts, side, cell.port, path, snaplen, budget)
        procs.append(cell.caps[side])
    spec = runner.ServerSpec(
        tls=_tls(plan, cell, keylog=cell.files[2]),
        chain=cell.chain,
        listen=f"{hosts.server_ip}:{cell.port}",
        max_connections=handshakes,
        response_mode="echo-size",
        client_auth=cell.client_auth,
    )
    server_cpu = plan.cpus[0] if plan.cpus else None
    # A remote server ends by itself after the batch's budget, whatever happens here.
    cell.server = runner.start_server(spec, hosts, cpu=server_cpu, lifetime=budget + 120)
    procs.append(cell.server)


def _run_round(hosts, plan: Plan, cell: _Live, rnd: tuple, position: int) -> None:
    """One round of one cell: a client making its share of the handshakes, with its memory
    and the server's sampled while it runs."""
    number, (warmup, n) = rnd
    spec = runner.ClientSpec(
        tls=_tls(plan, cell),
        connect=f"{hosts.server_ip}:{cell.port}",
        ca=cell.chain.root,
        servername=None,
        n=n,
        warmup=warmup,
        time_limit=int(cell_budget(plan, warmup + n)),
        expected=cell.expected,
        identity=cell.identity,
        request_bytes=RESPONSE_BYTES,
    )
    started_ns, started = time.time_ns(), time.monotonic()
    client = runner.start_client(spec, hosts, cpu=plan.cpus[1] if plan.cpus else None)
    memory = {}
    try:
        if client.local:
            memory["client"] = PeakRss(client.pid)
        if cell.server.local:  # a remote pid is not in this machine's /proc
            memory["server"] = PeakRss(cell.server.pid)
        records = [
            r for r in client.finish(cell_budget(plan, warmup + n)) if r["type"] == "connection"
        ]
    finally:
        for side, m in memory.items():
            peak = m.stop()
            if peak is not None:
                cell.peaks[side] = max(peak, cell.peaks.get(side) or 0)
        client.stop()
    seconds = time.monotonic() - started
    bad = runner.connection_errors(client, cell.server)
    if bad:
        raise EngineError(f"{len(bad)} connection(s) failed: {bad[0].get('message')}")
    if len(records) != warmup + n:
        raise EngineError(
            f"round {number}: expected {warmup + n} connections, the client reported {len(records)}"
        )
    for r in records:
        r["round"] = number
    cell.records += records
    user, system = procstat.cpu_seconds(client)
    cell.cpu[0] += user or 0.0
    cell.cpu[1] += system or 0.0
    cell.busy_s += seconds
    cell.order.append(
        {
            "cell_id": cell.cid,
            "round": number,
            "position": position,
            "seed": plan.seed,
            "warmup": warmup,
            "handshakes": n,
            "started_unix_ns": started_ns,
            "seconds": seconds,
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


def _finish(store, hosts, plan: Plan, cell: _Live) -> None:
    """The cell's server and captures stopped, its handshakes analysed and committed."""
    server_recs = [r for r in cell.server.finish(30) if r["type"] == "connection"]
    bad = runner.connection_errors(cell.server)
    if bad:
        raise EngineError(f"{len(bad)} connection(s) failed: {bad[0].get('message')}")
    summaries = {side: runner.stop_capture(cap) for side, cap in cell.caps.items()}
    total = len(cell.records)
    if len(server_recs) != total:
        raise EngineError(
            f"expected {total} connections, the client reported {total} and the server "
            f"{len(server_recs)}"
        )
    load = analyse.load_rows(
        {"server": cell.server, "client": _Clients(*cell.cpu)}, cell.peaks, cell.busy_s, total
    )
    pairs = analyse.pair_records(cell.records, server_recs)
    client_pcap, server_pcap, keylog = cell.files
    # Across hosts the server's capture is moved onto the client's clock first.
    cell_clock = clocks.correct(hosts, client_pcap, server_pcap, cell.port)
    if cell_clock.applied:
        cell.files = (*cell.files, cell_clock.server_pcap)
    # The server's io events are on its own clock: moved as its capture was.
    shift = cell_clock.estimate.offset_ns if cell_clock.applied else 0.0
    rows, phase_rows = analyse.analyse_cell(
        client_pcap,
        cell_clock.server_pcap,
        pairs,
        cell.port,
        hosts.tcp.initcwnd or DEFAULT_INITCWND,
        cell.expected,
        stacks.get(plan.stack),
        hosts.tcp.congestion_control,
        records_of=_records_source(plan, cell_clock.server_pcap, keylog, cell.port),
        clock_tolerance_ns=cell_clock.phase_uncertainty_ns,
        writes_of=lambda srec: predicted.io_writes(srec, shift),
        model=cell.model,
    )
    for row, (crec, _) in zip(rows, analyse.measured(pairs), strict=True):
        row["round"] = crec["round"]
    label = cell.pair.label if cell.pair is not None else None
    _commit(
        store,
        hosts,
        plan,
        (cell.cid, label, cell.port),
        cell,
        rows,
        clocks.tag_phases(phase_rows, cell_clock, label),
        summaries,
        {"client": client_pcap, "server": server_pcap},
        cell.busy_s,
        clocks.clock_row(cell.cid, label, cell_clock),
        load,
        cell.order,
    )


def run_batch(store, hosts, plan: Plan, pair, cells: list, work: Path, progress) -> None:
    """Measure a batch of cells side by side: every cell's server and captures started, then
    the rounds (each a client per cell, the cells in a shuffled order), then each cell
    analysed and committed. Everything started is stopped whatever happens."""
    rounds = plan.round_sizes(plan.rounds_for(len(cells)))
    per_cell = sum(w + n for w, n in rounds)
    budget = len(cells) * cell_budget(plan, per_cell)
    live: list[_Live] = []
    procs: list[process.EngineProcess] = []
    where = f" ({pair.label})" if pair is not None and len(plan.pairs) > 1 else ""
    try:
        for i, cell in enumerate(cells):
            group, ssig, csig = cell[:3]
            progress.start(f"starting {group.name} / {ssig.name} / CA {csig.name}{where}")
            live.append(_prepare(store, hosts, plan, pair, i, cell, work))
            _start(hosts, plan, live[-1], per_cell, budget, procs)
        for position, (number, i) in enumerate(schedule(len(live), len(rounds), plan.seed)):
            group, ssig, csig = live[i].algs[:3]
            progress.start(
                f"round {number + 1}/{len(rounds)}: {group.name} / {ssig.name} / CA "
                f"{csig.name}{where}"
            )
            _run_round(hosts, plan, live[i], (number, rounds[number]), position)
        for cell in live:
            _finish(store, hosts, plan, cell)
            progress.advance()
    finally:
        for p in reversed(procs):
            p.stop()
        if not plan.keep_pcap:
            for cell in live:
                for f in cell.files:
                    if f is not None:
                        with contextlib.suppress(FileNotFoundError):
                            f.unlink()


def _records_source(plan: Plan, server_pcap: Path, keylog: Path | None, port: int):
    """Where the analysis takes each handshake's TLS records from (--messages)."""
    if plan.messages == "keylog":
        return analyse.keylog_records(server_pcap, keylog, port)
    if plan.messages == "both":
        return analyse.cross_checked_records(server_pcap, keylog, port)
    return analyse.callback_records


def _commit(
    store,
    hosts,
    plan: Plan,
    ids,
    cell: _Live,
    rows,
    phase_rows,
    summaries,
    pcaps,
    elapsed: float,
    clock_row,
    load: list[dict] = (),
    order: list[dict] = (),
) -> None:
    cid, pair, port = ids
    group, server_sig, ca_sig, chain_bytes, client = cell.algs
    labels = {
        "cell_id": cid,
        "group": group.name,
        "server_sig": server_sig.name,
        "ca_sig": ca_sig.name,
        "stack": plan.stack,
        "client_sig": client.name if client is not None else "none",
    }
    topo = json.dumps(hosts.describe(), default=str)
    params = {
        **labels,
        "n": plan.n,
        "warmup": plan.warmup,
        "port": port,
        "rounds": len(order),
        "seed": plan.seed,
        "profile": plan.profile_name,
        "send_root": plan.send_root,
        "chain_bytes": chain_bytes,
        "stack": plan.stack,
        "host_pair": pair,
        "clock_offset_ns": clock_row["offset_ns"],
        "clock_uncertainty_ns": clock_row["uncertainty_ns"],
        "clock_applied": clock_row["applied"],
    }
    with store.cell(EXPERIMENT, cid, params):
        chain_sent = "server+root" if plan.send_root else "server"
        extra = {
            "chain_sent": chain_sent,
            "message_source": plan.messages,
            "host_pair": pair,
            "chain_bytes_requested": chain_bytes,
            "chain_der_bytes": cell.chain.sent_der_bytes,
            "shaped": plan.profile is not None,
        }
        store.insert("handshake_raw", _columns(rows, {**labels, **extra}))
        store.insert("handshake_phase", _columns(phase_rows, labels))
        store.insert("handshake_load", _columns(list(load), labels))
        store.insert_rows(
            "handshake_capture",
            [
                {
                    "cell_id": cid,
                    "side": side,
                    "packets": s["packets"],
                    "kernel_packets": s["kernel_packets"],
                    "kernel_drops": s["kernel_drops"],
                    "userspace_timestamps": s["userspace_timestamps"],
                    "pcap": str(pcaps[side]) if plan.keep_pcap else None,
                    "seconds": elapsed,
                    "handshakes": sum(o["warmup"] + o["handshakes"] for o in order),
                    "topology": topo,
                    "host_pair": pair,
                }
                for side, s in summaries.items()
            ],
        )
        store.insert_rows("handshake_clock", [clock_row])
        store.insert_rows("handshake_order", list(order))
        store.add_warnings(
            EXPERIMENT,
            cid,
            stats.noise_warnings(
                f"handshake {cid}", stats.summarize([r["handshake_ns"] for r in rows])
            ),
        )
        if rows and cell.model is not None:
            store.add_warnings(
                EXPERIMENT,
                cid,
                predicted.warnings(cid, rows, plan.profile is not None, cell.model.initcwnd),
            )
            store.insert_rows("handshake_cliffs", predicted.cliff_rows(cid, cell.model))
        moved = stats.drift([r["handshake_ns"] for r in rows], [r["round"] for r in rows])
        if moved is not None and abs(moved) >= DRIFT_WARNING:
            store.add_warnings(
                EXPERIMENT,
                cid,
                [
                    stats.Warning_(
                        stats.Cause.DRIFT,
                        cid,
                        f"the median handshake moved {moved * 100:+.1f} % from the cell's "
                        "earlier rounds to its later ones",
                    )
                ],
            )
        disagreed = sum(1 for r in rows if r.get("order_disagreements"))
        if disagreed:
            store.add_warnings(
                EXPERIMENT,
                cid,
                [
                    stats.Warning_(
                        stats.Cause.CLOCK_ORDER,
                        cid,
                        f"{disagreed} of {len(rows)} handshakes had events on the two hosts "
                        "in an order the two capture clocks cannot resolve (within "
                        f"{clock_row['uncertainty_ns'] / 1e3:.1f} us)",
                    )
                ],
            )
        drops = sum(s["kernel_drops"] for s in summaries.values())
        if drops:
            store.add_warnings(
                EXPERIMENT,
                cid,
                [
                    stats.Warning_(
                        stats.Cause.CAPTURE_DROPS,
                        cid,
                        f"the kernel dropped {drops} captured packets",
                        "rerun the cell with fewer parallel jobs on the machine",
                    )
                ],
            )


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
    work = store.path / ".work"
    work.mkdir(exist_ok=True)
    try:
        with CellProgress("handshake", len(todo)) as progress:
            for pair in plan.pairs:
                cells = [cell for p, cell in todo if p is pair]
                if cells:
                    _measure_pair(store, plan, pair, cells, work, progress)
        clocks.record_metadata(store)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _measure_pair(store, plan: Plan, pair, cells, work: Path, progress) -> None:
    tcp = TcpSettings(congestion_control=plan.congestion_control, initcwnd=plan.initcwnd)
    config = plan.remote.config if plan.remote is not None else ()
    with build_hosts(plan.profile, plan.shaper, tcp, pair, config) as hosts:
        if pair is not None:
            progress.log(f"{pair.label}: {hosts.link.choice}")
            hosts.record(store)
        for batch in plan.batches(cells):
            run_batch(store, hosts, plan, pair, batch, work, progress)
