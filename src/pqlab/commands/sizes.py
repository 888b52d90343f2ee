"""`pqlab sizes`: public key, secret key, ciphertext, shared secret and signature sizes, raw
and as encoded in practice (DER SPKI, PKCS#8, DER signatures), with observed ranges."""

from __future__ import annotations

from pqlab import units
from pqlab.commands.primitives import add_selection_options, parse_common
from pqlab.runner import add_run_options, run_experiment


def register(sub) -> None:
    p = sub.add_parser(
        "sizes", help="key, ciphertext and signature sizes (raw and DER)", description=__doc__
    )
    add_selection_options(p)
    p.add_argument(
        "--samples",
        default="32",
        metavar="N",
        help="keys and signatures generated per algorithm to observe the range "
        "of variable encodings (default 32)",
    )
    p.add_argument(
        "--max-seconds",
        default="10",
        metavar="S",
        help="time budget per algorithm phase, for slow key generation or signing (default 10)",
    )
    add_run_options(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from pqlab.experiments import sizes as exp

    samples = units.parse_positive_int(args.samples, "--samples")
    max_seconds = units.parse_duration(args.max_seconds, "--max-seconds") or None
    cells, _skipped = parse_common(args)

    def body(store):
        exp.run_cells(store, cells, samples, max_seconds)

    run_experiment("sizes", args, body)
    return 0
