"""The capacity experiment's options and plan: the (group, server signature, CA signature,
server threads) cells, the closed-loop client counts and open-loop rates, the bounds, and
the CPUs the server and the load generator are pinned to; all validated before anything
runs."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

from pqlab import catalog, units
from pqlab.errors import UserError
from pqlab.experiment import CellId, Cells, Option, parse_stack, stack_option
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
    stack_option(),
    Option("port", "server TCP port inside the lab", default=str(DEFAULT_PORT), metavar="PORT"),
)


@dataclass(frozen=True)
class Rate:
    """An open-loop rate: absolute (per second) or relative to the cell's saturation."""

    value: float
    relative: bool  # value is a fraction of the highest closed-loop rate

    @property
    def label(self) -> str:
        return f"{self.value * 100:g}%" if self.relative else f"{self.value:g}/s"


def pick_cpus(threads: int) -> tuple[list[int], list[int]]:
    """(server CPUs, load-generator CPUs): disjoint halves of this process's CPUs, the server
    getting the higher ones (at least one, at most `threads`). With one CPU both share it."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return cpus, cpus
    n = max(1, min(threads, len(cpus) // 2))
    return cpus[-n:], cpus[:-n]


def cpu_list(cpus: list[int]) -> str:
    return ",".join(str(c) for c in cpus)


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
    stack: str
    port: int
    pinning: bool = True  # taskset available

    def cells(self):
        for g in self.groups:
            for s in self.server_sigs:
                for c in self.ca_sigs or [s]:
                    for t in self.server_threads:
                        yield g, s, c, t

    def cell_id(self, group, server_sig, ca_sig, threads: int) -> CellId:
        return CELLS.id(group, server_sig, ca_sig, f"t{threads}", stack=self.stack)

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
    return Plan(
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
        stack=stack.name,
        port=port,
        pinning=shutil.which("taskset") is not None,
    )
