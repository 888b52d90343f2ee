"""`pqlab handshake`: TLS 1.3 handshakes over a matrix of key-exchange groups, server
signature algorithms and CA signature algorithms, captured on both hosts and broken down
message by message (document 000, section 4-3). Needs CAP_NET_ADMIN (network namespaces).
"""

from __future__ import annotations

from pqlab import units
from pqlab.errors import UserError
from pqlab.experiments import handshake as hs
from pqlab.runner import add_run_options, run_experiment


def register(sub) -> None:
    p = sub.add_parser(
        "handshake",
        help="TLS 1.3 handshakes, per-message phases from captures",
        description=__doc__,
    )
    p.add_argument(
        "--groups",
        metavar="LIST",
        default=",".join(hs.DEFAULT_GROUPS),
        help="key-exchange groups (default: %(default)s)",
    )
    p.add_argument(
        "--server-sig",
        metavar="LIST",
        default=",".join(hs.DEFAULT_SIGS),
        help="server certificate signature algorithms (default: %(default)s)",
    )
    p.add_argument(
        "--ca-sig",
        metavar="LIST",
        default=",".join(hs.DEFAULT_SIGS),
        help="root CA signature algorithms (default: %(default)s)",
    )
    p.add_argument(
        "-n",
        metavar="N",
        default="1000",
        help="measured handshakes per cell (default: %(default)s)",
    )
    p.add_argument(
        "--warmup",
        metavar="N",
        default="20",
        help="warm-up handshakes per cell, dropped (default: %(default)s)",
    )
    p.add_argument(
        "--keep-pcap",
        action="store_true",
        help="keep both captures of every cell in RUN/pcap/ with an SSLKEYLOGFILE "
        "so Wireshark shows the handshakes decrypted",
    )
    p.add_argument(
        "--send-root",
        action="store_true",
        help="send the root CA certificate after the server certificate, as the servers of "
        "document 000 did (its table 9 segment counts assume it); default: server "
        "certificate only",
    )
    p.add_argument(
        "--port",
        metavar="PORT",
        default=str(hs.DEFAULT_PORT),
        help="server TCP port inside the lab (default: %(default)s)",
    )
    p.add_argument(
        "--profile",
        metavar="NAME",
        help="network profile for the link between the hosts (default: the bare link)",
    )
    add_run_options(p)
    p.set_defaults(func=run)


def plan_from_args(args) -> hs.Plan:
    """Validate everything the user gave before anything is created."""
    groups = units.split_list(args.groups)
    ssigs = units.split_list(args.server_sig)
    cas = units.split_list(args.ca_sig)
    for opt, lst in (("--groups", groups), ("--server-sig", ssigs), ("--ca-sig", cas)):
        if not lst:
            raise UserError(f"{opt} is empty; give a comma-separated list of names")
    g, s, c = hs.resolve_matrix(groups, ssigs, cas)
    n = units.parse_positive_int(args.n, "-n")
    warmup = units.parse_positive_int(args.warmup, "--warmup", minimum=0)
    port = units.parse_positive_int(args.port, "--port")
    if port > 65535:
        raise UserError(f"--port {port} is not a TCP port; use 1-65535")
    plan = hs.Plan(
        groups=g,
        server_sigs=s,
        ca_sigs=c,
        n=n,
        warmup=warmup,
        keep_pcap=args.keep_pcap,
        port=port,
        profile=args.profile,
        send_root=args.send_root,
    )
    hs.check_profile(plan)
    return plan


def run(args) -> int:
    plan = plan_from_args(args)
    from pqlab.net import privileges

    privileges.require_net_admin()
    cells = len(plan.groups) * len(plan.server_sigs) * len(plan.ca_sigs)
    run_experiment(
        "handshake",
        args,
        lambda store: hs.body(plan, store),
        extra_meta={
            "handshake": {
                "cells": cells,
                "n": plan.n,
                "warmup": plan.warmup,
                "initcwnd": plan.initcwnd,
                "congestion_control": plan.congestion_control,
                "profile": plan.profile,
                "keep_pcap": plan.keep_pcap,
                "send_root": plan.send_root,
                "cpus": {"server": plan.cpus[0], "client": plan.cpus[1]} if plan.cpus else None,
            }
        },
    )
    return 0
