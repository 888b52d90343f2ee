"""`pqlab suite`: the default job. Every experiment of the source documents, sized to finish
in about 20 minutes on a 2-core machine, into one run directory and one report.

Network experiments need CAP_NET_ADMIN; without it they are skipped and the report says so.
`--quick` runs a smaller version of everything (a few minutes); `--full` the documents'
own sizes (1000 handshakes per cell; an hour or more).
"""

from __future__ import annotations

import sys
from pathlib import Path

from pqlab.errors import EngineError, UserError
from pqlab.store import default_out

# Each step: (experiment, argv for quick, argv for default, argv for full). Steps that need
# CAP_NET_ADMIN are marked.
STEPS = [
    # Tables 1-8, 16-17 and figures 1-7 of document 000.
    (
        "primitives",
        False,
        ["--iterations", "100"],
        ["--iterations", "1000"],
        ["--iterations", "1000"],
    ),
    ("sizes", False, [], [], []),
    # Tables 14-15.
    ("certs", False, [], [], []),
    # Document 000 section 4-3: figures 8-18, tables 9-12.
    (
        "handshake",
        True,
        [
            "--groups",
            "X25519,X25519MLKEM768",
            "--server-sig",
            "RSA-2048,ML-DSA-44",
            "--ca-sig",
            "RSA-2048",
            "-n",
            "50",
        ],
        ["-n", "100"],
        ["-n", "1000"],
    ),
    # Document 003: TTFB/TTLB over emulated networks.
    (
        "ttlb",
        True,
        ["--profile", "1mbps-200ms", "--sizes", "0,10KiB,200KiB", "-n", "3"],
        ["--profile", "1gbps-35ms", "--profile", "1mbps-200ms", "-n", "10"],
        [
            "--profile",
            "1gbps-35ms",
            "--profile",
            "1mbps-200ms",
            "--profile",
            "lossy-10pct",
            "--profile",
            "pareto-35ms",
            "-n",
            "100",
        ],
    ),
    # Document 001: AEAD throughput, AES-NI on and off.
    (
        "aead",
        False,
        ["--sizes", "16,1024,16384", "--seconds", "0.2"],
        ["--seconds", "0.5"],
        ["--seconds", "3"],
    ),
    # Document 002: TLS 1.2 key exchanges.
    ("tls12", True, ["-n", "10"], ["-n", "100"], ["-n", "200"]),
]


def register(sub) -> None:
    p = sub.add_parser(
        "suite", help="the default job: every experiment, one report", description=__doc__
    )
    p.add_argument("--out", metavar="DIR", help="run directory (default: results/suite-<time>)")
    p.add_argument("--resume", action="store_true", help="finish an interrupted suite")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="a few minutes: small matrices")
    size.add_argument(
        "--full",
        action="store_true",
        help="the documents' sizes (1000 handshakes per cell): an hour or more",
    )
    p.add_argument(
        "--only",
        metavar="LIST",
        help="comma-separated experiments to run (default: all): " + ",".join(s[0] for s in STEPS),
    )
    p.set_defaults(func=run)


def run(args) -> int:
    from pqlab import cli
    from pqlab.net import privileges

    names = [s[0] for s in STEPS]
    only = [x.strip() for x in (args.only or "").split(",") if x.strip()] or names
    unknown = [x for x in only if x not in names]
    if unknown:
        raise UserError(
            f"--only {','.join(unknown)!r}: unknown experiment; choose from " + ", ".join(names)
        )
    out = Path(args.out) if args.out else default_out("suite")
    can_net, why = privileges.can_admin_network()
    failures = []
    for name, needs_net, quick, default, full in STEPS:
        if name not in only:
            continue
        if needs_net and not can_net:
            print(f"suite: skipping {name}: {why}", file=sys.stderr)
            continue
        argv = [name, *(quick if args.quick else full if args.full else default), "--out", str(out)]
        if args.resume:
            argv.append("--resume")
        print(f"suite: pqlab {' '.join(argv)}", file=sys.stderr)
        code = cli.main(argv)
        if code == 130:
            raise KeyboardInterrupt
        if code != 0:
            failures.append((name, code))
    if out.exists():
        from pqlab.report import export_all
        from pqlab.store import RunStore

        store = RunStore.open(out)
        try:
            export_all(store, html=True)
        finally:
            store.close()
    if failures:
        raise EngineError(
            "suite: "
            + ", ".join(f"{n} exited {c}" for n, c in failures)
            + f"; finished experiments are in {out}"
        )
    print(f"suite: report {out / 'report.html'}", file=sys.stderr)
    return 0
