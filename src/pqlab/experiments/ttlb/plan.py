"""The ttlb experiment's options and plan: link profiles x groups x chains x response sizes
on one TLS stack, all validated before anything runs."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from pqlab import catalog, units
from pqlab.errors import UserError
from pqlab.experiment import CellId, Cells, Option
from pqlab.net import profiles
from pqlab.net.profiles import load_profiles
from pqlab.net.remote import network_profile
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

DEFAULT_PROFILE = "1mbps-200ms"
DEFAULT_GROUPS = ["X25519", "X25519MLKEM768"]
DEFAULT_CHAINS = ["RSA-2048", "ML-DSA-44"]
DEFAULT_SIZES = ["0", "1KiB", "10KiB", "50KiB", "100KiB", "200KiB"]
MAX_SIZE = 1 << 30
MAX_N = 100_000
MAX_WARMUP = 1000
CHAIN_STEP = 1000  # default step of a --chain-bytes range
MAX_CHAIN_BYTES = 1 << 20


def _profile_help() -> str:

    return (
        "link profile: a preset ("
        + ", ".join(profiles.preset_names())
        + "), key=value pairs (rtt=50ms,rate=1mbit,loss=1%,jitter=8.75ms,"
        "dist=paretonormal,limit=1000,initcwnd=10) or a .toml file with profiles "
        f"or a [grid]; repeatable (default: {DEFAULT_PROFILE})"
    )


CELLS = Cells("ttlb", ("profile", "group", "chain", "data_bytes"), tls=True)

OPTIONS = (
    Option("profile", _profile_help(), metavar="PROFILE", repeat=True),
    Option(
        "groups",
        "key-exchange groups; the first is the classical baseline",
        default=",".join(DEFAULT_GROUPS),
        metavar="LIST",
    ),
    Option(
        "chain",
        "certificate chains: root CA and server certificate both of this algorithm, both "
        "sent; the first is the classical baseline",
        default=",".join(DEFAULT_CHAINS),
        metavar="LIST",
    ),
    Option(
        "chain-bytes",
        "DER bytes of the chain the server sends (its certificate and the CA's), whatever "
        "the algorithm: the server certificate is padded with subjectAltName names to this "
        "size (document 003's 8 KB and 16 KB chains: 8000,16000); a list or a range "
        f"(2000..40000, steps of {CHAIN_STEP}) adds one cell per size and --chain algorithm",
        metavar="SIZES",
    ),
    Option(
        "sizes",
        "bytes the server sends after the handshake",
        default=",".join(DEFAULT_SIZES),
        metavar="LIST",
    ),
    Option(
        "n",
        f"measured connections per cell (1-{MAX_N})",
        default="20",
        metavar="N",
        short="-n",
        aliases=("--connections",),
    ),
    Option(
        "warmup",
        f"unrecorded connections before each cell (0-{MAX_WARMUP})",
        default="1",
        metavar="N",
    ),
    Option(
        "warmup-bytes",
        "bytes each warm-up connection fetches (a size, e.g. 0; default: the cell's size)",
        metavar="SIZE",
    ),
    *client_auth_options(same=True),
    stack_option(),
    shaper_option("link emulator"),
    *hosts.OPTIONS,
)


@dataclass
class Plan:
    profiles: list  # pqlab.net.profiles.LinkProfile
    groups: list[catalog.Algorithm]
    chains: list[catalog.Algorithm]
    sizes: list[int]
    n: int
    warmup: int
    shaper: str
    warmup_bytes: int | None = None  # None: each warm-up fetches its cell's size
    stack: stacks.Stack = field(default_factory=stacks.get)
    remote: object | None = None  # pqlab.net.remote.RemotePlan: one "profile" per pair
    chain_bytes: list[int] | None = None  # None: the algorithms' own chains
    # mutual TLS: client signers (None: no client certificate; SAME_AS_SERVER: the chain's
    # algorithm) and their CA's algorithm (None: the chain's)
    client_sigs: list = field(default_factory=lambda: [None])
    client_ca: object | None = None

    def clients_of(self, chain) -> list:
        """The client signers of a chain's cells (None: no client certificate)."""
        return [chain if c == SAME_AS_SERVER else c for c in self.client_sigs]

    def chain_points(self) -> list[int | None]:
        return list(self.chain_bytes) if self.chain_bytes else [None]

    @property
    def cells(self) -> int:
        chains = len(self.chains) * len(self.chain_points()) * len(self.client_sigs)
        return len(self.profiles) * len(self.groups) * chains * len(self.sizes)

    def cell_id(
        self, profile, group, chain, size: int, chain_bytes: int | None = None, client=None
    ) -> CellId:
        options = (f"chain{chain_bytes}",) if chain_bytes is not None else ()
        options += client_cell_option(client, self.client_ca)
        return CELLS.id(profile, group, chain, size, stack=self.stack.name, options=options)


def from_values(values) -> Plan:

    stack = parse_stack(values)
    hosts.refuse_profile_values(values, "ttlb")
    profiles = [] if hosts.is_remote(values) else load_profiles(values.profile or [DEFAULT_PROFILE])
    group_names = units.parse_list(values.groups, "--groups", example="X25519,X25519MLKEM768")
    chain_names = units.parse_list(values.chain, "--chain", example="RSA-2048,ML-DSA-44")
    groups = catalog.resolve_list(group_names, "kem")
    chains = catalog.resolve_list(chain_names, "sig")
    stacks.require(groups, stack, "group", "--groups")
    stacks.require(chains, stack, "server", "--chain")
    sizes = []
    for s in units.parse_list(values.sizes, "--sizes", example="0,10KiB,200KiB"):
        v = units.parse_size(s, "--sizes entry")
        if v > MAX_SIZE:
            raise UserError(f"--sizes entry {s!r} is above 1 GiB")
        sizes.append(v)
    if not sizes:
        raise UserError("--sizes needs at least one size, e.g. 0,200KiB")
    n = units.parse_positive_int(values.n, "-n")
    if n > MAX_N:
        raise UserError(f"-n {values.n!r}: at most {MAX_N} connections per cell")
    warmup = units.parse_positive_int(values.warmup, "--warmup", minimum=0)
    if warmup > MAX_WARMUP:
        raise UserError(f"--warmup {values.warmup!r}: at most {MAX_WARMUP}")
    warmup_bytes = None
    if values.warmup_bytes is not None:
        warmup_bytes = units.parse_size(values.warmup_bytes, "--warmup-bytes")
        if warmup_bytes > MAX_SIZE:
            raise UserError(f"--warmup-bytes {values.warmup_bytes!r} is above 1 GiB")
    chain_bytes = None
    if values.chain_bytes is not None:
        chain_bytes = units.parse_size_points(
            values.chain_bytes, "--chain-bytes", CHAIN_STEP, maximum=MAX_CHAIN_BYTES
        )
        stacks.require_padded_chains(chain_bytes, stack, True, [(c, c) for c in chains])
    client_sigs, client_ca = parse_client_auth(values, stack, chains)
    check_shaper(values.shaper or "auto")
    for p in profiles:
        for text in p.warnings():
            print(f"warning: {text}", file=sys.stderr)
    remote = hosts.plan(values, needs_capture=False, what="ttlb")
    if remote is not None:
        profiles = [network_profile(pair) for pair in remote.pairs]
    plan = Plan(
        profiles=profiles,
        groups=groups,
        chains=chains,
        sizes=sorted(set(sizes)),
        n=n,
        warmup=warmup,
        warmup_bytes=warmup_bytes,
        shaper=values.shaper or "auto",
        stack=stack,
        remote=remote,
        chain_bytes=chain_bytes,
    )
    plan.client_sigs, plan.client_ca = client_sigs, client_ca
    return plan
