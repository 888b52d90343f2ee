"""Pure logic of the capacity experiment: latencies from the engine's sample columns, one
load point's statistics, the server's CPU time from /proc. No I/O besides /proc."""

from __future__ import annotations

import os

import numpy as np


def latencies_ns(scheduled_ns, done_ns) -> np.ndarray:
    """Per-handshake latency: handshake complete minus when it was *due*. In an open loop
    that is the arrival's scheduled time, not when a worker got to it, so time spent waiting
    for a free worker or a slow server counts (no coordinated omission); in a closed loop
    the two are the same."""
    sched = np.asarray(scheduled_ns, dtype=np.int64)
    done = np.asarray(done_ns, dtype=np.int64)
    if sched.shape != done.shape:
        raise ValueError("scheduled and done columns differ in length")
    return done - sched


def point_stats(scheduled_ns, done_ns, end_ns, window_ns: int | None = None) -> dict:
    """Handshakes per second and latency percentiles of one load point. The rate is
    completed handshakes over the time from the start of the window to the last completion
    (for a closed loop bounded by count, or an open loop draining its backlog, that is not
    the configured window)."""
    lat = latencies_ns(scheduled_ns, done_ns)
    n = int(lat.size)
    if n == 0:
        return {
            "completed": 0,
            "handshakes_per_s": 0.0,
            "latency_p50_ms": None,
            "latency_p99_ms": None,
        }
    span = int(window_ns) if window_ns else int(np.max(np.asarray(end_ns)))
    p50, p99 = np.percentile(lat, [50, 99])
    return {
        "completed": n,
        "handshakes_per_s": n / (span / 1e9) if span > 0 else None,
        "latency_p50_ms": float(p50) / 1e6,
        "latency_p99_ms": float(p99) / 1e6,
    }


def proc_cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a running process, all its threads (from /proc)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    # Fields after the command name (which may hold spaces) start at state (field 3).
    fields = text.rsplit(")", 1)[1].split()
    utime, stime = int(fields[11]), int(fields[12])
    return (utime + stime) / os.sysconf("SC_CLK_TCK")
