"""The capacity experiment's tables: raw per-handshake samples and one row per load point."""

from __future__ import annotations

LABELS = """cell_id TEXT, stack TEXT, stack_impl TEXT, "group" TEXT, server_sig TEXT,
    ca_sig TEXT, server_threads INTEGER, point INTEGER, client_sig TEXT"""

DDL = [
    f"""CREATE TABLE IF NOT EXISTS capacity_raw ({LABELS}, mode TEXT, clients_or_rate TEXT,
        worker INTEGER, scheduled_ns BIGINT, start_ns BIGINT, done_ns BIGINT, end_ns BIGINT,
        host_pair TEXT, connected_ns BIGINT)""",
    f"""CREATE TABLE IF NOT EXISTS capacity_points ({LABELS}, mode TEXT, clients INTEGER,
        rate DOUBLE, rate_label TEXT, clients_or_rate TEXT, open_workers INTEGER,
        warmup_per_worker INTEGER, duration_ms BIGINT, window_ns BIGINT, completed BIGINT,
        errors BIGINT, error_messages TEXT, arrivals BIGINT, abandoned BIGINT,
        server_cpu_s DOUBLE, server_span_ns BIGINT, server_connections BIGINT,
        server_connection_errors BIGINT, server_output_blocked_ns BIGINT, loadgen_cpu_s DOUBLE,
        loadgen_span_ns BIGINT, machine_cpu TEXT, server_cpus TEXT, client_cpus TEXT,
        seconds DOUBLE, t_start BIGINT, host_pair TEXT, server_machine_cpu TEXT)""",
]

# Runs made before host pairs: the pair a row ran on (None: this machine's namespaces) and
# the server's host's CPUs (None: the load generator's machine, `machine_cpu`).
MIGRATIONS = (
    "ALTER TABLE IF EXISTS capacity_raw ADD COLUMN IF NOT EXISTS host_pair TEXT",
    # Runs made before the TCP connect was stamped apart from the handshake.
    "ALTER TABLE IF EXISTS capacity_raw ADD COLUMN IF NOT EXISTS connected_ns BIGINT",
    "ALTER TABLE IF EXISTS capacity_points ADD COLUMN IF NOT EXISTS host_pair TEXT",
    "ALTER TABLE IF EXISTS capacity_points ADD COLUMN IF NOT EXISTS server_machine_cpu TEXT",
    # Runs made before mutual TLS had no client certificate.
    "ALTER TABLE IF EXISTS capacity_raw ADD COLUMN IF NOT EXISTS client_sig TEXT DEFAULT 'none'",
    "ALTER TABLE IF EXISTS capacity_points ADD COLUMN IF NOT EXISTS client_sig TEXT DEFAULT 'none'",
)


def ensure(store) -> None:
    for ddl in DDL:
        store.ensure_table(ddl)
