"""The memory experiment's options and their validation: stacks, groups, signers, client
certificates, counts and the certificates directory.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from pqlab import catalog, files, units
from pqlab.catalog import Algorithm
from pqlab.experiment import CellId, Cells, Option
from pqlab.experiments.memory import tracker as memory_tracker
from pqlab.options import hosts as remote_hosts
from pqlab.options.tls import parse_stacks, stack_option
from pqlab.tls import stacks

NAME = "memory"


CELLS = Cells(NAME, ("group", "server_sig", "ca_sig", "client_sig"), tls=True)


DEFAULT_GROUPS = "X25519,X25519MLKEM768"


DEFAULT_SIGS = "ECDSA-P256,ML-DSA-44"


MAX_N = 10_000


MAX_WARMUP = 100


MAX_IDLE = 1024


NONE = "none"


@dataclass
class Plan:
    groups: list[Algorithm]
    server_sigs: list[Algorithm]
    ca_sigs: list[Algorithm]
    client_sigs: list[Algorithm | None]  # None: no client certificate
    n: int
    warmup: int
    idle: int  # connections held for the idle measurement; 0: none
    stacks: tuple[stacks.Stack, ...] = field(default_factory=lambda: (stacks.get(),))
    certs: Path | None = None  # certificates reused across runs (default_certs_dir())
    fixed_random: bool = True  # the engine's --fixed-random, on stacks that can
    library_tracker: bool = True  # also run the library's own tracker where it has one
    remote: object | None = None  # pqlab.net.remote.RemotePlan: the host pairs

    @property
    def pairs(self) -> list:
        """The host pairs the cells run on (None: this machine, both roles in one process)."""
        return list(self.remote.pairs) if self.remote is not None else [None]

    def tracker(self, stack) -> bool:
        """Whether cells on `stack` also run the library's own memory tracker: on one
        machine only (its example programs are this machine's, run over its loopback)."""
        return self.library_tracker and self.remote is None and memory_tracker.applies(stack)

    def cells(self):
        for st in self.stacks:
            for g in self.groups:
                for s in self.server_sigs:
                    for c in self.ca_sigs:
                        for cl in self.client_sigs:
                            yield st, g, s, c, cl

    def cell_id(self, st, g, s, c, cl, pair=None) -> CellId:
        # Several pairs: each cell once per pair (one pair: the cell ids of one machine).
        several = pair is not None and len(self.pairs) > 1
        return CELLS.id(g, s, c, cl or NONE, stack=st.name, pair=pair.label if several else None)

    def as_dict(self) -> dict:
        return {
            "groups": [a.name for a in self.groups],
            "server_sigs": [a.name for a in self.server_sigs],
            "ca_sigs": [a.name for a in self.ca_sigs],
            "client_sigs": [a.name if a else NONE for a in self.client_sigs],
            "n": self.n,
            "warmup": self.warmup,
            "idle": self.idle,
            "stacks": [st.name for st in self.stacks],
            "certs": str(self.certs) if self.certs else None,
            "fixed_random": self.fixed_random,
            "library_tracker": self.library_tracker and self.remote is None,
        }


def _client_sigs(text: str, chosen) -> list[Algorithm | None]:
    names = units.parse_list(text, "--client-sig", example="none,ECDSA-P256")
    out: list[Algorithm | None] = []
    for name in names:
        if name.lower() == NONE:
            out.append(None)
            continue
        alg = catalog.resolve(name, "sig")
        for stack in chosen:
            stacks.require([alg], stack, "client", "--client-sig")
        out.append(alg)
    return out


def from_values(values) -> Plan:
    """Every check before anything is created (every cell on every stack)."""
    chosen = parse_stacks(values)
    groups = catalog.resolve_list(units.parse_list(values.groups, "--groups"), "kem")
    server_sigs = catalog.resolve_list(units.parse_list(values.server_sig, "--server-sig"), "sig")
    ca_sigs = catalog.resolve_list(units.parse_list(values.ca_sig, "--ca-sig"), "sig")
    for stack in chosen:
        stacks.require(groups, stack, "group", "--groups")
        stacks.require(server_sigs, stack, "server", "--server-sig")
        stacks.require(ca_sigs, stack, "ca", "--ca-sig")
        stacks.require_chains(server_sigs, ca_sigs, stack)
    plan = Plan(
        groups=groups,
        server_sigs=server_sigs,
        ca_sigs=ca_sigs,
        client_sigs=_client_sigs(values.client_sig or NONE, chosen),
        n=units.parse_positive_int(values.n, "-n", maximum=MAX_N),
        warmup=units.parse_positive_int(values.warmup, "--warmup", minimum=1, maximum=MAX_WARMUP),
        idle=units.parse_positive_int(values.idle, "--idle", minimum=0, maximum=MAX_IDLE),
        stacks=tuple(chosen),
        certs=_certs_dir(values.certs),
        fixed_random=not values.system_random,
        library_tracker=not values.no_library_tracker,
    )
    plan.remote = remote_hosts.plan(values, needs_capture=False, what="memory")
    tracked = [st.name for st in chosen if memory_tracker.applies(st)]
    if plan.remote is not None and plan.library_tracker and tracked:
        print(
            f"memory: across hosts the {', '.join(tracked)} library's own memory tracker is "
            "not run (its example programs run on this machine only); run without host "
            "options for it",
            file=sys.stderr,
        )
    return plan


def default_certs_dir() -> Path:
    """Where `pqlab memory` keeps its chains between runs when --certs is not given: the
    user's cache ($XDG_CACHE_HOME/pqlab/memory-certs). The same keys in every run are what
    make an ML-DSA signer's allocation counts repeat (its rejection-sampling loop depends on
    the key and the signed transcript); the keys are throwaway test keys, 0600 in 0700
    directories, trusted by nothing else."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "pqlab" / "memory-certs"


def _certs_dir(text: str | None) -> Path:
    """Where the chains are kept: a directory pqlab may write (checked now, before the run
    directory exists: a read-only one is refused here, not after the first cell)."""
    path = Path(text).expanduser() if text else default_certs_dir()
    return files.check_writable(path, "--certs").resolve()


OPTIONS = (
    Option("groups", "key-exchange groups", default=DEFAULT_GROUPS, metavar="LIST"),
    Option("server-sig", "server signature algorithms", default=DEFAULT_SIGS, metavar="LIST"),
    Option("ca-sig", "CA signature algorithms", default="ECDSA-P256", metavar="LIST"),
    Option(
        "client-sig",
        "client certificate algorithms for mutual TLS; 'none' = no client certificate",
        default=NONE,
        metavar="LIST",
    ),
    Option("n", f"measured handshakes per cell (1-{MAX_N})", default="20", short="-n"),
    Option(
        "warmup",
        f"handshakes per cell before the measured ones, dropped (1-{MAX_WARMUP})",
        default="2",
    ),
    Option(
        "idle",
        f"idle connections the server holds per cell, for the per-connection slope "
        f"(0-{MAX_IDLE}; 0: skip)",
        default="32",
    ),
    Option(
        "certs",
        "directory for the certificate chains, reused when they are there (the same keys "
        "make ML-DSA signing, and its allocations, repeat exactly across runs); "
        "default: $XDG_CACHE_HOME/pqlab/memory-certs (~/.cache/pqlab/memory-certs)",
        metavar="DIR",
    ),
    Option(
        "system-random",
        "use OpenSSL's normal DRBG instead of the fixed-seed generator (allocation counts "
        "of randomised signing then vary between handshakes; stacks whose randomness "
        "cannot be fixed always use their own)",
        flag=True,
    ),
    Option(
        "no-library-tracker",
        "do not also run the TLS library's own memory tracker (wolfSSL's example server "
        "and client with mem_track.h) for the cells of stacks that have one",
        flag=True,
    ),
    stack_option(several=True),
    *remote_hosts.OPTIONS,
)
