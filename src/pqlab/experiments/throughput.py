"""`pqlab throughput`: bulk transfer after one handshake, each way, as wolfSSL's tls_bench
does, for each key-exchange group and TLS 1.3 cipher suite: the client pushes N bytes to the
server and pulls M bytes back on the same connection; every read is checked against a
position-dependent pattern on both ends. Tx and Rx in MB/s. Needs CAP_NET_ADMIN."""

from __future__ import annotations

import html
import statistics

from pqlab import catalog, figures, process, units
from pqlab.errors import EngineError, UserError
from pqlab.experiment import (
    CellId,
    Cells,
    CompareSpec,
    Experiment,
    Option,
    parse_stack,
    stack_option,
)
from pqlab.experiments.handshake.plan import pick_cpus
from pqlab.net.shaping import build_hosts
from pqlab.progress import CellProgress
from pqlab.report.section import Section, template
from pqlab.tls import negotiation, runner, stacks
from pqlab.tls.chains import make_chain

NAME = "throughput"
CELLS = Cells(NAME, ("group", "cipher_suite", "server_sig"), tls=True)
# RFC 8446's three suites every stack here has (the default); a stack may have more
# (`pqlab algorithms --tls` does not list suites; `pqlab-engine info` does).
SUITES = ("TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256")
MAX_BYTES = 1 << 34
DEFAULT_PORT = 4435

DDL = [
    """CREATE TABLE IF NOT EXISTS throughput_raw (
        cell_id TEXT, stack TEXT, stack_impl TEXT, "group" TEXT, cipher_suite TEXT,
        server_sig TEXT, idx INTEGER, push_bytes BIGINT, push_ns BIGINT,
        server_recv_ns BIGINT, pull_bytes BIGINT, pull_ns BIGINT,
        pull_first_to_last_ns BIGINT, negotiated_cipher TEXT, negotiated_group TEXT,
        server_cpus TEXT, client_cpus TEXT)""",
]

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
    Option("warmup", "unrecorded connections per cell (0-100)", default="1", metavar="N"),
    stack_option(),
    Option("port", "server TCP port inside the lab", default=str(DEFAULT_PORT), metavar="PORT"),
)


class Plan:
    def __init__(self, groups, suites, server_sig, nbytes, n, warmup, stack, port):
        self.groups, self.suites, self.server_sig = groups, suites, server_sig
        self.nbytes, self.n, self.warmup, self.stack, self.port = nbytes, n, warmup, stack, port

    def cells(self):
        for g in self.groups:
            for s in self.suites:
                yield g, s

    def cell_id(self, group, suite) -> CellId:
        return CELLS.id(group, suite, self.server_sig, stack=self.stack)


def from_values(values) -> Plan:
    stack = parse_stack(values)
    groups = catalog.resolve_list(units.parse_list(values.groups, "--groups"), "kem")
    stacks.require(groups, stack, "group", "--groups")
    suites = units.parse_list(values.ciphersuites, "--ciphersuites", example=SUITES[0])
    have = stack.cipher_suites or SUITES
    for s in suites:
        if s not in have:
            raise UserError(
                f"--ciphersuites {s!r} is not a TLS 1.3 suite of the {stack.name} stack; use "
                + ", ".join(have)
            )
    sig = catalog.resolve(values.server_sig, "sig")
    stacks.require([sig], stack, "server", "--server-sig")
    nbytes = units.parse_size(values.bytes, "--bytes", maximum=MAX_BYTES)
    if nbytes < 1:
        raise UserError(f"--bytes {values.bytes!r}: at least 1 byte")
    return Plan(
        groups,
        list(dict.fromkeys(suites)),
        sig,
        nbytes,
        units.parse_positive_int(values.n, "-n", maximum=1000),
        units.parse_positive_int(values.warmup, "--warmup", minimum=0, maximum=100),
        stack.name,
        units.parse_positive_int(values.port, "--port", maximum=65535),
    )


def run_cell(store, hosts, plan: Plan, group, suite: str, chain, cpus) -> None:
    stack = stacks.get(plan.stack)
    tls = runner.Tls(
        stack=plan.stack,
        groups=(group,),
        sigalgs=(plan.server_sig,),
        ciphersuites=suite,
        events=False,
    )
    expected = negotiation.Expected(group=group, sigalg=plan.server_sig, cipher=suite)
    total = plan.n + plan.warmup
    server_spec = runner.ServerSpec(
        tls=tls,
        chain=chain,
        listen=f"{hosts.server_ip}:{plan.port}",
        max_connections=total,
        max_response_bytes=plan.nbytes,
    )
    budget = 120 + total * (10 + plan.nbytes / 5e6)
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
        )
        proc = process.EngineProcess(
            runner.BulkSpec(client, push_bytes=plan.nbytes, pull_bytes=plan.nbytes).argv(),
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
    for r in records + srv:
        negotiation.check(r, expected, stack, what=f"{plan.cell_id(group, suite)} transfer")
    measured = [r for r in records if not r["warmup"]]
    if len(measured) != plan.n or len(srv) != total:
        raise EngineError(f"expected {plan.n} transfers, got {len(measured)}")
    cid = str(plan.cell_id(group, suite))
    rows = [
        {
            "cell_id": cid,
            "stack": plan.stack,
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
    if not todo:
        return
    cpus = pick_cpus() or (None, None)
    chain = make_chain(store.path / "certs", plan.server_sig, plan.server_sig, plan.stack)
    with build_hosts(None) as hosts, CellProgress(NAME, len(todo)) as progress:
        for group, suite in todo:
            progress.start(f"{group.name} / {suite}")
            run_cell(store, hosts, plan, group, suite, chain, cpus)
            progress.advance()


COLUMNS = [
    "stack_impl",
    "group",
    "cipher_suite",
    "server_sig",
    "bytes",
    "n",
    "tx_MBps",
    "rx_MBps",
    "tx_MBps_min",
    "tx_MBps_max",
    "rx_MBps_min",
    "rx_MBps_max",
    "server_rx_MBps",
]


def mbps(nbytes: int, ns: int) -> float:
    """Megabytes (10^6 bytes) per second."""
    return nbytes / ns * 1e3 if ns > 0 else float("nan")


def summary_rows(store) -> list[dict]:
    raw = store.query(
        'SELECT * FROM throughput_raw ORDER BY "group", cipher_suite, server_sig, idx'
    )
    cells: dict[tuple, list[dict]] = {}
    for r in raw:
        cells.setdefault(
            (r["stack_impl"], r["group"], r["cipher_suite"], r["server_sig"]), []
        ).append(r)
    out = []
    for (impl, group, suite, sig), rs in cells.items():
        tx = [mbps(r["push_bytes"], r["push_ns"]) for r in rs]
        rx = [mbps(r["pull_bytes"], r["pull_ns"]) for r in rs]
        srx = [mbps(r["push_bytes"], r["server_recv_ns"]) for r in rs]
        out.append(
            {
                "stack_impl": impl,
                "group": group,
                "cipher_suite": suite,
                "server_sig": sig,
                "bytes": rs[0]["push_bytes"],
                "n": len(rs),
                "tx_MBps": round(statistics.median(tx), 1),
                "rx_MBps": round(statistics.median(rx), 1),
                "tx_MBps_min": round(min(tx), 1),
                "tx_MBps_max": round(max(tx), 1),
                "rx_MBps_min": round(min(rx), 1),
                "rx_MBps_max": round(max(rx), 1),
                "server_rx_MBps": round(statistics.median(srx), 1),
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
        csv_path, "Tx (client to server) and Rx (server to client), MB/s (tables/throughput.csv)"
    )
    _figure(store, section, rows)
    return section


def _figure(store, section: Section, rows: list[dict]) -> None:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 0.4 * len(rows) + 1.2))
    labels = [f"{r['group']} / {r['cipher_suite']}" for r in rows]
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
    compare = (
        CompareSpec(
            "throughput rx",
            "throughput_raw",
            ("group", "cipher_suite", "server_sig"),
            "pull_bytes / pull_ns * 1e3",
            "MB/s",
            better="higher",
        ),
        CompareSpec(
            "throughput tx",
            "throughput_raw",
            ("group", "cipher_suite", "server_sig"),
            "push_bytes / push_ns * 1e3",
            "MB/s",
            better="higher",
        ),
    )

    def resume_key(self, plan: Plan) -> dict:
        return {"bytes": plan.nbytes, "n": plan.n, "warmup": plan.warmup, "stack": plan.stack}

    def metadata(self, plan: Plan) -> dict:
        return {
            "throughput": {
                "groups": [g.name for g in plan.groups],
                "ciphersuites": plan.suites,
                "server_sig": plan.server_sig.name,
                "bytes": plan.nbytes,
                "n": plan.n,
                "warmup": plan.warmup,
                "stack": plan.stack,
            }
        }


EXPERIMENT = Throughput()
