"""The progress display redraws at most every REDRAW_S, however often it is told what runs
(the handshake experiment tells it before each of its hundreds of rounds)."""

from __future__ import annotations

from pqlab import progress


def test_what_runs_is_redrawn_at_most_every_redraw_s(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: clock[0])
    with progress.CellProgress("handshake", 10, ticking=False) as bar:
        redraws = []
        update = bar._progress.update
        monkeypatch.setattr(
            bar._progress,
            "update",
            lambda task, **kw: (redraws.append(kw["refresh"]), update(task, **kw)),
        )
        for i in range(50):  # 50 rounds, 10 ms apart: half a second
            bar.start(f"round {i}")
            clock[0] += 0.01
        shown = bar._progress.tasks[0].description
    assert redraws.count(True) == 5  # the first, then one every 0.1 s
    assert shown == "round 49"  # every description kept, shown at the next redraw
