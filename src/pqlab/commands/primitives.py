"""`pqlab primitives`: time KEM, key-agreement and signature operations per algorithm and
backend, every operation checked, raw samples kept; tables, figures and report from them."""

from __future__ import annotations

from pqlab import units
from pqlab.runner import add_run_options, run_experiment


def add_selection_options(p) -> None:
    p.add_argument(
        "--kem",
        metavar="LIST",
        help="KEMs / key exchanges, comma-separated (e.g. ML-KEM-768,X25519), or all",
    )
    p.add_argument(
        "--sig",
        metavar="LIST",
        help="signature algorithms, comma-separated (e.g. ML-DSA-44,P-256), or all",
    )
    p.add_argument(
        "--backend",
        default="all",
        metavar="openssl|liboqs|all",
        help="library to measure (default all: every backend that provides each algorithm)",
    )


def register(sub) -> None:
    p = sub.add_parser(
        "primitives",
        help="time KEM and signature operations (keygen, encaps/decaps, sign/verify)",
        description=__doc__,
    )
    add_selection_options(p)
    p.add_argument(
        "--iterations",
        "-n",
        default="1000",
        metavar="N",
        help="kept timed runs per operation (default 1000; one more is made first and dropped)",
    )
    p.add_argument(
        "--warmup",
        default="10",
        metavar="N",
        help="untimed runs per phase before timing (default 10, at most 2 s)",
    )
    p.add_argument(
        "--max-seconds",
        default="60",
        metavar="S",
        help="time budget per phase (key generation; the pair of operations that "
        "use a key) so very slow operations stop early; default 60, 0 = none",
    )
    add_run_options(p)
    p.set_defaults(func=run)


def parse_common(args):
    from pqlab.experiments import primitives as exp

    cells, skipped = exp.select_cells(
        units.split_list(args.kem), units.split_list(args.sig), args.backend
    )
    if skipped:
        import sys

        print(
            f"note: not measured (no backend of this build provides them): {', '.join(skipped)}",
            file=sys.stderr,
        )
    return cells, exp.skipped_warnings(skipped, args.backend)


def run(args) -> int:
    from pqlab.experiments import primitives as exp

    iterations = units.parse_positive_int(args.iterations, "--iterations")
    warmup = units.parse_positive_int(args.warmup, "--warmup", minimum=0)
    max_seconds = units.parse_duration(args.max_seconds, "--max-seconds") or None
    cells, skipped = parse_common(args)

    def body(store):
        exp.run_cells(store, cells, iterations, warmup, max_seconds, skipped)

    run_experiment("primitives", args, body)
    return 0
