"""Shared plumbing for experiment commands: run directory, metadata, progress, export."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from pqlab import engine, metadata
from pqlab.store import RunStore


def add_run_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out", metavar="DIR", help="run directory (default: results/<experiment>-<time>)"
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="finish an interrupted run in --out, skipping finished cells",
    )
    parser.add_argument(
        "--no-report", action="store_true", help="write tables and figures but not report.html"
    )


def run_experiment(
    name: str,
    args: argparse.Namespace,
    body: Callable[[RunStore], None],
    extra_meta: dict | None = None,
) -> RunStore:
    """Open the run directory, record metadata, run `body`, then export tables, figures and
    the report from the database. Cells finished before an error or Ctrl-C stay saved."""
    # Validate the engine before creating anything, so a missing build fails early.
    info = engine.info()
    store = RunStore.create(args.out, name, resume=getattr(args, "resume", False))
    meta = metadata.collect(sys.argv, info)
    if extra_meta:
        meta.update(extra_meta)
    store.begin(name, meta)
    status = "failed"
    try:
        body(store)
        status = "complete"
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    finally:
        store.finish(status)
        if status == "complete" and not getattr(args, "no_export", False):
            from pqlab.report import export_all

            export_all(store, html=not getattr(args, "no_report", False))
            print(f"results: {store.path}", file=sys.stderr)
        store.close()
    return store
