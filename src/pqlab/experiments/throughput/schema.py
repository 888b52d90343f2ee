"""The throughput experiment's tables and their migrations."""

from __future__ import annotations

from pqlab.experiments.throughput import tls_bench as throughput_tls_bench

DDL = [
    """CREATE TABLE IF NOT EXISTS throughput_raw (
        cell_id TEXT, stack TEXT, stack_impl TEXT, "group" TEXT, cipher_suite TEXT,
        server_sig TEXT, idx INTEGER, push_bytes BIGINT, push_ns BIGINT,
        server_recv_ns BIGINT, pull_bytes BIGINT, pull_ns BIGINT,
        pull_first_to_last_ns BIGINT, negotiated_cipher TEXT, negotiated_group TEXT,
        server_cpus TEXT, client_cpus TEXT, handshake_ns BIGINT, push_cpu_ns BIGINT,
        pull_cpu_ns BIGINT, client_sig TEXT, echo_bytes BIGINT, echo_write_ns BIGINT,
        echo_read_ns BIGINT)""",
    throughput_tls_bench.DDL,
]


MIGRATIONS = (
    *(
        f"ALTER TABLE IF EXISTS throughput_raw ADD COLUMN IF NOT EXISTS {c} BIGINT"
        for c in (
            "handshake_ns",
            "push_cpu_ns",
            "pull_cpu_ns",
            "echo_bytes",
            "echo_write_ns",
            "echo_read_ns",
        )
    ),
    # Runs made before mutual TLS had no client certificate.
    "ALTER TABLE IF EXISTS throughput_raw ADD COLUMN IF NOT EXISTS client_sig TEXT DEFAULT 'none'",
)
