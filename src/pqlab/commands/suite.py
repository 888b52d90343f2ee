"""`pqlab suite [SUITE]`: several experiments into one run directory and one report.

SUITE is a suite file (TOML; see docs/suites.md and docs/suite-example.toml) or a built-in
suite: `default` (every experiment of the five source documents, under 12 minutes on a
2-core machine; what `make report` runs), `quick` (a few minutes) or `full` (the documents'
sizes: an hour or more). Every step is validated before anything runs. Network steps need
CAP_NET_ADMIN; without it they are skipped and the report says so.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pqlab import estimate
from pqlab import suite as suites
from pqlab.errors import EngineError, UserError
from pqlab.experiment import costs, names
from pqlab.files import check_out
from pqlab.net import privileges
from pqlab.session import run_steps
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
        "--check",
        action="store_true",
        help="validate the suite and list its steps, each with its estimated time on this "
        "machine; run nothing",
    )
    p.add_argument(
        "--estimate-from",
        metavar="DIR",
        action="append",
        help="with --check: earlier runs to calibrate the estimate with (a run directory or a "
        "directory of runs; repeatable; default: results/ and the parent of --out)",
    )
    p.set_defaults(func=run)


def _estimate_places(args) -> list[Path]:
    """Where earlier runs are looked for to calibrate the estimate (checked before
    anything)."""
    if args.estimate_from and not args.check:
        raise UserError("--estimate-from calibrates the estimate of --check; give --check too")
    if args.estimate_from:
        places = [Path(p) for p in args.estimate_from]
        for p in places:
            if not p.is_dir():
                raise UserError(
                    f"--estimate-from {str(p)!r} is not a directory; give a run directory or "
                    "a directory of runs"
                )
        return places
    places = [Path("results")]
    if args.out:
        places += [Path(args.out), Path(args.out).parent]
    return places


def _print_check(steps, places: list[Path]) -> None:
    """Each step's per-cell parameters (`EXPERIMENT: {...}`, as ever) followed by its
    estimate (lines starting with two spaces), then the export, the total and notes."""
    can_net, why = privileges.can_admin_network()
    skipped = {
        i: "needs CAP_NET_ADMIN"
        for i, step in enumerate(steps, 1)
        if step.experiment.needs_net and not can_net
    }
    lines = estimate.step_lines(steps, estimate.earlier_runs(places), skipped, costs())
    for step, line in zip(steps, lines, strict=False):
        print(f"{step.experiment.name}: {step.experiment.resume_key(step.plan)}")
        print(estimate.render(line, len(steps)))
    for line in lines[len(steps) :]:
        print(estimate.render(line, len(steps)))
    known = [x for x in lines if x.seconds is not None]
    ran = sum(1 for x in lines[: len(steps)] if x.seconds is not None)
    measured = sum(1 for x in known if x.basis.startswith("measured"))
    basis = f"{measured} of {len(known)} measured before" if measured else "built-in model"
    total = estimate.about(sum(x.seconds for x in known))
    print(f"  total | {ran} of {len(steps)} steps and the export | {total} | {basis}")
    for line in lines:
        for note in line.notes:
            where = f"step {line.index} {line.experiment}" if line.index else line.experiment
            print(f"  note: {where}: {note}")
    if skipped:
        names = ", ".join(f"{i} {steps[i - 1].experiment.name}" for i in skipped)
        print(
            f"  note: the suite would skip steps {names}, which need CAP_NET_ADMIN: {why}; "
            "they are not in the total"
        )


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
        check_out(Path(args.out), resume=args.resume)
    places = _estimate_places(args)
    steps = suites.plan_steps(suite, only)
    if args.check:
        _print_check(steps, places)
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
