"""`pqlab suite [SUITE]`: several experiments into one run directory and one report.

SUITE is a suite file (TOML; see docs/suites.md and docs/suite-example.toml) or a built-in
suite: `default` (every experiment of the five source documents, about 20 minutes on a
2-core machine; what `make report` runs), `quick` (a few minutes) or `full` (the documents'
sizes: an hour or more). Every step is validated before anything runs. Network steps need
CAP_NET_ADMIN; without it they are skipped and the report says so.
"""

from __future__ import annotations

import argparse
import sys

from pqlab import suite as suites
from pqlab.errors import EngineError, UserError
from pqlab.experiment import names
from pqlab.session import run_steps
from pqlab.store import check_out
from pqlab.units import split_list


def register(sub) -> None:
    p = sub.add_parser(
        "suite",
        help="several experiments, one report (default: every experiment of the documents)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "suite",
        nargs="?",
        metavar="SUITE",
        help="a suite file (.toml) or a built-in suite: " + ", ".join(suites.BUILT_IN),
    )
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="the built-in quick suite")
    size.add_argument("--full", action="store_true", help="the built-in full suite (several hours)")
    p.add_argument(
        "--only",
        metavar="LIST",
        help="comma-separated experiments of the suite to run (default: all its steps)",
    )
    p.add_argument("--out", metavar="DIR", help="run directory (default: results/suite-<time>)")
    p.add_argument("--resume", action="store_true", help="finish an interrupted suite")
    p.add_argument("--no-report", action="store_true", help="tables and figures, no report.html")
    p.add_argument(
        "--check", action="store_true", help="validate the suite and list its steps; run nothing"
    )
    p.set_defaults(func=run)


def run(args) -> int:

    if args.suite and (args.quick or args.full):
        raise UserError("give either a SUITE or --quick/--full, not both")
    name = args.suite or ("quick" if args.quick else "full" if args.full else "default")
    suite = suites.load(name)
    only = split_list(args.only) if args.only is not None else None
    if only is not None:
        if not only:
            raise UserError("--only is empty; give experiments, e.g. --only sizes,certs")
        unknown = [x for x in only if x not in names()]
        if unknown:
            raise UserError(
                f"--only {','.join(unknown)!r}: unknown experiment; choose from "
                + ", ".join(names())
            )
    if args.out:
        from pathlib import Path

        check_out(Path(args.out))
    steps = suites.plan_steps(suite, only)
    if args.check:
        for step in steps:
            print(f"{step.experiment.name}: {step.experiment.resume_key(step.plan)}")
        return 0
    outcome = run_steps(
        steps,
        out=args.out,
        resume=args.resume,
        report=not args.no_report,
        skip_unprivileged=True,
        keep_going=True,
        name="suite",
    )
    if outcome.failed:
        where = f"; finished experiments are in {outcome.path}" if outcome.completed else ""
        first = outcome.failed[0][1]
        err = type(first) if isinstance(first, EngineError) else EngineError
        raise err("suite: " + "; ".join(f"{n} failed: {e}" for n, e in outcome.failed) + where)
    print(f"suite: report {outcome.path / 'report.html'}", file=sys.stderr)
    return 0
