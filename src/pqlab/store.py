"""The run directory and its results database.

A run directory holds `results.duckdb` (raw samples, summaries, metadata, cell status),
`metadata.json`, `tables/` (CSV and Parquet exports), `figures/` (PNG and SVG) and
`report.html`. Results are committed cell by cell (or for the cells measured together, as
one): a crash loses at most the cells in flight, and `--resume` finishes the rest. Summaries are always recomputed from raw samples.

One writer at a time: a writer holds an exclusive lock on `RUN/.lock` (with its PID in it)
for as long as the store is open; readers (`report`, `compare`) take a shared lock and open
the database read-only, so they never change a run and never race a writer. The database
records the schema version it was written with; a run of another version is refused with
one line, as is a `--resume` on another machine or engine build (`check_resume`).

A results database is untrusted input (a colleague's run, a file anyone could have made): it
is opened with DuckDB's external access off and no extension loaded (`DB_CONFIG`), so nothing
in it (a view over `read_csv('/etc/shadow')`, a macro) can read or write another file; its
base tables must have pqlab's columns with pqlab's types and its JSON columns objects
(`_check_schema`) before anything reads them; and any query that finds a table, a column or a
value of another shape is one line naming the database (`_Connection`, `RunStore.reading`).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import fcntl
import json
import os
import re
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import duckdb
import pyarrow as pa

from pqlab import files
from pqlab.errors import StorageError, UserError
from pqlab.files import DB_NAME, RUN_DIRS, Dir
from pqlab.stages import StageClock

# 2: invocations carry the writer's PID (killed runs are detected); TLS tables carry the
# stack. Version 1 runs can still be read by `pqlab compare`.
SCHEMA_VERSION = 2
READABLE_VERSIONS = (1, 2)
LOCK_NAME = ".lock"
# DuckDB's own files beside the database (its write-ahead log), made by DuckDB itself.
DB_FILES = (DB_NAME, DB_NAME + ".wal")


# How every results database is opened: nothing in it may reach a file, the network or an
# extension (exports write through a connection of their own that sees only Arrow data).
DB_CONFIG = {
    "enable_external_access": False,
    "autoload_known_extensions": False,
    "autoinstall_known_extensions": False,
    "lock_configuration": True,
}

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


def _columns_of(ddl: str) -> dict[str, dict[str, str]]:
    """table -> column -> DuckDB type of what `ddl` creates (as information_schema says)."""
    con = duckdb.connect(":memory:", config=DB_CONFIG)
    try:
        con.execute(ddl)
        out: dict[str, dict[str, str]] = {}
        for table, column, kind in con.execute(
            "SELECT table_name, column_name, data_type FROM information_schema.columns"
        ).fetchall():
            out.setdefault(table, {})[column] = kind
        return out
    finally:
        con.close()


# The base tables every run has, as a reader checks them (`RunStore._check_schema`).
BASE_COLUMNS = _columns_of(_BASE_SCHEMA)

# What must be the same for `--resume` to add cells to a run: (label, path in metadata).
RESUME_IDENTITY = (
    ("CPU model", ("cpu", "model")),
    ("logical CPUs", ("cpu", "count")),
    ("engine build", ("engine", "build_id")),
    ("engine programs", ("engine", "programs")),
    ("OpenSSL", ("engine", "openssl", "version_text")),
    ("liboqs", ("engine", "liboqs", "version")),
    ("pqlab version", ("pqlab_version",)),
)


def default_out(experiment: str) -> Path:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("results") / f"{experiment}-{stamp}"


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def _dig(d: dict, path: tuple[str, ...]):
    for k in path:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


class _Lock:
    """`RUN/.lock`: flock(2) exclusive for a writer (PID written inside), shared for readers.
    Released when the process exits, however it exits. The last holder removes the file
    when it lets go (while still holding the lock: a writer always, a reader when it can take
    the lock exclusively, so no one else holds it), so a run directory nobody is using holds
    no lock file; a process that took the lock on a file since removed (it lost that race)
    sees that the name no longer names its file and tries again. A reader that cannot create
    the file (a read-only run directory) reads without a lock, as it can only read. The file
    is opened in the run directory's descriptor, never through a link; a writer writes its
    PID only into a regular file of its own with no other link."""

    ATTEMPTS = 20  # each retry follows a writer that removed the file: bounded

    def __init__(self, run: Dir, exclusive: bool):
        self.run = run
        self.path = run.path / LOCK_NAME
        self.fd = -1
        self.exclusive = exclusive
        for _ in range(self.ATTEMPTS):
            if not self._try_once():
                return  # no lock file and none wanted (a reader of an unlocked run)
            if self._still_ours():
                break
            os.close(self.fd)
            self.fd = -1
        else:
            raise UserError(f"cannot lock {self.path}: it keeps being replaced")
        if exclusive:
            st = os.fstat(self.fd)
            if st.st_uid != os.geteuid() or st.st_nlink != 1:
                self.release(remove=False)
                raise UserError(
                    f"{self.path} is not a lock file of pqlab's (another user's file, or a "
                    "hard link to one); remove it and run again"
                )
            try:
                os.ftruncate(self.fd, 0)
                os.write(self.fd, f"{os.getpid()}\n".encode())
            except OSError as e:
                self.release()
                raise files.storage_error(e, str(self.path)) from None

    def _open(self, flags: int) -> int:
        return os.open(
            LOCK_NAME, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o644,
            dir_fd=self.run.fd,
        )  # fmt: skip

    def _try_once(self) -> bool:
        try:
            self.fd = self._open(os.O_RDWR | os.O_CREAT)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise UserError(
                    f"{self.path} is a symbolic link; pqlab does not write through links "
                    "(remove it)"
                ) from None
            if self.exclusive:
                raise files.storage_error(e, str(self.path)) from None
            try:  # a reader without write access to the run directory
                self.fd = self._open(os.O_RDONLY)
            except OSError:
                return False  # no lock file and no right to make one: read unlocked
        if not stat.S_ISREG(os.fstat(self.fd).st_mode):
            os.close(self.fd)
            self.fd = -1
            raise UserError(f"{self.path} is not a regular file")
        try:
            fcntl.flock(
                self.fd, (fcntl.LOCK_EX if self.exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB
            )
        except OSError as e:
            holder = self.holder()
            os.close(self.fd)
            self.fd = -1
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                who = f"PID {holder}" if holder else "another process"
                raise UserError(
                    f"run directory {str(self.run.path)!r} is in use by {who}; wait for it "
                    "to finish (or stop it and use --resume), or choose another --out"
                ) from None
            raise UserError(f"cannot lock {self.path}: {e.strerror}") from None
        return True

    def _still_ours(self) -> bool:
        st = self.run.entry(LOCK_NAME)
        if st is None:
            return False
        mine = os.fstat(self.fd)
        return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)

    def holder(self) -> int | None:
        try:
            text = os.pread(self.fd, 32, 0).decode().strip()
            return int(text) if text else None
        except (OSError, ValueError):
            return None

    def release(self, remove: bool = True) -> None:
        if self.fd >= 0:
            try:
                last = self.exclusive or not fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                last = False  # another reader still holds it: the last one removes it
            if remove and last and self._still_ours():
                with contextlib.suppress(OSError):
                    os.unlink(LOCK_NAME, dir_fd=self.run.fd)
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1


# Errors that mean the file itself is bad (truncated, overwritten, half-written by a crash
# outside DuckDB), as opposed to a mistake in a query.
_DAMAGE = (duckdb.IOException, duckdb.SerializationException, duckdb.InternalException)
# DuckDB's messages for a write the file system refused carry the system's own words.
_REFUSED = {os.strerror(code): code for code in files.STORAGE_ERRNOS}
_QUOTED_FILE = re.compile(r'"(/[^"\\]+)\\?"')  # in DuckDB's messages: "/path" or \"/path\"


def _refused(db_path: Path, e: Exception) -> StorageError | None:
    """A full disk, a read-only file system...: the file it names (results.duckdb, or an
    export's target) could not be written. Not the database's fault."""
    text = str(e)
    for words, code in _REFUSED.items():
        if words in text:
            named = _QUOTED_FILE.search(text)
            what = named.group(1) if named else str(db_path)
            return files.storage_error(OSError(code, words), what)
    return None


# Errors of a query that met a table, a column or a value of another shape than pqlab's:
# the database was not written by pqlab (or was changed since).
_FOREIGN = (
    duckdb.CatalogException, duckdb.BinderException, duckdb.ConversionException,
    duckdb.InvalidInputException, duckdb.TypeMismatchException, duckdb.PermissionException,
    duckdb.OutOfRangeException, duckdb.InvalidTypeException, duckdb.NotImplementedException,
)  # fmt: skip


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return " ".join(text.splitlines()[0].split())[:300] if text else type(e).__name__


def foreign(db_path: Path, e: BaseException) -> UserError:
    """One line for a database that does not hold what pqlab writes."""
    return UserError(f"{db_path} does not hold what pqlab writes: {_first_line(e)}")


def _damaged(db_path: Path, e: Exception) -> UserError:
    refused = _refused(db_path, e)
    if refused is not None:
        return refused
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return UserError(f"{db_path} is damaged: {first}")


class _Connection:
    """A DuckDB connection whose damage errors (from any query, at any time: a truncated file
    opens fine and fails on the first block it lacks) become one line naming the file, and
    whose failed writes (a full disk: at a commit, a checkpoint, any time) one line saying
    what the file system refused."""

    def __init__(self, con: duckdb.DuckDBPyConnection, db_path: Path):
        self._con = con
        self._db_path = db_path

    def _guard(self, fn, *args, **kw):
        try:
            return fn(*args, **kw)
        except duckdb.Error as e:
            refused = _refused(self._db_path, e)
            if refused is not None:
                raise refused from None
            if isinstance(e, _DAMAGE):
                raise _damaged(self._db_path, e) from None
            if isinstance(e, _FOREIGN):
                raise foreign(self._db_path, e) from None
            raise

    def execute(self, *args, **kw):
        return self._guard(self._con.execute, *args, **kw)

    def executemany(self, *args, **kw):
        return self._guard(self._con.executemany, *args, **kw)

    def sql(self, *args, **kw):
        return self._guard(self._con.sql, *args, **kw)

    def __getattr__(self, name):
        return getattr(self._con, name)


def write_error(path: Path, e: Exception) -> UserError:
    """One line for a DuckDB write of the file `path` that failed (an export's COPY): what
    the file system refused, naming the file, never a database."""
    refused = _refused(path, e)
    if refused is not None:
        return refused
    return StorageError(f"cannot write {files.shown(path)}: {_first_line(e)}")


def _connect(db_path: Path, read_only: bool) -> _Connection:
    try:
        con = duckdb.connect(str(db_path), read_only=read_only, config=DB_CONFIG)
        return _Connection(con, db_path)
    except duckdb.Error as e:
        raise _damaged(db_path, e) from None


class RunStore:
    """One run directory. `RunStore.create(...)` starts or resumes a run (the one writer),
    `RunStore.open(...)` reads one. The directory is opened once (`pqlab.files.Dir`): every
    file the run writes (its lock, metadata.json, tables, figures, the report) is made in it
    by `pqlab.files`, never through a link."""

    def __init__(self, run: Dir, read_only: bool = False, _lock: _Lock | None = None):
        self.dir = run
        self.path = run.path
        self.db_path = self.path / DB_NAME
        self.read_only = read_only
        self._lock = _lock
        # A write-ahead log left beside the database: its last writer ended without folding
        # it in (killed, or its final checkpoint failed on a full disk). DuckDB reads it.
        self.unfinished_log = run.entry(DB_FILES[1]) is not None
        self.con = _connect(self.db_path, read_only)
        self.invocation_id: int | None = None
        self.schema_version = SCHEMA_VERSION
        # Where exports go (tables/, figures/, report.html): the run directory itself, or
        # the scratch directory of `pqlab export`. None: nothing may be written.
        self.output: Dir | None = None if read_only else run
        # Where the running step's time goes (`pqlab.stages`); written into its metadata.
        self.stages = StageClock()

    # --- opening -------------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        out: str | Path | None,
        experiment: str,
        resume: bool = False,
        migrations: tuple[str, ...] | list[str] = (),
    ) -> RunStore:
        """Open `out` for writing. Refuse to add to finished results of `experiment` unless
        --resume is given, so a second run never silently mixes with the first. Runs the
        experiments' schema `migrations` (idempotent SQL) on a run that already exists, so
        its tables gain what this pqlab writes before anything is written. A directory made
        here is removed again when the start fails (a full disk, say)."""
        path = Path(out) if out else default_out(experiment)
        run, made = files.open_run(path)
        try:
            lock = _Lock(run, exclusive=True)
        except BaseException:
            files.discard(run, made)
            raise
        try:
            for name in DB_FILES:
                run.check_file(name)
            for name in RUN_DIRS:  # each a real directory where there is one
                if run.entry(name) is not None:
                    run.sub(name, create=False)
            existed = run.entry(DB_NAME) is not None
            store = cls(run, _lock=lock)
        except BaseException:
            lock.release()
            files.discard(run, made)
            raise
        try:
            if existed:
                store._check_version(write=True)
                for sql in migrations:
                    store.con.execute(sql)
            store.con.execute(_BASE_SCHEMA)
            if not existed:
                store.con.execute("INSERT INTO schema_info VALUES (?)", [SCHEMA_VERSION])
            for sub in ("tables", "figures"):
                run.sub(sub)
            store.mark_killed()
            if experiment and not resume and store.cells_done(experiment):
                raise UserError(
                    f"{str(path)!r} already holds {experiment} results; use --resume to finish "
                    "that run, or choose another --out"
                )
        except BaseException:
            store.close()
            files.discard(run, made and not existed)
            raise
        return store

    @classmethod
    def open(cls, path: str | Path, any_version: bool = False, outputs: bool = False) -> RunStore:
        """Open a run directory to read it (read-only; waits for no one: a run still being
        written is refused with the writer's PID). `outputs`: its tables, figures and report
        will be written again (`pqlab report`): the directory must then be one pqlab writes
        into (the user's own, see `pqlab.files`)."""
        path = Path(path)
        if not os.path.isdir(path):
            raise UserError(f"{str(path)!r} is not a pqlab run directory (no such directory)")
        if outputs:
            run = Dir.open(path, "run directory", own=True)
        else:
            run = Dir.reading(path, "run directory")
        try:
            st = run.entry(DB_NAME)
            if st is None or not stat.S_ISREG(st.st_mode):
                raise UserError(f"{str(path)!r} is not a pqlab run directory (no {DB_NAME})")
            lock = _Lock(run, exclusive=False)
        except BaseException:
            run.close()
            raise
        try:
            store = cls(run, read_only=True, _lock=lock)
        except BaseException:
            lock.release()
            run.close()
            raise
        if outputs:
            store.output = run
        try:
            store._check_version(write=False, any_version=any_version)
        except BaseException:
            store.close()
            raise
        return store

    def _check_schema(self) -> None:
        """The base tables have pqlab's columns with pqlab's types (more columns are
        allowed: a newer pqlab's), and their JSON columns hold objects; or one line."""
        have: dict[str, dict[str, str]] = {}
        for table, column, kind in self.con.execute(
            "SELECT table_name, column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = 'main'"
        ).fetchall():
            have.setdefault(table, {})[column] = kind
        for table, columns in BASE_COLUMNS.items():
            if table not in have:
                raise UserError(
                    f"{self.db_path} has no {table} table (not a pqlab run, or a damaged one)"
                )
            for column, kind in columns.items():
                got = have[table].get(column)
                if got is None:
                    raise UserError(
                        f"{self.db_path}: table {table} has no column {column} (not a "
                        "pqlab run, or a damaged one)"
                    )
                if got != kind:
                    raise UserError(
                        f"{self.db_path}: {table}.{column} is {got}, not {kind} (not a "
                        "pqlab run, or a damaged one)"
                    )
        for table, column in (("invocations", "metadata"), ("cells", "params")):
            bad = self.con.execute(
                f"SELECT count(*) FROM {table} WHERE {column} IS NOT NULL "
                f"AND json_type({column}) <> 'OBJECT'"
            ).fetchall()[0][0]
            if bad:
                raise UserError(
                    f"{self.db_path}: {bad} value(s) of {table}.{column} are not JSON objects "
                    "(not a pqlab run, or a damaged one)"
                )

    @contextlib.contextmanager
    def reading(self) -> Iterator[RunStore]:
        """Around code that reads the run's tables (report, export, compare): a value of
        another shape than pqlab writes (a number where text was, a JSON list where an
        object was) is one line naming the database, not a traceback."""
        try:
            yield self
        except (ValueError, TypeError, KeyError, AttributeError, IndexError) as e:
            raise foreign(self.db_path, e) from None

    def _check_version(self, write: bool, any_version: bool = False) -> None:
        try:
            rows = self.con.execute("SELECT version FROM schema_info").fetchall()
        except duckdb.Error as e:
            raise _damaged(self.db_path, e) from None
        except UserError:
            raise UserError(
                f"{self.db_path} has no schema_info table (not a pqlab run, or a damaged one)"
            ) from None
        try:
            versions = sorted({int(r[0]) for r in rows})
        except (TypeError, ValueError):
            raise UserError(f"{self.db_path} is damaged: schema versions {rows[:3]}") from None
        if len(versions) != 1:
            raise UserError(f"{self.db_path} is damaged: schema versions {versions or 'none'}")
        version = versions[0]
        self.schema_version = version
        self._check_schema()
        if version == SCHEMA_VERSION:
            return
        if not write and any_version and version in READABLE_VERSIONS:
            return
        what = "an older" if version < SCHEMA_VERSION else "a newer"
        raise UserError(
            f"{str(self.path)!r} was written by {what} pqlab (results schema {version}; this "
            f"pqlab {'writes' if write else 'reads'} schema {SCHEMA_VERSION}); "
            + ("use another --out" if write else "open it with the pqlab that made it")
        )

    def close(self, check: bool = False) -> None:
        """Checkpoint (a writer: the write-ahead log folded into results.duckdb), close, let
        go of the lock. `check`: a checkpoint that fails (a full disk) raises StorageError
        after everything is closed; the results stay in results.duckdb.wal, which every
        reader reads and the next writer folds in."""
        failed = None
        if not self.read_only and self._lock is not None:
            try:
                self.con.execute("CHECKPOINT")
            except Exception as e:  # noqa: BLE001 - reported below when asked to
                failed = e
        with contextlib.suppress(Exception):
            self.con.close()
        if self._lock is not None:
            self._lock.release()
            self._lock = None
        self.dir.close()
        if failed is not None and check:
            refused = failed if isinstance(failed, StorageError) else None
            reason = str(refused) if refused else str(failed).strip().splitlines()[0]
            raise StorageError(
                f"the run's final checkpoint failed ({reason}); its results are kept in "
                f"{self.db_path}.wal: free space, then `pqlab report {self.path}` reads them "
                "and a --resume folds them into the database"
            )

    # --- invocations and metadata --------------------------------------------------------
    def begin(self, experiment: str, metadata: dict) -> None:
        row = self.con.execute("SELECT coalesce(max(id), 0) + 1 FROM invocations").fetchall()[:1]
        self.invocation_id = int(row[0][0])
        self.stages = StageClock()
        metadata = {**metadata, "pid": os.getpid()}
        self.con.execute(
            "INSERT INTO invocations VALUES (?, ?, ?, ?, NULL, 'running', ?)",
            [
                self.invocation_id,
                experiment,
                metadata.get("command_line", ""),
                _now(),
                json.dumps(metadata, default=str),
            ],
        )
        self.write_metadata_json()

    def finish(self, status: str = "complete") -> None:
        if self.invocation_id is None:
            return
        self.merge_metadata(self.invocation_id, "stages", self.stages.summary())
        self.con.execute(
            "UPDATE invocations SET finished = ?, status = ? WHERE id = ?",
            [_now(), status, self.invocation_id],
        )
        self.invocation_id = None
        self.write_metadata_json()

    def merge_metadata(self, invocation_id: int, key: str, value: dict) -> None:
        """Merge `value` into `key` of an invocation's metadata (metadata.json follows)."""
        row = self.con.execute(
            "SELECT metadata FROM invocations WHERE id = ?", [invocation_id]
        ).fetchall()
        meta = json.loads(row[0][0]) if row and row[0][0] else {}
        merged = meta.get(key) if isinstance(meta.get(key), dict) else {}
        meta[key] = {**merged, **value}
        self.con.execute(
            "UPDATE invocations SET metadata = ? WHERE id = ?",
            [json.dumps(meta, default=str), invocation_id],
        )

    def record_export(self, seconds: float) -> None:
        """The run's export took `seconds`: kept as the `export` stage of the last step (the
        export covers the whole run and follows it), its wall time grown by as much."""
        row = self.con.execute("SELECT max(id) FROM invocations").fetchall()
        if not row or row[0][0] is None:
            return
        inv = int(row[0][0])
        meta = next((i["metadata"] for i in self.invocations() if i["id"] == inv), {})
        stages = meta.get("stages") or {"wall_s": 0.0, "seconds": {}}
        stages["seconds"] = {**stages.get("seconds", {}), "export": round(seconds, 3)}
        stages["wall_s"] = round(stages.get("wall_s", 0.0) + seconds, 3)
        self.merge_metadata(inv, "stages", stages)
        self.write_metadata_json()

    def mark_killed(self) -> list[int]:
        """Invocations still 'running' when a writer opens the run were killed (SIGKILL, power
        loss): their writer no longer holds the lock we now hold. Say so, instead of leaving
        them 'running' forever."""
        rows = self.con.execute("SELECT id FROM invocations WHERE status = 'running'").fetchall()
        killed = [int(r[0]) for r in rows]
        for inv_id in killed:
            self.con.execute("UPDATE invocations SET status = 'killed' WHERE id = ?", [inv_id])
        if killed:
            self.write_metadata_json()
        return killed

    def metadata(self) -> dict:
        """Metadata of the most recent invocation (machine, libraries, command line)."""
        row = self.con.execute(
            "SELECT metadata FROM invocations ORDER BY id DESC LIMIT 1"
        ).fetchall()[:1]
        return json.loads(row[0][0]) if row else {}

    def invocations(self, experiment: str | None = None) -> list[dict]:
        sql = "SELECT id, experiment, command_line, started, finished, status, metadata FROM "
        sql += "invocations" + (" WHERE experiment = ?" if experiment else "") + " ORDER BY id"
        rows = self.con.execute(sql, [experiment] if experiment else []).fetchall()
        return [
            {
                "id": r[0],
                "experiment": r[1],
                "command_line": r[2],
                "started": r[3],
                "finished": r[4],
                "status": r[5],
                "metadata": json.loads(r[6]) if r[6] else {},
            }
            for r in rows
        ]

    def check_resume(self, metadata: dict) -> None:
        """Refuse to add to a run made on another machine or with another engine build or
        library, naming the first difference."""
        earlier = self.invocations()
        if not earlier:
            return
        first = earlier[0]["metadata"]
        for label, path in RESUME_IDENTITY:
            was, now = _dig(first, path), _dig(metadata, path)
            if was is not None and now is not None and was != now:
                raise UserError(
                    f"--resume: {label} differs from the run's ({was!r} then, {now!r} now); "
                    "finish it on the same machine and build, or choose another --out"
                )

    def check_plan(self, experiment: str, key: dict) -> None:
        """Refuse to resume `experiment` with per-cell parameters other than those its finished
        cells were measured with (e.g. -n 20 into cells of -n 200)."""
        if not self.cells_done(experiment):
            return
        for inv in reversed(self.invocations(experiment)):
            stored = inv["metadata"].get("plan")
            if stored is None:
                continue
            for k in sorted(set(stored) | set(key)):
                was, now = stored.get(k), key.get(k)
                if was != now:
                    raise UserError(
                        f"--resume: {k} was {was!r} for the finished {experiment} cells, now "
                        f"{now!r}; resume with the same options or choose another --out"
                    )
            return

    def write_metadata_json(self) -> None:
        invocations = self.invocations()
        if not invocations:
            return
        latest = dict(invocations[-1]["metadata"])
        latest["invocations"] = [
            {k: v for k, v in i.items() if k != "metadata"} for i in invocations
        ]
        self.dir.write("metadata.json", json.dumps(latest, indent=2, sort_keys=True, default=str))

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

    def cells_done_count(self) -> int:
        """How many cells the run has finished, of every experiment."""
        return int(self.con.execute("SELECT count(*) FROM cells").fetchall()[0][0])

    @contextlib.contextmanager
    def cell(self, experiment: str, cell_id: str, params: dict) -> Iterator[None]:
        """Everything written inside is committed together with the cell's 'done' mark."""
        with self.cells(experiment) as mark:
            yield
            mark(cell_id, params)

    @contextlib.contextmanager
    def cells(self, experiment: str) -> Iterator[Callable[[str, dict], None]]:
        """Everything written inside is committed together with the 'done' marks of the
        cells given to `mark(cell_id, params)`: one transaction (and one insert per table)
        for the cells one process measured. An interruption loses them all, and a resume
        measures them again."""
        marks: list[list] = []

        def mark(cell_id: str, params: dict) -> None:
            marks.append([experiment, str(cell_id), json.dumps(params, sort_keys=True), _now()])

        with self.stages.stage("database_writes"):
            self.con.execute("BEGIN TRANSACTION")
        try:
            yield mark
            with self.stages.stage("database_writes"):
                if marks:
                    self.con.executemany("INSERT INTO cells VALUES (?, ?, ?, ?)", marks)
                self.con.execute("COMMIT")
        except BaseException:
            self.con.execute("ROLLBACK")
            raise

    # --- data ----------------------------------------------------------------------------
    def ensure_table(self, ddl: str) -> None:
        """`CREATE TABLE IF NOT EXISTS ...` for an experiment's raw or summary table."""
        self.con.execute(ddl)

    def insert(self, table: str, columns: dict[str, list] | pa.Table | None) -> None:
        """Append columns (name -> list of values, or an Arrow table) to `table`, matching
        by column name."""
        if columns is None or not len(columns):
            return
        with self.stages.stage("database_writes"):
            arrow = columns if isinstance(columns, pa.Table) else pa.table(columns)
            names = ", ".join(f'"{c}"' for c in arrow.column_names)
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
        rows = [
            [experiment, str(cell_id), w.code, w.subject, w.message, w.advice] for w in warnings
        ]
        if rows:
            with self.stages.stage("database_writes"):
                self.con.executemany("INSERT INTO warnings VALUES (?, ?, ?, ?, ?, ?)", rows)

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

    @contextlib.contextmanager
    def arrow_reader(self, sql: str, batch: int = 65536) -> Iterator:
        """Query result as a stream of Arrow record batches (a table larger than memory),
        read on a cursor of its own (the store's connection stays free meanwhile)."""
        cursor = _Connection(self.con.cursor(), self.db_path)
        try:
            rel = cursor.sql(sql)
            for method in ("to_arrow_reader", "fetch_record_batch", "record_batch"):
                fn = getattr(rel, method, None)
                if fn is not None:
                    yield cursor._guard(fn, batch)
                    return
            raise RuntimeError("this duckdb has no arrow reader")
        finally:
            cursor.close()

    def numpy(self, sql: str, params: list | None = None) -> dict:
        """Query result as a dict of numpy arrays (column -> array)."""
        return self.con.execute(sql, params or []).fetchnumpy()

    def has_table(self, name: str) -> bool:
        row = self.con.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_name = ?", [name]
        ).fetchall()[:1]
        return bool(row and row[0][0])

    def columns(self, table: str) -> set[str]:
        rows = self.con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = ?", [table]
        ).fetchall()
        return {r[0] for r in rows}

    # --- exports -------------------------------------------------------------------------
    def export_table(self, name: str, sql: str, params: list | None = None) -> Path:
        """Write the result of `sql` to tables/<name>.csv and .parquet; return the CSV path."""
        rel = self.arrow(sql, params)
        import pyarrow.csv as pacsv
        import pyarrow.parquet as pq

        tables = self._outputs("tables")
        with tables.replacing(f"{name}.csv") as f:
            pacsv.write_csv(rel, f)
        with tables.replacing(f"{name}.parquet") as f:
            pq.write_table(rel, f)
        return tables.path_of(f"{name}.csv")

    def _outputs(self, sub: str | None = None) -> Dir:
        """Where exports go (or its sub-directory `sub`)."""
        if self.output is None:
            raise RuntimeError("this store was opened to read only: it writes no exports")
        return self.output.sub(sub) if sub else self.output

    def export_rows(self, name: str, rows: list[dict], columns: list[str] | None = None):
        """Write computed rows (dicts) as tables/<name>.csv and .parquet, in `columns` order
        (default: the first row's keys); None when there are no rows."""
        if not rows:
            return None
        cols = columns or list(rows[0])
        table = pa.table({c: [r.get(c) for r in rows] for c in cols})
        self.con.register("_pqlab_rows", table)
        try:
            return self.export_table(name, "SELECT * FROM _pqlab_rows")
        finally:
            self.con.unregister("_pqlab_rows")

    def figures(self) -> Dir:
        """figures/ of the exports."""
        return self._outputs("figures")

    def write_output(self, name: str, data: str | bytes) -> Path:
        """A file of the exports (report.html), written whole or not at all."""
        return self._outputs().write(name, data)
