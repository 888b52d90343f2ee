"""The experiment protocol: what every experiment declares once, and the one registry.

An experiment is a module or a package under `pqlab.experiments` that defines an
`Experiment` instance named `EXPERIMENT`. The instance declares the options (`Option`: the
CLI flags and, with the same names, the keys of a suite file), its cells (`cell_axes`, and
whether they run on a TLS stack), what `pqlab compare` compares (`compare`), the schema
migrations of its tables (`migrations`), the plan parameters a resumed run must match
(`resume_key`) and the plan's units of work (`work`, priced by `pqlab.estimate` at the
costs it declares, `costs`). The work
is done by four module-level functions of one shape:

    from_values(values) -> plan     every check happens here, before anything is created
    measure(plan, store)            cell by cell into the run directory
    export(store) -> Section|None   tables, figures and the report section, from the database
    summarize(store) -> Summary     (optional) the experiment's lines of the report's summary

A module experiment defines the four itself; a package experiment (handshake, ttlb,
capacity) puts them in its `plan`, `run` and `report` modules and names those in its class
(`plan_module`, `run_module`, `report_module`). The CLI (`pqlab <experiment>`), the suite
(`pqlab suite FILE.toml`), the report, compare and the store's migrations all iterate
`registry()`; nothing else lists the experiments.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from pqlab import estimate
from pqlab.errors import UserError
from pqlab.tls import stacks

# Report order; also the order of `pqlab --help` and of a suite's default steps.
EXPERIMENT_MODULES = (
    "primitives",
    "sizes",
    "certs",
    "plan",
    "handshake",
    "ttlb",
    "linktest",
    "aead",
    "tls12",
    "memory",
    "capacity",
    "throughput",
    "probe",
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
    positional: bool = False  # the command's argument (`pqlab probe HOST:PORT`), not a flag

    @property
    def dest(self) -> str:
        return self.name.replace("-", "_")

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        if self.positional:
            parser.add_argument(
                self.dest, metavar=self.metavar or self.name.upper(), help=self.help
            )
            return
        flags = [f"--{self.name}", *self.aliases]
        if self.short:
            flags.insert(0, self.short)
        # argparse formats help with %: a literal one (loss=1%) is written %%.
        text = self.help.replace("%", "%%").replace("%%(default)", "%(default)")
        kw: dict[str, Any] = {"dest": self.dest, "help": text}
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
                kw["help"] = f"{text} (default: %(default)s)"
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
            if any(not item.strip() for item in items):
                raise UserError(f"{where}: {self.name} = {value!r} holds an empty value")
            if self.repeat:
                return items
            return ",".join(items)
        text = str(value)
        if not text.strip():
            raise UserError(f"{where}: {self.name} = {value!r} is empty; give a value")
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
    # The column numbering the rounds the samples ran in, when the experiment interleaves its
    # cells: `compare` then measures each run's drift and calls no change within it
    # significant.
    round_column: str | None = None
    # Values computed, not measured (`pqlab plan`'s predictions): compared as they are, one
    # per key, "same" or "changed", without statistics.
    exact: bool = False


@dataclass(frozen=True)
class CellId:
    """One measured cell: the experiment's own axes (group, signers, size...), the TLS stack
    it ran on (TLS experiments; always present), options that change what is measured
    (`+root`) and the host pair (when a run spans several). It renders itself as the text the
    store keeps, `AXIS|AXIS|...|STACK|+OPTION@PAIR`, and `Experiment.parse_cell` reads that
    text back, including the forms older runs stored (no stack: the default stack)."""

    axes: tuple[str, ...]
    stack: str | None = None
    options: tuple[str, ...] = ()
    pair: str | None = None

    def __post_init__(self) -> None:
        for part in (*self.axes, *self.options, self.stack or ""):
            if "|" in part:
                raise UserError(f"{part!r} cannot name a cell: it contains '|'")
        for part in (*self.axes, self.stack or ""):
            if part.startswith("+"):
                raise UserError(f"{part!r} cannot name a cell: it starts with '+'")
        # '@' starts the host pair in the last part; axes before it may hold one
        # (a link profile named after a host pair, "local->root@host").
        if "@" in self._parts()[-1]:
            raise UserError(f"{self._parts()[-1]!r} cannot end a cell id: it contains '@'")

    def _parts(self) -> list[str]:
        parts = [*self.axes, *([self.stack] if self.stack is not None else [])]
        return parts + [f"+{o}" for o in self.options]

    def __str__(self) -> str:
        text = "|".join(self._parts())
        return f"{text}@{self.pair}" if self.pair else text

    def label(self) -> str:
        """For progress lines: the axes and stack, comma separated."""
        return ", ".join([*self.axes, *([self.stack] if self.stack else [])])


@dataclass(frozen=True)
class Cells:
    """The shape of one experiment's cell ids: the names of its axes and whether its cells
    run on a TLS stack. Makes ids (`id`), reads stored ones back (`parse`) and lists the
    finished ones of a run (`done`)."""

    experiment: str
    axes: tuple[str, ...]
    tls: bool = False
    # Cells that are not points of the matrix but one-off measurements a run records once
    # (the CPU's capability vector under each mask): their first part is one of these names,
    # the rest their own values.
    aux: tuple[str, ...] = ()

    def auxiliary(self, name: str, *values) -> CellId:
        if name not in self.aux:
            raise ValueError(f"{self.experiment}: {name!r} is not an auxiliary cell")
        return CellId((name, *map(str, values)))

    def id(
        self,
        *axes,
        stack: str | None = None,
        options: Sequence[str] = (),
        pair: str | None = None,
    ) -> CellId:
        """One cell's id. Axes may be catalogue algorithms (their names) or values."""
        if len(axes) != len(self.axes):
            raise ValueError(f"{self.experiment}: a cell has axes {self.axes}, got {axes!r}")
        if self.tls and stack is None:
            raise ValueError(f"{self.experiment}: a TLS cell names its stack")
        names = tuple(str(getattr(a, "name", a)) for a in axes)
        return CellId(names, stack if self.tls else None, tuple(options), pair)

    def parse(self, text: str) -> CellId:
        """A stored cell id read back (this pqlab's form and the forms older runs stored:
        no stack means the default stack)."""
        parts = text.split("|")
        last, _, pair = parts[-1].partition("@")  # the host pair follows the last part
        parts[-1] = last
        if parts[0] in self.aux:
            return CellId(tuple(parts), None, (), pair or None)
        options = tuple(p[1:] for p in parts if p.startswith("+"))
        rest = [p for p in parts if not p.startswith("+")]
        n = len(self.axes)
        axes, extra = tuple(rest[:n]), rest[n:]
        if len(axes) != n or len(extra) > 1 or (extra and not self.tls):
            raise UserError(f"{self.experiment}: {text!r} is not a cell id of this experiment")
        stack = (extra[0] if extra else stacks.DEFAULT_STACK) if self.tls else None
        return CellId(axes, stack, options, pair or None)

    def done(self, store) -> set[CellId]:
        """The cells of this experiment the run has finished."""
        return {self.parse(c) for c in store.cells_done(self.experiment)}


class Experiment:
    """Base class: subclasses set the class attributes; the work is the module-level
    functions of the module docstring, found in `plan_module`, `run_module` and
    `report_module` (by default the module that declares the subclass)."""

    name: str = ""
    help: str = ""  # one line for `pqlab --help`
    description: str = ""  # the command's --help text
    needs_net: bool = False  # needs CAP_NET_ADMIN (network namespaces)
    options: Sequence[Option] = ()
    compare: Sequence[CompareSpec] = ()
    cells: Cells | None = None  # the shape of its cell ids
    # Idempotent SQL the store runs on open, before anything is written: how tables of runs
    # made by an earlier pqlab gain what this one writes (e.g. ADD COLUMN IF NOT EXISTS).
    migrations: Sequence[str] = ()
    # Its units of work and their costs, each named `<name>.<unit>` (`pqlab.estimate`; the
    # model's shared units, such as operation_seconds, are priced there).
    costs: Mapping[str, estimate.Cost] = {}
    plan_module: ModuleType | None = None
    run_module: ModuleType | None = None
    report_module: ModuleType | None = None

    def _module(self, attr: str) -> ModuleType:
        return getattr(self, attr) or sys.modules[type(self).__module__]

    def plan(self, values: argparse.Namespace) -> Any:
        """Validate every option value and return the plan. Raises UserError; creates
        nothing."""
        return self._module("plan_module").from_values(values)

    def measure(self, plan: Any, store) -> None:
        """Measure every cell of `plan` not yet done in `store`, cell by cell."""
        self._module("run_module").measure(plan, store)

    def export(self, store):
        """Tables, figures and the report section (`pqlab.report.section.Section`) from the database
        alone, or None when the run holds nothing of this experiment."""
        return self._module("report_module").export(store)

    def summarize(self, store):
        """This experiment's part of the report's summary (`pqlab.report.summary.Summary`),
        or None when it offers none or the run holds nothing to summarise."""
        fn = getattr(self._module("report_module"), "summarize", None)
        return fn(store) if fn is not None else None

    def metadata(self, plan: Any) -> dict:
        """Extra metadata stored with the invocation (what the plan was)."""
        return {}

    def resume_key(self, plan: Any) -> dict:
        """Per-cell parameters that must be the same when `--resume` adds to a run (the
        matrix may grow; -n may not change)."""
        return {}

    def cell_ids(self, plan: Any) -> set[str] | None:
        """The ids of the cells `plan` measures (as the store keeps them), so that two steps
        of one run that would share a cell are found before anything runs; None when the
        experiment does not say (two such steps must then have the same `resume_key`)."""
        return None

    def work(self, plan: Any):
        """The plan's units of work (`pqlab.estimate.Work`), which `pqlab suite --check`
        turns into an estimated time; None when the experiment declares none."""
        return None

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


def costs() -> dict[str, estimate.Cost]:
    """Every experiment's own units of work and their costs, for estimates that span
    experiments (a suite's export, earlier runs' steps)."""
    out: dict[str, estimate.Cost] = {}
    for exp in registry():
        for unit, cost in exp.costs.items():
            if not unit.startswith(f"{exp.name}.") or unit in estimate.COSTS or unit in out:
                raise RuntimeError(f"{exp.name}: cost {unit!r} is not named {exp.name}.<unit>")
            out[unit] = cost
    return out


def get(name: str) -> Experiment:
    for exp in registry():
        if exp.name == name:
            return exp
    raise UserError(f"unknown experiment {name!r}; choose from " + ", ".join(EXPERIMENT_MODULES))


def names() -> list[str]:
    return list(EXPERIMENT_MODULES)
