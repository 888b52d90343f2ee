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
RUN changes; DIR must not exist yet, or be empty, and may not lie inside RUN. Every file is
written inside DIR (`pqlab.files`): a table whose name would leave it (a '/', '..') is
refused before anything is written, and a failed export (a full disk) removes what it wrote.
"""

from __future__ import annotations

import datetime as _dt
import json
import sys
import tempfile
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from pqlab import __version__, files
from pqlab.errors import UserError
from pqlab.files import Dir
from pqlab.report.page import export_all
from pqlab.store import RunStore, write_error

# USE_TMP_FILE false: DuckDB writes the file it is given (a new private one, `pqlab.files`)
# rather than a `tmp_` file of its own beside it.
FORMATS = {
    "csv": ("csv", "(FORMAT CSV, HEADER true, USE_TMP_FILE false)"),
    "parquet": ("parquet", "(FORMAT PARQUET, USE_TMP_FILE false)"),
    "json": ("json", "(FORMAT JSON, ARRAY true, USE_TMP_FILE false)"),
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
    if target.is_symlink():
        raise UserError(f"--to {str(target)!r} is a symbolic link; give a new directory")
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


def _copy(source, into: Dir, name: str, fmt: str) -> None:
    """`source` (Arrow data: a table or a stream of batches) into the new file `name` of
    `into`, by DuckDB's COPY on a connection of its own: the run's database, opened with
    external access off, never sees a path, and this connection sees only the Arrow data."""
    con = duckdb.connect(":memory:")
    try:
        con.register("_pqlab_export", source)
        with into.filled_by_path(name) as dest:
            try:
                con.execute(
                    f"COPY (SELECT * FROM _pqlab_export) TO {_sql_path(dest)} {FORMATS[fmt][1]}"
                )
            except duckdb.Error as e:
                raise write_error(dest, e) from None
    finally:
        con.close()


def _describe(store: RunStore, select: str) -> tuple[int, list[str]]:
    cur = store.con.execute(f"SELECT * FROM ({select}) LIMIT 0")
    cols = [d[0] for d in cur.description]
    n = store.con.execute(f"SELECT count(*) FROM ({select})").fetchone()[0]
    return int(n), cols


def _file_names(tables: list[str], ext: str) -> None:
    """Every table's file stays in its directory: a name from the database with a '/' or
    '..' (or an absolute one) is refused, before anything is written."""
    for t in tables:
        try:
            files.check_name(f"{t}.{ext}")
        except UserError:
            raise UserError(
                f"the run holds a table named {t!r}, whose file would leave --to; pqlab exports "
                "only tables whose names are plain file names (no '/', not '..')"
            ) from None


def _export_raw(store: RunStore, out: Dir, fmt: str) -> list[dict]:
    ext = FORMATS[fmt][0]
    raw = out.sub("raw")
    entries = []
    for t in raw_tables(store):
        select = f"SELECT * FROM {_q(t)}"
        with store.arrow_reader(select) as source:
            _copy(source, raw, f"{t}.{ext}", fmt)
        rows, cols = _describe(store, select)
        entries.append(
            {"table": t, "kind": "raw", "file": f"raw/{t}.{ext}", "rows": rows, "columns": cols}
        )
    return entries


def _derived(store: RunStore, scratch: Dir) -> list[Path]:
    """The report's tables, computed into `scratch` (tables/*.parquet and .csv); figures
    drawn on the way land in scratch too. The run directory is not written."""

    store.output = scratch
    try:
        export_all(store, html=False)
    finally:
        store.output = None
    return sorted(scratch.sub("tables").path.glob("*.parquet"))


def _export_derived(store: RunStore, out: Dir, fmt: str) -> list[dict]:
    ext = FORMATS[fmt][0]
    tables = out.sub("tables")
    entries = []
    with (
        tempfile.TemporaryDirectory(prefix="pqlab-export-") as tmp,
        Dir.open(tmp, "scratch directory", own=True) as scratch,
    ):
        for parquet in _derived(store, scratch):
            name = parquet.stem
            data = pq.read_table(
                pa.BufferReader(scratch.sub("tables").read_bytes(parquet.name, "table"))
            )
            if fmt in ("csv", "parquet"):  # the report's own files
                scratch.sub("tables").copy_into(f"{name}.{ext}", tables, 0o644)
            else:
                _copy(data, tables, f"{name}.{ext}", fmt)
            rows, cols = data.num_rows, data.column_names
            entries.append(
                {
                    "table": name,
                    "kind": "report",
                    "file": f"tables/{name}.{ext}",
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
        _file_names(raw_tables(store), FORMATS[fmt][0])
        made = not out.exists()
        target = Dir.open(out, "--to", create=True, own=True)
        try:
            with store.reading():
                entries = _export_raw(store, target, fmt) + _export_derived(store, target, fmt)
            manifest = {
                "run": str(run_dir.resolve()),
                "format": fmt,
                "exported": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
                "pqlab_version": __version__,
                "tables": entries,
            }
            target.write("manifest.json", json.dumps(manifest, indent=1))
        except BaseException:
            for name in ("raw", "tables", "manifest.json"):
                target.remove_tree(name)
            files.discard(target, made)
            raise
        target.close()
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
