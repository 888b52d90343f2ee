"""The sizes experiment's options and their validation: algorithms, backends, samples."""

from __future__ import annotations

from dataclasses import dataclass

from pqlab import units
from pqlab.algorithms.selection import SELECTION_OPTIONS, selection
from pqlab.errors import UserError
from pqlab.experiment import Cells, Option

NAME = "sizes"


CELLS = Cells(NAME, ("algorithm", "backend"))


MAX_SAMPLES = 100_000


@dataclass
class Plan:
    cells: list
    samples: int
    max_seconds: float | None


def from_values(values) -> Plan:
    samples = units.parse_positive_int(values.samples, "--samples")
    if samples > MAX_SAMPLES:
        raise UserError(f"--samples {values.samples!r}: at most {MAX_SAMPLES}")
    max_seconds = units.parse_duration(values.max_seconds, "--max-seconds")
    if max_seconds > 86_400:
        raise UserError(f"--max-seconds {values.max_seconds!r}: at most 86400 (one day)")
    cells, _skipped = selection(values)
    return Plan(cells, samples, max_seconds or None)


OPTIONS = (
    *SELECTION_OPTIONS,
    Option(
        "samples",
        "keys and signatures generated per algorithm to observe the range of variable "
        f"encodings (at most {MAX_SAMPLES})",
        default="32",
        metavar="N",
    ),
    Option(
        "max-seconds",
        "time budget per algorithm phase, for slow key generation or signing",
        default="10",
        metavar="S",
    ),
)
