"""Where a step's time goes (`pqlab.stages`): nested stages counted once, the remainder as
`other`, worker time apart; kept in the invocation's metadata, the export added after."""

from __future__ import annotations

import json
import time

import pytest

from pqlab import stages
from pqlab.store import RunStore


def test_nested_stages_count_each_second_once():
    clock = stages.StageClock()
    with clock.stage("analysis"):
        time.sleep(0.05)
        with clock.stage("database_writes"):
            time.sleep(0.1)
        time.sleep(0.05)
    time.sleep(0.05)
    s = clock.summary()
    sec = s["seconds"]
    assert sec["database_writes"] == pytest.approx(0.1, abs=0.04)
    # The outer stage's clock stopped while the inner one ran.
    assert sec["analysis"] == pytest.approx(0.1, abs=0.04)
    assert sec["other"] == pytest.approx(0.05, abs=0.04)
    assert sum(sec.values()) == pytest.approx(s["wall_s"], abs=0.005)
    assert "in_workers" not in s


def test_an_exception_leaves_the_clock_consistent():
    clock = stages.StageClock()
    with pytest.raises(RuntimeError), clock.stage("handshakes"):
        with clock.stage("stopping"):
            raise RuntimeError("x")
    with clock.stage("chains"):
        pass
    s = clock.summary()
    assert set(s["seconds"]) == {"handshakes", "stopping", "chains", "other"}
    assert sum(s["seconds"].values()) == pytest.approx(s["wall_s"], abs=0.005)


def test_unknown_stage_is_refused_and_worker_time_kept_apart():
    clock = stages.StageClock()
    with pytest.raises(ValueError, match="unknown stage"), clock.stage("lunch"):
        pass
    clock.add_parallel({"analysis": 1.5, "reading_captures": 0.5})
    clock.add_parallel({"analysis": 1.0, "other": 9.0})
    s = clock.summary()
    assert s["in_workers"] == {"reading_captures": 0.5, "analysis": 2.5}
    assert s["seconds"] == {"other": s["seconds"]["other"]}


def test_around_times_entering_and_leaving_a_context_manager():
    class Slow:
        def __enter__(self):
            time.sleep(0.05)
            return "inside"

        def __exit__(self, *exc):
            time.sleep(0.05)
            return False

    clock = stages.StageClock()
    with clock.around(Slow(), "namespaces_and_links", "stopping") as value:
        assert value == "inside"
    sec = clock.summary()["seconds"]
    assert sec["namespaces_and_links"] == pytest.approx(0.05, abs=0.03)
    assert sec["stopping"] == pytest.approx(0.05, abs=0.03)


def test_the_breakdown_is_in_the_metadata_with_the_export(tmp_path):
    store = RunStore.create(tmp_path / "run", "sizes")
    store.begin("sizes", {"command_line": "pqlab sizes"})
    with store.stages.stage("analysis"):
        store.insert("warnings", {})  # nothing to insert: no database time
    store.con.execute("CREATE TABLE t (x INTEGER)")
    store.insert("t", {"x": [1, 2, 3]})
    store.finish()
    store.record_export(2.0)
    meta = json.loads((tmp_path / "run" / "metadata.json").read_text())
    st = meta["stages"]
    assert st["seconds"]["export"] == 2.0
    assert st["seconds"]["database_writes"] > 0
    assert st["wall_s"] >= 2.0
    assert store.invocations()[-1]["metadata"]["stages"] == st
    store.close()


def test_describe_orders_by_time():
    text = stages.describe({"wall_s": 10.0, "seconds": {"analysis": 2.0, "handshakes": 7.0}})
    assert text.startswith("handshakes 7.0 s (70 %), analysis 2.0 s (20 %)")
