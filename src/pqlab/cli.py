"""The `pqlab` command line.

Experiments come from the one registry (`pqlab.experiment.registry()`): each gets a
subcommand with its declared options plus the run options (--out, --resume, --no-report).
The other commands (suite, serve, connect, algorithms, report, compare, doctor) are
modules under `pqlab.commands` with `register(subparsers)`. User mistakes become one
`error: ...` line and a non-zero exit (codes in `pqlab.errors`).
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
from pathlib import Path

from pqlab import __version__
from pqlab.errors import EngineError, Interrupted, UserError
from pqlab.experiment import Experiment, registry
from pqlab.files import check_out
from pqlab.session import Step, run_steps
from pqlab.store import RunStore

# `pqlab --help` order: the suite, the experiments (registry order), then the tools.
TOOLS_FIRST = ["suite"]
TOOLS = ["serve", "connect", "algorithms", "report", "export", "compare", "doctor"]


class _Parser(argparse.ArgumentParser):
    """argparse that reports bad usage as one `error:` line (exit 2), like every other error,
    and refuses an empty value for any flag or argument (`--server-host ''` would otherwise
    quietly mean its default): every command's values pass here."""

    def error(self, message: str):  # noqa: D102
        self.exit(2, f"error: {message} (see '{self.prog} --help')\n")

    def parse_known_args(self, args=None, namespace=None):  # noqa: D102
        namespace, extras = super().parse_known_args(args, namespace)
        for action in self._actions:
            value = getattr(namespace, action.dest, None)
            if value is action.default:
                continue  # not given
            values = value if isinstance(value, list) else [value]
            if any(isinstance(v, str) and not v.strip() for v in values):
                name = max(action.option_strings, key=len, default=None) or action.metavar
                self.error(f"{name or action.dest} {''!r} is empty; give a value")
        return namespace, extras


def add_run_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out", metavar="DIR", help="run directory (default: results/<experiment>-<time>)"
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="finish an interrupted run in --out, skipping finished cells (same machine, "
        "engine build and per-cell options)",
    )
    parser.add_argument(
        "--no-report", action="store_true", help="write tables and figures but not report.html"
    )


def _experiment_parser(sub, exp: Experiment) -> None:
    p = sub.add_parser(
        exp.name,
        help=exp.help,
        description=exp.description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    exp.add_options(p)
    add_run_options(p)
    p.set_defaults(func=lambda args, exp=exp: run_experiment(exp, args))


def run_experiment(exp: Experiment, args: argparse.Namespace) -> int:
    """`pqlab <experiment> ...`: validate, run into one run directory, export."""

    if args.out:
        check_out(Path(args.out), resume=args.resume)
    plan = exp.plan(args)
    outcome = run_steps(
        [Step(exp, plan)], out=args.out, resume=args.resume, report=not args.no_report
    )
    line = exp.summary(plan)
    print(f"results: {outcome.path}" + (f" ({line})" if line else ""), file=sys.stderr)

    store = RunStore.open(outcome.path)
    try:
        exp.verdict(plan, store)
    finally:
        store.close()
    return 0


def _tool(sub, name: str) -> None:
    module = importlib.import_module(f"pqlab.commands.{name}")
    module.register(sub)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="pqlab", description="Measure what post-quantum cryptography costs a TLS deployment."
    )
    parser.add_argument("--version", action="version", version=f"pqlab {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in TOOLS_FIRST:
        _tool(sub, name)
    for exp in registry():
        _experiment_parser(sub, exp)
    for name in TOOLS:
        _tool(sub, name)
    return parser


def _raise_interrupted(signum, frame):
    raise Interrupted(signum)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    # Ctrl-C and SIGTERM unwind the same way: every `with`/`finally` cleans up (namespaces,
    # engines, the run directory's lock), finished cells stay saved, one line says so.
    previous = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        previous[sig] = signal.signal(sig, _raise_interrupted)
    try:
        return int(args.func(args) or 0)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    except EngineError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt as e:
        code = e.exit_code if isinstance(e, Interrupted) else 130
        what = "terminated (SIGTERM)" if code == 143 else "interrupted"
        run = getattr(e, "saved_run", None)  # set by a run that has finished cells
        if run is not None:
            what += f": finished cells are saved in {run}; rerun with --resume to complete the run"
        print(what, file=sys.stderr)
        return code
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


if __name__ == "__main__":
    sys.exit(main())
