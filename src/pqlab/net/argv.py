"""Command-line arguments of a process that may run on another host.

The TLS runner builds engine command lines from typed specs; some arguments name things
that live on this machine: the engine binary itself, files the process reads (certificate
chain, key, CA) and files it writes that the lab reads afterwards (captures, key logs).
They are marked here so that the host that runs the process can put them in place:
locally each is just its path; on a remote host (`pqlab.net.ssh.RemoteHost`) the engine is
the copy installed there, inputs are uploaded into the remote run directory and outputs are
written there and fetched back to their local path when the process has finished.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


class _EngineBinary:
    """The pqlab-engine executable of whichever host runs the process."""

    def __repr__(self) -> str:
        return "ENGINE"


ENGINE = _EngineBinary()


@dataclass(frozen=True)
class InFile:
    """A local file the process reads."""

    path: Path

    def __str__(self) -> str:
        return str(self.path)


@dataclass(frozen=True)
class OutFile:
    """A file the process writes, wanted at `path` on this machine once it has finished.
    `kind` says what it is ("pcap" for captures, whose timestamps belong to the clock of the
    host that wrote them; "secret" for key logs, kept 0600)."""

    path: Path
    kind: str = "data"

    def __str__(self) -> str:
        return str(self.path)


def local(argv) -> list[str]:
    """The argv as it runs on this machine."""
    from pqlab import engine

    return [str(engine.engine_path()) if a is ENGINE else str(a) for a in argv]
