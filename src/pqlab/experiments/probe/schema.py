"""The probe's tables in the results database (what each column means: docs/probe.md)."""

from __future__ import annotations

RAW_DDL = """
CREATE TABLE IF NOT EXISTS probe_raw (
    cell_id TEXT, probe TEXT, target TEXT, address TEXT, stack TEXT, config TEXT,
    offered_groups TEXT, key_shares TEXT, sig TEXT, idx INTEGER, client_port INTEGER,
    outcome TEXT, error_kind TEXT, error TEXT, alert TEXT,
    version TEXT, cipher TEXT, "group" TEXT, group_code INTEGER, post_quantum BOOLEAN,
    sigalg TEXT, sigalg_code INTEGER, hello_retry BOOLEAN,
    verified BOOLEAN, verify_error TEXT, chain_certs INTEGER, chain_der_bytes INTEGER,
    client_hello_bytes INTEGER, hello_retry_bytes INTEGER, server_flight_bytes INTEGER,
    server_flight_segments INTEGER, certificate_bytes INTEGER, session_tickets INTEGER,
    round_trips INTEGER, ack_waits INTEGER, ack_wait_ms DOUBLE,
    flight_before_wait_segments INTEGER, flight_before_wait_bytes INTEGER,
    tcp_rtt_ms DOUBLE, tcp_connect_ms DOUBLE, handshake_ms DOUBLE, ttfb_ms DOUBLE,
    first_byte_ms DOUBLE, ttlb_ms DOUBLE, hello_retry_ms DOUBLE, server_wait_ms DOUBLE,
    http_status INTEGER, response_bytes BIGINT, bytes_sent BIGINT, bytes_received BIGINT,
    messages_from TEXT, messages_agree BOOLEAN, capture_note TEXT, server_first_bytes TEXT,
    failed_at_ms DOUBLE,
    t_connect_start_ns BIGINT, record JSON, chain_from TEXT, stack_chain_certs INTEGER,
    stack_chain_truncated BOOLEAN, failed_in TEXT)
"""

MESSAGES_DDL = """
CREATE TABLE IF NOT EXISTS probe_messages (
    cell_id TEXT, probe TEXT, stack TEXT, config TEXT, sig TEXT, idx INTEGER, seq INTEGER,
    sender TEXT, message TEXT, type_code INTEGER, length_bytes INTEGER, record_end INTEGER,
    at_ms DOUBLE, source TEXT)
"""

CHAIN_DDL = """
CREATE TABLE IF NOT EXISTS probe_chain (
    cell_id TEXT, probe TEXT, stack TEXT, config TEXT, sig TEXT, idx INTEGER,
    position INTEGER, der_bytes INTEGER, subject TEXT, issuer TEXT, key_algorithm TEXT,
    signature_algorithm TEXT, self_signed BOOLEAN, sha256 TEXT, source TEXT, not_after TEXT)
"""

# One row per configuration as the probe judged it (the verdict line it printed).
CONFIGS_DDL = """
CREATE TABLE IF NOT EXISTS probe_configs (
    cell_id TEXT, probe TEXT, target TEXT, stack TEXT, config TEXT, sig TEXT,
    connections INTEGER, outcome TEXT, verdict TEXT)
"""

DDL = (RAW_DDL, MESSAGES_DDL, CHAIN_DDL, CONFIGS_DDL)
# Runs made before the chain was read from the capture (where each chain came from, what the
# client stack kept of it) and before a failed connection named its phase.
MIGRATIONS: tuple[str, ...] = (
    "ALTER TABLE IF EXISTS probe_raw ADD COLUMN IF NOT EXISTS chain_from TEXT",
    "ALTER TABLE IF EXISTS probe_raw ADD COLUMN IF NOT EXISTS stack_chain_certs INTEGER",
    "ALTER TABLE IF EXISTS probe_raw ADD COLUMN IF NOT EXISTS stack_chain_truncated BOOLEAN",
    "ALTER TABLE IF EXISTS probe_raw ADD COLUMN IF NOT EXISTS failed_in TEXT",
    "ALTER TABLE IF EXISTS probe_chain ADD COLUMN IF NOT EXISTS source TEXT",
    "ALTER TABLE IF EXISTS probe_chain ADD COLUMN IF NOT EXISTS not_after TEXT",
)


def ensure(store) -> None:
    for ddl in DDL:
        store.ensure_table(ddl)
