"""The memory experiment's tables and their migrations."""

from __future__ import annotations

RAW_DDL = """
CREATE TABLE IF NOT EXISTS memory_raw (
    cell_id TEXT, stack TEXT, stack_impl TEXT, role TEXT, "group" TEXT, server_sig TEXT,
    ca_sig TEXT, client_sig TEXT, idx INTEGER, warmup BOOLEAN,
    heap_total_bytes BIGINT, heap_peak_bytes BIGINT, heap_retained_bytes BIGINT,
    allocations BIGINT, frees BIGINT, reallocations BIGINT, stack_bytes BIGINT,
    stack_base_bytes BIGINT, stack_overflowed_paint BOOLEAN, handshake_ns BIGINT,
    negotiated_group TEXT, negotiated_sigalg TEXT, negotiated_client_sigalg TEXT,
    record JSON, heap_counting TEXT, malloc_total_bytes BIGINT, malloc_peak_bytes BIGINT,
    malloc_retained_bytes BIGINT, malloc_allocations BIGINT, malloc_frees BIGINT,
    fixed_random BOOLEAN, host_pair TEXT)
"""


IDLE_DDL = """
CREATE TABLE IF NOT EXISTS memory_idle_raw (
    cell_id TEXT, stack TEXT, stack_impl TEXT, "group" TEXT, server_sig TEXT, ca_sig TEXT,
    client_sig TEXT, idx INTEGER, connections_open INTEGER, heap_in_use_bytes BIGINT,
    vm_rss_bytes BIGINT, record JSON, heap_counting TEXT, malloc_in_use_bytes BIGINT,
    host_pair TEXT)
"""


ADDED = {
    "memory_raw": [
        ("heap_counting", "TEXT"),
        ("malloc_total_bytes", "BIGINT"),
        ("malloc_peak_bytes", "BIGINT"),
        ("malloc_retained_bytes", "BIGINT"),
        ("malloc_allocations", "BIGINT"),
        ("malloc_frees", "BIGINT"),
        ("fixed_random", "BOOLEAN"),
        # Runs made before host pairs: the pair a row ran on (None: this machine).
        ("host_pair", "TEXT"),
    ],
    "memory_idle_raw": [
        ("heap_counting", "TEXT"),
        ("malloc_in_use_bytes", "BIGINT"),
        ("host_pair", "TEXT"),
    ],
}


MIGRATIONS = tuple(
    f"ALTER TABLE IF EXISTS {table} ADD COLUMN IF NOT EXISTS {name} {kind}"
    for table, cols in ADDED.items()
    for name, kind in cols
)
