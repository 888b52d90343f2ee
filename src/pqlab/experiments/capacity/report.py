"""tables/capacity.csv, the latency-against-offered-load figure and the report section,
derived from the raw samples alone."""

from __future__ import annotations

import html

from pqlab import figures
from pqlab.experiments.capacity import analyse
from pqlab.report.section import Section, template

COLUMNS = [
    "stack_impl",
    "group",
    "server_sig",
    "ca_sig",
    "server_threads",
    "mode",
    "clients_or_rate",
    "offered_per_s",
    "handshakes_per_s",
    "latency_p50_ms",
    "latency_p99_ms",
    "server_cpu_us_per_handshake",
    "server_cpu_utilisation",
    "completed",
    "errors",
    "abandoned",
    "rate_x_handshake_median",
    "rate_x_handshake_total_median",
    "server_cpus",
    "client_cpus",
    "duration_ms",
]


def _handshake_medians(store) -> dict:
    """Median `pqlab handshake` time (ns) per (group, server_sig, ca_sig) when the same run
    holds that experiment (for the one-client check)."""
    if not store.has_table("handshake_raw"):
        return {}
    rows = store.query(
        'SELECT "group" AS g, server_sig, ca_sig, median(handshake_ns) AS m, '
        "median(total_ns) AS t FROM handshake_raw GROUP BY ALL"
    )
    return {(r["g"], r["server_sig"], r["ca_sig"]): (r["m"], r["t"]) for r in rows}


def rows(store) -> list[dict]:
    points = store.query("SELECT * FROM capacity_points ORDER BY cell_id, point")
    medians = _handshake_medians(store)
    out = []
    for p in points:
        raw = store.numpy(
            "SELECT scheduled_ns, done_ns, end_ns FROM capacity_raw "
            "WHERE cell_id = ? AND point = ?",
            [p["cell_id"], p["point"]],
        )
        st = analyse.point_stats(raw["scheduled_ns"], raw["done_ns"], raw["end_ns"])
        cpu = p["server_cpu_s"]
        conns = p["server_connections"]
        span_s = (p["window_ns"] or 0) / 1e9
        row = {k: p[k] for k in ("stack_impl", "group", "server_sig", "ca_sig")}
        row.update(
            {
                "server_threads": p["server_threads"],
                "mode": p["mode"],
                "clients_or_rate": p["clients_or_rate"],
                "offered_per_s": round(p["rate"], 1) if p["rate"] else None,
                "handshakes_per_s": _r(st["handshakes_per_s"], 1),
                "latency_p50_ms": _r(st["latency_p50_ms"], 3),
                "latency_p99_ms": _r(st["latency_p99_ms"], 3),
                "server_cpu_us_per_handshake": _r(cpu / conns * 1e6, 1) if cpu and conns else None,
                "server_cpu_utilisation": _r(cpu / span_s, 3) if cpu and span_s else None,
                "completed": st["completed"],
                "errors": p["errors"],
                "abandoned": p["abandoned"],
                "server_cpus": p["server_cpus"],
                "client_cpus": p["client_cpus"],
                "duration_ms": p["duration_ms"],
            }
        )
        med = medians.get((p["group"], p["server_sig"], p["ca_sig"]))
        if med and p["mode"] == "closed" and p["clients"] == 1 and st["handshakes_per_s"]:
            row["rate_x_handshake_median"] = round(st["handshakes_per_s"] * med[0] / 1e9, 3)
            row["rate_x_handshake_total_median"] = round(st["handshakes_per_s"] * med[1] / 1e9, 3)
        out.append(row)
    return out


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
    cpus = {(r["server_cpus"], r["client_cpus"]) for r in table}
    section.intro = template(
        "capacity_intro",
        cpus=html.escape("; ".join(f"server on CPU {s}, clients on CPU {c}" for s, c in cpus)),
    )
    section.table(csv_path, "Capacity per cell and load point (tables/capacity.csv)")
    _figure(store, section, table)
    return section


def _figure(store, section: Section, table: list[dict]) -> None:
    import matplotlib.pyplot as plt

    series: dict[tuple, list[dict]] = {}
    for r in table:
        key = (r["group"], r["server_sig"], r["ca_sig"], r["server_threads"])
        series.setdefault(key, []).append(r)
    fig, (ax50, ax99) = plt.subplots(1, 2, figsize=(10, 4))
    for (g, s, c, t), rs in series.items():
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
