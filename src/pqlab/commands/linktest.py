"""`pqlab linktest`: check that an emulated link does what its profile says (RTT seen by TCP,
transfer time at the configured rate, loss, one-way delay distribution)."""

from __future__ import annotations

import sys

from pqlab.errors import EngineError
from pqlab.units import parse_positive_int


def register(sub) -> None:
    from pqlab.net import profiles
    from pqlab.net.shaping import SHAPERS
    from pqlab.runner import add_run_options

    p = sub.add_parser(
        "linktest", help="physics checks of an emulated link profile", description=__doc__
    )
    p.add_argument(
        "--profile",
        action="append",
        metavar="PROFILE",
        required=True,
        help="link profile: a preset ("
        + ", ".join(profiles.preset_names())
        + "), key=value pairs or a .toml file; repeatable",
    )
    p.add_argument(
        "--shaper",
        default="auto",
        choices=SHAPERS,
        help="netem, userspace or auto (netem when available; default)",
    )
    p.add_argument(
        "--probes",
        default="1000",
        metavar="N",
        help="UDP probes per direction for loss and delay (default: %(default)s)",
    )
    p.add_argument(
        "--connects",
        default="20",
        metavar="N",
        help="TCP connects for the RTT check (default: %(default)s)",
    )
    p.add_argument(
        "--rate-seconds",
        default=2.0,
        type=float,
        metavar="S",
        help="length of the bulk transfer for the rate check (default: %(default)s)",
    )
    add_run_options(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from pqlab.experiments import linktest
    from pqlab.net import privileges
    from pqlab.net.profiles import load_profiles
    from pqlab.progress import CellProgress
    from pqlab.runner import run_experiment

    profiles = load_profiles(args.profile)
    probes = parse_positive_int(args.probes, "--probes", minimum=20)
    connects = parse_positive_int(args.connects, "--connects", minimum=3)
    for p in profiles:
        for text in p.warnings():
            print(f"warning: {text}", file=sys.stderr)
    ok, why = privileges.can_admin_network()
    if not ok:
        from pqlab.errors import PrivilegeError

        raise PrivilegeError(f"pqlab linktest needs network namespaces: {why}")
    from pqlab.net.shaping import check_shaper

    check_shaper(args.shaper)
    results: list[dict] = []

    def body(store):
        with CellProgress("linktest", len(profiles)) as progress:
            results.extend(
                linktest.measure(
                    store,
                    profiles,
                    args.shaper,
                    progress,
                    connects=connects,
                    udp_count=probes,
                    rate_seconds=args.rate_seconds,
                )
            )

    run_experiment(
        "linktest",
        args,
        body,
        extra_meta={
            "link_profiles": [p.describe() for p in profiles],
            "profile_warnings": [w for p in profiles for w in p.warnings()],
            "shaper_requested": args.shaper,
        },
    )
    failed = [r for r in results if not r["passed"]]
    for r in results:
        mark = "ok  " if r["passed"] else "FAIL"
        print(
            f"{mark} {r['profile']} [{r['shaper']}] {r['check_name']} {r['direction']}: "
            f"measured {r['measured']:.3f} {r['unit']}, expected {r['expected']:.3f} "
            f"(accepted {r['low']:.3f}..{r['high']:.3f})",
            file=sys.stderr,
        )
    if failed:
        raise EngineError(
            f"linktest: {len(failed)} of {len(results)} checks failed; see tables/linktest.csv"
        )
    return 0
