"""The options every TLS experiment shares: the stack (`--stack`) and mutual TLS
(`--client-sig`, `--client-ca-sig`), their validation against the stack, and the cell-id
part a client certificate adds."""

from __future__ import annotations

import argparse

from pqlab import catalog, units
from pqlab.errors import UserError
from pqlab.experiment import Option
from pqlab.tls import stacks


def stack_option(several: bool = False) -> Option:
    """The `--stack` option every TLS experiment shares (one stack, or a list with
    `several`)."""
    what = "TLS stacks, comma separated" if several else "TLS stack"
    return Option(
        "stack",
        f"{what} (the names `pqlab algorithms --tls` lists)",
        default=stacks.DEFAULT_STACK,
        metavar="LIST" if several else "NAME",
    )


def parse_stack(values: argparse.Namespace) -> stacks.Stack:
    """The one stack of `--stack` (checked against this engine build)."""
    chosen = stacks.parse_stacks(getattr(values, "stack", None))
    if len(chosen) != 1:
        raise UserError(
            f"--stack {values.stack!r}: this experiment runs one stack at a time; give one name"
        )
    return chosen[0]


def parse_stacks(values: argparse.Namespace) -> list[stacks.Stack]:
    """The stacks of `--stack A,B` (each checked against this engine build)."""
    return stacks.parse_stacks(getattr(values, "stack", None))


NO_CLIENT = "none"  # --client-sig value: no client certificate


def client_auth_options(same: bool = False) -> tuple[Option, Option]:
    """`--client-sig` and `--client-ca-sig`: mutual TLS on a TLS experiment (with `same`, a
    client certificate of each cell's server algorithm can be asked for)."""
    also = "; 'same' for a client certificate of each cell's server algorithm" if same else ""
    return (
        Option(
            "client-sig",
            "mutual TLS: client certificate / CertificateVerify algorithms, comma separated; "
            f"'{NO_CLIENT}' for no client certificate (default: {NO_CLIENT}){also}",
            metavar="LIST",
        ),
        Option(
            "client-ca-sig",
            "mutual TLS: algorithm of the CA that signs the client certificates (default: "
            "the server chain's CA algorithm)",
            metavar="ALG",
        ),
    )


SAME_AS_SERVER = "same"  # --client-sig value: a client certificate of the cell's server's algorithm


def parse_client_auth(values: argparse.Namespace, stack, server_sigs=None) -> tuple[list, object]:
    """(client signers, client CA or None) of `--client-sig` / `--client-ca-sig`, each checked
    against the stack; a signer is None for "no client certificate". With `server_sigs`,
    `same` is accepted too (a client certificate of each cell's server algorithm, checked
    for every one of them) and stays `SAME_AS_SERVER` in the list."""
    text = getattr(values, "client_sig", None) or NO_CLIENT
    sigs: list = []
    for name in units.parse_list(text, "--client-sig", example=f"{NO_CLIENT},ML-DSA-44"):
        if name.lower() == NO_CLIENT:
            sigs.append(None)
            continue
        if name.lower() == SAME_AS_SERVER and server_sigs is not None:
            stacks.require(server_sigs, stack, "client", "--client-sig same")
            sigs.append(SAME_AS_SERVER)
            continue
        alg = catalog.resolve(name, "sig")
        stacks.require([alg], stack, "client", "--client-sig")
        sigs.append(alg)
    ca = None
    if getattr(values, "client_ca_sig", None):
        if all(s is None for s in sigs):
            raise UserError("--client-ca-sig signs client certificates: give --client-sig too")
        ca = catalog.resolve(values.client_ca_sig, "sig")
        stacks.require([ca], stack, "ca", "--client-ca-sig")
    unique: dict = {}  # by name, first of each in order (algorithms do not hash)
    for s in sigs:
        unique.setdefault(getattr(s, "name", s), s)
    return list(unique.values()), ca


def client_cell_option(client_sig, client_ca=None) -> tuple[str, ...]:
    """The cell-id option of a mutually authenticated cell (`+client-ML-DSA-44`, with
    `-ca-ALG` when the client certificates have a CA of their own); () without a client
    certificate, so the ids of cells without one are what they always were."""
    if client_sig is None:
        return ()
    return (f"client-{client_sig.name}" + (f"-ca-{client_ca.name}" if client_ca else ""),)
