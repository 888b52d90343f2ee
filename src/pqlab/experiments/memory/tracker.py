"""The memory experiment's outside reference: a TLS library's own memory tracker, run
through the library's own example server and client for the same cells pqlab counts
(document 004's heap and stack tables). Today wolfSSL's: its `mem_track.h` tracker and its
examples' stack-size check (`pqlab.tls.wolfssl_tools`), on the stacks whose engine report
lists those programs (`memory_server`, `memory_client`).

Per cell, three runs of the example pair: one connection that exchanges wolfSSL's "hello"
messages, as document 004 ran it (the whole process: context, certificates, one connection;
stack used, allocations, bytes, peak), and the client's benchmark loop of 1 and of
`BENCH_CONNECTIONS` connections, whose difference is the tracker's count per connection:
the figure comparable with pqlab's count per handshake. docs/memory.md explains every
column's difference.
"""

from __future__ import annotations

from pqlab.tls import wolfssl_tools

BENCH_CONNECTIONS = 11
TOOLS = ("memory_server", "memory_client")
FIGURES = (
    "allocations",
    "deallocations",
    "heap_total_bytes",
    "heap_peak_bytes",
    "heap_current_bytes",
    "stack_used_bytes",
)

DDL = """
CREATE TABLE IF NOT EXISTS memory_tracker_raw (
    cell_id TEXT, stack TEXT, stack_impl TEXT, role TEXT, "group" TEXT, server_sig TEXT,
    ca_sig TEXT, client_sig TEXT, run TEXT, connections INTEGER, allocations BIGINT,
    deallocations BIGINT, heap_total_bytes BIGINT, heap_peak_bytes BIGINT,
    heap_current_bytes BIGINT, stack_used_bytes BIGINT, note TEXT, output TEXT)
"""


def applies(stack) -> bool:
    """Whether the stack's build has the library's tracked example programs."""
    return wolfssl_tools.has_tools(stack, *TOOLS)


def _spec(cell, chain, client) -> wolfssl_tools.PairSpec:
    return wolfssl_tools.PairSpec(
        group=cell.group.tls_group,
        chain=chain.chain,
        key=chain.key,
        root=chain.root,
        client_chain=client.chain if client else None,
        client_key=client.key if client else None,
        client_root=client.root if client else None,
    )


def _row(base: dict, role: str, run: str, tracked=None, note: str | None = None) -> dict:
    figures = tracked.figures if tracked else {}
    return {
        **base,
        "role": role,
        "run": run,
        "connections": tracked.connections if tracked else None,
        **{f: figures.get(f) for f in FIGURES},
        "note": note,
        "output": tracked.output if tracked else None,
    }


def measure_cell(stack, cell, chain, client) -> list[dict]:
    """The tracker's rows of one cell: `single` (document 004's one connection) and `bench`
    (1 and BENCH_CONNECTIONS connections) per role; one `unavailable` row per role with the
    reason when the example client cannot offer the cell's group."""
    base = {
        "cell_id": str(cell.cell_id),
        "stack": stack.name,
        "stack_impl": stack.implementation,
        **cell.keys(),
    }
    if wolfssl_tools.example_group_flags(cell.group.tls_group) is None:
        note = f"wolfSSL's example client cannot offer {cell.group.name} alone"
        return [_row(base, role, "unavailable", note=note) for role in ("client", "server")]
    spec = _spec(cell, chain, client)
    rows = []
    for run, connections, bench in (
        ("single", 1, False),
        ("bench", 1, True),
        ("bench", BENCH_CONNECTIONS, True),
    ):
        pair = wolfssl_tools.tracked_pair(stack, spec, connections, bench)
        rows += [_row(base, role, run, pair[role]) for role in ("client", "server")]
    return rows


KEYS = ("stack", "role", "group", "server_sig", "ca_sig", "client_sig")
_ON = " AND ".join(f't."{k}" = m."{k}"' for k in KEYS)

# Per (stack, role, cell): the one-connection process figures and the per-connection
# difference of the two benchmark loops.
CELL_SQL = """
SELECT s.stack, s.role, s."group", s.server_sig, s.ca_sig, s.client_sig,
       s.stack_used_bytes AS tracker_stack_bytes,
       s.allocations AS tracker_process_allocations,
       s.deallocations AS tracker_process_deallocations,
       s.heap_total_bytes AS tracker_process_heap_total_bytes,
       s.heap_peak_bytes AS tracker_heap_peak_bytes,
       CAST(round((k.allocations - o.allocations) / (k.connections - o.connections)) AS BIGINT)
           AS tracker_allocations,
       CAST(round((k.heap_total_bytes - o.heap_total_bytes) / (k.connections - o.connections))
            AS BIGINT) AS tracker_heap_total_bytes,
       k.connections AS tracker_connections
FROM memory_tracker_raw s
JOIN memory_tracker_raw o USING (cell_id, role)
JOIN memory_tracker_raw k USING (cell_id, role)
WHERE s.run = 'single' AND o.run = 'bench' AND k.run = 'bench'
  AND o.connections = 1 AND k.connections > 1
"""


def with_tracker(table_sql: str) -> str:
    """The memory table with the tracker's figures for the same stack, role and cell
    (null where no tracker ran)."""
    return f"""
SELECT m.*, t.tracker_allocations, t.tracker_heap_total_bytes, t.tracker_heap_peak_bytes,
       t.tracker_stack_bytes
FROM ({table_sql}) m LEFT JOIN ({CELL_SQL}) t ON {_ON}
ORDER BY m.role, m."group", m.server_sig, m.ca_sig, m.client_sig, m.stack_impl
"""


def _ratio(a: str, b: str) -> str:
    return f"round(CAST({a} AS DOUBLE) / nullif({b}, 0), 3)"


def comparison_sql(table_sql: str) -> str:
    """Document 004's figures from the tracker, per role and cell, beside pqlab's count of
    the same cell on every stack the run measured, with pqlab / tracker ratios."""
    on = " AND ".join(f'p."{k}" = t."{k}"' for k in KEYS[1:])
    return f"""
SELECT t.role, t."group", t.server_sig, t.ca_sig, t.client_sig,
       t.tracker_stack_bytes AS stack_used_bytes,
       t.tracker_process_allocations AS total_allocs,
       t.tracker_process_heap_total_bytes AS heap_total_bytes,
       t.tracker_heap_peak_bytes AS heap_peak_bytes,
       t.tracker_allocations AS allocations_per_connection,
       t.tracker_heap_total_bytes AS heap_total_bytes_per_connection,
       p.stack_impl AS pqlab_stack_impl, p.heap_counting AS pqlab_heap_counting,
       p.allocations AS pqlab_allocations, p.heap_total_bytes AS pqlab_heap_total_bytes,
       p.heap_peak_bytes AS pqlab_heap_peak_bytes, p.stack_bytes AS pqlab_stack_bytes,
       {_ratio("p.allocations", "t.tracker_allocations")} AS allocations_ratio,
       {_ratio("p.heap_total_bytes", "t.tracker_heap_total_bytes")} AS heap_total_ratio,
       {_ratio("p.heap_peak_bytes", "t.tracker_heap_peak_bytes")} AS heap_peak_ratio,
       {_ratio("p.stack_bytes", "t.tracker_stack_bytes")} AS stack_ratio,
       t.tracker_connections
FROM ({CELL_SQL}) t JOIN ({table_sql}) p ON {on}
ORDER BY t.role, t."group", t.server_sig, t.ca_sig, t.client_sig, p.stack_impl
"""


UNAVAILABLE_SQL = """
SELECT DISTINCT stack_impl, "group", server_sig, ca_sig, client_sig, note
FROM memory_tracker_raw WHERE run = 'unavailable'
"""
