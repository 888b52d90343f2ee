"""The certs experiment's options and their validation: the CA and server algorithms, checked
against the chosen stack.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pqlab import catalog, units
from pqlab.catalog import Algorithm
from pqlab.experiment import CellId, Cells, Option
from pqlab.options.tls import parse_stack, stack_option
from pqlab.tls import stacks

NAME = "certs"


CELLS = Cells(NAME, ("ca_sig", "server_sig"), tls=True)


DEFAULT_SIGS = ["RSA-2048", "RSA-3072", "ECDSA-P256", "ML-DSA-44"]


def resolve_sigs(text: str | None, role: str, stack, option: str) -> list[Algorithm]:
    """The algorithms of --ca-sig / --server-sig: names (any the certificate builder can
    make keys of, whether or not the stack can serve them), 'all' (every catalogue signature
    the stack can use in that role) or the default set."""
    names = units.parse_list(text, option, example="ML-DSA-44,all") if text else DEFAULT_SIGS
    if [n.lower() for n in names] == ["all"]:
        return [a for a in catalog.all_algorithms("sig") if stack.why_not(a, role) is None]
    algs = catalog.resolve_list(names, "sig")
    stacks.require_certificates(algs, option)
    return algs


@dataclass
class Plan:
    ca_sigs: list[Algorithm]
    server_sigs: list[Algorithm]
    stack: stacks.Stack = field(default_factory=stacks.get)

    def cell_id(self, ca: Algorithm, srv: Algorithm) -> CellId:
        return CELLS.id(ca, srv, stack=self.stack.name)


def from_values(values) -> Plan:
    stack = parse_stack(values)
    return Plan(
        ca_sigs=resolve_sigs(values.ca_sig, "ca", stack, "--ca-sig"),
        server_sigs=resolve_sigs(values.server_sig, "server", stack, "--server-sig"),
        stack=stack,
    )


OPTIONS = (
    Option(
        "ca-sig",
        f"CA signature algorithms, comma separated, or 'all' (default: {','.join(DEFAULT_SIGS)})",
        metavar="LIST",
    ),
    Option(
        "server-sig",
        "server certificate algorithms, comma separated (any the engine can make "
        "certificates of; the table says which the stack can serve), or 'all' (every "
        f"catalogue signature the stack supports in TLS; default: {','.join(DEFAULT_SIGS)})",
        metavar="LIST",
    ),
    stack_option(),
)
