"""`pqlab aead`: AEAD and cipher throughput through OpenSSL, AES-NI on and off.

Every record is a full init-update-final with a fresh nonce by default (`fair`);
`--mode speed-compatible` drives OpenSSL as `openssl speed -evp` does, so the two can be
compared. Every record is checked. Results: tables/aead.csv, figures, report section.
"""

from __future__ import annotations

from pqlab import runner
from pqlab.errors import UserError
from pqlab.experiments import aead as experiment
from pqlab.units import parse_size, split_list


def register(sub) -> None:
    p = sub.add_parser(
        "aead", help="AEAD / cipher throughput, AES-NI on and off", description=__doc__
    )
    p.add_argument(
        "--ciphers",
        default=",".join(experiment.CIPHERS),
        help="comma-separated ciphers (default: all): " + ", ".join(experiment.CIPHERS),
    )
    p.add_argument(
        "--sizes",
        default="16,64,256,1024,8192,16384",
        help="record sizes in bytes, comma separated (default: %(default)s)",
    )
    p.add_argument("--aesni", default="on,off", help="on, off or on,off (default: %(default)s)")
    p.add_argument(
        "--mask",
        default="documents",
        help="CPU mask for AES-NI off: documents (~0x200000200000000, as the "
        "documents; also disables AVX2/AVX-512/VAES), precise (AES-NI, "
        "PCLMULQDQ, VAES, VPCLMULQDQ only), or both (default: %(default)s)",
    )
    p.add_argument(
        "--mode", default="fair", help="fair, speed-compatible or both (default: %(default)s)"
    )
    p.add_argument(
        "--speed-compatible", action="store_true", help="same as --mode speed-compatible"
    )
    p.add_argument(
        "--directions",
        default="encrypt,decrypt",
        help="encrypt, decrypt or both (default: %(default)s)",
    )
    p.add_argument(
        "--seconds",
        default="3",
        help="timed seconds per cell, like openssl speed's 3 s (default: %(default)s)",
    )
    runner.add_run_options(p)
    p.set_defaults(func=run)


def parse_args(args) -> experiment.Plan:
    """Validate everything before the first measurement; raise UserError on bad input."""
    ciphers = [c.lower() for c in split_list(args.ciphers)]
    if not ciphers:
        raise UserError("--ciphers is empty; choose from " + ", ".join(experiment.CIPHERS))
    for c in ciphers:
        if c not in experiment.CIPHERS:
            raise UserError(
                f"unknown cipher {c!r} in --ciphers; choose from " + ", ".join(experiment.CIPHERS)
            )
    sizes = []
    for text in split_list(args.sizes):
        n = parse_size(text, "record size")
        if not 1 <= n <= experiment.MAX_RECORD:
            raise UserError(f"record size {text!r} is outside 1..{experiment.MAX_RECORD} bytes")
        sizes.append(n)
    if not sizes:
        raise UserError("--sizes is empty; give e.g. 16,1024,16384")
    for c in ciphers:
        if c.endswith("-ecb"):
            bad = [s for s in sizes if s % 16]
            if bad:
                raise UserError(
                    f"{c} encrypts whole 16-byte blocks; record size {bad[0]} is "
                    "not a multiple of 16"
                )
    aesni = split_list(args.aesni)
    if not aesni or any(a not in ("on", "off") for a in aesni):
        raise UserError(f"--aesni {args.aesni!r}: use on, off or on,off")
    masks = split_list(args.mask)
    if masks == ["both"]:
        masks = list(experiment.MASKS)
    if not masks or any(m not in experiment.MASKS for m in masks):
        raise UserError(f"--mask {args.mask!r}: use documents, precise or both")
    mode_text = "speed-compatible" if args.speed_compatible else args.mode
    modes = ["fair", "speed-compatible"] if mode_text == "both" else split_list(mode_text)
    if not modes or any(m not in ("fair", "speed-compatible") for m in modes):
        raise UserError(f"--mode {mode_text!r}: use fair, speed-compatible or both")
    directions = split_list(args.directions)
    if directions == ["both"]:
        directions = ["encrypt", "decrypt"]
    if not directions or any(d not in ("encrypt", "decrypt") for d in directions):
        raise UserError(f"--directions {args.directions!r}: use encrypt, decrypt or both")
    try:
        seconds = float(args.seconds)
    except ValueError:
        raise UserError(f"--seconds {args.seconds!r} is not a number of seconds") from None
    if not 0 < seconds <= experiment.MAX_SECONDS:
        raise UserError(
            f"--seconds {args.seconds!r} must be above 0 and at most {experiment.MAX_SECONDS:g}"
        )
    return experiment.Plan(
        ciphers=ciphers,
        sizes=list(dict.fromkeys(sizes)),
        aesni=list(dict.fromkeys(aesni)),
        masks=list(dict.fromkeys(masks)),
        modes=list(dict.fromkeys(modes)),
        directions=list(dict.fromkeys(directions)),
        seconds=seconds,
    )


def run(args) -> int:
    plan = parse_args(args)
    runner.run_experiment(
        "aead",
        args,
        lambda store: experiment.measure(store, plan),
        extra_meta={"aead_plan": plan.as_dict()},
    )
    return 0
