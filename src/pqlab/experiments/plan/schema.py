"""`pqlab plan`'s tables in the results database: one row per cell and signature size
(`plan_cells`), its TTLB per response size (`plan_ttlb`), the chain sizes where each extra
round trip begins (`plan_cliffs`) and the migration table (`plan_migration`)."""

CELLS_DDL = """
CREATE TABLE IF NOT EXISTS plan_cells (
    cell_id TEXT, stack TEXT, "group" TEXT, server_sig TEXT, ca_sig TEXT,
    intermediates INTEGER, intermediate_sig TEXT, send_root BOOLEAN, chain TEXT,
    chain_bytes_requested BIGINT, chain_own_bytes BIGINT, chain_der_bytes BIGINT,
    chain_certs INTEGER, padding_bytes BIGINT, path TEXT, rtt_ms DOUBLE, bandwidth_bps DOUBLE,
    loss_pct DOUBLE, initcwnd INTEGER, mss INTEGER, variant TEXT, signature_bytes INTEGER,
    client_hello_bytes INTEGER, client_hello_segments INTEGER, server_hello_bytes INTEGER,
    encrypted_extensions_bytes INTEGER, certificate_bytes INTEGER,
    certificate_verify_bytes INTEGER, finished_bytes INTEGER,
    bytes_through_certificate INTEGER, server_flight_bytes INTEGER,
    server_flight_records JSON, server_writes JSON, server_flight_segments INTEGER,
    flight_rounds INTEGER, cwnd_stalls INTEGER, round_trips INTEGER, ttfb_ms DOUBLE,
    client_flight_bytes INTEGER, handshake_bytes INTEGER, next_cliff_chain_bytes BIGINT,
    headroom_bytes BIGINT, p_no_loss DOUBLE, write_model TEXT, client_sig TEXT,
    certificate_request_bytes INTEGER, cpu_ms DOUBLE, per_packet_us DOUBLE)
"""
# `--calibrate`: per configuration, what was measured on this machine beyond the network.
CALIBRATION_DDL = """
CREATE TABLE IF NOT EXISTS plan_calibration (
    configuration TEXT, stack TEXT, shaper TEXT, per_packet_us DOUBLE, cpu_ms DOUBLE,
    connections INTEGER, profile TEXT)
"""
# Columns added after the table's first release (older runs get them when opened).
MIGRATIONS = (
    "ALTER TABLE IF EXISTS plan_cells ADD COLUMN IF NOT EXISTS cpu_ms DOUBLE",
    "ALTER TABLE IF EXISTS plan_cells ADD COLUMN IF NOT EXISTS per_packet_us DOUBLE",
)
TTLB_DDL = """
CREATE TABLE IF NOT EXISTS plan_ttlb (
    cell_id TEXT, variant TEXT, data_bytes BIGINT, ttlb_ms DOUBLE, response_segments INTEGER,
    response_rounds INTEGER, ttlb_round_trips INTEGER)
"""
CLIFFS_DDL = """
CREATE TABLE IF NOT EXISTS plan_cliffs (
    cell_id TEXT, stack TEXT, "group" TEXT, server_sig TEXT, ca_sig TEXT,
    intermediates INTEGER, send_root BOOLEAN, chain_certs INTEGER, path TEXT,
    initcwnd INTEGER, mss INTEGER, variant TEXT, round_trips INTEGER, chain_der_bytes BIGINT,
    server_flight_bytes INTEGER, client_sig TEXT)
"""
MIGRATION_DDL = """
CREATE TABLE IF NOT EXISTS plan_migration (
    path TEXT, rtt_ms DOUBLE, bandwidth_bps DOUBLE, loss_pct DOUBLE, initcwnd INTEGER,
    mss INTEGER, stack TEXT, "from" TEXT, "to" TEXT, response_bytes BIGINT,
    from_handshake_bytes INTEGER, to_handshake_bytes INTEGER, extra_bytes INTEGER,
    from_round_trips INTEGER, to_round_trips INTEGER, extra_round_trips INTEGER,
    from_ttfb_ms DOUBLE, to_ttfb_ms DOUBLE, extra_ttfb_ms DOUBLE, extra_ttfb_pct DOUBLE,
    from_ttlb_ms DOUBLE, to_ttlb_ms DOUBLE, extra_ttlb_ms DOUBLE, extra_ttlb_pct DOUBLE,
    to_headroom_bytes BIGINT)
"""


def ensure(store) -> None:
    for ddl in (CELLS_DDL, TTLB_DDL, CLIFFS_DDL, MIGRATION_DDL, CALIBRATION_DDL):
        store.ensure_table(ddl)
