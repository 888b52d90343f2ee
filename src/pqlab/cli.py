"""The `pqlab` command line: one module per command under pqlab.commands.

A command module exposes `register(subparsers)`, which adds its parser and sets
`func=run` on it. User mistakes become one `error: ...` line and a non-zero exit.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from pqlab import __version__
from pqlab.errors import EngineError, UserError

# Order is the order of `pqlab --help`.
COMMANDS = [
    "suite",
    "algorithms",
    "primitives",
    "sizes",
    "certs",
    "handshake",
    "serve",
    "connect",
    "ttlb",
    "linktest",
    "aead",
    "tls12",
    "report",
    "compare",
    "doctor",
]


class _Parser(argparse.ArgumentParser):
    """argparse that reports bad usage as one `error:` line (exit 2), like every other error."""

    def error(self, message: str):  # noqa: D102
        self.exit(2, f"error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="pqlab", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.description = "Measure what post-quantum cryptography costs a TLS deployment."
    parser.add_argument("--version", action="version", version=f"pqlab {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"pqlab.commands.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"pqlab.commands.{name}":
                continue  # command not part of this build yet
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    except EngineError as e:
        print(f"error: {e}", file=sys.stderr)
        return EngineError.exit_code
    except KeyboardInterrupt:
        print(
            "interrupted: finished cells are saved; rerun with --resume to complete the run",
            file=sys.stderr,
        )
        return 130


if __name__ == "__main__":
    sys.exit(main())
