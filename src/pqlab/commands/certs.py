"""`pqlab certs`: root CA and server certificates for every (CA, server) algorithm pair,
and their DER sizes (tables certs_root and certs_server)."""

from __future__ import annotations

from pqlab import runner, units
from pqlab.experiments import certs
from pqlab.progress import CellProgress


def register(sub) -> None:
    p = sub.add_parser(
        "certs", help="certificate sizes per CA x server signature algorithm", description=__doc__
    )
    p.add_argument(
        "--ca-sig",
        metavar="LIST",
        help="CA signature algorithms, comma separated, or 'all' "
        f"(default: {','.join(certs.DEFAULT_SIGS)})",
    )
    p.add_argument(
        "--server-sig",
        metavar="LIST",
        help="server certificate algorithms, comma separated, or 'all' "
        "(every catalogue signature OpenSSL's TLS stack supports; "
        f"default: {','.join(certs.DEFAULT_SIGS)})",
    )
    runner.add_run_options(p)
    p.set_defaults(func=run)


def run(args) -> int:
    ca_sigs = certs.resolve_sigs(units.split_list(args.ca_sig) if args.ca_sig else None, "ca")
    server_sigs = certs.resolve_sigs(
        units.split_list(args.server_sig) if args.server_sig else None, "server"
    )

    def body(store):
        with CellProgress("certs", len(ca_sigs) * len(server_sigs)) as progress:
            certs.measure(store, ca_sigs, server_sigs, progress)

    runner.run_experiment(certs.EXPERIMENT, args, body)
    return 0
