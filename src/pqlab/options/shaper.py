"""The `--shaper` option: which link emulator a command with an emulated link uses."""

from __future__ import annotations

from pqlab.experiment import Option
from pqlab.net.shaping import SHAPERS


def shaper_option(what: str = "link emulator for --profile") -> Option:
    """The `--shaper` option every command with an emulated link shares (checked by
    `pqlab.net.shaping.check_shaper`)."""
    return Option(
        "shaper",
        f"{what}: netem (the kernel's qdisc), userspace (pqlab's TUN emulator) or auto (netem "
        "when the kernel has it)",
        default="auto",
        choices=SHAPERS,
    )
