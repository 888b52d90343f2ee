"""Typed specs of what an engine command runs with, turned into its arguments by one table.

Each spec (a frozen dataclass: `pqlab.tls.runner`'s TLS server, client, load generator,
bulk transfer and memory measurement; `pqlab.net.shaping`'s link emulator) lists a row per
field in `ARGS`: which flag carries it and how. `argv()` walks the table, so a field cannot
be forgotten on the way to the engine; tests/test_tls_runner.py sets every field of every
spec and finds each flag in the argv and in the engine's own record of what it ran with.
A spec also names the engine program that runs it (`program`: its stack's, else the main
one), so nothing reads an argv to find out.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pqlab import engine
from pqlab.process import InFile, OutFile


@dataclass(frozen=True)
class Arg:
    """One row of a spec's argument table: the spec field, the engine flag and how the value
    is written (`kind`): "value" (the value; None leaves the flag out), "switch" (the flag
    alone when true), "in" / "out" / "secret-out" (a file the engine reads / writes /
    writes 0600, marked for the host that runs it), "stack" (a `Stack`, by its name),
    "groups" / "sigalgs" (catalogue algorithms by the stack's own names, joined with ':'),
    "rounds" ((warm-up, measured) pairs as W:N,W:N), "spec" (a nested spec's own
    arguments)."""

    field: str
    flag: str = ""
    kind: str = "value"


def _render(spec, arg: Arg) -> list:
    value = getattr(spec, arg.field)
    if arg.kind == "spec":
        return value.options() if value is not None else []
    if value is None or value == () or (arg.kind == "switch" and not value):
        return []
    if arg.kind == "switch":
        return [arg.flag]
    if arg.kind == "in":
        return [arg.flag, InFile(Path(value))]
    if arg.kind == "secret-out":
        return [arg.flag, OutFile(Path(value), "secret")]
    if arg.kind == "out":
        return [arg.flag, OutFile(Path(value))]
    if arg.kind == "stack":
        return [arg.flag, value.name]
    if arg.kind in ("groups", "sigalgs"):
        st = spec.stack
        name = st.group_name if arg.kind == "groups" else st.sigalg_name
        return [arg.flag, ":".join(name(a) for a in value)]
    if arg.kind == "rounds":
        return [arg.flag, ",".join(f"{w}:{n}" for w, n in value)]
    if isinstance(value, bool):
        return [arg.flag, "on" if value else "off"]
    if isinstance(value, float):
        return [arg.flag, f"{value:.6g}"]
    return [arg.flag, str(value)]


class Spec:
    """What every spec shares: `options()` (the table's arguments), `argv()` (the engine
    command and its options, files marked), `args()` (the same as plain strings) and
    `program` (the engine program that runs it: its stack's, else the main one)."""

    COMMAND: tuple[str, ...] = ()
    ARGS: tuple[Arg, ...] = ()

    @property
    def program(self) -> str:
        stack = getattr(self, "stack", None)
        return stack.program if stack is not None else engine.MAIN

    def options(self) -> list:
        return [a for row in self.ARGS for a in _render(self, row)]

    def argv(self) -> list:
        """The engine arguments, files marked for the host that runs them
        (`pqlab.process`)."""
        return [*self.COMMAND, *self.options()]

    def args(self) -> list[str]:
        return [str(a) for a in self.argv()]
