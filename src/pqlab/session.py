"""Running planned experiments into one run directory: the lifecycle every command shares.

    steps = [Step(exp, exp.plan(values)) for ...]      # every plan validated first
    run_steps(steps, out=..., resume=...)

Before anything is created: privileges of network steps, the engine build, the --out path.
Then the store is opened (one writer; other schema versions, other machines or engine builds
on --resume refused), each step is begun, measured cell by cell and finished with its
status, and the tables, figures and report are exported once at the end.
"""

from __future__ import annotations

import contextlib
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pqlab import engine, metadata
from pqlab.errors import EngineError, PrivilegeError, UserError
from pqlab.experiment import Experiment, registry
from pqlab.files import check_out
from pqlab.net import privileges
from pqlab.report.page import export_all
from pqlab.store import RunStore, default_out


@dataclass
class Step:
    experiment: Experiment
    plan: Any
    command_line: str | None = None  # what to record (default: this process's argv)
    label: str | None = None  # how messages name it ("suite x.toml, step 3"; default "step N")


@dataclass
class Outcome:
    path: Path
    completed: list[str] = field(default_factory=list)
    failed: list[tuple[str, Exception]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    exported: bool = False


def export(store: RunStore, html: bool = True) -> None:
    """Tables, figures and report.html of every experiment in the run (the one export);
    its time is kept as the last step's `export` stage (`pqlab.stages`)."""
    started = time.perf_counter()
    export_all(store, html=html)
    store.record_export(time.perf_counter() - started)


def check_steps(steps: list[Step], where: str = "") -> None:
    """Two steps of one experiment in a run either measure different cells, or measure
    them with the same per-cell options (`resume_key`): a run keeps each cell once, so the
    second step would otherwise skip the first's cells and measure nothing of what it was
    asked (20 iterations, then 40). Refused before anything runs, naming both steps."""
    seen: dict[str, list[tuple[str, dict, set[str] | None]]] = {}
    for index, step in enumerate(steps, 1):
        label = step.label or f"step {index}"
        exp = step.experiment
        key = exp.resume_key(step.plan)
        ids = exp.cell_ids(step.plan)
        for other, other_key, other_ids in seen.get(exp.name, []):
            if key == other_key:
                continue
            shared = None if ids is None or other_ids is None else ids & other_ids
            if shared is not None and not shared:
                continue
            k = next(k for k in sorted(set(key) | set(other_key)) if key.get(k) != other_key.get(k))
            cell = f" (cell {min(shared)})" if shared else ""
            raise UserError(
                f"{where}{other} and {label} both measure {exp.name} cells{cell} with "
                f"different {k} ({other_key.get(k)!r}, then {key.get(k)!r}): a run measures "
                "each cell once, with one set of options; give them the same options, or "
                "run the second into another --out"
            )
        seen.setdefault(exp.name, []).append((label, key, ids))


def run_steps(
    steps: list[Step],
    out: str | Path | None,
    resume: bool = False,
    report: bool = True,
    skip_unprivileged: bool = False,
    keep_going: bool = False,
    name: str | None = None,
) -> Outcome:
    """Measure every step into one run directory and export once at the end.

    `skip_unprivileged`: network steps without CAP_NET_ADMIN are skipped with a note (the
    suite) instead of refused (a single command). `keep_going`: a failing step is recorded
    and the next one runs (the suite); otherwise its error propagates after cleanup."""

    check_steps(steps)
    outcome = Outcome(Path(out) if out else default_out(name or steps[0].experiment.name))
    runnable = []
    can_net, why = privileges.can_admin_network()
    for step in steps:
        if step.experiment.needs_net and not can_net:
            if not skip_unprivileged:
                raise PrivilegeError(
                    f"pqlab {step.experiment.name} needs network namespaces: {why}"
                )
            outcome.skipped.append((step.experiment.name, why))
            print(f"suite: skipping {step.experiment.name}: {why}", file=sys.stderr)
            continue
        runnable.append(step)
    if not runnable:
        raise UserError("nothing to run: " + "; ".join(f"{n}: {w}" for n, w in outcome.skipped))
    check_out(outcome.path, resume=resume)
    info = engine.info()  # a missing or stale engine fails here, before the run directory
    migrations = [sql for exp in registry() for sql in exp.migrations]
    store = RunStore.create(outcome.path, "", resume, migrations)
    try:
        meta = metadata.collect(sys.argv, info)
        if resume:
            store.check_resume(meta)
        for step in runnable:
            exp = step.experiment
            key = exp.resume_key(step.plan)
            if not resume and store.cells_done(exp.name):
                raise UserError(
                    f"{str(outcome.path)!r} already holds {exp.name} results; use --resume to "
                    "finish that run, or choose another --out"
                )
            store.check_plan(exp.name, key)
        for step in runnable:
            _run_one(
                store,
                step,
                meta,
                key=step.experiment.resume_key(step.plan),
                out=outcome,
                keep_going=keep_going,
                resume=resume,
            )
        if outcome.completed:
            export(store, html=report)
            outcome.exported = True
        store.close(check=True)  # a final checkpoint that fails fails the run
    except KeyboardInterrupt as e:
        # What the interrupted command may say: where finished cells are kept, if any are.
        with contextlib.suppress(Exception):
            if store.cells_done_count():
                e.saved_run = outcome.path  # type: ignore[attr-defined]
        raise
    finally:
        store.close()
    return outcome


def _run_one(
    store: RunStore,
    step: Step,
    meta: dict,
    key: dict,
    out: Outcome,
    keep_going: bool,
    resume: bool = False,
) -> None:
    exp = step.experiment
    step_meta = {**meta, **exp.metadata(step.plan), "plan": key}
    work = exp.work(step.plan)
    if work is not None:
        # The step's units of work beside its measured stage seconds: what later estimates
        # are calibrated with (`pqlab.estimate`); a step resumed over finished cells did
        # less than its units, which `resumed` says.
        resumed = resume and bool(store.cells_done(exp.name))
        step_meta["estimate"] = {**work.record(), "resumed": resumed}
    if step.command_line:
        step_meta["command_line"] = step.command_line
    store.begin(exp.name, step_meta)
    status = "failed"
    try:
        exp.measure(step.plan, store)
        status = "complete"
        out.completed.append(exp.name)
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    except (EngineError, UserError) as e:
        if not keep_going:
            raise
        out.failed.append((exp.name, e))
        print(f"suite: {exp.name} failed: {e}", file=sys.stderr)
    finally:
        store.finish(status)
