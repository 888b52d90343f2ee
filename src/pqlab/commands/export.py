"""`pqlab export RUN --format csv|parquet|json [--to DIR]`: every table of a run, in one format,
into a directory of its own; the run is only read.

Two kinds of tables are written:
- `raw/`: every table of the run's database as stored (raw samples, per-handshake rows,
  cells, invocations with their metadata, warnings): what every number is derived from;
- `tables/`: the report's tables (the same ones `pqlab report` writes to RUN/tables),
  recomputed from the raw samples now, so they match the database even if RUN/tables is
  stale or missing.
plus `manifest.json` (run, format, pqlab version, and per table its kind, file, rows and
columns). The database is opened read-only (waiting for no writer: a run still being written
is refused), the report's tables are computed into a scratch directory, and nothing under
RUN changes; DIR must not exist yet, or be empty, and may not lie inside RUN.
"""

from __future__ import annotations

import datetime as _dt
import json
import shutil
import sys
import tempfile
from pathlib import Path

from pqlab import __version__
from pqlab.errors import UserError
from pqlab.report.page import export_all
from pqlab.store import RunStore

FORMATS = {
    "csv": ("csv", "(FORMAT CSV, HEADER true)"),
    "parquet": ("parquet", "(FORMAT PARQUET)"),
    "json": ("json", "(FORMAT JSON, ARRAY true)"),
}


def register(sub) -> None:
    p = sub.add_parser(
        "export",
        help="write every table of a run as CSV, Parquet or JSON (read-only on the run)",
        description=__doc__,
    )
    p.add_argument("run", metavar="RUN", help="a run directory (results/...)")
    p.add_argument("--format", required=True, choices=sorted(FORMATS), help="file format")
    p.add_argument(
        "--to",
        metavar="DIR",
        help="output directory (default: RUN-export-FORMAT next to the run); must not exist "
        "or be empty, and may not be inside RUN",
    )
    p.set_defaults(func=run)


def check_target(run_dir: Path, target: Path) -> None:
    run_dir, resolved = run_dir.resolve(), target.resolve()
    if resolved == run_dir or run_dir in resolved.parents:
        raise UserError(f"--to {str(target)!r} is inside the run; export leaves the run as it is")
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise UserError(f"--to {str(target)!r} exists and is not an empty directory")


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _sql_path(path: Path) -> str:
    return "'" + str(path).replace("'", "''") + "'"


def raw_tables(store: RunStore) -> list[str]:
    rows = store.query(
        "SELECT table_name FROM information_schema.tables WHERE table_type = 'BASE TABLE' "
        "AND table_schema = 'main' ORDER BY table_name"
    )
    return [r["table_name"] for r in rows]


def _copy(store: RunStore, select: str, dest: Path, fmt: str) -> None:
    store.con.execute(f"COPY ({select}) TO {_sql_path(dest)} {FORMATS[fmt][1]}")


def _describe(store: RunStore, select: str) -> tuple[int, list[str]]:
    cur = store.con.execute(f"SELECT * FROM ({select}) LIMIT 0")
    cols = [d[0] for d in cur.description]
    n = store.con.execute(f"SELECT count(*) FROM ({select})").fetchone()[0]
    return int(n), cols


def _export_raw(store: RunStore, out: Path, fmt: str) -> list[dict]:
    ext = FORMATS[fmt][0]
    (out / "raw").mkdir(parents=True)
    entries = []
    for t in raw_tables(store):
        select = f"SELECT * FROM {_q(t)}"
        dest = out / "raw" / f"{t}.{ext}"
        _copy(store, select, dest, fmt)
        rows, cols = _describe(store, select)
        entries.append(
            {"table": t, "kind": "raw", "file": f"raw/{dest.name}", "rows": rows, "columns": cols}
        )
    return entries


def _derived(store: RunStore, scratch: Path) -> list[Path]:
    """The report's tables, computed into `scratch` (tables/*.parquet and .csv); figures
    drawn on the way land in scratch too. The run directory is not written."""

    for sub in ("tables", "figures"):
        (scratch / sub).mkdir()
    real = store.path
    store.path = scratch
    try:
        export_all(store, html=False)
    finally:
        store.path = real
    return sorted((scratch / "tables").glob("*.parquet"))


def _export_derived(store: RunStore, out: Path, fmt: str) -> list[dict]:
    ext = FORMATS[fmt][0]
    (out / "tables").mkdir(parents=True)
    entries = []
    with tempfile.TemporaryDirectory(prefix="pqlab-export-") as tmp:
        for parquet in _derived(store, Path(tmp)):
            name = parquet.stem
            dest = out / "tables" / f"{name}.{ext}"
            select = f"SELECT * FROM read_parquet({_sql_path(parquet)})"
            if fmt == "csv":
                shutil.copyfile(parquet.with_suffix(".csv"), dest)  # the report's own CSV
            elif fmt == "parquet":
                shutil.copyfile(parquet, dest)
            else:
                _copy(store, select, dest, fmt)
            rows, cols = _describe(store, select)
            entries.append(
                {
                    "table": name,
                    "kind": "report",
                    "file": f"tables/{dest.name}",
                    "rows": rows,
                    "columns": cols,
                }
            )
    return entries


def export(run_dir: str | Path, fmt: str, to: str | Path | None = None) -> tuple[Path, list]:
    """Write every table of the run in `fmt`; the output directory and the manifest's
    table entries."""
    if fmt not in FORMATS:
        raise UserError(f"--format {fmt!r} is not one of {', '.join(sorted(FORMATS))}")
    run_dir = Path(run_dir)
    store = RunStore.open(run_dir)
    try:
        out = (
            Path(to) if to else run_dir.resolve().parent / f"{run_dir.resolve().name}-export-{fmt}"
        )
        check_target(run_dir, out)
        out.mkdir(parents=True, exist_ok=True)
        try:
            entries = _export_raw(store, out, fmt) + _export_derived(store, out, fmt)
        except BaseException:
            shutil.rmtree(out, ignore_errors=True)
            raise
        manifest = {
            "run": str(run_dir.resolve()),
            "format": fmt,
            "exported": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
            "pqlab_version": __version__,
            "tables": entries,
        }
        (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    finally:
        store.close()
    return out, entries


def run(args) -> int:
    out, entries = export(args.run, args.format, args.to)
    raw = sum(1 for e in entries if e["kind"] == "raw")
    print(
        f"export: {out} ({raw} database tables in raw/, {len(entries) - raw} report tables "
        f"in tables/, {args.format}; manifest.json lists them)",
        file=sys.stderr,
    )
    return 0
