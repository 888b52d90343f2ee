"""The throughput experiment's options and their validation: stacks, groups, cipher suites,
bytes each way.
"""

from __future__ import annotations

from pqlab import catalog, units
from pqlab.errors import UserError
from pqlab.experiment import CellId, Cells, Option
from pqlab.options.tls import (
    client_auth_options,
    client_cell_option,
    parse_client_auth,
    parse_stacks,
    stack_option,
)
from pqlab.tls import stacks

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
            stack=stack.name,
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
        tuple(chosen),
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
