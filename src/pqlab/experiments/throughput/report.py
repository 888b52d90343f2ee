"""The throughput experiment's tables, figure and report section, from the database alone."""

from __future__ import annotations

import html
import statistics

from pqlab import figures, units
from pqlab.experiments.throughput import tls_bench as throughput_tls_bench
from pqlab.experiments.throughput.plan import NAME
from pqlab.options.tls import NO_CLIENT
from pqlab.report.section import Section, template

COLUMNS = [
    "stack",
    "stack_impl",
    "group",
    "cipher_suite",
    "server_sig",
    "client_sig",
    "bytes",
    "n",
    "echo_bytes",
    "tx_MBps",
    "rx_MBps",
    "tx_MBps_min",
    "tx_MBps_max",
    "rx_MBps_min",
    "rx_MBps_max",
    "server_rx_MBps",
    "handshake_ms",
    "handshake_mean_ms",
    "tx_cpu_MBps",
    "rx_cpu_MBps",
    "echo_tx_MBps",
    "echo_rx_MBps",
]


def mbps(nbytes: int, ns: int) -> float:
    """Megabytes (10^6 bytes) per second."""
    return nbytes / ns * 1e3 if ns > 0 else float("nan")


def summary_rows(store) -> list[dict]:
    raw = store.query(
        'SELECT * FROM throughput_raw ORDER BY "group", cipher_suite, server_sig, stack_impl, idx'
    )
    cells: dict[tuple, list[dict]] = {}
    for r in raw:
        key = (r["stack_impl"], r["group"], r["cipher_suite"], r["server_sig"])
        cells.setdefault((*key, r.get("client_sig") or NO_CLIENT), []).append(r)
    out = []
    for (impl, group, suite, sig, client), rs in cells.items():
        handshakes = [r["handshake_ns"] / 1e6 for r in rs if r.get("handshake_ns")]
        tx_cpu = [mbps(r["push_bytes"], r["push_cpu_ns"]) for r in rs if r.get("push_cpu_ns")]
        rx_cpu = [mbps(r["pull_bytes"], r["pull_cpu_ns"]) for r in rs if r.get("pull_cpu_ns")]
        tx = [mbps(r["push_bytes"], r["push_ns"]) for r in rs]
        rx = [mbps(r["pull_bytes"], r["pull_ns"]) for r in rs]
        srx = [mbps(r["push_bytes"], r["server_recv_ns"]) for r in rs]
        echoed = [r for r in rs if r.get("echo_write_ns")]
        # As tls_bench sums: all bytes over all time inside the writes (reads), not a median.
        echo_tx = mbps(
            sum(r["echo_bytes"] for r in echoed), sum(r["echo_write_ns"] for r in echoed)
        )
        echo_rx = mbps(sum(r["echo_bytes"] for r in echoed), sum(r["echo_read_ns"] for r in echoed))
        out.append(
            {
                "stack": rs[0].get("stack"),
                "stack_impl": impl,
                "group": group,
                "cipher_suite": suite,
                "server_sig": sig,
                "client_sig": client,
                "bytes": rs[0]["push_bytes"],
                "n": len(rs),
                "echo_bytes": echoed[0]["echo_bytes"] if echoed else None,
                "tx_MBps": round(statistics.median(tx), 1),
                "rx_MBps": round(statistics.median(rx), 1),
                "tx_MBps_min": round(min(tx), 1),
                "tx_MBps_max": round(max(tx), 1),
                "rx_MBps_min": round(min(rx), 1),
                "rx_MBps_max": round(max(rx), 1),
                "server_rx_MBps": round(statistics.median(srx), 1),
                "handshake_ms": round(statistics.median(handshakes), 3) if handshakes else None,
                "handshake_mean_ms": round(statistics.fmean(handshakes), 3) if handshakes else None,
                "tx_cpu_MBps": round(statistics.median(tx_cpu), 1) if tx_cpu else None,
                "rx_cpu_MBps": round(statistics.median(rx_cpu), 1) if rx_cpu else None,
                "echo_tx_MBps": round(echo_tx, 1) if echoed else None,
                "echo_rx_MBps": round(echo_rx, 1) if echoed else None,
            }
        )
    return out


def export(store) -> Section | None:
    if not store.has_table("throughput_raw"):
        return None
    rows = summary_rows(store)
    if not rows:
        return None
    csv_path = store.export_rows(NAME, rows, COLUMNS)
    section = Section(title="Bulk throughput after the handshake")
    section.intro = template(
        "throughput_intro", size=html.escape(units.format_bytes(rows[0]["bytes"]))
    )
    section.table(
        csv_path,
        "Tx (client to server) and Rx (server to client), MB/s, and the client's handshake "
        "time (tables/throughput.csv)",
    )
    _figure(store, section, rows)
    throughput_tls_bench.export(store, section, rows)
    return section


def _figure(store, section: Section, rows: list[dict]) -> None:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 0.4 * len(rows) + 1.2))
    several = len({r["stack_impl"] for r in rows}) > 1
    labels = [
        f"{r['group']} / {r['cipher_suite']}"
        + (f" / client {r['client_sig']}" if r["client_sig"] != NO_CLIENT else "")
        + (f" / {r['stack']}" if several else "")
        for r in rows
    ]
    y = list(range(len(rows)))
    ax.barh([v - 0.2 for v in y], [r["tx_MBps"] for r in rows], height=0.4, label="Tx")
    ax.barh([v + 0.2 for v in y], [r["rx_MBps"] for r in rows], height=0.4, label="Rx")
    ax.set_yticks(y, labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("MB/s (median of connections)")
    ax.legend()
    png = figures.save(fig, store, "throughput")
    section.figure(png, "Bulk transfer after the handshake, each way, per group and cipher suite")
