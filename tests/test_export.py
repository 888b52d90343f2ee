"""`pqlab export RUN --format csv|parquet|json`: every database table and every report table
of a real run, readable in each format, equal to the database and to `pqlab report`'s tables,
and the run left exactly as it was."""

from __future__ import annotations

import csv
import json
import os

import duckdb
import pyarrow.parquet as pq
import pytest

from conftest import run_pqlab


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("export") / "RUN"
    run_pqlab(
        "primitives",
        "--kem",
        "X25519,ML-KEM-768",
        "--sig",
        "ECDSA-P256",
        "--backend",
        "openssl,python",
        "-n",
        "60",
        "--out",
        out,
        check=True,
    )
    return out


def _tree(path):
    """Every file under `path` with its size and modification time."""
    out = {}
    for root, _, files in os.walk(path):
        for f in files:
            p = os.path.join(root, f)
            st = os.stat(p)
            out[os.path.relpath(p, path)] = (st.st_size, st.st_mtime_ns)
    return out


def _db_tables(run_dir) -> dict[str, int]:
    con = duckdb.connect(str(run_dir / "results.duckdb"), read_only=True)
    try:
        names = [
            r[0]
            for r in con.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_type = "
                "'BASE TABLE' AND table_schema = 'main'"
            ).fetchall()
        ]
        return {n: con.execute(f'SELECT count(*) FROM "{n}"').fetchone()[0] for n in names}
    finally:
        con.close()


def _read(path, fmt) -> tuple[int, list[str]]:
    if fmt == "csv":
        with open(path, newline="") as f:
            rows = list(csv.reader(f))
        return len(rows) - 1, rows[0]
    if fmt == "parquet":
        t = pq.read_table(path)
        return t.num_rows, t.column_names
    data = json.loads(path.read_text())
    return len(data), list(data[0]) if data else []


@pytest.mark.parametrize("fmt", ["csv", "parquet", "json"])
def test_every_table_in_each_format_and_the_run_untouched(run_dir, tmp_path, fmt):
    before = _tree(run_dir)
    target = tmp_path / f"out-{fmt}"
    proc = run_pqlab("export", run_dir, "--format", fmt, "--to", target, check=True)
    assert "export:" in proc.stderr
    assert _tree(run_dir) == before  # not a byte, not a timestamp changed
    manifest = json.loads((target / "manifest.json").read_text())
    assert manifest["format"] == fmt and manifest["run"] == str(run_dir.resolve())
    raw = {e["table"]: e for e in manifest["tables"] if e["kind"] == "raw"}
    db = _db_tables(run_dir)
    assert set(raw) == set(db)
    assert {"primitive_samples", "primitive_runs", "primitive_resources", "warnings"} <= set(db)
    for name, e in raw.items():
        rows, cols = _read(target / e["file"], fmt)
        assert rows == db[name] == e["rows"], name
        if rows:
            assert cols == e["columns"], name
    report = {e["table"]: e for e in manifest["tables"] if e["kind"] == "report"}
    assert {"primitives", "sizes", "summary", "primitive_load"} <= set(report)
    for e in report.values():
        rows, _ = _read(target / e["file"], fmt)
        assert rows == e["rows"], e
    for name in ("primitives", "sizes", "summary", "primitive_load"):
        assert report[name]["rows"] > 0, name


def test_report_tables_equal_what_pqlab_report_writes(run_dir, tmp_path):
    run_pqlab("report", run_dir, check=True)
    target = tmp_path / "csv"
    run_pqlab("export", run_dir, "--format", "csv", "--to", target, check=True)
    exported = {p.name: p.read_bytes() for p in (target / "tables").glob("*.csv")}
    reported = {p.name: p.read_bytes() for p in (run_dir / "tables").glob("*.csv")}
    assert exported == reported


def test_samples_survive_the_round_trip(run_dir, tmp_path):
    target = tmp_path / "pq"
    run_pqlab("export", run_dir, "--format", "parquet", "--to", target, check=True)
    t = pq.read_table(target / "raw" / "primitive_samples.parquet").to_pylist()
    con = duckdb.connect(str(run_dir / "results.duckdb"), read_only=True)
    try:
        want = con.execute(
            "SELECT algorithm, backend, operation, i, ns, dropped FROM primitive_samples"
        ).fetchall()
    finally:
        con.close()
    got = [(r["algorithm"], r["backend"], r["operation"], r["i"], r["ns"], r["dropped"]) for r in t]
    assert sorted(got) == sorted(want)


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--format", "xml"], "--format"),
        (["--format", "csv", "--to", "{run}/inside"], "inside the run"),
        (["--format", "csv", "--to", "{busy}"], "not an empty directory"),
    ],
)
def test_bad_requests_are_one_error_line(run_dir, tmp_path, args, needle):
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "x").write_text("x")
    args = [a.format(run=run_dir, busy=busy) for a in args]
    before = _tree(run_dir)
    proc = run_pqlab("export", run_dir, *args)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0]
    assert _tree(run_dir) == before
    assert (busy / "x").read_text() == "x"


def test_not_a_run_is_refused(tmp_path):
    proc = run_pqlab("export", tmp_path, "--format", "csv", "--to", tmp_path / "o")
    assert proc.returncode == 2 and "not a pqlab run directory" in proc.stderr
    assert not (tmp_path / "o").exists()
