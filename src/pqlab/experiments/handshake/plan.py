"""The handshake experiment's options and plan: the (group, server signature, CA signature)
matrix on one TLS stack, the per-cell sizes, the link, all validated before anything runs."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from pqlab import catalog, cpuquota, units
from pqlab.errors import UserError
from pqlab.experiment import CellId, Cells, Option
from pqlab.net.profiles import load_profiles
from pqlab.net.shaping import check_shaper
from pqlab.options import hosts
from pqlab.options.shaper import shaper_option
from pqlab.options.tls import (
    SAME_AS_SERVER,
    client_auth_options,
    client_cell_option,
    parse_client_auth,
    parse_stack,
    stack_option,
)
from pqlab.tls import stacks

DEFAULT_GROUPS = ["X25519", "ML-KEM-512", "ML-KEM-768", "ML-KEM-1024", "X25519MLKEM768"]
DEFAULT_SIGS = ["RSA-2048", "RSA-3072", "P-256", "ML-DSA-44"]
DEFAULT_PORT = 4433
DEFAULT_INITCWND = 10
CHAIN_STEP = 1000  # default step of a --chain-bytes range
MAX_CHAIN_BYTES = 1 << 20
MESSAGE_SOURCES = ("auto", "callback", "keylog", "both")
MAX_N = 100_000
MAX_WARMUP = 10_000
AUTO_ROUNDS = 10
MAX_ROUNDS = 1000
# Cells whose servers and captures run at once (on ports PORT to PORT+MAX_BATCH-1); a larger
# matrix runs in batches of this many, interleaved within each batch.
MAX_BATCH = 48
# Across hosts each cell keeps two processes on the server host (capture and server), each a
# session of the one SSH connection, and sshd allows 10 sessions per connection by default
# (MaxSessions): four cells at once leave room for file transfers.
REMOTE_BATCH = 4

CELLS = Cells("handshake", ("group", "server_sig", "ca_sig"), tls=True)

OPTIONS = (
    Option(
        "groups",
        "key-exchange groups",
        default=",".join(DEFAULT_GROUPS),
        metavar="LIST",
    ),
    Option(
        "server-sig",
        "server certificate / CertificateVerify signature algorithms",
        default=",".join(DEFAULT_SIGS),
        metavar="LIST",
    ),
    Option(
        "ca-sig",
        "root CA signature algorithms (sign the server certificate); 'same': each server "
        "certificate under a root of its own algorithm",
        default=",".join(DEFAULT_SIGS),
        metavar="LIST",
    ),
    Option(
        "n", f"measured handshakes per cell (1-{MAX_N})", default="1000", metavar="N", short="-n"
    ),
    Option(
        "warmup",
        f"warm-up handshakes per cell, dropped (0-{MAX_WARMUP})",
        default="20",
        metavar="N",
    ),
    Option(
        "rounds",
        "rounds the cells' handshakes run in: each round gives every cell a share of its -n, "
        "the cells in a shuffled order (recorded), so whatever slows the machine for a while "
        f"lands on every cell alike; auto: {AUTO_ROUNDS} with several cells, 1 with one "
        f"(1-{MAX_ROUNDS}, at most -n)",
        default="auto",
        metavar="R",
    ),
    Option(
        "seed",
        "seed of the rounds' shuffled order (default: a random one, recorded in handshake_order)",
        metavar="INT",
    ),
    stack_option(),
    Option(
        "keep-pcap",
        "keep both captures of every cell in RUN/pcap/ with an SSLKEYLOGFILE so Wireshark "
        "shows the handshakes decrypted",
        flag=True,
    ),
    Option(
        "send-root",
        "send the root CA certificate after the server certificate, as the servers of "
        "document 000 did (its table 9 segment counts assume it); default: server "
        "certificate only",
        flag=True,
    ),
    Option(
        "messages",
        "where TLS message boundaries come from: callback (the stack's own message events), "
        "keylog (the captures decrypted with the server's key log; any stack), both (the "
        "callback, with the key log required to agree exactly for every handshake), or "
        "auto (callback when the stack has one, else keylog)",
        default="auto",
        choices=MESSAGE_SOURCES,
    ),
    Option(
        "chain-bytes",
        "DER bytes of the certificates the server sends (the root included with --send-root), "
        "whatever the algorithms: the server certificate is padded with subjectAltName names "
        "to this size; a list (8000,16000) or a range (2000..40000, steps of "
        f"{CHAIN_STEP}; 2000..40000/500) adds one cell per size",
        metavar="SIZES",
    ),
    *client_auth_options(same=True),
    Option("port", "server TCP port inside the lab", default=str(DEFAULT_PORT), metavar="PORT"),
    Option(
        "profile",
        "network profile for the link between the hosts: a preset, key=value pairs or a "
        ".toml file naming one profile (default: the bare link)",
        metavar="PROFILE",
    ),
    shaper_option(),
    *hosts.OPTIONS,
)


@dataclass
class Plan:
    groups: list[catalog.Algorithm]
    server_sigs: list[catalog.Algorithm]
    ca_sigs: list[catalog.Algorithm]
    n: int
    warmup: int
    keep_pcap: bool
    port: int
    profile: object | None  # pqlab.net.profiles.LinkProfile
    shaper: str = "auto"
    stack: stacks.Stack = field(default_factory=stacks.get)
    send_root: bool = False
    messages: str = "callback"  # resolved: callback | keylog | both
    initcwnd: int = DEFAULT_INITCWND
    congestion_control: str = "cubic"
    rtt_s: float = 0.0  # configured round trip of the link (0: the bare link)
    cpus: tuple[int, int] | None = field(default_factory=cpuquota.pick_cpu_pair)
    remote: object | None = None  # pqlab.net.remote.RemotePlan: the host pairs
    rounds: int | None = None  # None: auto (AUTO_ROUNDS with several cells, else 1)
    seed: int = field(default_factory=lambda: random.SystemRandom().randrange(2**31))
    chain_bytes: list[int] | None = None  # None: the algorithms' own chains
    # mutual TLS: client signers (None: no client certificate; SAME_AS_SERVER: the cell's
    # server algorithm) and the client certificates' CA algorithm (None: the cell's CA's)
    client_sigs: list = field(default_factory=lambda: [None])
    client_ca: object | None = None
    ca_same: bool = False  # --ca-sig same: each server certificate under its own algorithm

    def rounds_for(self, cells: int) -> int:
        """Rounds of a batch of `cells` cells: never more than -n (every round measures)."""
        rounds = self.rounds if self.rounds is not None else (AUTO_ROUNDS if cells > 1 else 1)
        return max(1, min(rounds, self.n))

    def round_sizes(self, rounds: int) -> list[tuple[int, int]]:
        """(warm-up, measured) handshakes of each round: -n split evenly; the first round
        warms up with --warmup, later ones (a new client process, the server already warm)
        with --warmup / rounds, at least one when --warmup is not 0."""
        later = 0 if self.warmup == 0 else max(1, -(-self.warmup // rounds))
        return [
            (self.warmup if r == 0 else later, self.n // rounds + (r < self.n % rounds))
            for r in range(rounds)
        ]

    def batches(self, cells: list) -> list[list]:
        """The cells in batches run side by side."""
        size = MAX_BATCH if self.remote is None else REMOTE_BATCH
        return [cells[i : i + size] for i in range(0, len(cells), size)]

    def cells(self):
        """(group, server signature, CA signature, chain bytes or None, client signature or
        None) of every cell."""
        for g in self.groups:
            for s in self.server_sigs:
                for c in [s] if self.ca_same else self.ca_sigs:
                    for size in self.chain_bytes or [None]:
                        for cl in self.client_sigs:
                            yield g, s, c, size, (s if cl == SAME_AS_SERVER else cl)

    @property
    def pairs(self) -> list:
        """The host pairs the cells run on (None: this machine's namespaces)."""
        return list(self.remote.pairs) if self.remote is not None else [None]

    def cell_id(
        self, group, server_sig, ca_sig, chain_bytes=None, client=None, pair=None
    ) -> CellId:
        # Several pairs: each cell once per pair (one pair: the cell ids of one machine).
        several = pair is not None and len(self.pairs) > 1
        options = ("root",) if self.send_root else ()
        options += (f"chain{chain_bytes}",) if chain_bytes is not None else ()
        options += client_cell_option(client, self.client_ca)
        return CELLS.id(
            group,
            server_sig,
            ca_sig,
            stack=self.stack.name,
            options=options,
            pair=pair.label if several else None,
        )

    @property
    def needs_keylog(self) -> bool:
        return self.messages in ("keylog", "both")

    @property
    def profile_name(self) -> str | None:
        return getattr(self.profile, "name", None)


def _names(text, option: str) -> list[str]:
    return units.parse_list(text, option, example="X25519,X25519MLKEM768")


def _message_source(choice: str, stack) -> str:
    if choice not in MESSAGE_SOURCES:
        raise UserError(f"--messages {choice!r}: use {', '.join(MESSAGE_SOURCES)}")
    has_callback = stack.message_events
    if choice == "auto":
        return "callback" if has_callback else "keylog"
    if choice in ("callback", "both") and not has_callback:
        raise UserError(
            f"--messages {choice}: the {stack.name} stack reports no message events; use "
            "--messages keylog"
        )
    return choice


def _chain_bytes(values, stack, pairs) -> list[int] | None:
    """The --chain-bytes sizes, each one every (server, CA) chain can be padded to."""
    if values.chain_bytes is None:
        return None
    sizes = units.parse_size_points(
        values.chain_bytes, "--chain-bytes", CHAIN_STEP, maximum=MAX_CHAIN_BYTES
    )
    stacks.require_padded_chains(sizes, stack, bool(values.send_root), pairs)
    return sizes


def _cas(values, stack, server_sigs) -> tuple[list, bool, list[tuple]]:
    """(CA algorithms, whether 'same', the (server, CA) pairs of the cells), checked."""
    same = str(values.ca_sig or "").strip().lower() == "same"
    cas = server_sigs if same else catalog.resolve_list(_names(values.ca_sig, "--ca-sig"), "sig")
    stacks.require(cas, stack, "ca", "--ca-sig" + (" same" if same else ""))
    pairs = [(s, s) for s in server_sigs] if same else [(s, c) for s in server_sigs for c in cas]
    for s, c in pairs:
        stacks.require_chains([s], [c], stack, bool(values.send_root))
    return cas, same, pairs


def from_values(values) -> Plan:
    """Validate everything the user gave before anything is created."""
    stack = parse_stack(values)
    groups = catalog.resolve_list(_names(values.groups, "--groups"), "kem")
    server_sigs = catalog.resolve_list(_names(values.server_sig, "--server-sig"), "sig")
    stacks.require(groups, stack, "group", "--groups")
    stacks.require(server_sigs, stack, "server", "--server-sig")
    ca_sigs, ca_same, pairs = _cas(values, stack, server_sigs)
    n = units.parse_positive_int(values.n, "-n")
    warmup = units.parse_positive_int(values.warmup, "--warmup", minimum=0)
    if n > MAX_N:
        raise UserError(f"-n {values.n!r}: at most {MAX_N} handshakes per cell")
    if warmup > MAX_WARMUP:
        raise UserError(f"--warmup {values.warmup!r}: at most {MAX_WARMUP} per cell")
    port = units.parse_positive_int(values.port, "--port")
    if port > 65535:
        raise UserError(f"--port {port} is not a TCP port; use 1-65535")
    chain_bytes = _chain_bytes(values, stack, pairs)
    client_sigs, client_ca = parse_client_auth(values, stack, server_sigs)
    cells = len(groups) * len(pairs) * len(chain_bytes or [None]) * len(client_sigs)
    last = port + min(cells, MAX_BATCH) - 1
    if last > 65535:
        raise UserError(
            f"--port {port}: the {cells} cells run side by side on ports {port} to {last}; "
            f"use a port at most {65536 - min(cells, MAX_BATCH)}"
        )
    rounds = None
    if (values.rounds or "auto") != "auto":
        try:
            rounds = units.parse_positive_int(values.rounds, "--rounds", maximum=MAX_ROUNDS)
        except UserError:
            raise UserError(
                f"--rounds {units.show(values.rounds)}: use auto or a whole number from 1 to "
                f"{MAX_ROUNDS}"
            ) from None
    plan = Plan(
        groups=groups,
        server_sigs=server_sigs,
        ca_sigs=ca_sigs,
        n=n,
        warmup=warmup,
        keep_pcap=bool(values.keep_pcap),
        port=port,
        profile=None,
        shaper=values.shaper or "auto",
        stack=stack,
        send_root=bool(values.send_root),
        messages=_message_source(values.messages or "auto", stack),
        rounds=rounds,
    )
    if values.seed is not None:
        plan.seed = units.parse_positive_int(values.seed, "--seed", minimum=0, maximum=2**31 - 1)
    plan.chain_bytes = chain_bytes
    plan.client_sigs, plan.client_ca = client_sigs, client_ca
    plan.ca_same = ca_same

    check_shaper(plan.shaper)
    if values.profile:
        loaded = load_profiles([values.profile])
        if len(loaded) != 1:
            raise UserError(
                f"--profile {values.profile!r} names {len(loaded)} profiles; handshake takes "
                "exactly one"
            )
        lp = loaded[0]
        plan.profile = lp
        plan.initcwnd = lp.initcwnd or DEFAULT_INITCWND
        plan.congestion_control = lp.congestion_control
        plan.rtt_s = lp.rtt_s
    hosts.refuse_profile_values(values, "handshake")
    plan.remote = hosts.plan(values, needs_capture=True, what="handshake")
    if plan.remote is not None:
        plan.cpus = None  # client and server are on different machines already
    return plan
