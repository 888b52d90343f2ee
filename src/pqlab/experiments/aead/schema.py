"""The aead experiment's tables."""

from __future__ import annotations

DDL = [
    """CREATE TABLE IF NOT EXISTS aead_cpu (
        aesni TEXT, mask TEXT, ia32cap_env TEXT, openssl_ia32cap TEXT, aes_gcm_path TEXT,
        features JSON)""",
    """CREATE TABLE IF NOT EXISTS aead_windows (
        cell_id TEXT, cipher TEXT, aesni TEXT, mask TEXT, mode TEXT, direction TEXT,
        record_bytes BIGINT, window_index INTEGER, records BIGINT, bytes BIGINT, ns BIGINT,
        cpu_ns BIGINT)""",
    """CREATE TABLE IF NOT EXISTS aead_cells (
        cell_id TEXT, cipher TEXT, aesni TEXT, mask TEXT, ia32cap_env TEXT,
        openssl_ia32cap TEXT, aes_gcm_path TEXT, mode TEXT, direction TEXT,
        record_bytes BIGINT, records BIGINT, bytes BIGINT, ns BIGINT, cpu_ns BIGINT,
        verified_records BIGINT,
        windows INTEGER, batch_records INTEGER, aad_bytes INTEGER, key_set_per_record BOOLEAN,
        nonce TEXT, seconds_requested DOUBLE)""",
]
