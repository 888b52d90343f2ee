"""The handshake experiment's tables in the results database (raw rows per handshake, phase
rows per handshake and view, capture statistics per cell and host)."""


def json_ints(values) -> str:
    """A JSON column of integers, as `json.dumps(list(values))` writes it (some five times
    as fast: a cell writes five such columns a handshake)."""
    return "[" + ", ".join(map(str, values)) + "]"


def json_int_map(mapping: dict[str, int]) -> str:
    """A JSON object of integers under plain keys (no character JSON escapes), as
    `json.dumps(mapping)` writes it."""
    return "{" + ", ".join(f'"{k}": {v}' for k, v in mapping.items()) + "}"


RAW_DDL = """
CREATE TABLE IF NOT EXISTS handshake_raw (
    cell_id TEXT, "group" TEXT, server_sig TEXT, ca_sig TEXT, idx INTEGER,
    client_port INTEGER, t_syn_ns BIGINT,
    handshake_ns BIGINT, total_ns BIGINT, client_processing_ns BIGINT,
    sh_to_cert_ns BIGINT, sh_to_fin_ns BIGINT,
    server_flight_segments INTEGER, server_flight_bytes INTEGER,
    bytes_through_certificate INTEGER, server_flight_retransmissions INTEGER,
    writes_predicted INTEGER, flush_offsets_predicted TEXT, short_segment_ends TEXT,
    split_by_write_buffer BOOLEAN, cwnd_stalls INTEGER, cwnd_stall_wait_ns BIGINT,
    client_bytes INTEGER, server_bytes INTEGER,
    client_hello_bytes INTEGER, server_hello_bytes INTEGER,
    encrypted_extensions_bytes INTEGER, certificate_bytes INTEGER,
    certificate_verify_bytes INTEGER, server_finished_bytes INTEGER,
    client_finished_bytes INTEGER,
    negotiated_group TEXT, negotiated_sigalg TEXT, congestion_control TEXT, chain_sent TEXT,
    server_snd_cwnd INTEGER, server_total_retrans INTEGER, server_snd_mss INTEGER,
    points JSON, stack TEXT, message_source TEXT,
    client_hello_segments INTEGER, server_hello_segments INTEGER, host_pair TEXT,
    order_disagreements INTEGER, document_case INTEGER, cv_stall_predicted BOOLEAN,
    "round" INTEGER, chain_bytes_requested BIGINT, server_writes JSON, flight_rounds INTEGER,
    round_trips INTEGER, predicted_flight_bytes_min INTEGER,
    predicted_flight_bytes_max INTEGER, predicted_writes JSON,
    predicted_segments_min INTEGER, predicted_segments_max INTEGER,
    predicted_round_trips_min INTEGER, predicted_round_trips_max INTEGER,
    predicted_handshake_ns_min BIGINT, predicted_handshake_ns_max BIGINT, shaped BOOLEAN,
    chain_der_bytes INTEGER, flight_max_in_flight INTEGER, client_sig TEXT,
    certificate_request_bytes INTEGER, client_certificate_bytes INTEGER,
    client_certificate_verify_bytes INTEGER, client_flight_bytes INTEGER,
    client_flight_segments INTEGER, client_payload_bytes BIGINT, server_payload_bytes BIGINT,
    client_connection_ip_bytes BIGINT, server_connection_ip_bytes BIGINT,
    negotiated_client_sigalg TEXT, negotiated_cipher TEXT, client_retransmissions INTEGER,
    client_retransmitted_bytes BIGINT, server_retransmissions INTEGER,
    server_retransmitted_bytes BIGINT, segments_sh_to_cv INTEGER)
"""
PHASE_DDL = """
CREATE TABLE IF NOT EXISTS handshake_phase (
    cell_id TEXT, "group" TEXT, server_sig TEXT, ca_sig TEXT, idx INTEGER,
    view TEXT, phase_order INTEGER, phase TEXT, family TEXT, ns BIGINT, host_pair TEXT,
    cross_host BOOLEAN, clock_uncertainty_ns DOUBLE, below_clock_uncertainty BOOLEAN,
    stack TEXT, client_sig TEXT, retransmissions INTEGER)
"""
CAPTURE_DDL = """
CREATE TABLE IF NOT EXISTS handshake_capture (
    cell_id TEXT, side TEXT, packets BIGINT, kernel_packets BIGINT, kernel_drops BIGINT,
    userspace_timestamps BIGINT, pcap TEXT, seconds DOUBLE, handshakes INTEGER,
    topology JSON, host_pair TEXT)
"""

# The order the cells' rounds ran in (the comparisons' defence against drift): per cell and
# round, its place in the run, the shuffle's seed, its handshakes, when it started and the
# server port the cell ran on (the cells of a batch run side by side on PORT, PORT+1, ...).
ORDER_DDL = """
CREATE TABLE IF NOT EXISTS handshake_order (
    cell_id TEXT, "round" INTEGER, position INTEGER, seed BIGINT, warmup INTEGER,
    handshakes INTEGER, started_unix_ns BIGINT, seconds DOUBLE, host_pair TEXT, port INTEGER)
"""

# What the server and the client processes cost (document 000 says the load is negligible):
# CPU seconds of each finished process (its rusage), its peak RSS (VmHWM, see
# pqlab.procstat), the wall time of the cell's rounds together and how many handshakes it made (warm-up included).
LOAD_DDL = """
CREATE TABLE IF NOT EXISTS handshake_load (
    cell_id TEXT, "group" TEXT, server_sig TEXT, ca_sig TEXT, side TEXT, handshakes INTEGER,
    wall_s DOUBLE, cpu_user_s DOUBLE, cpu_sys_s DOUBLE, max_rss_kib BIGINT, stack TEXT,
    client_sig TEXT)
"""


# Where the wire model puts each extra round trip for a cell's group, signature, certificate
# count and window (`pqlab.tls.predict.cliffs`): the chain DER bytes from which the handshake
# takes `round_trips`; a --chain-bytes sweep's measured steps are checked against them.
CLIFFS_DDL = """
CREATE TABLE IF NOT EXISTS handshake_cliffs (
    cell_id TEXT, round_trips INTEGER, chain_der_bytes BIGINT, mss INTEGER, initcwnd INTEGER)
"""


# Columns added after a table's first release, in the order the tables above end with them:
# the store adds them to an older run's tables when it opens the run.
ADDED = {
    "handshake_raw": [
        ("client_hello_segments", "INTEGER"),
        ("server_hello_segments", "INTEGER"),
        ("host_pair", "TEXT"),
        ("order_disagreements", "INTEGER"),
        ("document_case", "INTEGER"),
        ("cv_stall_predicted", "BOOLEAN"),
        ('"round"', "INTEGER"),
        ("chain_bytes_requested", "BIGINT"),
        ("server_writes", "JSON"),
        ("flight_rounds", "INTEGER"),
        ("round_trips", "INTEGER"),
        ("predicted_flight_bytes_min", "INTEGER"),
        ("predicted_flight_bytes_max", "INTEGER"),
        ("predicted_writes", "JSON"),
        ("predicted_segments_min", "INTEGER"),
        ("predicted_segments_max", "INTEGER"),
        ("predicted_round_trips_min", "INTEGER"),
        ("predicted_round_trips_max", "INTEGER"),
        ("predicted_handshake_ns_min", "BIGINT"),
        ("predicted_handshake_ns_max", "BIGINT"),
        ("shaped", "BOOLEAN"),
        ("chain_der_bytes", "INTEGER"),
        ("flight_max_in_flight", "INTEGER"),
        # Runs made before mutual TLS had no client certificate.
        ("client_sig", "TEXT DEFAULT 'none'"),
        ("certificate_request_bytes", "INTEGER"),
        ("client_certificate_bytes", "INTEGER"),
        ("client_certificate_verify_bytes", "INTEGER"),
        ("client_flight_bytes", "INTEGER"),
        ("client_flight_segments", "INTEGER"),
        ("client_payload_bytes", "BIGINT"),
        ("server_payload_bytes", "BIGINT"),
        ("client_connection_ip_bytes", "BIGINT"),
        ("server_connection_ip_bytes", "BIGINT"),
        ("negotiated_client_sigalg", "TEXT"),
        ("negotiated_cipher", "TEXT"),
        ("client_retransmissions", "INTEGER"),
        ("client_retransmitted_bytes", "BIGINT"),
        ("server_retransmissions", "INTEGER"),
        ("server_retransmitted_bytes", "BIGINT"),
        ("segments_sh_to_cv", "INTEGER"),
    ],
    "handshake_capture": [("host_pair", "TEXT")],
    "handshake_phase": [
        ("host_pair", "TEXT"),
        ("cross_host", "BOOLEAN"),
        ("clock_uncertainty_ns", "DOUBLE"),
        ("below_clock_uncertainty", "BOOLEAN"),
        ("stack", "TEXT"),
        ("client_sig", "TEXT DEFAULT 'none'"),
        ("retransmissions", "INTEGER"),
    ],
    "handshake_load": [("stack", "TEXT"), ("client_sig", "TEXT DEFAULT 'none'")],
}
MIGRATIONS = tuple(
    f"ALTER TABLE IF EXISTS {table} ADD COLUMN IF NOT EXISTS {name} {kind}"
    for table, cols in ADDED.items()
    for name, kind in cols
)


def ensure(store) -> None:
    for ddl in (RAW_DDL, PHASE_DDL, CAPTURE_DDL, LOAD_DDL, ORDER_DDL, CLIFFS_DDL):
        store.ensure_table(ddl)
