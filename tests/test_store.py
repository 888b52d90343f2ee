import json

import pytest

from pqlab.errors import UserError
from pqlab.store import RunStore


def test_cells_commit_atomically_and_resume(tmp_path):
    store = RunStore.create(tmp_path / "run", "demo")
    store.begin("demo", {"command_line": "pqlab demo"})
    store.ensure_table("CREATE TABLE IF NOT EXISTS demo_samples (cell TEXT, v DOUBLE)")
    with store.cell("demo", "a", {"x": 1}):
        store.insert("demo_samples", {"cell": ["a", "a"], "v": [1.0, 2.0]})
    with pytest.raises(RuntimeError):
        with store.cell("demo", "b", {"x": 2}):
            store.insert("demo_samples", {"cell": ["b"], "v": [3.0]})
            raise RuntimeError("crash mid-cell")
    assert store.cells_done("demo") == {"a"}
    rows = store.query("SELECT cell, count(*) AS n FROM demo_samples GROUP BY cell")
    assert rows == [{"cell": "a", "n": 2}]  # nothing of the failed cell
    store.finish("interrupted")
    store.close()

    with pytest.raises(UserError, match="--resume"):
        RunStore.create(tmp_path / "run", "demo")
    again = RunStore.create(tmp_path / "run", "demo", resume=True)
    assert again.cells_done("demo") == {"a"}
    again.close()


def test_several_cells_commit_together_or_not_at_all(tmp_path):
    store = RunStore.create(tmp_path / "run", "demo")
    store.begin("demo", {"command_line": "pqlab demo"})
    store.ensure_table("CREATE TABLE IF NOT EXISTS demo_samples (cell TEXT, v DOUBLE)")
    with store.cells("demo") as mark:
        store.insert("demo_samples", {"cell": ["a", "b"], "v": [1.0, 2.0]})
        mark("a", {"x": 1})
        mark("b", {"x": 2})
    with pytest.raises(RuntimeError):
        with store.cells("demo") as mark:
            store.insert("demo_samples", {"cell": ["c", "d"], "v": [3.0, 4.0]})
            mark("c", {"x": 3})
            raise RuntimeError("crash before the batch's last cell")
    assert store.cells_done("demo") == {"a", "b"}
    rows = store.query("SELECT cell FROM demo_samples ORDER BY cell")
    assert [r["cell"] for r in rows] == ["a", "b"]  # nothing of the interrupted batch
    params = store.query("SELECT params FROM cells WHERE cell_id = 'b'")[0]["params"]
    assert json.loads(params) == {"x": 2}
    store.close()


def test_metadata_json_and_exports(tmp_path):
    store = RunStore.create(tmp_path / "r", "demo")
    store.begin("demo", {"command_line": "pqlab demo --x", "cpu": {"model": "test"}})
    store.ensure_table("CREATE TABLE IF NOT EXISTS t (a INTEGER, b TEXT)")
    store.insert_rows("t", [{"a": 1, "b": "x"}, {"a": 2, "b": "y"}])
    path = store.export_table("t", "SELECT * FROM t ORDER BY a")
    assert path.read_text().splitlines()[0].replace('"', "") == "a,b"
    assert (tmp_path / "r" / "tables" / "t.parquet").exists()
    store.finish()
    meta = json.loads((tmp_path / "r" / "metadata.json").read_text())
    assert meta["cpu"]["model"] == "test"
    assert meta["invocations"][0]["status"] == "complete"
    store.close()


def test_out_must_be_a_directory(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(UserError, match="not a directory"):
        RunStore.create(f, "demo")


def test_no_lock_file_is_left_once_nobody_uses_the_run(tmp_path):
    run = tmp_path / "run"
    writer = RunStore.create(run, "demo")
    assert (run / ".lock").exists()
    with pytest.raises(UserError, match="in use by PID"):
        RunStore.create(run, "demo", resume=True)
    writer.close()
    assert not (run / ".lock").exists()
    # Readers share the lock and keep a writer out; the last one to leave removes the file.
    r1, r2 = RunStore.open(run), RunStore.open(run)
    with pytest.raises(UserError, match="in use"):
        RunStore.create(run, "demo", resume=True)
    r1.close()
    assert (run / ".lock").exists()
    r2.close()
    assert not (run / ".lock").exists()
    RunStore.create(run, "demo", resume=True).close()
    assert not (run / ".lock").exists()


def test_a_lock_taken_on_a_removed_file_is_taken_again(tmp_path, monkeypatch):
    from pqlab import store as store_mod

    run = tmp_path / "run"
    RunStore.create(run, "demo").close()
    real = store_mod._Lock._try_once
    calls = []

    def racing(self):  # the previous holder removes the file just after we locked it
        ok = real(self)
        if not calls:
            calls.append(1)
            self.path.unlink()
        return ok

    monkeypatch.setattr(store_mod._Lock, "_try_once", racing)
    s = RunStore.create(run, "demo", resume=True)
    assert (run / ".lock").exists() and len(calls) == 1
    s.close()
