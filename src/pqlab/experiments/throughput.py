"""`pqlab throughput`: bulk transfer after one handshake, each way, as wolfSSL's tls_bench
does, for each TLS stack, key-exchange group and TLS 1.3 cipher suite: the client pushes N
bytes to the server and pulls M bytes back on the same connection; every read is checked
against a position-dependent pattern on both ends. Tx and Rx in MB/s, and the client's
handshake time. Where a stack's build has wolfSSL's own tls_bench, it runs too and its rows
stand beside pqlab's (`throughput_tls_bench`). Needs CAP_NET_ADMIN."""

from __future__ import annotations

import html
import statistics

from pqlab import catalog, estimate, figures, process, units
from pqlab.errors import EngineError, UserError
from pqlab.experiment import (
    NO_CLIENT,
    CellId,
    Cells,
    CompareSpec,
    Experiment,
    Option,
    client_auth_options,
    client_cell_option,
    parse_client_auth,
    parse_stacks,
    stack_option,
)
from pqlab.experiments import throughput_tls_bench
from pqlab.experiments.handshake.plan import pick_cpus
from pqlab.net.shaping import build_hosts
from pqlab.progress import CellProgress
from pqlab.report.section import Section, template
from pqlab.tls import negotiation, runner, stacks, wolfssl_tools
from pqlab.tls.chains import make_chain

NAME = "throughput"
CELLS = Cells(NAME, ("group", "cipher_suite", "server_sig"), tls=True, aux=("tls_bench",))
# RFC 8446's three suites every stack here has (the default); a stack may have more
# (`pqlab algorithms --tls` does not list suites; `pqlab-engine info` does).
SUITES = ("TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256")
MAX_BYTES = 1 << 34
MIN_ECHO_BYTES, MAX_ECHO_BYTES = 1 << 14, 1 << 30
DEFAULT_PORT = 4435
# Bytes echoed per connection right after its handshake, a 16 KiB record at a time, as tls_bench's
# client does (8 records): its Tx and Rx, measured the same way on every stack
# (`--echo-bytes`, default).
ECHO_BYTES = 131072

DDL = [
    """CREATE TABLE IF NOT EXISTS throughput_raw (
        cell_id TEXT, stack TEXT, stack_impl TEXT, "group" TEXT, cipher_suite TEXT,
        server_sig TEXT, idx INTEGER, push_bytes BIGINT, push_ns BIGINT,
        server_recv_ns BIGINT, pull_bytes BIGINT, pull_ns BIGINT,
        pull_first_to_last_ns BIGINT, negotiated_cipher TEXT, negotiated_group TEXT,
        server_cpus TEXT, client_cpus TEXT, handshake_ns BIGINT, push_cpu_ns BIGINT,
        pull_cpu_ns BIGINT, client_sig TEXT, echo_bytes BIGINT, echo_write_ns BIGINT,
        echo_read_ns BIGINT)""",
    throughput_tls_bench.DDL,
]
MIGRATIONS = (
    *(
        f"ALTER TABLE IF EXISTS throughput_raw ADD COLUMN IF NOT EXISTS {c} BIGINT"
        for c in (
            "handshake_ns",
            "push_cpu_ns",
            "pull_cpu_ns",
            "echo_bytes",
            "echo_write_ns",
            "echo_read_ns",
        )
    ),
    # Runs made before mutual TLS had no client certificate.
    "ALTER TABLE IF EXISTS throughput_raw ADD COLUMN IF NOT EXISTS client_sig TEXT DEFAULT 'none'",
)

OPTIONS = (
    Option("groups", "key-exchange groups", default="X25519,X25519MLKEM768", metavar="LIST"),
    Option(
        "ciphersuites",
        "TLS 1.3 cipher suites, any the stack has (OpenSSL also TLS_AES_128_CCM_SHA256 and "
        "TLS_AES_128_CCM_8_SHA256)",
        default=",".join(SUITES),
        metavar="LIST",
    ),
    Option("server-sig", "server certificate algorithm", default="ECDSA-P256", metavar="ALG"),
    Option("bytes", "bytes each way per connection (e.g. 64MiB), at most 16GiB", default="64MiB"),
    Option("n", "measured connections per cell (1-1000)", default="5", short="-n", metavar="N"),
    Option(
        "echo-bytes",
        "bytes each connection echoes right after its handshake, a 16 KiB record at a time as "
        "tls_bench's client (128KiB as tls_bench), 16KiB to 1GiB",
        default="128KiB",
        metavar="BYTES",
    ),
    Option("warmup", "unrecorded connections per cell (0-100)", default="1", metavar="N"),
    Option(
        "tls-bench-seconds",
        "seconds per group of wolfSSL's tls_bench, run beside the cells of stacks whose build "
        "has it (1-60; 0: do not run it)",
        default="1",
        metavar="S",
    ),
    Option(
        "mtu",
        "MTU of the lab's link (576-65535): 1500 as Ethernet; 65535 as loopback, so the "
        "kernel handles few, large segments and the rate is the TLS stack's",
        default="1500",
        metavar="BYTES",
    ),
    *client_auth_options(),
    stack_option(several=True),
    Option("port", "server TCP port inside the lab", default=str(DEFAULT_PORT), metavar="PORT"),
)


class Plan:
    def __init__(self, groups, suites, server_sig, nbytes, n, warmup, stacks, port, bench_s=1):
        self.groups, self.suites, self.server_sig = groups, suites, server_sig
        self.nbytes, self.n, self.warmup, self.stacks, self.port = nbytes, n, warmup, stacks, port
        self.tls_bench_seconds = bench_s  # 0: no tls_bench
        self.mtu = 1500  # the lab link's MTU
        self.echo_bytes = ECHO_BYTES  # echoed per connection after its handshake
        self.client_sigs: list = [None]  # mutual TLS: client signers (None: no certificate)
        self.client_ca = None  # their CA's algorithm (None: the server chain's)

    def cells(self):
        for st in self.stacks:
            for g in self.groups:
                for s in self.suites:
                    for cl in self.client_sigs:
                        yield st, g, s, cl

    def cell_id(self, stack, group, suite, client=None) -> CellId:
        return CELLS.id(
            group,
            suite,
            self.server_sig,
            stack=stack,
            options=client_cell_option(client, self.client_ca),
        )


def _check_suites(stack, suites: list[str]) -> None:
    have = stack.cipher_suites or SUITES
    for s in suites:
        if s not in have:
            raise UserError(
                f"--ciphersuites {s!r} is not a TLS 1.3 suite of the {stack.name} stack; use "
                + ", ".join(have)
            )


def from_values(values) -> Plan:
    chosen = parse_stacks(values)
    groups = catalog.resolve_list(units.parse_list(values.groups, "--groups"), "kem")
    suites = units.parse_list(values.ciphersuites, "--ciphersuites", example=SUITES[0])
    sig = catalog.resolve(values.server_sig, "sig")
    for stack in chosen:
        stacks.require(groups, stack, "group", "--groups")
        _check_suites(stack, suites)
        stacks.require([sig], stack, "server", "--server-sig")
    nbytes = units.parse_size(values.bytes, "--bytes", maximum=MAX_BYTES)
    if nbytes < 1:
        raise UserError(f"--bytes {values.bytes!r}: at least 1 byte")
    clients = [parse_client_auth(values, stack) for stack in chosen]
    plan = Plan(
        groups,
        list(dict.fromkeys(suites)),
        sig,
        nbytes,
        units.parse_positive_int(values.n, "-n", maximum=1000),
        units.parse_positive_int(values.warmup, "--warmup", minimum=0, maximum=100),
        tuple(st.name for st in chosen),
        units.parse_positive_int(values.port, "--port", maximum=65535),
        units.parse_positive_int(
            values.tls_bench_seconds, "--tls-bench-seconds", minimum=0, maximum=60
        ),
    )
    plan.client_sigs, plan.client_ca = clients[0]
    plan.mtu = units.parse_positive_int(values.mtu, "--mtu", minimum=576, maximum=65535)
    plan.echo_bytes = parse_echo_bytes(values.echo_bytes)
    return plan


def parse_echo_bytes(text) -> int:
    """`--echo-bytes`: from one 16 KiB record (tls_bench's client writes whole records) to
    1 GiB."""
    size = units.parse_size(text, "--echo-bytes")
    if not MIN_ECHO_BYTES <= size <= MAX_ECHO_BYTES:
        raise UserError(
            f"--echo-bytes {units.show(text)} is out of range; accepted: 16KiB (one record) to 1GiB"
        )
    return size


def run_cell(store, hosts, plan: Plan, cell, chain, cpus) -> None:
    stack_name, group, suite, client_sig = cell
    stack = stacks.get(stack_name)
    client_auth, identity = runner.client_certificate(
        store.path / "certs", plan.server_sig, client_sig, plan.client_ca, stack_name
    )
    tls = runner.Tls(
        stack=stack_name,
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
        proc = process.EngineProcess(
            runner.BulkSpec(
                client, push_bytes=plan.nbytes, pull_bytes=plan.nbytes, echo_bytes=plan.echo_bytes
            ).argv(),
            "TLS bulk client",
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
            "stack": stack_name,
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
        cpus = pick_cpus() or (None, None)
        chains = {
            st: make_chain(store.path / "certs", plan.server_sig, plan.server_sig, st)
            for st in dict.fromkeys(c[0] for c in todo)
        }
        hosts_cm = build_hosts(None, mtu=plan.mtu)
        with hosts_cm as hosts, CellProgress(NAME, len(todo)) as progress:
            for cell in todo:
                mtls = f" / client {cell[3].name}" if cell[3] is not None else ""
                progress.start(f"{cell[1].name} / {cell[2]}{mtls} / {cell[0]}")
                run_cell(store, hosts, plan, cell, chains[cell[0]], cpus)
                progress.advance()
    if plan.tls_bench_seconds:
        throughput_tls_bench.measure(plan, store, CELLS, done)


COLUMNS = [
    "stack",
    "stack_impl",
    "group",
    "cipher_suite",
    "server_sig",
    "client_sig",
    "bytes",
    "n",
    "echo_bytes",
    "tx_MBps",
    "rx_MBps",
    "tx_MBps_min",
    "tx_MBps_max",
    "rx_MBps_min",
    "rx_MBps_max",
    "server_rx_MBps",
    "handshake_ms",
    "handshake_mean_ms",
    "tx_cpu_MBps",
    "rx_cpu_MBps",
    "echo_tx_MBps",
    "echo_rx_MBps",
]


def mbps(nbytes: int, ns: int) -> float:
    """Megabytes (10^6 bytes) per second."""
    return nbytes / ns * 1e3 if ns > 0 else float("nan")


def summary_rows(store) -> list[dict]:
    raw = store.query(
        'SELECT * FROM throughput_raw ORDER BY "group", cipher_suite, server_sig, stack_impl, idx'
    )
    cells: dict[tuple, list[dict]] = {}
    for r in raw:
        key = (r["stack_impl"], r["group"], r["cipher_suite"], r["server_sig"])
        cells.setdefault((*key, r.get("client_sig") or NO_CLIENT), []).append(r)
    out = []
    for (impl, group, suite, sig, client), rs in cells.items():
        handshakes = [r["handshake_ns"] / 1e6 for r in rs if r.get("handshake_ns")]
        tx_cpu = [mbps(r["push_bytes"], r["push_cpu_ns"]) for r in rs if r.get("push_cpu_ns")]
        rx_cpu = [mbps(r["pull_bytes"], r["pull_cpu_ns"]) for r in rs if r.get("pull_cpu_ns")]
        tx = [mbps(r["push_bytes"], r["push_ns"]) for r in rs]
        rx = [mbps(r["pull_bytes"], r["pull_ns"]) for r in rs]
        srx = [mbps(r["push_bytes"], r["server_recv_ns"]) for r in rs]
        echoed = [r for r in rs if r.get("echo_write_ns")]
        # As tls_bench sums: all bytes over all time inside the writes (reads), not a median.
        echo_tx = mbps(
            sum(r["echo_bytes"] for r in echoed), sum(r["echo_write_ns"] for r in echoed)
        )
        echo_rx = mbps(sum(r["echo_bytes"] for r in echoed), sum(r["echo_read_ns"] for r in echoed))
        out.append(
            {
                "stack": rs[0].get("stack"),
                "stack_impl": impl,
                "group": group,
                "cipher_suite": suite,
                "server_sig": sig,
                "client_sig": client,
                "bytes": rs[0]["push_bytes"],
                "n": len(rs),
                "echo_bytes": echoed[0]["echo_bytes"] if echoed else None,
                "tx_MBps": round(statistics.median(tx), 1),
                "rx_MBps": round(statistics.median(rx), 1),
                "tx_MBps_min": round(min(tx), 1),
                "tx_MBps_max": round(max(tx), 1),
                "rx_MBps_min": round(min(rx), 1),
                "rx_MBps_max": round(max(rx), 1),
                "server_rx_MBps": round(statistics.median(srx), 1),
                "handshake_ms": round(statistics.median(handshakes), 3) if handshakes else None,
                "handshake_mean_ms": round(statistics.fmean(handshakes), 3) if handshakes else None,
                "tx_cpu_MBps": round(statistics.median(tx_cpu), 1) if tx_cpu else None,
                "rx_cpu_MBps": round(statistics.median(rx_cpu), 1) if rx_cpu else None,
                "echo_tx_MBps": round(echo_tx, 1) if echoed else None,
                "echo_rx_MBps": round(echo_rx, 1) if echoed else None,
            }
        )
    return out


def export(store) -> Section | None:
    if not store.has_table("throughput_raw"):
        return None
    rows = summary_rows(store)
    if not rows:
        return None
    csv_path = store.export_rows(NAME, rows, COLUMNS)
    section = Section(title="Bulk throughput after the handshake")
    section.intro = template(
        "throughput_intro", size=html.escape(units.format_bytes(rows[0]["bytes"]))
    )
    section.table(
        csv_path,
        "Tx (client to server) and Rx (server to client), MB/s, and the client's handshake "
        "time (tables/throughput.csv)",
    )
    _figure(store, section, rows)
    throughput_tls_bench.export(store, section, rows)
    return section


def _figure(store, section: Section, rows: list[dict]) -> None:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 0.4 * len(rows) + 1.2))
    several = len({r["stack_impl"] for r in rows}) > 1
    labels = [
        f"{r['group']} / {r['cipher_suite']}"
        + (f" / client {r['client_sig']}" if r["client_sig"] != NO_CLIENT else "")
        + (f" / {r['stack']}" if several else "")
        for r in rows
    ]
    y = list(range(len(rows)))
    ax.barh([v - 0.2 for v in y], [r["tx_MBps"] for r in rows], height=0.4, label="Tx")
    ax.barh([v + 0.2 for v in y], [r["rx_MBps"] for r in rows], height=0.4, label="Rx")
    ax.set_yticks(y, labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("MB/s (median of connections)")
    ax.legend()
    png = figures.save(fig, store, "throughput")
    section.figure(png, "Bulk transfer after the handshake, each way, per group and cipher suite")


class Throughput(Experiment):
    name = NAME
    help = "bulk transfer after the handshake, each way, per group and cipher suite"
    description = __doc__.split("\n\n")[0]
    needs_net = True
    cells = CELLS
    options = OPTIONS
    migrations = MIGRATIONS
    compare = (
        CompareSpec(
            "throughput rx",
            "throughput_raw",
            ("group", "cipher_suite", "server_sig", "client_sig", "stack"),
            "pull_bytes / pull_ns * 1e3",
            "MB/s",
            better="higher",
        ),
        CompareSpec(
            "throughput tx",
            "throughput_raw",
            ("group", "cipher_suite", "server_sig", "client_sig", "stack"),
            "push_bytes / push_ns * 1e3",
            "MB/s",
            better="higher",
        ),
    )

    def resume_key(self, plan: Plan) -> dict:
        return {
            "bytes": plan.nbytes,
            "n": plan.n,
            "warmup": plan.warmup,
            "mtu": plan.mtu,
            "echo_bytes": plan.echo_bytes,
        }

    def work(self, plan: Plan) -> estimate.Work:
        """Per cell a server and warm-up + -n connections, each a handshake, --bytes each
        way and the echo's --echo-bytes; per stack whose build has tls_bench and suite it
        knows, one tls_bench run of every group it has for --tls-bench-seconds each (fixed
        by the plan)."""
        cells = list(plan.cells())
        work = estimate.Work(
            f"{estimate.count(len(cells), 'cell')} x {plan.n} transfers of {units.format_bytes(plan.nbytes)}",
            cells=len(cells),
        )
        each = plan.n + plan.warmup
        work.add("throughput.topology", 1)
        work.add("throughput.cell", len(cells))
        work.add("throughput.connection", each * len(cells))
        # The echo moves its bytes each way too (a round trip per record: slower per byte).
        work.add("throughput.byte", 2 * (plan.nbytes + plan.echo_bytes) * each * len(cells))
        work.add("chain", len(plan.stacks))
        runs = 0
        for name in plan.stacks:
            if plan.tls_bench_seconds and wolfssl_tools.has_tools(stacks.get(name), "tls_bench"):
                runs += len([s for s in plan.suites if s in throughput_tls_bench.SUITES])
        if runs:
            groups = estimate.TLS_BENCH_GROUPS
            work.exact_s += runs * groups * plan.tls_bench_seconds
            work.add("throughput.tls_bench_group", runs * groups)
            work.size += f", {estimate.count(runs, 'tls_bench run')}"
        return work

    def metadata(self, plan: Plan) -> dict:
        return {
            "throughput": {
                "groups": [g.name for g in plan.groups],
                "ciphersuites": plan.suites,
                "server_sig": plan.server_sig.name,
                "bytes": plan.nbytes,
                "n": plan.n,
                "warmup": plan.warmup,
                "stacks": list(plan.stacks),
                "tls_bench_seconds": plan.tls_bench_seconds,
                "mtu": plan.mtu,
                "echo_bytes": plan.echo_bytes,
                "client_sigs": [c.name if c else NO_CLIENT for c in plan.client_sigs],
                "client_ca_sig": plan.client_ca.name if plan.client_ca else None,
            }
        }


EXPERIMENT = Throughput()
