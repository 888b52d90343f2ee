"""The message and record size model (pqlab.tls.messages) against real handshakes: every
server message's size and the flight's stream offsets equal what `pqlab handshake`
measured, from catalogue sizes and certificate DER sizes alone."""

from __future__ import annotations

import json

import duckdb
import pytest

from conftest import run_pqlab
from pqlab import catalog
from pqlab.tls import messages


def test_known_sizes():
    x25519 = catalog.resolve("X25519", "kem")
    hybrid = catalog.resolve("X25519MLKEM768", "kem")
    assert messages.server_hello(x25519) == 122
    assert messages.server_hello(hybrid) == 122 - 32 + 1120  # ciphertext 1088 + X25519 32
    assert messages.certificate([2012, 870]) == 2900
    assert messages.certificate_verify(2420) == 2428
    assert messages.finished() == 52
    assert messages.encrypted_record_bytes(16384) == 16384 + 22
    assert messages.encrypted_record_bytes(16385) == 16385 + 2 * 22


@pytest.mark.net
def test_predicted_flights_equal_measured_ones(tmp_path):
    out = tmp_path / "hs"
    r = run_pqlab(
        "handshake", "--groups", "X25519,X25519MLKEM768,ML-KEM-1024", "--server-sig",
        "ML-DSA-44,RSA-2048,ECDSA-P256", "--ca-sig", "RSA-2048,ML-DSA-65", "-n", "3",
        "--warmup", "0", "--send-root", "--out", out,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    db = duckdb.connect(str(out / "results.duckdb"), read_only=True)
    try:
        rows = db.execute(
            'SELECT "group", server_sig, ca_sig, server_hello_bytes, certificate_bytes, '
            "certificate_verify_bytes, server_finished_bytes, bytes_through_certificate, "
            "server_flight_bytes FROM handshake_raw"
        ).fetchall()
    finally:
        db.close()
    checked = 0
    for g, s, c, sh, cert, cv, fin, through_cert, flight_bytes in rows:
        rec = json.loads((out / "certs" / f"{c}__{s}" / "certs.json").read_text())
        chain = [rec["server_cert_der_bytes"], rec["root_der_bytes"]]
        sig = catalog.resolve(s, "sig")
        f = messages.server_flight(catalog.resolve(g, "kem"), chain, cv - 8)
        assert (f.server_hello, f.certificate, f.finished) == (sh, cert, fin), (g, s, c)
        assert f.flight().through_certificate == through_cert
        assert f.bytes == flight_bytes
        # The signature's size: exact for fixed-size algorithms, in its range for ECDSA.
        low, high = messages.signature_bytes(sig)
        assert low <= cv - 8 <= high, s
        if sig.family in ("ML-DSA", "RSA"):
            assert low == high == sig.sizes["signature"], s
        checked += 1
    assert checked == 3 * 3 * 2 * 3


def test_ecdsa_signature_range_covers_what_a_signer_produces():
    """DER ECDSA signatures, made by an independent signer (PyCA cryptography, RFC 6979
    deterministic signing with a fixed key, so the test repeats exactly): every length lies
    in `signature_bytes`'s range, and some are shorter than the usual 70 bytes (an INTEGER
    whose top byte is zero), which the range once left out."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.derive_private_key(0x5EED, ec.SECP256R1())
    algorithm = ec.ECDSA(hashes.SHA256(), deterministic_signing=True)
    lengths = {len(key.sign(b"message %d" % i, algorithm)) for i in range(2000)}
    low, high = messages.signature_bytes(catalog.resolve("ECDSA-P256", "sig"))
    assert low <= min(lengths) and max(lengths) <= high == 72
    assert min(lengths) < 70
