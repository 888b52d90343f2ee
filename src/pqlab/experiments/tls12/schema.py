"""The tls12 experiment's tables and their migrations."""

from __future__ import annotations

# Runs made before host pairs: the host pair a row ran on (None: this machine's namespaces).
MIGRATIONS = tuple(
    f"ALTER TABLE IF EXISTS {t} ADD COLUMN IF NOT EXISTS host_pair TEXT"
    for t in ("tls12_handshakes", "tls12_cells")
) + (
    # Runs made before DHE parameter sources.
    "ALTER TABLE IF EXISTS tls12_cells ADD COLUMN IF NOT EXISTS dh_params TEXT",
    "ALTER TABLE IF EXISTS tls12_cells ADD COLUMN IF NOT EXISTS dh_private_bits INTEGER",
    # Runs made before the server reported its DH exponent per connection.
    "ALTER TABLE IF EXISTS tls12_handshakes ADD COLUMN IF NOT EXISTS server_dh_private_bits "
    "INTEGER",
)


DDL = [
    """CREATE TABLE IF NOT EXISTS tls12_handshakes (
        cell_id TEXT, version TEXT, kex TEXT, cert TEXT, idx INTEGER,
        connect_to_handshake_ns BIGINT, tcp_connect_ns BIGINT, handshake_ns BIGINT,
        server_handshake_ns BIGINT, negotiated_version TEXT, cipher TEXT, grp TEXT,
        sigalg TEXT, peer_tmp_key_bits INTEGER, bytes_received BIGINT, bytes_sent BIGINT,
        host_pair TEXT, server_dh_private_bits INTEGER)""",
    """CREATE TABLE IF NOT EXISTS tls12_cells (
        cell_id TEXT, version TEXT, kex TEXT, cert TEXT, suite TEXT, grp TEXT,
        dh_bits INTEGER, n INTEGER, note TEXT, server_cpu DOUBLE, cpu_mechanism TEXT,
        server_cpu_ms DOUBLE, connections INTEGER, profile TEXT, link TEXT, client_security_level INTEGER,
        host_pair TEXT, dh_params TEXT, dh_private_bits INTEGER)""",
]
