"""`pqlab tls12`: TLS 1.2 handshake time per key exchange (RSA, DHE, ECDHE) and server
certificate (RSA-2048, ECDSA P-256), AES-128-GCM fixed, with the TLS 1.3 counterparts
(FFDHE and the same ECDHE curves), between two network namespaces. Needs root
(CAP_NET_ADMIN). Results: tables/tls12.csv, a figure, a report section.
"""

from __future__ import annotations

from pqlab import runner
from pqlab.errors import UserError
from pqlab.experiments import tls12 as experiment
from pqlab.units import parse_positive_int, split_list


def register(sub) -> None:
    p = sub.add_parser(
        "tls12", help="TLS 1.2 key exchange study (and TLS 1.3 counterparts)", description=__doc__
    )
    p.add_argument(
        "-n",
        default="200",
        help="measured handshakes per (version, kex, cert) cell (default: %(default)s)",
    )
    p.add_argument(
        "--warmup",
        default="3",
        help="unrecorded handshakes before each cell (default: %(default)s)",
    )
    p.add_argument(
        "--versions",
        default="1.2,1.3",
        help="TLS versions: 1.2, 1.3 or 1.2,1.3 (default: %(default)s)",
    )
    p.add_argument(
        "--kex",
        default=None,
        help="key exchanges, comma separated (default: all): RSA, DHE-1024, "
        "DHE-2048, DHE-3072, DHE-4096, ECDHE-P-256, ECDHE-P-384, "
        "ECDHE-P-521, ECDHE-X25519, ECDHE-X448, FFDHE-2048, FFDHE-3072, "
        "FFDHE-4096",
    )
    p.add_argument(
        "--certs",
        default="RSA-2048,ECDSA-P-256",
        help="server certificates: RSA-2048, ECDSA-P-256 (default: both)",
    )
    p.add_argument(
        "--server-cpu",
        default=None,
        metavar="FRACTION",
        help="limit the server to this fraction of one CPU core (cgroup CPU "
        "quota), e.g. 0.25, to see the ranking on weaker hardware",
    )
    p.add_argument(
        "--profile",
        default=None,
        help="link profile (preset or key=value list, see 'pqlab linktest'); "
        "default: an unshaped veth link",
    )
    p.add_argument(
        "--shaper", default="auto", help="link emulator for --profile: auto, netem or userspace"
    )
    runner.add_run_options(p)
    p.set_defaults(func=run)


def parse_args(args) -> experiment.Plan:
    n = parse_positive_int(args.n, "-n")
    if n > 100_000:
        raise UserError(f"-n {args.n!r} is more than 100000 handshakes per cell")
    warmup = parse_positive_int(args.warmup, "--warmup", minimum=0)
    versions = split_list(args.versions)
    if not versions or any(v not in ("1.2", "1.3") for v in versions):
        raise UserError(f"--versions {args.versions!r}: use 1.2, 1.3 or 1.2,1.3")
    kexes = experiment.parse_kexes(args.kex)
    certs = []
    for c in split_list(args.certs):
        match = [k for k in experiment.CERTS if k.lower() == c.lower()]
        if not match:
            raise UserError(
                f"unknown certificate {c!r} in --certs; use " + ", ".join(experiment.CERTS)
            )
        certs.append(match[0])
    if not certs:
        raise UserError("--certs is empty; use RSA-2048, ECDSA-P-256 or both")
    server_cpu = None
    if args.server_cpu is not None:
        from pqlab.cpuquota import parse_fraction

        server_cpu = parse_fraction(args.server_cpu)
    profile = None
    if args.profile:
        try:
            from pqlab.net import profiles
        except ImportError:
            raise UserError(
                "--profile needs link profiles (pqlab.net.profiles), which this "
                "build does not have yet; leave out --profile"
            ) from None
        loaded = profiles.load_profiles([args.profile])
        if len(loaded) != 1:
            raise UserError(
                f"--profile {args.profile!r} names {len(loaded)} profiles; give exactly one"
            )
        profile = loaded[0]
    plan = experiment.Plan(
        versions=list(dict.fromkeys(versions)),
        kexes=kexes,
        certs=list(dict.fromkeys(certs)),
        n=n,
        warmup=warmup,
        server_cpu=server_cpu,
        profile=profile,
        shaper=args.shaper,
    )
    if not plan.cells():
        raise UserError(
            "no cells: the chosen --kex do not exist in the chosen --versions "
            "(RSA and DHE are TLS 1.2 only, FFDHE TLS 1.3 only)"
        )
    return plan


def run(args) -> int:
    plan = parse_args(args)
    from pqlab.net import privileges

    privileges.require_net_admin()  # before the run directory is created
    from pqlab.net.shaping import check_shaper

    check_shaper(args.shaper)
    meta = {
        "tls12_plan": {
            "versions": plan.versions,
            "kex": plan.kexes,
            "certs": plan.certs,
            "n": plan.n,
            "warmup": plan.warmup,
            "server_cpu": plan.server_cpu,
            "profile": getattr(plan.profile, "spec", None) or None,
        }
    }
    runner.run_experiment(
        "tls12", args, lambda store: experiment.measure(store, plan), extra_meta=meta
    )
    return 0
