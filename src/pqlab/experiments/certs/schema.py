"""The certs experiment's table and its migrations."""

from __future__ import annotations

RAW_DDL = """
CREATE TABLE IF NOT EXISTS certs_raw (
    ca_sig TEXT, server_sig TEXT, ca_key_spec TEXT, server_key_spec TEXT,
    ca_signature_algorithm TEXT, server_cert_signature_algorithm TEXT,
    root_der_bytes INTEGER, server_cert_der_bytes INTEGER,
    root_public_key_der_bytes INTEGER, server_public_key_der_bytes INTEGER,
    root_signature_bytes INTEGER, server_cert_signature_bytes INTEGER,
    chain_certs INTEGER, chain_bytes INTEGER, chain_tls13_list_bytes INTEGER,
    root_sha256 TEXT, record JSON, stack TEXT, usable_in_tls BOOLEAN,
    not_usable_because TEXT)
"""


MIGRATIONS = tuple(
    f"ALTER TABLE IF EXISTS certs_raw ADD COLUMN IF NOT EXISTS {name} {kind}"
    for name, kind in (
        ("stack", "TEXT"),
        ("usable_in_tls", "BOOLEAN"),
        ("not_usable_because", "TEXT"),
    )
)
