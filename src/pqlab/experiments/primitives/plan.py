"""The primitives experiment's options and their validation: algorithms, backends,
iterations, warm-up and time budget.
"""

from __future__ import annotations

from dataclasses import dataclass

from pqlab import units
from pqlab.algorithms.selection import (
    SELECTION_OPTIONS,
    Cell,
    selection,
)
from pqlab.errors import UserError
from pqlab.experiment import Cells, Option
from pqlab.experiments.primitives import wolfcrypt as primitives_wolfcrypt

NAME = "primitives"


MACHINE = "__machine__"  # the auxiliary cell holding the machine's warnings


WOLFCRYPT = "__wolfcrypt__"  # the auxiliary cell of wolfCrypt's own benchmark


CELLS = Cells(NAME, ("algorithm", "backend"), aux=(MACHINE, WOLFCRYPT))


DEFAULT_ITERATIONS = 1000


MAX_ITERATIONS = 1_000_000  # samples are kept in memory by the engine (16 bytes each)


MAX_WARMUP = 100_000


MAX_SECONDS = 86_400.0


@dataclass
class Plan:
    cells: list[Cell]
    skipped: list[str]
    backend: str
    iterations: int
    warmup: int
    max_seconds: float | None
    seconds: float | None = None  # fixed-time mode: own seconds per operation
    wolfcrypt: bool = False  # also run wolfCrypt's own benchmark (document 004)


def from_values(values) -> Plan:
    seconds = None
    if getattr(values, "seconds", None) is not None:
        seconds = units.parse_duration(values.seconds, "--seconds")
        if not 0 < seconds <= MAX_SECONDS:
            raise UserError(f"--seconds {values.seconds!r}: above 0 and at most 86400")
    default = MAX_ITERATIONS if seconds else DEFAULT_ITERATIONS
    iterations = units.parse_positive_int(values.iterations or str(default), "--iterations")
    if iterations > MAX_ITERATIONS:
        raise UserError(f"--iterations {values.iterations!r}: at most {MAX_ITERATIONS}")
    warmup = units.parse_positive_int(values.warmup, "--warmup", minimum=0)
    if warmup > MAX_WARMUP:
        raise UserError(f"--warmup {values.warmup!r}: at most {MAX_WARMUP}")
    max_seconds = units.parse_duration(values.max_seconds, "--max-seconds")
    if max_seconds > MAX_SECONDS:
        raise UserError(f"--max-seconds {values.max_seconds!r}: at most 86400 (one day)")
    cells, skipped = selection(values, python_ok=True)
    wolfcrypt = bool(getattr(values, "wolfcrypt_benchmark", False))
    if wolfcrypt:
        primitives_wolfcrypt.program()  # built, or one clear error now
        if not (values.kem or values.sig):
            cells = primitives_wolfcrypt.with_compared(cells, values.backend)
    if seconds and any(c.backend == "python" for c in cells):
        raise UserError(
            "--seconds: the python harness has no fixed-time mode; use --iterations with "
            "--backend python, or --seconds with openssl and liboqs"
        )
    return Plan(
        cells,
        skipped,
        values.backend,
        iterations,
        warmup,
        max_seconds or None,
        seconds,
        wolfcrypt,
    )


OPTIONS = (
    *SELECTION_OPTIONS,
    Option(
        "iterations",
        f"kept timed runs per operation (one more is made first and dropped; at most "
        f"{MAX_ITERATIONS}; default {DEFAULT_ITERATIONS}, or with --seconds the most "
        "runs allowed)",
        metavar="N",
        short="-n",
    ),
    Option(
        "seconds",
        "fixed-time mode, like liboqs's speed_kem / speed_sig (document 004's table): each "
        "operation runs until it has spent at least S seconds in its own timed runs, as "
        "many runs as fit; tables/primitives_speed.csv has that table's columns",
        metavar="S",
    ),
    Option(
        "wolfcrypt-benchmark",
        "also run wolfCrypt's own benchmark program (built with wolfSSL by 'make engine') for the "
        "algorithms document 004 lists, and set its rows beside pqlab's OpenSSL and liboqs "
        "measurement of the same operation (tables/primitives_wolfcrypt.csv); without "
        "--kem/--sig those algorithms are added to the default set",
        flag=True,
    ),
    Option(
        "warmup",
        "untimed runs per phase before timing (at most 2 s)",
        default="10",
        metavar="N",
    ),
    Option(
        "max-seconds",
        "time budget per phase (key generation; the pair of operations that use a key) "
        "so very slow operations stop early; 0 = none",
        default="60",
        metavar="S",
    ),
)
