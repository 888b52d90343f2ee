"""The ttlb experiment's tables in the results database: one row per connection
(`ttlb_raw`), the link profiles as run (`ttlb_profiles`) and the chains (`ttlb_chains`)."""

RAW_DDL = """
CREATE TABLE IF NOT EXISTS ttlb_raw (
    profile TEXT, shaper TEXT, grp TEXT, chain TEXT, data_bytes BIGINT, idx INTEGER,
    ttfb_ns BIGINT, ttlb_ns BIGINT, tcp_connect_ns BIGINT,
    client_retrans INTEGER, server_retrans INTEGER, retransmits INTEGER,
    client_hello_bytes BIGINT, server_flight_bytes BIGINT, record_bytes_sent BIGINT,
    record_bytes_received BIGINT, chain_der_bytes BIGINT, negotiated_group TEXT,
    negotiated_sigalg TEXT, rtt_us BIGINT, stack TEXT, host_pair TEXT)
"""
PROFILES_DDL = """
CREATE TABLE IF NOT EXISTS ttlb_profiles (
    profile TEXT PRIMARY KEY, shaper TEXT, choice TEXT, profile_json JSON, link_json JSON,
    topology_json JSON)
"""
CHAINS_DDL = """
CREATE TABLE IF NOT EXISTS ttlb_chains (
    chain TEXT PRIMARY KEY, key_spec TEXT, sigalg TEXT, chain_certs INTEGER,
    chain_der_bytes INTEGER, record JSON)
"""


# Runs made before host pairs: which host pair a row was measured on (None: this machine's
# namespaces).
MIGRATIONS = ("ALTER TABLE IF EXISTS ttlb_raw ADD COLUMN IF NOT EXISTS host_pair TEXT",)


def ensure(store) -> None:
    for ddl in (RAW_DDL, PROFILES_DDL, CHAINS_DDL):
        store.ensure_table(ddl)
