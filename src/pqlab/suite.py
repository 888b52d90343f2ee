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

import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from pqlab import experiment as experiments
from pqlab.errors import UserError
from pqlab.session import Step

BUILT_IN = ("default", "quick", "full")
TOP_KEYS = ("description", "step")


@dataclass
class Suite:
    name: str  # built-in name or file path
    description: str
    steps: list[tuple[str, dict, str]]  # (experiment, option table, where)


def _read_text(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise UserError(
            f"suite file {str(path)!r} does not exist; give a TOML file or one of the "
            f"built-in suites: {', '.join(BUILT_IN)}"
        ) from None
    except IsADirectoryError:
        raise UserError(f"suite file {str(path)!r} is a directory") from None
    except UnicodeDecodeError as e:
        raise UserError(f"suite file {str(path)!r} is not UTF-8 text (byte {e.start})") from None
    except OSError as e:
        raise UserError(f"cannot read suite file {str(path)!r}: {e.strerror}") from None


def load(name_or_path: str) -> Suite:
    """A built-in suite by name, or a suite file."""
    if name_or_path in BUILT_IN:
        text = resources.files("pqlab.suites").joinpath(f"{name_or_path}.toml").read_text()
        return parse(text, name_or_path)
    return parse(_read_text(Path(name_or_path)), name_or_path)


def parse(text: str, where: str) -> Suite:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise UserError(f"suite {where}: not valid TOML: {e}") from None
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
    """Every step's plan, validated (UserError names the step and the key)."""
    out = []
    for name, table, where in suite.steps:
        if only and name not in only:
            continue
        exp = experiments.get(name)
        values = exp.values_from_suite(table, where)
        if getattr(values, "shaper", None) == "uml":
            raise UserError(
                f'{where}: shaper = "uml" runs one command in a guest, not a suite\'s step; '
                f"run that step as its own command (pqlab {name} --shaper uml ...)"
            )
        try:
            plan = exp.plan(values)
        except UserError as e:
            raise type(e)(f"{where}: {e}") from None
        out.append(Step(exp, plan, command_line=f"pqlab suite {suite.name} [{name}]"))
    if not out:
        raise UserError(f"suite {suite.name}: no step left to run")
    return out
