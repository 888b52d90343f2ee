"""Pure logic of the capacity experiment: latencies from the engine's sample columns, one
load point's statistics, each side's CPU utilisation (a host's /proc/stat read before and
after a point included) and what limited a point's rate. No I/O."""

from __future__ import annotations

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


def point_stats(
    scheduled_ns, done_ns, end_ns, window_ns: int | None = None, start_ns=None, connected_ns=None
) -> dict:
    """Handshakes per second and latency percentiles of one load point. The rate is
    completed handshakes over the time from the start of the window to the last completion
    (for a closed loop bounded by count, or an open loop draining its backlog, that is not
    the configured window). With `start_ns`, also the median wait for a worker (start -
    scheduled: an open loop's queue) and the median handshake itself (done - start). With
    `connected_ns`, the TLS handshake alone (TCP connected to done): its median and mean."""
    lat = latencies_ns(scheduled_ns, done_ns)
    n = int(lat.size)
    if n == 0:
        return {
            "completed": 0,
            "handshakes_per_s": 0.0,
            "latency_p50_ms": None,
            "latency_p99_ms": None,
            "latency_mean_ms": None,
            "wait_p50_ms": None,
            "service_p50_ms": None,
            "tls_handshake_p50_ms": None,
            "tls_handshake_mean_ms": None,
        }
    span = int(window_ns) if window_ns else int(np.max(np.asarray(end_ns)))
    p50, p99 = np.percentile(lat, [50, 99])
    wait = service = None
    if start_ns is not None:
        start = np.asarray(start_ns, dtype=np.int64)
        wait = float(np.median(start - np.asarray(scheduled_ns, dtype=np.int64))) / 1e6
        service = float(np.median(np.asarray(done_ns, dtype=np.int64) - start)) / 1e6
    tls_p50 = tls_mean = None
    # Runs recorded before the stamp have it NULL (a masked column).
    if connected_ns is not None and not np.ma.getmaskarray(connected_ns).any():
        tls = np.asarray(done_ns, dtype=np.int64) - np.asarray(connected_ns, dtype=np.int64)
        tls_p50, tls_mean = float(np.median(tls)) / 1e6, float(np.mean(tls)) / 1e6
    return {
        "completed": n,
        "handshakes_per_s": n / (span / 1e9) if span > 0 else None,
        "latency_p50_ms": float(p50) / 1e6,
        "latency_p99_ms": float(p99) / 1e6,
        "latency_mean_ms": float(np.mean(lat)) / 1e6,
        "wait_p50_ms": wait,
        "service_p50_ms": service,
        "tls_handshake_p50_ms": tls_p50,
        "tls_handshake_mean_ms": tls_mean,
    }


# --- who was busy: the server, the load generator, something else, or nobody --------------

# A side whose CPUs were busy at least this fraction of the time was the bottleneck.
SATURATED = 0.8
# An open-loop point that completed at least this fraction of its offered rate kept up.
KEPT_UP = 0.95

SERVER_CPU = "server CPU"
LOADGEN_CPU = "load generator CPU"
OTHER_LOAD = "other load on the CPUs"
STALL = "network / protocol stall"
CLIENTS = "clients (too few to keep a CPU busy)"
OFFERED = "offered rate (below capacity)"
OUTPUT = "server output (the reader of its records)"


def server_window(records: list[dict], warmups: int) -> dict:
    """The server's CPU time over a load point's measuring window and the time it took,
    both from its own connection records, on its own host and clock: each record carries
    the process's CPU time (`process_cpu_ns`) and its close time (`t_closed`), read together
    when it was written. The window runs from the last warm-up connection's record (the
    server is idle until the load generator's window opens) to the point's last record.
    Without warm-ups the first measured connection is the baseline and is not counted. No
    clock of another host enters: across hosts the server's span is still the server's."""
    cpu = [r.get("process_cpu_ns") for r in records]
    if len(records) <= warmups or any(c is None for c in cpu):
        return {"cpu_s": None, "span_ns": None, "connections": max(0, len(records) - warmups)}
    first = max(warmups, 1)
    measured = records[first:]
    closed = [r.get("t_closed") or r.get("t_accept") for r in records]
    if any(c is None for c in closed):
        return {"cpu_s": None, "span_ns": None, "connections": len(measured)}
    span = max(closed) - max(closed[:first])
    blocked = [r.get("output_blocked_ns") or 0 for r in records]
    return {
        "cpu_s": (max(cpu) - max(cpu[:first])) / 1e9,
        "span_ns": span if span > 0 else None,
        "connections": len(measured),
        "output_blocked_ns": max(blocked) - max(blocked[:first]),
    }


def proc_stat(text: str) -> dict:
    """A host's CPU counters from `getconf CLK_TCK` (first line) and /proc/stat: per CPU,
    (tasks, interrupts, steal, total) clock ticks, grouped as the engine's load generator
    groups them for its own machine (user + nice + system; irq + softirq; steal; the first
    eight columns)."""
    lines = text.splitlines()
    hz = int(lines[0]) if lines and lines[0].strip().isdigit() else 100
    cpus = {}
    for line in lines[1:]:
        words = line.split()
        if not words or not words[0].startswith("cpu") or not words[0][3:].isdigit():
            continue
        v = [int(w) for w in words[1:9] if w.isdigit()]
        if len(v) == 8:
            cpus[int(words[0][3:])] = (v[0] + v[1] + v[2], v[5] + v[6], v[7], sum(v))
    return {"hz": hz, "cpus": cpus}


def stat_delta(before: dict, after: dict) -> dict:
    """What each CPU did between two `proc_stat` snapshots, in seconds, as the columns the
    load generator reports for its machine (`cpu`, `tasks_s`, `interrupts_s`, `steal_s`,
    `total_s`)."""
    hz = after["hz"] or 100
    out: dict[str, list] = {k: [] for k in ("cpu", "tasks_s", "interrupts_s", "steal_s", "total_s")}
    for cpu, a in sorted(after["cpus"].items()):
        b = before["cpus"].get(cpu)
        if b is None:
            continue
        out["cpu"].append(cpu)
        for key, x, y in zip(("tasks_s", "interrupts_s", "steal_s", "total_s"), a, b, strict=True):
            out[key].append(max(0, x - y) / hz)
    return out


def utilisation(cpu_s, span_ns, cpus: int) -> float | None:
    """CPU seconds per wall second per CPU available: 1.0 = every CPU busy all the time."""
    if cpu_s is None or not span_ns or cpus < 1:
        return None
    return cpu_s / (span_ns / 1e9) / cpus


def machine_busy(machine: dict | None, cpus: list[int] | None = None) -> float | None:
    """Fraction of the time the given CPUs (all without a list) did anything, from a host's
    /proc/stat columns: tasks, interrupts and a hypervisor's steal over total."""
    if not machine or not machine.get("cpu"):
        return None
    busy = total = 0.0
    for i, cpu in enumerate(machine["cpu"]):
        if cpus is not None and cpu not in cpus:
            continue
        busy += machine["tasks_s"][i] + machine["interrupts_s"][i] + machine["steal_s"][i]
        total += machine["total_s"][i]
    return busy / total if total > 0 else None


def other_utilisation(hosts: list[tuple[dict | None, tuple]]) -> float | None:
    """The busy time of the hosts not spent by the server or the load generator, per CPU of
    the hosts (0.0 = nothing else ran). `hosts`: per host its /proc/stat columns and the
    CPU seconds of the measured processes that ran there (one machine: both)."""
    busy = total = 0.0
    for machine, own_cpu_s in hosts:
        if not machine or not machine.get("cpu") or any(c is None for c in own_cpu_s):
            return None
        total += sum(machine["total_s"])
        used = sum(
            t + i + s
            for t, i, s in zip(
                machine["tasks_s"], machine["interrupts_s"], machine["steal_s"], strict=True
            )
        )
        busy += max(0.0, used - sum(own_cpu_s))
    return busy / total if total > 0 else None


def limited_by(
    *,
    mode: str,
    rate: float | None,
    offered: float | None,
    server_util: float | None,
    loadgen_util: float | None,
    server_cpus_busy: float | None,
    loadgen_cpus_busy: float | None,
    output_blocked_share: float | None = None,
    cpu_work_share: float | None = None,
    queued: bool = False,
) -> str:
    """What limited a load point's rate. A server or load generator waiting for its own
    output first; then an open loop that kept up with its arrivals (at least `KEPT_UP` of
    the offered rate, arrivals not `queued` for a worker longer than a handshake takes, and
    neither side saturated) was limited by the offered rate. Otherwise the first side whose
    own CPU time filled `SATURATED` of its CPUs; then CPUs kept busy by something else
    (other processes, interrupts, a hypervisor). With every CPU idle enough, a closed loop
    whose clients spent their time on the two sides' CPU work (`cpu_work_share`, see
    `work_share`) had too few clients to fill a CPU; anything else went to waiting: the
    network or the protocol (round trips, timers, a blocked write)."""
    if output_blocked_share is not None and output_blocked_share > 0.01:
        return OUTPUT
    server_full = server_util is not None and server_util >= SATURATED
    loadgen_full = loadgen_util is not None and loadgen_util >= SATURATED
    kept_up = bool(rate and offered and rate >= KEPT_UP * offered and not queued)
    if mode == "open" and kept_up and not (server_full or loadgen_full):
        return OFFERED
    if server_full:
        return SERVER_CPU
    if loadgen_full:
        return LOADGEN_CPU
    if any(b is not None and b >= SATURATED for b in (server_cpus_busy, loadgen_cpus_busy)):
        return OTHER_LOAD
    if mode == "closed" and cpu_work_share is not None and cpu_work_share >= SATURATED:
        return CLIENTS
    return STALL


def work_share(
    server_util: float | None,
    server_cpus: int,
    loadgen_util: float | None,
    loadgen_cpus: int,
    clients: int,
) -> float | None:
    """Closed loop: the CPU time both sides spent per handshake over the time each client
    took per handshake (clients / rate); about 1 when a client's time is the two sides'
    work one after the other, well below 1 when it also waited for something that used no
    CPU (a timer, a blocked write, the network)."""
    if server_util is None or loadgen_util is None or clients < 1:
        return None
    return (server_util * server_cpus + loadgen_util * loadgen_cpus) / clients


def little_ratio(rate: float | None, latency_mean_ms: float | None, clients: int) -> float | None:
    """Closed loop: rate x mean latency / clients (Little's law). 1.0 when the clients spend
    all their time waiting for handshakes; the rest is connection teardown and the load
    generator's own time between handshakes."""
    if not rate or not latency_mean_ms or clients < 1:
        return None
    return rate * latency_mean_ms / 1e3 / clients
