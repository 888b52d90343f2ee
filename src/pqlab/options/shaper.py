"""The `--shaper` option: which link emulator a command with an emulated link uses."""

from __future__ import annotations

from pqlab.experiment import Option
from pqlab.net.shaping import SHAPER_CHOICES_HELP, SHAPERS


def shaper_option(what: str = "link emulator for --profile") -> Option:
    """The `--shaper` option every command with an emulated link shares (checked by
    `pqlab.net.shaping.check_shaper`)."""
    return Option(
        "shaper",
        f"{what}: {SHAPER_CHOICES_HELP}",
        default="auto",
        choices=SHAPERS,
    )
