"""tables/capacity.csv, the latency-against-offered-load figure and the report section,
derived from the raw samples alone."""

from __future__ import annotations

import html
import json
import os
import sys

from pqlab import figures, stats
from pqlab.experiments.capacity import analyse
from pqlab.report.section import Section, template
from pqlab.tls.stacks import DEFAULT_STACK, STACK_SQL

COLUMNS = [
    "stack_impl",
    "group",
    "server_sig",
    "ca_sig",
    "client_sig",
    "server_threads",
    "mode",
    "clients_or_rate",
    "offered_per_s",
    "handshakes_per_s",
    "latency_p50_ms",
    "latency_p99_ms",
    "latency_mean_ms",
    "tls_handshake_p50_ms",
    "tls_handshake_mean_ms",
    "limited_by",
    "server_cpu_us_per_handshake",
    "server_cpu_utilisation",
    "loadgen_cpu_utilisation",
    "other_cpu_utilisation",
    "rate_x_latency_mean",
    "completed",
    "errors",
    "abandoned",
    "rate_x_handshake_median",
    "rate_x_handshake_total_median",
    "server_cpus",
    "client_cpus",
    "duration_ms",
    "server_cpus_busy",
    "loadgen_cpus_busy",
    "host_pair",
]


def _handshake_medians(store) -> dict:
    """Median `pqlab handshake` time (ns) per (stack, group, server_sig, ca_sig, client_sig)
    when the same run holds that experiment (for the one-client check)."""
    if not store.has_table("handshake_raw"):
        return {}
    client = "client_sig" if "client_sig" in store.columns("handshake_raw") else "'none'"
    rows = store.query(
        f'SELECT {STACK_SQL} AS st, "group" AS g, server_sig, ca_sig, '
        f"coalesce({client}, 'none') AS cl, median(handshake_ns) AS m, median(total_ns) AS t "
        "FROM handshake_raw GROUP BY ALL"
    )
    return {
        (r["st"], r["g"], r["server_sig"], r["ca_sig"], r["cl"]): (r["m"], r["t"]) for r in rows
    }


def _cpus(text) -> list[int] | None:
    return [int(c) for c in str(text).split(",") if c.strip()] if text else None


def _json(text) -> dict | None:
    return json.loads(text) if text else None


def _all_cpus(machine: dict | None) -> list[int]:
    """Every CPU of a host, from its /proc/stat columns (this machine's without them)."""
    return list(machine["cpu"]) if machine else list(range(os.cpu_count() or 1))


def point_row(p: dict, raw: dict) -> dict:
    """One load point's table row from its `capacity_points` row and raw samples: rates,
    latencies, each side's CPU utilisation and what limited the rate."""
    st = analyse.point_stats(
        raw["scheduled_ns"],
        raw["done_ns"],
        raw["end_ns"],
        start_ns=raw.get("start_ns"),
        connected_ns=raw.get("connected_ns"),
    )
    cpu = p["server_cpu_s"]
    conns = p["server_connections"]
    # The load generator's machine, from its own report; the server's host: the same
    # machine, or across hosts its /proc/stat read over the pair's connection.
    machine = _json(p.get("machine_cpu"))
    server_machine = _json(p.get("server_machine_cpu")) or machine
    server_cpus = _cpus(p["server_cpus"]) or _all_cpus(server_machine)
    client_cpus = _cpus(p["client_cpus"]) or _all_cpus(machine)
    server_util = analyse.utilisation(cpu, p.get("server_span_ns"), len(server_cpus))
    loadgen_util = analyse.utilisation(
        p.get("loadgen_cpu_s"), p.get("loadgen_span_ns"), len(client_cpus)
    )
    if p.get("server_machine_cpu"):
        hosts = [(server_machine, (cpu,)), (machine, (p.get("loadgen_cpu_s"),))]
    else:
        hosts = [(machine, (cpu, p.get("loadgen_cpu_s")))]
    server_busy = analyse.machine_busy(server_machine, server_cpus)
    loadgen_busy = analyse.machine_busy(machine, client_cpus)
    blocked = p.get("server_output_blocked_ns")
    span = p.get("server_span_ns")
    limit = analyse.limited_by(
        mode=p["mode"],
        rate=st["handshakes_per_s"],
        offered=p["rate"],
        server_util=server_util,
        loadgen_util=loadgen_util,
        server_cpus_busy=server_busy,
        loadgen_cpus_busy=loadgen_busy,
        output_blocked_share=blocked / span if blocked is not None and span else None,
        cpu_work_share=analyse.work_share(
            server_util, len(server_cpus), loadgen_util, len(client_cpus), p["clients"] or 0
        ),
        queued=st["wait_p50_ms"] is not None
        and st["service_p50_ms"] is not None
        and st["wait_p50_ms"] > st["service_p50_ms"],
    )
    row = {k: p[k] for k in ("stack_impl", "group", "server_sig", "ca_sig")}
    row["client_sig"] = p.get("client_sig") or "none"
    row.update(
        {
            "server_threads": p["server_threads"],
            "mode": p["mode"],
            "clients_or_rate": p["clients_or_rate"],
            "offered_per_s": round(p["rate"], 1) if p["rate"] else None,
            "handshakes_per_s": _r(st["handshakes_per_s"], 1),
            "latency_p50_ms": _r(st["latency_p50_ms"], 3),
            "latency_p99_ms": _r(st["latency_p99_ms"], 3),
            "latency_mean_ms": _r(st["latency_mean_ms"], 3),
            "tls_handshake_p50_ms": _r(st["tls_handshake_p50_ms"], 3),
            "tls_handshake_mean_ms": _r(st["tls_handshake_mean_ms"], 3),
            "limited_by": limit,
            "server_cpu_us_per_handshake": _r(cpu / conns * 1e6, 1) if cpu and conns else None,
            "server_cpu_utilisation": _r(server_util, 3),
            "loadgen_cpu_utilisation": _r(loadgen_util, 3),
            "other_cpu_utilisation": _r(analyse.other_utilisation(hosts), 3),
            "rate_x_latency_mean": _r(
                analyse.little_ratio(
                    st["handshakes_per_s"], st["latency_mean_ms"], p["clients"] or 0
                ),
                3,
            )
            if p["mode"] == "closed"
            else None,
            "completed": st["completed"],
            "errors": p["errors"],
            "abandoned": p["abandoned"],
            "server_cpus": p["server_cpus"],
            "client_cpus": p["client_cpus"],
            "duration_ms": p["duration_ms"],
            "server_cpus_busy": _r(server_busy, 3),
            "loadgen_cpus_busy": _r(loadgen_busy, 3),
            "host_pair": p.get("host_pair"),
        }
    )
    return row


def rows(store, cell_id: str | None = None) -> list[dict]:
    where, params = ("WHERE cell_id = ?", [cell_id]) if cell_id else ("", [])
    points = store.query(f"SELECT * FROM capacity_points {where} ORDER BY cell_id, point", params)
    medians = _handshake_medians(store)
    out = []
    for p in points:
        raw = store.numpy(
            "SELECT scheduled_ns, start_ns, connected_ns, done_ns, end_ns FROM capacity_raw "
            "WHERE cell_id = ? AND point = ?",
            [p["cell_id"], p["point"]],
        )
        row = point_row(p, raw)
        cell = (p["stack"] or DEFAULT_STACK, p["group"], p["server_sig"], p["ca_sig"])
        med = medians.get((*cell, row["client_sig"]))
        rate = row["handshakes_per_s"]
        if med and p["mode"] == "closed" and p["clients"] == 1 and rate:
            row["rate_x_handshake_median"] = round(rate * med[0] / 1e9, 3)
            row["rate_x_handshake_total_median"] = round(rate * med[1] / 1e9, 3)
        out.append(row)
    return out


def maxima(table: list[dict]) -> list[dict]:
    """Each cell's closed-loop maximum (per host pair): its row with the highest rate."""
    best: dict[tuple, dict] = {}
    for r in table:
        if r["mode"] != "closed" or not r["handshakes_per_s"]:
            continue
        key = (
            r["stack_impl"],
            r["group"],
            r["server_sig"],
            r["ca_sig"],
            r.get("client_sig", "none"),
            r["server_threads"],
            r["host_pair"],
        )
        if key not in best or r["handshakes_per_s"] > best[key]["handshakes_per_s"]:
            best[key] = r
    return list(best.values())


def describe_maximum(r: dict) -> str:
    ca = f" / CA {r['ca_sig']}" if r["ca_sig"] != r["server_sig"] else ""
    ca += f" / client {r['client_sig']}" if r.get("client_sig", "none") != "none" else ""
    ca += f" ({r['host_pair']})" if r["host_pair"] else ""
    util = r["server_cpu_utilisation"]
    load = r["loadgen_cpu_utilisation"]
    return (
        f"{r['group']} / {r['server_sig']}{ca}: {r['handshakes_per_s']:g} handshakes/s with "
        f"{r['clients_or_rate']} client(s); server CPUs "
        + (f"{util:.0%}" if util is not None else "?")
        + " busy, load generator CPUs "
        + (f"{load:.0%}" if load is not None else "?")
        + f" busy; limited by {r['limited_by']}"
    )


def not_saturated(table: list[dict]) -> list[stats.Warning_]:
    """A warning for every cell whose closed-loop maximum did not saturate the server: that
    rate is not the server's capacity."""
    out = []
    for r in maxima(table):
        if r["limited_by"] == analyse.SERVER_CPU:
            continue
        out.append(
            stats.Warning_(
                stats.Cause.CAPACITY_NOT_SATURATED,
                f"capacity {r['group']} / {r['server_sig']} / CA {r['ca_sig']}"
                + (f" / client {r['client_sig']}" if r.get("client_sig", "none") != "none" else ""),
                f"the closed-loop maximum did not saturate the server: {describe_maximum(r)}",
            )
        )
    return out


def print_maxima(store) -> None:
    """One line per cell on stderr: its closed-loop maximum and what limited it, with a
    warning when that was not the server's CPU."""
    if not store.has_table("capacity_points"):
        return
    for r in maxima(rows(store)):
        if r["limited_by"] == analyse.SERVER_CPU:
            print(f"capacity {describe_maximum(r)}", file=sys.stderr)
        else:
            print(
                f"warning: capacity {describe_maximum(r)}: not the server's capacity "
                "(see docs/capacity.md, 'What limited the rate')",
                file=sys.stderr,
            )


def _r(x, nd):
    return None if x is None else round(float(x), nd)


def export(store) -> Section | None:
    if not store.has_table("capacity_points"):
        return None
    table = rows(store)
    if not table:
        return None
    csv_path = store.export_rows("capacity", table, COLUMNS)
    section = Section(title="Capacity: handshakes per second and latency under load")
    section.intro = template("capacity_intro", cpus=html.escape(_where(table)))
    section.table(csv_path, "Capacity per cell and load point (tables/capacity.csv)")
    _figure(store, section, table)
    return section


def _where(table: list[dict]) -> str:
    """Which CPUs each side ran on, per host pair (one machine: its two halves)."""
    out = []
    for s, c, pair in sorted({(r["server_cpus"], r["client_cpus"], r["host_pair"]) for r in table}):
        if pair:
            client, _, server = pair.partition("->")
            out.append(
                f"{pair}: server on CPU {s or 'any'} of {server}, load generator on CPU "
                f"{c or 'any'} of {client}"
            )
        else:
            out.append(f"server on CPU {s or 'any'}, clients on CPU {c or 'any'}")
    return "; ".join(out)


def _figure(store, section: Section, table: list[dict]) -> None:
    import matplotlib.pyplot as plt

    series: dict[tuple, list[dict]] = {}
    for r in table:
        key = (
            r["group"],
            r["server_sig"],
            r["ca_sig"] + (f" / client {r['client_sig']}" if r["client_sig"] != "none" else ""),
            r["server_threads"],
            r["host_pair"],
            r["stack_impl"],
        )
        series.setdefault(key, []).append(r)
    several = len({key[-1] for key in series}) > 1
    fig, (ax50, ax99) = plt.subplots(1, 2, figsize=(10, 4))
    for (g, s, c, t, pair, impl), rs in series.items():
        pts = sorted(
            (
                (
                    r["offered_per_s"] or r["handshakes_per_s"],
                    r["latency_p50_ms"],
                    r["latency_p99_ms"],
                )
                for r in rs
                if r["mode"] == "open" and r["latency_p50_ms"] is not None
            ),
        )
        if not pts:
            continue
        label = f"{g} / {s}" + (f" / CA {c}" if c != s else "") + (f" / {t} thr" if t > 1 else "")
        label += f" ({pair})" if pair else ""
        label += f" [{impl}]" if several else ""
        x = [p[0] for p in pts]
        ax50.plot(x, [p[1] for p in pts], marker="o", label=label)
        ax99.plot(x, [p[2] for p in pts], marker="o", label=label)
    for ax, what in ((ax50, "p50"), (ax99, "p99")):
        ax.set_xlabel("offered load (handshakes/s, open loop)")
        ax.set_ylabel(f"latency {what} from scheduled start (ms)")
        ax.set_yscale("log")
    if ax50.lines:
        ax50.legend(fontsize=7)
        png = figures.save(fig, store, "capacity_latency_vs_load")
        section.figure(
            png,
            "Open loop: handshake latency (scheduled arrival to handshake complete) against "
            "the offered arrival rate, p50 (left) and p99 (right); the knee is the capacity",
        )
    else:
        plt.close(fig)
