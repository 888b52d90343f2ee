"""Measuring the throughput experiment: per cell a server and a client pushing and pulling
checked bytes over one connection, and wolfSSL's tls_bench beside it where built.
"""

from __future__ import annotations

from pqlab import cpuquota, process
from pqlab.errors import EngineError
from pqlab.experiments.throughput import tls_bench as throughput_tls_bench
from pqlab.experiments.throughput.plan import CELLS, NAME, Plan
from pqlab.experiments.throughput.schema import DDL
from pqlab.net.shaping import build_hosts
from pqlab.options.tls import NO_CLIENT
from pqlab.progress import CellProgress
from pqlab.tls import negotiation, runner
from pqlab.tls.chains import make_chain


def run_cell(store, hosts, plan: Plan, cell, chain, cpus) -> None:
    stack, group, suite, client_sig = cell
    client_auth, identity = runner.client_certificate(
        store.path / "certs", plan.server_sig, client_sig, plan.client_ca, stack
    )
    tls = runner.Tls(
        stack=stack,
        groups=(group,),
        sigalgs=(plan.server_sig,) if client_sig is None else (plan.server_sig, client_sig),
        ciphersuites=suite,
        events=False,
    )
    expected = negotiation.Expected(
        group=group, sigalg=plan.server_sig, cipher=suite, client_sigalg=client_sig
    )
    total = plan.n + plan.warmup
    server_spec = runner.ServerSpec(
        tls=tls,
        chain=chain,
        listen=f"{hosts.server_ip}:{plan.port}",
        max_connections=total,
        max_response_bytes=max(plan.nbytes, plan.echo_bytes),
        client_auth=client_auth,
    )
    budget = 120 + total * (10 + (plan.nbytes + plan.echo_bytes) / 5e6)
    server_cpu, client_cpu = cpus
    with runner.start_server(server_spec, hosts, cpu=server_cpu) as server:
        client = runner.ClientSpec(
            tls=tls,
            connect=f"{hosts.server_ip}:{plan.port}",
            ca=chain.root,
            n=plan.n,
            warmup=plan.warmup,
            time_limit=int(budget),
            expected=expected,
            identity=identity,
        )
        bulk = runner.BulkSpec(
            client, push_bytes=plan.nbytes, pull_bytes=plan.nbytes, echo_bytes=plan.echo_bytes
        )
        proc = process.EngineProcess(
            bulk.argv(),
            "TLS bulk client",
            bulk.program,
            topo=hosts,
            side="client",
            cpu=client_cpu,
        )
        try:
            records = [r for r in proc.finish(budget) if r.get("type") == "bulk"]
        finally:
            proc.stop()
        srv = [r for r in server.finish(60) if r["type"] in ("connection", "connection_error")]
    bad = [r for r in srv if r["type"] != "connection"]
    if bad:
        raise EngineError(f"throughput server: {bad[0].get('message')}")
    cid = str(plan.cell_id(*cell))
    for r in records + srv:
        negotiation.check(r, expected, stack, what=f"{cid} transfer")
    measured = [r for r in records if not r["warmup"]]
    if len(measured) != plan.n or len(srv) != total:
        raise EngineError(f"expected {plan.n} transfers, got {len(measured)}")
    rows = [
        {
            "cell_id": cid,
            "stack": stack.name,
            "stack_impl": stack.implementation,
            "group": group.name,
            "cipher_suite": suite,
            "server_sig": plan.server_sig.name,
            "idx": r["index"],
            "push_bytes": r["push_bytes"],
            "push_ns": r["push_ns"],
            "server_recv_ns": r["server_recv_ns"],
            "pull_bytes": r["pull_bytes"],
            "pull_ns": r["pull_ns"],
            "pull_first_to_last_ns": r["pull_first_to_last_ns"],
            "negotiated_cipher": r["negotiated"].get("cipher"),
            "negotiated_group": r["negotiated"].get("group"),
            "server_cpus": str(server_cpu),
            "client_cpus": str(client_cpu),
            "handshake_ns": r.get("handshake_ns"),
            "push_cpu_ns": r.get("push_cpu_ns"),
            "pull_cpu_ns": r.get("pull_cpu_ns"),
            "client_sig": client_sig.name if client_sig is not None else NO_CLIENT,
            "echo_bytes": r.get("echo_bytes"),
            "echo_write_ns": r.get("echo_write_ns"),
            "echo_read_ns": r.get("echo_read_ns"),
        }
        for r in measured
    ]
    with store.cell(NAME, cid, {"bytes": plan.nbytes, "n": plan.n}):
        store.insert_rows("throughput_raw", rows)


def measure(plan: Plan, store) -> None:

    for ddl in DDL:
        store.ensure_table(ddl)
    done = CELLS.done(store)
    todo = [c for c in plan.cells() if plan.cell_id(*c) not in done]
    if todo:
        cpus = cpuquota.pick_cpu_pair() or (None, None)
        chains = {
            st: make_chain(store.path / "certs", plan.server_sig, plan.server_sig, st)
            for st in dict.fromkeys(c[0].name for c in todo)
        }
        hosts_cm = build_hosts(None, mtu=plan.mtu)
        with hosts_cm as hosts, CellProgress(NAME, len(todo)) as progress:
            for cell in todo:
                mtls = f" / client {cell[3].name}" if cell[3] is not None else ""
                progress.start(f"{cell[1].name} / {cell[2]}{mtls} / {cell[0].name}")
                run_cell(store, hosts, plan, cell, chains[cell[0].name], cpus)
                progress.advance()
    if plan.tls_bench_seconds:
        throughput_tls_bench.measure(plan, store, CELLS, done)
