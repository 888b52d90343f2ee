"""Measuring the sizes experiment: one engine run per (algorithm, backend) cell, its `sizes`
record stored in the shared `primitive_sizes` table.
"""

from __future__ import annotations

from pqlab import engine
from pqlab.algorithms.sizes import SIZES_DDL, store_sizes
from pqlab.errors import EngineError
from pqlab.experiments.sizes.plan import CELLS, NAME, Plan
from pqlab.progress import CellProgress
from pqlab.store import RunStore


def run_cells(store: RunStore, cells, samples: int, max_seconds: float | None) -> None:
    """Generate `samples` keys (and as many signatures or encapsulations) per cell, untimed
    for the purpose of this table (the engine still checks each one), and store the sizes."""

    store.ensure_table(SIZES_DDL)
    done = CELLS.done(store)
    todo = [c for c in cells if c.cell_id not in done]
    with CellProgress("sizes", len(cells)) as progress:
        progress.advance(len(cells) - len(todo))
        for cell in todo:
            progress.start(f"{cell.algorithm.name} ({cell.backend})")
            args = cell.engine_args() + [
                "--iterations",
                str(samples),
                "--warmup",
                "0",
                "--no-samples",
            ]
            if max_seconds:
                args += ["--max-seconds", f"{max_seconds:g}"]
            try:
                records = engine.run(args, timeout=(max_seconds or 3600) * 4 + 60)
                record = next((r for r in records if r["type"] == "sizes"), None)
            except EngineError as e:
                raise EngineError(f"{cell.algorithm.name} ({cell.backend}): {e}") from None
            if record is None:
                raise EngineError(f"{cell.algorithm.name} ({cell.backend}): no sizes record")
            with store.cell(NAME, cell.cell_id, {"args": args}):
                store_sizes(store, NAME, cell, record)
            progress.advance()


def measure(plan: Plan, store) -> None:
    run_cells(store, plan.cells, plan.samples, plan.max_seconds)
