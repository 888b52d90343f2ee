"""Running the handshake matrix: per cell, captures in both namespaces, the TLS server, the
client's warm-up + N handshakes, then analysis and one committed cell.

Everything is started through the TLS runner (`pqlab.tls.runner`) on one topology built by
`pqlab.net.shaping.build_hosts`; every process is stopped whatever happens.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from pathlib import Path

from pqlab import process, stats
from pqlab.errors import EngineError, UserError
from pqlab.experiments.handshake import analyse, clocks, schema
from pqlab.experiments.handshake.plan import CELLS, DEFAULT_INITCWND, Plan
from pqlab.net.shaping import build_hosts
from pqlab.net.topology import TcpSettings
from pqlab.procstat import PeakRss
from pqlab.progress import CellProgress
from pqlab.tls import runner, stacks
from pqlab.tls.chains import Chain, make_chain, private_dir, secret_file
from pqlab.tls.negotiation import Expected

EXPERIMENT = "handshake"


def _columns(rows: list[dict], extra: dict) -> dict[str, list]:
    if not rows:
        return {}
    keys = list(extra) + list(rows[0])
    return {k: [extra[k]] * len(rows) if k in extra else [r[k] for r in rows] for k in keys}


def cell_budget(plan: Plan) -> float:
    """A generous bound on one cell (seconds): a handshake takes 2 RTTs plus processing."""
    return 120 + (plan.warmup + plan.n) * (0.2 + 4 * plan.rtt_s)


def _specs(plan: Plan, hosts, group, server_sig, chain: Chain, keylog: Path | None):
    tls = runner.Tls(stack=plan.stack, groups=(group,), sigalgs=(server_sig,))
    total = plan.warmup + plan.n
    server = runner.ServerSpec(
        tls=runner.Tls(stack=plan.stack, groups=(group,), sigalgs=(server_sig,), keylog=keylog),
        chain=chain,
        listen=f"{hosts.server_ip}:{plan.port}",
        max_connections=total,
        response_mode="none",
    )
    expected = Expected(group=group, sigalg=server_sig)
    client = runner.ClientSpec(
        tls=tls,
        connect=f"{hosts.server_ip}:{plan.port}",
        ca=chain.root,
        servername=None,
        n=plan.n,
        warmup=plan.warmup,
        time_limit=int(cell_budget(plan)),
        expected=expected,
    )
    return server, client, expected


def _cell_files(store, plan: Plan, name: str, work: Path):
    """The cell's capture paths and its key log (0600), kept under pcap/ with --keep-pcap."""
    pcap_dir = private_dir(store.path / "pcap") if plan.keep_pcap else work
    client_pcap, server_pcap = pcap_dir / f"{name}.client.pcap", pcap_dir / f"{name}.server.pcap"
    keylog = pcap_dir / f"{name}.keys.log" if plan.keep_pcap or plan.needs_keylog else None
    if keylog is not None:
        secret_file(keylog)
    return client_pcap, server_pcap, keylog


def _run_processes(hosts, plan: Plan, specs, pcaps, budget: float, procs: list, memory: dict):
    """Captures, server and client of one cell: (client records, server records, load rows,
    capture summaries). Every process started is appended to `procs` for the caller to stop."""
    server_spec, client_spec = specs
    # Headers suffice for the callback analysis; the key-log source and Wireshark need
    # whole packets.
    snaplen = 262144 if plan.keep_pcap or plan.needs_keylog else 128
    started = time.monotonic()
    caps = {}
    for side, path in (("client", pcaps[0]), ("server", pcaps[1])):
        caps[side] = runner.start_capture(hosts, side, plan.port, path, snaplen, budget)
        procs.append(caps[side])
    server_cpu, client_cpu = plan.cpus or (None, None)
    # A remote server ends by itself after the cell's budget, whatever happens here.
    server = runner.start_server(server_spec, hosts, cpu=server_cpu, lifetime=budget + 120)
    procs.append(server)
    if server.local:  # a remote pid is not in this machine's /proc
        memory["server"] = PeakRss(server.pid)
    client = runner.start_client(client_spec, hosts, cpu=client_cpu)
    procs.append(client)
    if client.local:
        memory["client"] = PeakRss(client.pid)
    client_recs = [r for r in client.finish(budget) if r["type"] == "connection"]
    server_recs = [r for r in server.finish(30) if r["type"] == "connection"]
    load = analyse.load_rows(
        {"server": server, "client": client},
        {side: m.stop() for side, m in memory.items()},
        time.monotonic() - started,
        plan.warmup + plan.n,
    )
    bad = runner.connection_errors(client, server)
    if bad:
        raise EngineError(f"{len(bad)} connection(s) failed: {bad[0].get('message')}")
    summaries = {side: runner.stop_capture(cap) for side, cap in caps.items()}
    total = plan.warmup + plan.n
    if len(client_recs) != total or len(server_recs) != total:
        raise EngineError(
            f"expected {total} connections, the client reported "
            f"{len(client_recs)} and the server {len(server_recs)}"
        )
    return client_recs, server_recs, load, summaries


def run_cell(
    store, hosts, plan: Plan, group, server_sig, ca_sig, chain: Chain, work: Path, pair=None
):
    """Run one cell (captures, server, client), analyse it and commit it to the store."""
    cid = str(plan.cell_id(group, server_sig, ca_sig, pair))
    name = f"{group.name}_{server_sig.name}_{ca_sig.name}".replace("/", "_")
    if len(plan.pairs) > 1:
        name += "_" + "".join(c if c.isalnum() or c in ".-" else "_" for c in pair.label)
    client_pcap, server_pcap, keylog = _cell_files(store, plan, name, work)
    budget = cell_budget(plan)
    server_spec, client_spec, expected = _specs(plan, hosts, group, server_sig, chain, keylog)
    procs: list[process.EngineProcess] = []
    corrected: Path | None = None
    memory: dict[str, PeakRss] = {}
    started = time.monotonic()
    try:
        client_recs, server_recs, load, summaries = _run_processes(
            hosts,
            plan,
            (server_spec, client_spec),
            (client_pcap, server_pcap),
            budget,
            procs,
            memory,
        )
        elapsed = time.monotonic() - started
        pairs = analyse.pair_records(client_recs, server_recs)
        # Across hosts the server's capture is moved onto the client's clock first.
        cell_clock = clocks.correct(hosts, client_pcap, server_pcap, plan.port)
        corrected = cell_clock.server_pcap if cell_clock.applied else None
        rows, phase_rows = analyse.analyse_cell(
            client_pcap,
            cell_clock.server_pcap,
            pairs,
            plan.port,
            hosts.tcp.initcwnd or DEFAULT_INITCWND,
            expected,
            stacks.get(plan.stack),
            hosts.tcp.congestion_control,
            records_of=_records_source(plan, cell_clock.server_pcap, keylog),
            clock_tolerance_ns=cell_clock.phase_uncertainty_ns,
        )
        label = pair.label if pair is not None else None
        _commit(
            store,
            hosts,
            plan,
            (cid, label),
            (group, server_sig, ca_sig),
            rows,
            clocks.tag_phases(phase_rows, cell_clock, label),
            summaries,
            {"client": client_pcap, "server": server_pcap},
            elapsed,
            clocks.clock_row(cid, label, cell_clock),
            load,
        )
    finally:
        for m in memory.values():
            m.stop()
        for p in reversed(procs):
            p.stop()
        if not plan.keep_pcap:
            for f in (client_pcap, server_pcap, keylog, corrected):
                if f is not None:
                    with contextlib.suppress(FileNotFoundError):
                        f.unlink()


def _records_source(plan: Plan, server_pcap: Path, keylog: Path | None):
    """Where the analysis takes each handshake's TLS records from (--messages)."""
    if plan.messages == "keylog":
        return analyse.keylog_records(server_pcap, keylog, plan.port)
    if plan.messages == "both":
        return analyse.cross_checked_records(server_pcap, keylog, plan.port)
    return analyse.callback_records


def _commit(
    store,
    hosts,
    plan: Plan,
    ids,
    algs,
    rows,
    phase_rows,
    summaries,
    pcaps,
    elapsed: float,
    clock_row,
    load: list[dict] = (),
) -> None:
    cid, pair = ids
    group, server_sig, ca_sig = algs
    labels = {
        "cell_id": cid,
        "group": group.name,
        "server_sig": server_sig.name,
        "ca_sig": ca_sig.name,
        "stack": plan.stack,
    }
    topo = json.dumps(hosts.describe(), default=str)
    params = {
        **labels,
        "n": plan.n,
        "warmup": plan.warmup,
        "port": plan.port,
        "profile": plan.profile_name,
        "send_root": plan.send_root,
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
                    "handshakes": plan.warmup + plan.n,
                    "topology": topo,
                    "host_pair": pair,
                }
                for side, s in summaries.items()
            ],
        )
        store.insert_rows("handshake_clock", [clock_row])
        store.add_warnings(
            EXPERIMENT,
            cid,
            stats.noise_warnings(
                f"handshake {cid}", stats.summarize([r["handshake_ns"] for r in rows])
            ),
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
    other = {c for c in done if ("root" in c.options) != plan.send_root}
    if other:
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

    cert_dir = store.path / "certs"
    tcp = TcpSettings(congestion_control=plan.congestion_control, initcwnd=plan.initcwnd)
    config = plan.remote.config if plan.remote is not None else ()
    with build_hosts(plan.profile, plan.shaper, tcp, pair, config) as hosts:
        if pair is not None:
            progress.log(f"{pair.label}: {hosts.link.choice}")
            hosts.record(store)
        for group, ssig, csig in cells:
            where = f" ({pair.label})" if pair is not None and len(plan.pairs) > 1 else ""
            progress.start(f"{group.name} / {ssig.name} / CA {csig.name}{where}")
            chain = make_chain(
                cert_dir,
                csig,
                ssig,
                plan.stack,
                send_root=plan.send_root,
                server_address=hosts.server_ip if pair is not None else None,
            )
            run_cell(store, hosts, plan, group, ssig, csig, chain, work, pair)
            progress.advance()
