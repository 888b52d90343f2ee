"""The ttlb experiment's tables in the results database: one row per connection
(`ttlb_raw`), the link profiles as run (`ttlb_profiles`), the chains (`ttlb_chains`), the
wire model's prediction per cell (`ttlb_prediction`) and the handshake's round-trip cliffs
per cell (`ttlb_cliffs`)."""

RAW_DDL = """
CREATE TABLE IF NOT EXISTS ttlb_raw (
    profile TEXT, shaper TEXT, grp TEXT, chain TEXT, data_bytes BIGINT, idx INTEGER,
    ttfb_ns BIGINT, ttlb_ns BIGINT, tcp_connect_ns BIGINT,
    client_retrans INTEGER, server_retrans INTEGER, retransmits INTEGER,
    client_hello_bytes BIGINT, server_flight_bytes BIGINT, record_bytes_sent BIGINT,
    record_bytes_received BIGINT, chain_der_bytes BIGINT, negotiated_group TEXT,
    negotiated_sigalg TEXT, rtt_us BIGINT, stack TEXT, host_pair TEXT,
    chain_bytes_requested BIGINT, client_sig TEXT, cell_id TEXT)
"""
PROFILES_DDL = """
CREATE TABLE IF NOT EXISTS ttlb_profiles (
    profile TEXT PRIMARY KEY, shaper TEXT, choice TEXT, profile_json JSON, link_json JSON,
    topology_json JSON)
"""
CHAINS_DDL = """
CREATE TABLE IF NOT EXISTS ttlb_chains (
    chain TEXT PRIMARY KEY, key_spec TEXT, sigalg TEXT, chain_certs INTEGER,
    chain_der_bytes INTEGER, record JSON, chain_bytes_requested BIGINT)
"""
# One row per cell and signature size (`variant`: exact, or the smallest and largest where
# a signature's size varies): what `pqlab plan` predicts for it (`pqlab.tls.predict`, no CPU
# time, no loss or jitter) on the profile's link, and its times on the link as measured
# (`link_rtt_ms`: the cell's median TCP connect; `link_ttfb_ms`, `link_ttlb_ms`), which the
# band is checked against.
PREDICTION_DDL = """
CREATE TABLE IF NOT EXISTS ttlb_prediction (
    cell_id TEXT, variant TEXT, client_hello_bytes INTEGER, server_flight_bytes INTEGER,
    server_flight_segments INTEGER, round_trips INTEGER, ttfb_ms DOUBLE, ttlb_ms DOUBLE,
    ttlb_round_trips INTEGER, link_rtt_ms DOUBLE, link_ttfb_ms DOUBLE, link_ttlb_ms DOUBLE)
"""

# One row per cell and extra round trip: the chain DER bytes from which the cell's handshake
# takes `round_trips` (`pqlab.tls.predict.cliffs`: its group, signature, certificate count,
# ClientHello, write model, MSS and initcwnd kept; the largest signature where it varies).
# A --chain-bytes sweep's measured steps are set beside them.
CLIFFS_DDL = """
CREATE TABLE IF NOT EXISTS ttlb_cliffs (
    cell_id TEXT, round_trips INTEGER, chain_der_bytes BIGINT, mss INTEGER, initcwnd INTEGER)
"""


# Runs made before host pairs: which host pair a row was measured on (None: this machine's
# namespaces); before --chain-bytes: the size a chain was padded to.
MIGRATIONS = (
    "ALTER TABLE IF EXISTS ttlb_raw ADD COLUMN IF NOT EXISTS host_pair TEXT",
    "ALTER TABLE IF EXISTS ttlb_raw ADD COLUMN IF NOT EXISTS chain_bytes_requested BIGINT",
    "ALTER TABLE IF EXISTS ttlb_chains ADD COLUMN IF NOT EXISTS chain_bytes_requested BIGINT",
    # Runs made before mutual TLS had no client certificate.
    "ALTER TABLE IF EXISTS ttlb_raw ADD COLUMN IF NOT EXISTS client_sig TEXT DEFAULT 'none'",
    "ALTER TABLE IF EXISTS ttlb_raw ADD COLUMN IF NOT EXISTS cell_id TEXT",
    # Runs made before the band was checked on the measured round trip.
    "ALTER TABLE IF EXISTS ttlb_prediction ADD COLUMN IF NOT EXISTS link_rtt_ms DOUBLE",
    "ALTER TABLE IF EXISTS ttlb_prediction ADD COLUMN IF NOT EXISTS link_ttfb_ms DOUBLE",
    "ALTER TABLE IF EXISTS ttlb_prediction ADD COLUMN IF NOT EXISTS link_ttlb_ms DOUBLE",
)


def ensure(store) -> None:
    for ddl in (RAW_DDL, PROFILES_DDL, CHAINS_DDL, PREDICTION_DDL, CLIFFS_DDL):
        store.ensure_table(ddl)


def chain_sql(store) -> str:
    """The chain column as the tables and figures name it: with the client's certificate
    in mutual TLS (`chain_label`), so those cells stay apart (runs made before it: chain)."""
    if "client_sig" not in store.columns("ttlb_raw"):
        return "chain"
    return (
        "chain || CASE WHEN coalesce(client_sig, 'none') <> 'none' "
        "THEN ' + client ' || client_sig ELSE '' END"
    )


def chain_label(chain: str, client: str | None) -> str:
    """A chain's name in tables and figures, with the client's certificate in mutual TLS."""
    return chain if not client or client == "none" else f"{chain} + client {client}"
