"""`pqlab ttlb`: time to first byte (handshake) and time to last byte of TLS 1.3 connections
over emulated links, for key-exchange groups x certificate chains x response sizes
(source document 003).
"""

from __future__ import annotations

import sys

from pqlab.errors import UserError
from pqlab.units import parse_positive_int, parse_size, split_list

DEFAULT_PROFILE = "1mbps-200ms"


def register(sub) -> None:
    from pqlab.experiments import ttlb
    from pqlab.net import profiles
    from pqlab.net.shaping import SHAPERS
    from pqlab.runner import add_run_options

    p = sub.add_parser(
        "ttlb",
        help="TTFB and TTLB of TLS 1.3 over emulated links (document 003)",
        description=__doc__,
    )
    p.add_argument(
        "--profile",
        action="append",
        metavar="PROFILE",
        help="link profile: a preset ("
        + ", ".join(profiles.preset_names())
        + "), key=value pairs (rtt=50ms,rate=1mbit,loss=1%%,jitter=8.75ms,"
        "dist=paretonormal,limit=1000,initcwnd=10) or a .toml file with profiles "
        f"or a [grid]; repeatable (default: {DEFAULT_PROFILE})",
    )
    p.add_argument(
        "--groups",
        default=",".join(ttlb.DEFAULT_GROUPS),
        metavar="LIST",
        help="key-exchange groups; the first is the classical baseline (default: %(default)s)",
    )
    p.add_argument(
        "--chain",
        default=",".join(ttlb.DEFAULT_CHAINS),
        metavar="LIST",
        help="certificate chains: root CA and server certificate both of this "
        "algorithm, both sent; the first is the classical baseline "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--sizes",
        default=",".join(ttlb.DEFAULT_SIZES),
        metavar="LIST",
        help="bytes the server sends after the handshake (default: %(default)s)",
    )
    p.add_argument(
        "-n",
        "--connections",
        dest="n",
        default="20",
        metavar="N",
        help="measured connections per cell (default: %(default)s)",
    )
    p.add_argument(
        "--warmup",
        default="1",
        metavar="N",
        help="unrecorded connections before each cell (default: %(default)s)",
    )
    p.add_argument(
        "--shaper",
        default="auto",
        choices=SHAPERS,
        help="netem (kernel qdisc), userspace (pqlab's TUN emulator) or auto "
        "(netem when the kernel has it; default)",
    )
    add_run_options(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from pqlab.experiments import ttlb
    from pqlab.net import privileges
    from pqlab.net.profiles import load_profiles
    from pqlab.progress import CellProgress
    from pqlab.runner import run_experiment

    # Validate everything before creating anything.
    profiles = load_profiles(args.profile or [DEFAULT_PROFILE])
    groups = [g.name for g in ttlb.resolve_groups(split_list(args.groups))]
    chains = [c.name for c in ttlb.resolve_chains(split_list(args.chain))]
    if not groups or not chains:
        raise UserError("--groups and --chain need at least one name each")
    sizes = []
    for s in split_list(args.sizes):
        v = parse_size(s, "--sizes entry")
        if v > 1 << 30:
            raise UserError(f"--sizes entry {s!r} is above 1 GiB")
        sizes.append(v)
    if not sizes:
        raise UserError("--sizes needs at least one size, e.g. 0,200KiB")
    sizes = sorted(set(sizes))
    n = parse_positive_int(args.n, "-n")
    warmup = parse_positive_int(args.warmup, "--warmup", minimum=0)
    for p in profiles:
        for text in p.warnings():
            print(f"warning: {text}", file=sys.stderr)
    ok, why = privileges.can_admin_network()
    if not ok:
        from pqlab.errors import PrivilegeError

        raise PrivilegeError(f"pqlab ttlb needs network namespaces: {why}")
    from pqlab.net.shaping import check_shaper

    check_shaper(args.shaper)
    total = len(profiles) * len(groups) * len(chains) * len(sizes)

    def body(store):
        with CellProgress("ttlb", total) as progress:
            ttlb.measure(
                store,
                profiles,
                groups,
                chains,
                sizes,
                n,
                args.shaper,
                warmup=warmup,
                progress=progress,
            )

    store = run_experiment(
        "ttlb",
        args,
        body,
        extra_meta={
            "ttlb_groups": groups,
            "ttlb_chains": chains,
            "ttlb_sizes": sizes,
            "link_profiles": [p.describe() for p in profiles],
            "profile_warnings": [w for p in profiles for w in p.warnings()],
            "shaper_requested": args.shaper,
        },
    )
    del store
    print("ttlb: tables/ttlb.csv, tables/ttlb_increase.csv", file=sys.stderr)
    return 0
