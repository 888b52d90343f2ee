"""Suite files: a list of experiment steps with their options, in TOML.

    description = "what this suite is for"      # optional
    [[step]]
    experiment = "handshake"                     # required: an experiment name
    groups = ["X25519", "X25519MLKEM768"]        # any option of that experiment, named as
    n = 50                                       # on the command line without the dashes

The built-in suites (default, quick, full) are such files shipped in `pqlab.suites`. A file
is validated completely (unknown keys, unknown experiments or algorithms, bad units: every
step's plan is built) before anything runs; errors name the file, the step and the key.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from pqlab import experiment as experiments
from pqlab import files
from pqlab.errors import UserError
from pqlab.session import Step, check_steps

BUILT_IN = ("default", "quick", "full")
# The most steps a suite may have (the full suite has 21): each costs a plan before anything
# runs, and a start of its own.
MAX_STEPS = 1000
TOP_KEYS = ("description", "step")


@dataclass
class Suite:
    name: str  # built-in name or file path
    description: str
    steps: list[tuple[str, dict, str]]  # (experiment, option table, where)


def _read_text(path: Path) -> str:
    what = f"suite file {str(path)!r}"
    if not os.path.lexists(path):
        raise UserError(
            f"{what} does not exist; give a TOML file or one of the built-in suites: "
            f"{', '.join(BUILT_IN)}"
        )
    return files.read_input_text(path, what, "suite file")


def load(name_or_path: str) -> Suite:
    """A built-in suite by name, or a suite file."""
    if name_or_path in BUILT_IN:
        text = resources.files("pqlab.suites").joinpath(f"{name_or_path}.toml").read_text()
        return parse(text, name_or_path)
    return parse(_read_text(Path(name_or_path)), name_or_path)


def parse(text: str, where: str) -> Suite:
    data = files.parse_toml(text, f"suite {where}")
    unknown = sorted(set(data) - set(TOP_KEYS))
    if unknown:
        raise UserError(
            f"suite {where}: unknown key {unknown[0]!r}; accepted at the top: description, [[step]]"
        )
    description = data.get("description", "")
    if not isinstance(description, str):
        raise UserError(f"suite {where}: description must be a string")
    raw_steps = data.get("step", [])
    if not isinstance(raw_steps, list) or not raw_steps:
        raise UserError(f"suite {where}: no [[step]] tables; each names an experiment")
    if len(raw_steps) > MAX_STEPS:
        raise UserError(f"suite {where}: {len(raw_steps)} steps; a suite has at most {MAX_STEPS}")
    steps = []
    for i, table in enumerate(raw_steps, 1):
        here = f"suite {where}, step {i}"
        if not isinstance(table, dict):
            raise UserError(f"{here}: must be a [[step]] table")
        table = dict(table)
        name = table.pop("experiment", None)
        if not isinstance(name, str):
            raise UserError(
                f'{here}: no experiment = "..."; choose from {", ".join(experiments.names())}'
            )
        if name not in experiments.names():
            raise UserError(
                f"{here}: unknown experiment {name!r}; choose from "
                + ", ".join(experiments.names())
            )
        steps.append((name, table, f"{here} ({name})"))
    return Suite(where, description, steps)


def plan_steps(suite: Suite, only: list[str] | None = None) -> list[Step]:
    """Every step's plan, validated (UserError names the step and the key). Two steps
    that are the same, or that would measure one cell with different options
    (`session.check_steps`), are refused before anything runs."""
    chosen = []
    first: dict[tuple, int] = {}  # a step's experiment and values -> its number
    for index, (name, table, where) in enumerate(suite.steps, 1):
        if only and name not in only:
            continue
        exp = experiments.get(name)
        values = exp.values_from_suite(table, where)
        same = (name, repr(sorted(vars(values).items())))
        if same in first:
            raise UserError(
                f"suite {suite.name}: steps {first[same]} and {index} are the same ({name} with "
                "the same options); a run measures each cell once: remove one"
            )
        first[same] = index
        chosen.append((index, name, exp, values, where))
    out = []
    for index, name, exp, values, where in chosen:
        try:
            plan = exp.plan(values)
        except UserError as e:
            raise type(e)(f"{where}: {e}") from None
        out.append(
            Step(
                exp,
                plan,
                command_line=f"pqlab suite {suite.name} [{name}]",
                label=f"step {index}",
            )
        )
    if not out:
        raise UserError(f"suite {suite.name}: no step left to run")
    check_steps(out, f"suite {suite.name}: ")
    return out
