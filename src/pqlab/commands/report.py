"""`pqlab report RUN`: rebuild tables, figures and report.html from a run's database."""

from __future__ import annotations

import sys

from pqlab.report.page import export_all
from pqlab.store import RunStore


def register(sub) -> None:
    p = sub.add_parser(
        "report", help="rebuild tables, figures and report.html of a run", description=__doc__
    )
    p.add_argument("run", metavar="RUN", help="a run directory (results/...)")
    p.set_defaults(func=run)


def run(args) -> int:
    # Exports write files next to the database, never the database itself: read-only.
    store = RunStore.open(args.run, outputs=True)
    if store.unfinished_log:
        print(
            f"report: note: {store.db_path}.wal holds results its last writer did not fold "
            "into the database (it was killed, or its final checkpoint failed on a full or "
            "read-only disk); they are read from there, and the next --resume folds them in",
            file=sys.stderr,
        )
    try:
        with store.reading():
            sections = export_all(store, html=True)
    finally:
        store.close()
    print(f"report: {store.path / 'report.html'} ({len(sections)} sections)", file=sys.stderr)
    return 0
