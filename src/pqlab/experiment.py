"""The experiment protocol: what every experiment declares once, and the one registry.

An experiment is a module under `pqlab.experiments` that defines an `Experiment` instance
named `EXPERIMENT`. It declares its options (`Option`: the CLI flags and, with the same names,
the keys of a suite file), turns option values into a validated plan (`plan`: every check
happens here, before anything is created), measures a plan into a run directory
(`measure`), exports its tables, figures and report section from the database alone
(`export`), says which raw samples `pqlab compare` compares (`compare`), and which plan
parameters must match when a run is resumed (`resume_key`).

The CLI (`pqlab <experiment>`), the suite (`pqlab suite FILE.toml`), the report and compare
all iterate `registry()`; nothing else lists the experiments.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pqlab.errors import UserError

# Report order; also the order of `pqlab --help` and of a suite's default steps.
EXPERIMENT_MODULES = (
    "primitives",
    "sizes",
    "certs",
    "handshake",
    "ttlb",
    "linktest",
    "aead",
    "tls12",
    "memory",
    "capacity",
    "throughput",
)


@dataclass(frozen=True)
class Option:
    """One experiment option. `name` is the long flag without dashes ("server-sig"), the suite
    file key and (with "_" for "-") the attribute the plan reads. Values reach `plan` as the
    user wrote them (strings; a list of strings for `repeat`; a bool for `flag`), so the CLI
    and suite files share one parser."""

    name: str
    help: str
    default: Any = None
    metavar: str | None = None
    flag: bool = False  # --name with no value
    repeat: bool = False  # may be given several times (a list of strings)
    short: str | None = None  # e.g. "-n"
    aliases: tuple[str, ...] = ()  # other long flags, e.g. ("--connections",)
    choices: tuple[str, ...] | None = None  # shown in help; checked by argparse and suites

    @property
    def dest(self) -> str:
        return self.name.replace("-", "_")

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        flags = [f"--{self.name}", *self.aliases]
        if self.short:
            flags.insert(0, self.short)
        kw: dict[str, Any] = {"dest": self.dest, "help": self.help}
        if self.flag:
            kw["action"] = "store_true"
        else:
            if self.repeat:
                kw["action"] = "append"
            kw["metavar"] = self.metavar or self.name.upper().replace("-", "_")
            kw["default"] = self.default
            if self.choices:
                kw["choices"] = self.choices
            if self.default is not None and "%(default)" not in self.help:
                kw["help"] = f"{self.help} (default: %(default)s)"
        parser.add_argument(*flags, **kw)

    def from_suite(self, value: Any, where: str) -> Any:
        """A suite file value as the CLI would have given it."""
        if self.flag:
            if not isinstance(value, bool):
                raise UserError(f"{where}: {self.name} = {value!r} must be true or false")
            return value
        if isinstance(value, bool) or isinstance(value, dict):
            raise UserError(
                f"{where}: {self.name} = {value!r} must be a string, number or list "
                f"(like the CLI's --{self.name} {self.metavar or 'VALUE'})"
            )
        if isinstance(value, list):
            if any(isinstance(v, list | dict | bool) for v in value):
                raise UserError(f"{where}: {self.name} = {value!r}: a list of plain values")
            items = [str(v) for v in value]
            if self.repeat:
                return items
            return ",".join(items)
        text = str(value)
        if self.choices and text not in self.choices:
            raise UserError(
                f"{where}: {self.name} = {value!r}; choose from {', '.join(self.choices)}"
            )
        return [text] if self.repeat else text


@dataclass(frozen=True)
class CompareSpec:
    """One comparable measurement for `pqlab compare`: raw samples of `value_sql` from `table`,
    grouped by `keys`; `label` names it in the output ("handshake", "ttfb", ...). Key columns
    an older run lacks read as `missing` (e.g. the TLS stack of runs made before stacks)."""

    label: str
    table: str
    keys: tuple[str, ...]
    value_sql: str
    unit: str
    better: str = "lower"  # "lower" (times) or "higher" (throughput)
    where: str = "TRUE"
    missing: dict = field(default_factory=dict)


class Experiment:
    """Base class: subclasses set the class attributes and implement plan/measure/export."""

    name: str = ""
    help: str = ""  # one line for `pqlab --help`
    description: str = ""  # the command's --help text
    needs_net: bool = False  # needs CAP_NET_ADMIN (network namespaces)
    options: Sequence[Option] = ()
    compare: Sequence[CompareSpec] = ()

    def plan(self, values: argparse.Namespace) -> Any:
        """Validate every option value and return the plan. Raises UserError; creates
        nothing."""
        raise NotImplementedError

    def measure(self, plan: Any, store) -> None:
        """Measure every cell of `plan` not yet done in `store`, cell by cell."""
        raise NotImplementedError

    def export(self, store):
        """Tables, figures and the report section (`pqlab.report.Section`) from the database
        alone, or None when the run holds nothing of this experiment."""
        raise NotImplementedError

    def metadata(self, plan: Any) -> dict:
        """Extra metadata stored with the invocation (what the plan was)."""
        return {}

    def resume_key(self, plan: Any) -> dict:
        """Per-cell parameters that must be the same when `--resume` adds to a run (the
        matrix may grow; -n may not change)."""
        return {}

    def verdict(self, plan: Any, store) -> None:
        """After the run is saved and exported: report a pass/fail outcome and raise (e.g.
        CheckError) when the experiment is itself a check that failed (linktest)."""

    def summary(self, plan: Any) -> str | None:
        """A line printed when the experiment finished (where its tables are)."""
        return None

    # --- CLI and suite plumbing -----------------------------------------------------------
    def add_options(self, parser: argparse.ArgumentParser) -> None:
        for opt in self.options:
            opt.add_to(parser)

    def option(self, name: str) -> Option:
        for opt in self.options:
            if opt.name == name:
                return opt
        raise KeyError(name)

    def defaults(self) -> argparse.Namespace:
        return argparse.Namespace(
            **{o.dest: (False if o.flag else o.default) for o in self.options}
        )

    def values_from_suite(self, table: dict, where: str) -> argparse.Namespace:
        """Option values from a suite step (keys are the option names), defaults elsewhere."""
        values = self.defaults()
        known = {o.name: o for o in self.options}
        for key, value in table.items():
            opt = known.get(key) or known.get(key.replace("_", "-"))
            if opt is None:
                raise UserError(
                    f"{where}: unknown key {key!r} for {self.name}; accepted: "
                    + ", ".join(sorted(known))
                )
            setattr(values, opt.dest, opt.from_suite(value, where))
        return values


def registry() -> list[Experiment]:
    """Every experiment, in report order."""
    out = []
    for name in EXPERIMENT_MODULES:
        module = importlib.import_module(f"pqlab.experiments.{name}")
        exp = module.EXPERIMENT
        if exp.name != name:
            raise RuntimeError(f"pqlab.experiments.{name} declares experiment {exp.name!r}")
        out.append(exp)
    return out


def get(name: str) -> Experiment:
    for exp in registry():
        if exp.name == name:
            return exp
    raise UserError(f"unknown experiment {name!r}; choose from " + ", ".join(EXPERIMENT_MODULES))


def names() -> list[str]:
    return list(EXPERIMENT_MODULES)


class SplitExperiment(Experiment):
    """An experiment split into modules by job (a package: handshake, ttlb, capacity): its
    `plan_module.from_values` plans, `run_module.measure` measures, `report_module.export`
    exports. Subclasses set the three modules and the other class attributes."""

    plan_module: Any = None
    run_module: Any = None
    report_module: Any = None

    def plan(self, values: argparse.Namespace) -> Any:
        return self.plan_module.from_values(values)

    def measure(self, plan: Any, store) -> None:
        self.run_module.measure(plan, store)

    def export(self, store):
        return self.report_module.export(store)
