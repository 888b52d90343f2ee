"""The memory experiment's tables and report section, from the database alone."""

from __future__ import annotations

import html

from pqlab.experiments.memory import tracker as memory_tracker
from pqlab.report.section import Section, template

KEYS = 'stack_impl, role, "group", server_sig, ca_sig, client_sig'


TABLE_SQL = f"""
SELECT {KEYS}, any_value(stack) AS stack, any_value(heap_counting) AS heap_counting,
       CAST(median(heap_total_bytes) AS BIGINT) AS heap_total_bytes,
       CAST(median(heap_peak_bytes) AS BIGINT) AS heap_peak_bytes,
       CAST(median(heap_retained_bytes) AS BIGINT) AS heap_retained_bytes,
       CAST(median(allocations) AS BIGINT) AS allocations,
       CAST(median(frees) AS BIGINT) AS frees,
       CAST(median(reallocations) AS BIGINT) AS reallocations,
       CAST(median(stack_bytes) AS BIGINT) AS stack_bytes,
       count(*) AS n,
       min(allocations) AS allocations_min, max(allocations) AS allocations_max,
       min(heap_peak_bytes) AS heap_peak_bytes_min, max(heap_peak_bytes) AS heap_peak_bytes_max,
       min(heap_total_bytes) AS heap_total_bytes_min,
       max(heap_total_bytes) AS heap_total_bytes_max,
       max(stack_bytes) AS stack_bytes_max,
       bool_or(stack_overflowed_paint) AS stack_paint_overflowed,
       CAST(median(malloc_total_bytes) AS BIGINT) AS malloc_total_bytes,
       CAST(median(malloc_peak_bytes) AS BIGINT) AS malloc_peak_bytes,
       CAST(median(malloc_retained_bytes) AS BIGINT) AS malloc_retained_bytes,
       CAST(median(malloc_allocations) AS BIGINT) AS malloc_allocations,
       bool_and(fixed_random) AS fixed_random,
       host_pair
FROM memory_raw WHERE NOT warmup
GROUP BY {KEYS}, host_pair
ORDER BY role, "group", server_sig, ca_sig, client_sig, stack_impl, host_pair
"""


IDLE_SQL = """
SELECT stack_impl, "group", server_sig, ca_sig, client_sig,
       max(connections_open) AS connections,
       CAST(regr_slope(vm_rss_bytes, connections_open) AS BIGINT) AS rss_bytes_per_connection,
       CAST(regr_slope(heap_in_use_bytes, connections_open) AS BIGINT)
           AS heap_bytes_per_connection,
       round(regr_r2(vm_rss_bytes, connections_open), 3) AS rss_r2,
       round(regr_r2(heap_in_use_bytes, connections_open), 3) AS heap_r2,
       min(vm_rss_bytes) AS rss_bytes_first, max(vm_rss_bytes) AS rss_bytes_last,
       any_value(heap_counting) AS heap_counting,
       CAST(regr_slope(malloc_in_use_bytes, connections_open) AS BIGINT)
           AS malloc_bytes_per_connection,
       host_pair
FROM memory_idle_raw
GROUP BY stack_impl, "group", server_sig, ca_sig, client_sig, host_pair
ORDER BY "group", server_sig, ca_sig, client_sig, host_pair
"""


def export(store):

    if not store.has_table("memory_raw"):
        return None
    tracked = store.has_table("memory_tracker_raw") and bool(
        store.query("SELECT 1 FROM memory_tracker_raw LIMIT 1")
    )
    table = store.export_table(
        "memory", memory_tracker.with_tracker(TABLE_SQL) if tracked else TABLE_SQL
    )
    s = Section(
        title="Memory per handshake and per idle connection", intro=template("memory_intro")
    )
    s.table(table, "Heap and stack per full handshake, per role (medians; min/max show spread)")
    if tracked:
        _export_tracker(store, s)
    if store.has_table("memory_idle_raw") and store.query("SELECT 1 FROM memory_idle_raw LIMIT 1"):
        idle = store.export_table("memory_idle", IDLE_SQL)
        s.table(idle, "Server memory per idle established connection (least-squares slopes)")
    pairs = store.query(
        "SELECT DISTINCT host_pair FROM memory_raw WHERE host_pair IS NOT NULL ORDER BY 1"
    )
    if pairs:
        names = ", ".join(html.escape(p["host_pair"]) for p in pairs)
        s.text(
            f"<p>Across hosts ({names}, the <code>host_pair</code> column): each role ran on "
            "its own host, its handshakes counted on its own thread there; the idle "
            "connections were held on the server's host, over its loopback; the library's "
            "own tracker was not run (it runs on one machine only).</p>"
        )
    return s


def _export_tracker(store, s: Section) -> None:
    """The library's own tracker beside pqlab's count (document 004's heap and stack)."""
    rows = store.query(memory_tracker.comparison_sql(TABLE_SQL))
    if rows:
        table = store.export_table("memory_tracker", memory_tracker.comparison_sql(TABLE_SQL))
        s.table(
            table,
            "wolfSSL's own memory tracker and stack check (its example server and client, as "
            "document 004 ran them) beside pqlab's count of the same cell on every stack: "
            "allocations and bytes per connection from the tracker's 1- and N-connection "
            "runs; peak and stack of its one-connection process (docs/memory.md explains "
            "each column's difference)",
        )
    for row in store.query(memory_tracker.UNAVAILABLE_SQL):
        s.text(
            f"<p>{html.escape(row['stack_impl'])} {html.escape(row['group'])} / "
            f"{html.escape(row['server_sig'])}: no tracker figures "
            f"({html.escape(row['note'])}).</p>"
        )
