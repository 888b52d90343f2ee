"""Where a step's wall time goes: seconds per stage, kept in the invocation's metadata.

    with store.stages.stage("chains"):
        make_chain(...)

Stages nest: while an inner stage runs the outer one's clock stops, so every second is
counted once and the stages of a step add up to its wall time with `other` the remainder
(start-up, plan checks, anything no stage claims). The clock belongs to the lab's main
thread; what the lab waits for (a client's round, the worker processes' analysis) counts
for the stage the main thread waits in. Work done in worker processes (`pqlab.workers`)
is added up apart, per stage (`in_workers`): it ran side by side, so it is not wall time. `STAGES` names and explains every stage an experiment may use;
docs/handshake.md says which of them run while handshakes are timed (none but
`handshakes`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

# Every stage, in the order a handshake run passes through them, with what it covers.
STAGES = {
    "namespaces_and_links": "building the network namespaces, the link and its shaping",
    "chains": "certificate chains (keys and certificates made, or taken from the run)",
    "starting_servers_and_captures": "TLS servers, packet captures and clients started, each "
    "waited for until ready",
    "handshakes": "the timed handshakes: every round of every cell, warm-ups included",
    "stopping": "servers, clients and captures ended, their last records and files collected",
    "reading_captures": "pcap files read and split into TCP connections",
    "record_matching": "the engines' connection records read and paired, and each "
    "handshake's TLS records matched to its connections: the stack's callback events, or "
    "the capture decrypted with the key log",
    "analysis": "points, phases, flights, clock offsets, the wire model's predictions",
    "database_writes": "rows inserted and each cell committed",
    "export": "tables, figures and report.html of the whole run (after the last step)",
}
OTHER = "other"


class StageClock:
    """Wall seconds per stage of one step (see the module docstring)."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.seconds: dict[str, float] = {}
        self.in_workers: dict[str, float] = {}
        self._open: list[list] = []  # [name, since] of the stages entered, innermost last

    def _charge(self, now: float) -> None:
        if self._open:
            name, since = self._open[-1]
            self.seconds[name] = self.seconds.get(name, 0.0) + now - since

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        if name not in STAGES:
            raise ValueError(f"unknown stage {name!r}; add it to pqlab.stages.STAGES")
        now = time.perf_counter()
        self._charge(now)
        self._open.append([name, now])
        try:
            yield
        finally:
            now = time.perf_counter()
            self._charge(now)
            self._open.pop()
            if self._open:
                self._open[-1][1] = now

    @contextlib.contextmanager
    def around(self, manager, enter: str, leave: str) -> Iterator:
        """`with clock.around(cm, "namespaces_and_links", "stopping") as x:` is `with cm as
        x:` with entering `cm` counted as stage `enter` and leaving it as `leave`."""
        with self.stage(enter):
            value = manager.__enter__()
        try:
            yield value
        except BaseException as e:
            with self.stage(leave):
                if not manager.__exit__(type(e), e, e.__traceback__):
                    raise
        else:
            with self.stage(leave):
                manager.__exit__(None, None, None)

    def add_parallel(self, seconds: dict[str, float]) -> None:
        """Seconds per stage a worker process spent on a job (its own clock's `seconds`)."""
        for name, s in seconds.items():
            if name in STAGES:
                self.in_workers[name] = self.in_workers.get(name, 0.0) + s

    def summary(self) -> dict:
        """{"wall_s": seconds since the clock started, "seconds": {stage: s, "other": s}},
        rounded to milliseconds, stages in `STAGES` order; with work done in worker
        processes, "in_workers": {stage: s} too."""
        wall = time.perf_counter() - self.started
        seconds = {k: round(self.seconds[k], 3) for k in STAGES if k in self.seconds}
        seconds[OTHER] = round(max(0.0, wall - sum(self.seconds.values())), 3)
        out = {"wall_s": round(wall, 3), "seconds": seconds}
        if self.in_workers:
            out["in_workers"] = {
                k: round(self.in_workers[k], 3) for k in STAGES if k in self.in_workers
            }
        return out


def describe(summary: dict, top: int | None = None) -> str:
    """A breakdown as one line: `handshakes 150.2 s (80 %), analysis 12.1 s (6 %), ...`,
    largest first (the `top` largest when given)."""
    wall = summary.get("wall_s") or 0.0
    items = sorted((summary.get("seconds") or {}).items(), key=lambda kv: -kv[1])
    if top is not None:
        items = items[:top]
    return ", ".join(
        f"{name} {s:.1f} s ({100 * s / wall:.0f} %)" if wall else f"{name} {s:.1f} s"
        for name, s in items
    )
