"""The run directory and its results database.

A run directory holds `results.duckdb` (raw samples, summaries, metadata, cell status),
`metadata.json`, `tables/` (CSV and Parquet exports), `figures/` (PNG and SVG) and
`report.html`. Results are committed cell by cell: a crash loses at most the cell in
flight, and `--resume` finishes the rest. Summaries are always recomputed from raw samples.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pyarrow as pa

from pqlab.errors import UserError

SCHEMA_VERSION = 1
DB_NAME = "results.duckdb"

_BASE_SCHEMA = """
CREATE TABLE IF NOT EXISTS schema_info (version INTEGER);
CREATE TABLE IF NOT EXISTS invocations (
    id INTEGER, experiment TEXT, command_line TEXT, started TEXT, finished TEXT,
    status TEXT, metadata JSON);
CREATE TABLE IF NOT EXISTS cells (
    experiment TEXT, cell_id TEXT, params JSON, finished TEXT,
    PRIMARY KEY (experiment, cell_id));
CREATE TABLE IF NOT EXISTS warnings (
    experiment TEXT, cell_id TEXT, code TEXT, subject TEXT, message TEXT, advice TEXT);
"""


def default_out(experiment: str) -> Path:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("results") / f"{experiment}-{stamp}"


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


class RunStore:
    """One run directory. Use `RunStore.create(...)` to start or resume, `open(...)` to read."""

    def __init__(self, path: Path, read_only: bool = False):
        self.path = Path(path)
        self.db_path = self.path / DB_NAME
        self.con = duckdb.connect(str(self.db_path), read_only=read_only)
        self.invocation_id: int | None = None

    # --- opening -------------------------------------------------------------------------
    @classmethod
    def create(cls, out: str | Path | None, experiment: str, resume: bool = False) -> RunStore:
        """Open `out` for writing `experiment`. Refuse to mix with finished results unless
        --resume is given, so a second run never silently overwrites the first."""
        path = Path(out) if out else default_out(experiment)
        if path.exists() and not path.is_dir():
            raise UserError(f"--out {str(path)!r} exists and is not a directory")
        try:
            path.mkdir(parents=True, exist_ok=True)
            (path / "tables").mkdir(exist_ok=True)
            (path / "figures").mkdir(exist_ok=True)
        except OSError as e:
            raise UserError(f"cannot create run directory {str(path)!r}: {e.strerror}") from None
        existed = (path / DB_NAME).exists()
        store = cls(path)
        store.con.execute(_BASE_SCHEMA)
        if not existed:
            store.con.execute("INSERT INTO schema_info VALUES (?)", [SCHEMA_VERSION])
        elif not resume and store.cells_done(experiment):
            store.close()
            raise UserError(
                f"{str(path)!r} already holds {experiment} results; use --resume to finish "
                "that run, or choose another --out"
            )
        return store

    @classmethod
    def open(cls, path: str | Path) -> RunStore:
        path = Path(path)
        if not (path / DB_NAME).exists():
            raise UserError(f"{str(path)!r} is not a pqlab run directory (no {DB_NAME})")
        store = cls(path, read_only=False)
        return store

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.con.close()

    # --- invocations and metadata --------------------------------------------------------
    def begin(self, experiment: str, metadata: dict) -> None:
        row = self.con.execute("SELECT coalesce(max(id), 0) + 1 FROM invocations").fetchall()[:1]
        self.invocation_id = int(row[0][0])
        self.con.execute(
            "INSERT INTO invocations VALUES (?, ?, ?, ?, NULL, 'running', ?)",
            [
                self.invocation_id,
                experiment,
                metadata.get("command_line", ""),
                _now(),
                json.dumps(metadata),
            ],
        )
        self.write_metadata_json()

    def finish(self, status: str = "complete") -> None:
        if self.invocation_id is None:
            return
        self.con.execute(
            "UPDATE invocations SET finished = ?, status = ? WHERE id = ?",
            [_now(), status, self.invocation_id],
        )
        self.write_metadata_json()

    def metadata(self) -> dict:
        """Metadata of the most recent invocation (machine, libraries, command line)."""
        row = self.con.execute(
            "SELECT metadata FROM invocations ORDER BY id DESC LIMIT 1"
        ).fetchall()[:1]
        return json.loads(row[0][0]) if row else {}

    def write_metadata_json(self) -> None:
        rows = self.con.execute(
            "SELECT id, experiment, command_line, started, finished, status, metadata "
            "FROM invocations ORDER BY id"
        ).fetchall()
        if not rows:
            return
        latest = json.loads(rows[-1][6])
        latest["invocations"] = [
            {
                "id": r[0],
                "experiment": r[1],
                "command_line": r[2],
                "started": r[3],
                "finished": r[4],
                "status": r[5],
            }
            for r in rows
        ]
        tmp = self.path / "metadata.json.tmp"
        tmp.write_text(json.dumps(latest, indent=2, sort_keys=True))
        tmp.replace(self.path / "metadata.json")

    def experiments(self) -> list[str]:
        rows = self.con.execute(
            "SELECT DISTINCT experiment FROM cells UNION SELECT DISTINCT experiment "
            "FROM invocations"
        ).fetchall()
        return sorted(r[0] for r in rows)

    # --- cells ---------------------------------------------------------------------------
    def cells_done(self, experiment: str) -> set[str]:
        rows = self.con.execute(
            "SELECT cell_id FROM cells WHERE experiment = ?", [experiment]
        ).fetchall()
        return {r[0] for r in rows}

    @contextlib.contextmanager
    def cell(self, experiment: str, cell_id: str, params: dict) -> Iterator[None]:
        """Everything written inside is committed together with the cell's 'done' mark."""
        self.con.execute("BEGIN TRANSACTION")
        try:
            yield
            self.con.execute(
                "INSERT INTO cells VALUES (?, ?, ?, ?)",
                [experiment, cell_id, json.dumps(params, sort_keys=True), _now()],
            )
            self.con.execute("COMMIT")
        except BaseException:
            self.con.execute("ROLLBACK")
            raise

    # --- data ----------------------------------------------------------------------------
    def ensure_table(self, ddl: str) -> None:
        """`CREATE TABLE IF NOT EXISTS ...` for an experiment's raw or summary table."""
        self.con.execute(ddl)

    def insert(self, table: str, columns: dict[str, list]) -> None:
        """Append columns (name -> list of values) to `table`, matching by column name."""
        if not columns:
            return
        arrow = pa.table(columns)
        names = ", ".join(f'"{c}"' for c in columns)
        self.con.register("_pqlab_insert", arrow)
        try:
            self.con.execute(f"INSERT INTO {table} ({names}) SELECT {names} FROM _pqlab_insert")
        finally:
            self.con.unregister("_pqlab_insert")

    def insert_rows(self, table: str, rows: list[dict]) -> None:
        if not rows:
            return
        keys = list(rows[0])
        self.insert(table, {k: [r.get(k) for r in rows] for k in keys})

    def add_warnings(self, experiment: str, cell_id: str, warnings) -> None:
        for w in warnings:
            self.con.execute(
                "INSERT INTO warnings VALUES (?, ?, ?, ?, ?, ?)",
                [experiment, cell_id, w.code, w.subject, w.message, w.advice],
            )

    def query(self, sql: str, params: list | None = None) -> list[dict]:
        cur = self.con.execute(sql, params or [])
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    def arrow(self, sql: str, params: list | None = None) -> pa.Table:
        """Query result as a pyarrow Table (DuckDB 1.x and 2.x spell this differently)."""
        rel = self.con.sql(sql, params=params or None)
        for method in ("to_arrow_table", "fetch_arrow_table", "arrow"):
            fn = getattr(rel, method, None)
            if fn is not None:
                table = fn()
                return table.read_all() if hasattr(table, "read_all") else table
        raise RuntimeError("this duckdb has no arrow export")

    def numpy(self, sql: str, params: list | None = None) -> dict:
        """Query result as a dict of numpy arrays (column -> array)."""
        return self.con.execute(sql, params or []).fetchnumpy()

    def has_table(self, name: str) -> bool:
        row = self.con.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_name = ?", [name]
        ).fetchall()[:1]
        return bool(row and row[0][0])

    # --- exports -------------------------------------------------------------------------
    def export_table(self, name: str, sql: str, params: list | None = None) -> Path:
        """Write the result of `sql` to tables/<name>.csv and .parquet; return the CSV path."""
        csv_path = self.path / "tables" / f"{name}.csv"
        rel = self.arrow(sql, params)
        import pyarrow.csv as pacsv
        import pyarrow.parquet as pq

        tmp = csv_path.with_suffix(".csv.tmp")
        pacsv.write_csv(rel, tmp)
        tmp.replace(csv_path)
        pq.write_table(rel, self.path / "tables" / f"{name}.parquet")
        return csv_path

    def figure_path(self, name: str) -> Path:
        return self.path / "figures" / name
