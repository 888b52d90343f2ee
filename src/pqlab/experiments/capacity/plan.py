"""The capacity experiment's options and plan: the (group, server signature, CA signature,
server threads) cells, the closed-loop client counts and open-loop rates, the bounds, the
host pairs (`--server-host` ...), and the CPUs the server and the load generator are pinned
to; all validated before anything runs."""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass, field

from pqlab import catalog, cpuquota, units
from pqlab.errors import UserError
from pqlab.experiment import CellId, Cells, Option
from pqlab.options import hosts
from pqlab.options.tls import (
    client_auth_options,
    client_cell_option,
    parse_client_auth,
    parse_stack,
    stack_option,
)
from pqlab.tls import stacks

DEFAULT_GROUPS = "X25519,X25519MLKEM768"
DEFAULT_SIGS = "ECDSA-P256,ML-DSA-44"
MODES = ("closed", "open")
MAX_CLIENTS = 1024
MAX_THREADS = 256
MAX_RATE = 1_000_000.0
MAX_DURATION_S = 3600.0
MAX_HANDSHAKES = 10_000_000
DEFAULT_PORT = 4434

CELLS = Cells("capacity", ("group", "server_sig", "ca_sig", "threads"), tls=True)

OPTIONS = (
    Option("groups", "key-exchange groups", default=DEFAULT_GROUPS, metavar="LIST"),
    Option(
        "server-sig",
        "server certificate / CertificateVerify signature algorithms",
        default=DEFAULT_SIGS,
        metavar="LIST",
    ),
    Option(
        "ca-sig",
        "root CA signature algorithms; 'same' signs each server certificate with a CA of its "
        "own algorithm",
        default="same",
        metavar="LIST",
    ),
    Option(
        "mode",
        "closed (C clients back to back), open (fixed arrival rates) or closed,open",
        default="closed,open",
        metavar="LIST",
    ),
    Option(
        "clients",
        f"closed loop: numbers of concurrent clients, 1-{MAX_CLIENTS}",
        default="1,2,4",
        metavar="LIST",
    ),
    Option(
        "rates",
        "open loop: arrival rates, handshakes/s (e.g. 200) or a percentage of the cell's "
        "highest closed-loop rate (e.g. 80%%, needs closed in --mode)",
        default="25%,50%,75%,90%,110%",
        metavar="LIST",
    ),
    Option(
        "open-workers",
        f"open loop: most handshakes in flight at once (load-generator threads), 1-{MAX_CLIENTS}",
        default="16",
        metavar="N",
    ),
    Option(
        "server-threads",
        "CPUs the server runs on (at most half the machine's; every connection in flight "
        f"gets a thread of its own), 1-{MAX_THREADS}",
        default="1",
        metavar="LIST",
    ),
    Option(
        "duration",
        "measuring window of every load point (closed: no handshake starts after it; open: "
        "arrivals are scheduled inside it), e.g. 5s",
        default="5s",
        metavar="DURATION",
    ),
    Option(
        "max-handshakes",
        f"most measured handshakes per load point, 1-{MAX_HANDSHAKES}",
        default="200000",
        metavar="N",
    ),
    Option(
        "warmup",
        "warm-up handshakes per load-generator thread before each point's clock starts",
        default="5",
        metavar="N",
    ),
    *client_auth_options(),
    stack_option(),
    Option(
        "port",
        "server TCP port (inside the lab, or on the server's host)",
        default=str(DEFAULT_PORT),
        metavar="PORT",
    ),
    *hosts.OPTIONS,
)
# Why capacity needs the two sides on two machines when hosts are named.
APART = (
    "the load generator would share the server's CPUs, and the server host's CPU accounting "
    "would count it as other load"
)


@dataclass(frozen=True)
class Rate:
    """An open-loop rate: absolute (per second) or relative to the cell's saturation."""

    value: float
    relative: bool  # value is a fraction of the highest closed-loop rate

    @property
    def label(self) -> str:
        return f"{self.value * 100:g}%" if self.relative else f"{self.value:g}/s"


def cpu_list(cpus: list[int]) -> str:
    return ",".join(str(c) for c in cpus)


@dataclass(frozen=True)
class Pinning:
    """Where one cell's two sides run: `server`/`client` the CPUs each is pinned to (None:
    not pinned), `server_cpus`/`client_cpus` the CPUs each may use (None: every CPU of its
    host, known only from the load generator's report), `note` why a side is not pinned."""

    server: list[int] | None
    client: list[int] | None
    server_cpus: list[int] | None
    client_cpus: list[int] | None
    note: str | None = None

    def describe(self) -> dict:
        return {
            "server": self.server_cpus,
            "client": self.client_cpus,
            "server_pinned": self.server is not None,
            "client_pinned": self.client is not None,
            "note": self.note,
        }


@dataclass(frozen=True)
class ServerHost:
    """The server's host of a pair: its name, the CPUs a process there may use and whether
    it has taskset (`pqlab.options.hosts.host_cpus`)."""

    name: str
    cpus: list[int]
    taskset: bool

    def pinning(self, threads: int) -> Pinning:
        """The server pinned to `threads` of the host's CPUs (its highest ones) when it has
        them and taskset; else on all of them, saying so. The load generator runs on its own
        host, on whatever CPUs that host gives it."""
        if not self.taskset:
            note = f"{self.name} has no taskset: the server runs unpinned on its CPUs"
            return Pinning(None, None, self.cpus, None, note)
        if len(self.cpus) < threads:
            note = (
                f"{self.name} has {len(self.cpus)} CPU(s) ({cpu_list(self.cpus)}), fewer than "
                f"--server-threads {threads}: the server runs unpinned on all of them"
            )
            return Pinning(None, None, self.cpus, None, note)
        cpus = self.cpus[-threads:]
        return Pinning(cpus, None, cpus, None)


@dataclass
class Plan:
    groups: list[catalog.Algorithm]
    server_sigs: list[catalog.Algorithm]
    ca_sigs: list[catalog.Algorithm] | None  # None: same as the server signature
    modes: list[str]
    clients: list[int]
    rates: list[Rate]
    open_workers: int
    server_threads: list[int]
    duration_s: float
    max_handshakes: int
    warmup: int
    stack: stacks.Stack
    port: int
    pinning: bool = True  # taskset available (on this machine)
    remote: object | None = None  # pqlab.net.remote.RemotePlan: the host pairs
    client_sigs: list = field(default_factory=lambda: [None])  # None: no client certificate
    client_ca: object | None = None  # the client certificates' CA (None: the server's CA's)
    server_hosts: dict[str, ServerHost] = field(default_factory=dict)  # per pair label

    @property
    def pairs(self) -> list:
        """The host pairs the cells run on (None: this machine's namespaces)."""
        return list(self.remote.pairs) if self.remote is not None else [None]

    def cells(self):
        for g in self.groups:
            for s in self.server_sigs:
                for c in self.ca_sigs or [s]:
                    for t in self.server_threads:
                        for cl in self.client_sigs:
                            yield g, s, c, t, cl

    def cell_id(self, group, server_sig, ca_sig, threads: int, client=None, pair=None) -> CellId:
        # Several pairs: each cell once per pair (one pair: the cell ids of one machine).
        several = pair is not None and len(self.pairs) > 1
        return CELLS.id(
            group,
            server_sig,
            ca_sig,
            f"t{threads}",
            stack=self.stack.name,
            options=client_cell_option(client, self.client_ca),
            pair=pair.label if several else None,
        )

    def cpus(self, threads: int, pair=None) -> Pinning:
        """Where a cell's server and load generator run. One machine: disjoint halves of
        its CPUs (`cpuquota.pick_cpus`), with taskset. Across hosts: the server's host's own CPUs."""
        if pair is not None:
            return self.server_hosts[pair.label].pinning(threads)
        if not self.pinning:
            return Pinning(None, None, None, None, "no taskset on this machine: nothing pinned")
        server, client = cpuquota.pick_cpus(threads)
        return Pinning(server, client, server, client)

    def describe_cpus(self) -> dict:
        """Every cell's CPUs, per server-threads value (and per pair across hosts)."""
        if self.remote is None:
            return {str(t): self.cpus(t).describe() for t in self.server_threads}
        return {
            p.label: {str(t): self.cpus(t, p).describe() for t in self.server_threads}
            for p in self.pairs
        }

    def point_budget_s(self) -> float:
        """The bound on one load point: the window, time to drain an open loop's backlog,
        warm-up and start-up."""
        return 3 * self.duration_s + 30


def _ints(text, option: str, top: int) -> list[int]:
    items = units.parse_list(text, option, example="1,2,4")
    out = [units.parse_positive_int(i, option, maximum=top) for i in items]
    return list(dict.fromkeys(out))


def parse_rates(text) -> list[Rate]:
    out = []
    for item in units.parse_list(text, "--rates", example="200,400 or 50%,100%"):
        if item.endswith("%"):
            pct = units.parse_percent(item, "--rates", maximum=10_000)
            if pct <= 0:
                raise UserError(f"--rates {item!r}: a percentage above 0, e.g. 80%")
            out.append(Rate(pct / 100.0, True))
            continue
        try:
            value = float(item)
        except ValueError:
            value = float("nan")
        if not (0 < value <= MAX_RATE):
            raise UserError(
                f"--rates {item!r}: use handshakes per second (0 < rate <= {MAX_RATE:g}) or "
                "a percentage of the closed-loop saturation such as 80%"
            )
        out.append(Rate(value, False))
    return list(dict.fromkeys(out))


def from_values(values) -> Plan:
    """Validate everything before anything is created."""
    stack = parse_stack(values)
    groups = catalog.resolve_list(units.parse_list(values.groups, "--groups"), "kem")
    server_sigs = catalog.resolve_list(units.parse_list(values.server_sig, "--server-sig"), "sig")
    ca_sigs = None
    if str(values.ca_sig).strip().lower() != "same":
        ca_sigs = catalog.resolve_list(units.parse_list(values.ca_sig, "--ca-sig"), "sig")
        stacks.require(ca_sigs, stack, "ca", "--ca-sig")
    stacks.require(groups, stack, "group", "--groups")
    stacks.require(server_sigs, stack, "server", "--server-sig")
    if ca_sigs is None:
        stacks.require(server_sigs, stack, "ca", "--server-sig (as its own CA, --ca-sig same)")
        for s in server_sigs:
            stacks.require_chains([s], [s], stack)
    else:
        stacks.require_chains(server_sigs, ca_sigs, stack)
    modes = units.parse_list(values.mode, "--mode", example="closed,open")
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise UserError(f"--mode {values.mode!r}: use closed, open or closed,open")
    rates = parse_rates(values.rates) if "open" in modes else []
    if any(r.relative for r in rates) and "closed" not in modes:
        raise UserError(
            f"--rates {values.rates!r}: percentages are of the closed-loop saturation; add "
            "closed to --mode or give rates in handshakes per second"
        )
    duration = units.parse_seconds(values.duration, "--duration", MAX_DURATION_S)
    if duration < 0.1:
        raise UserError(f"--duration {values.duration!r}: at least 100ms")
    port = units.parse_positive_int(values.port, "--port", maximum=65535)
    client_sigs, client_ca = parse_client_auth(values, stack)
    plan = Plan(
        groups=groups,
        server_sigs=server_sigs,
        ca_sigs=ca_sigs,
        modes=[m for m in MODES if m in modes],
        clients=_ints(values.clients, "--clients", MAX_CLIENTS) if "closed" in modes else [],
        rates=rates,
        open_workers=units.parse_positive_int(
            values.open_workers, "--open-workers", maximum=MAX_CLIENTS
        ),
        server_threads=_ints(values.server_threads, "--server-threads", MAX_THREADS),
        duration_s=duration,
        max_handshakes=units.parse_positive_int(
            values.max_handshakes, "--max-handshakes", maximum=MAX_HANDSHAKES
        ),
        warmup=units.parse_positive_int(values.warmup, "--warmup", minimum=0, maximum=10_000),
        stack=stack,
        port=port,
        pinning=shutil.which("taskset") is not None,
        client_sigs=client_sigs,
        client_ca=client_ca,
    )
    plan.remote = hosts.plan(values, needs_capture=False, what="capacity", apart=APART)
    for pair in plan.pairs if plan.remote is not None else []:
        spec = pair.server
        cpus, taskset = hosts.host_cpus(plan.remote, spec)
        name = spec.name if spec is not None else "this machine"
        plan.server_hosts[pair.label] = ServerHost(name, cpus, taskset)
        for t in plan.server_threads:
            note = plan.cpus(t, pair).note
            if note:
                print(f"capacity: {pair.label}: {note}", file=sys.stderr)
    return plan
