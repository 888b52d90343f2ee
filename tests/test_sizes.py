"""`pqlab sizes` with the real engine: FIPS 203/204 sizes from both backends, DER encodings
(OpenSSL's encoder and the computed liboqs form agree), observed ranges, --resume."""

from __future__ import annotations

import csv

import duckdb
import pytest

from conftest import run_pqlab

# FIPS 203 table 3 (ek, dk, ciphertext, shared secret) and FIPS 204 table 2 (pk, sk, sig).
FIPS203 = {
    "ML-KEM-512": (800, 1632, 768, 32),
    "ML-KEM-768": (1184, 2400, 1088, 32),
    "ML-KEM-1024": (1568, 3168, 1568, 32),
}
FIPS204 = {
    "ML-DSA-44": (1312, 2560, 2420),
    "ML-DSA-65": (1952, 4032, 3309),
    "ML-DSA-87": (2592, 4896, 4627),
}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("sizes") / "S"
    run_pqlab(
        "sizes",
        "--kem",
        ",".join(FIPS203) + ",X25519,FFDHE-2048",
        "--sig",
        ",".join(FIPS204) + ",P-256,RSA-2048,Falcon-512",
        "--samples",
        "24",
        "--out",
        out,
        check=True,
    )
    return out


def _table(run_dir):
    with open(run_dir / "tables" / "sizes.csv", newline="") as f:
        return {r["algorithm"]: r for r in csv.DictReader(f)}


def test_leading_columns(run_dir):
    with open(run_dir / "tables" / "sizes.csv", newline="") as f:
        header = next(csv.reader(f))
    assert header[:7] == [
        "algorithm",
        "kind",
        "public_key",
        "secret_key",
        "ciphertext",
        "shared_secret",
        "signature",
    ]
    assert "public_key_der_min" in header and "signature_der_max" in header


def test_fips_203_204_sizes_on_both_backends(run_dir):
    t = _table(run_dir)
    for name, (pk, sk, ct, ss) in FIPS203.items():
        r = t[name]
        assert (
            int(r["public_key"]),
            int(r["secret_key"]),
            int(r["ciphertext"]),
            int(r["shared_secret"]),
        ) == (pk, sk, ct, ss), name
        assert r["backends"] == "liboqs,openssl" and r["catalogue_check"] == "ok"
    for name, (pk, sk, sig) in FIPS204.items():
        r = t[name]
        assert (int(r["public_key"]), int(r["secret_key"]), int(r["signature"])) == (pk, sk, sig), (
            name
        )
    # Each backend on its own reports the same raw sizes (no disagreement note).
    assert not any("disagree" in r["notes"] for r in t.values())


def test_encodings_and_ranges(run_dir):
    t = _table(run_dir)
    # ML-KEM-768 SPKI: 22 bytes of DER around the 1184-byte key, from OpenSSL's encoder.
    assert int(t["ML-KEM-768"]["public_key_der_max"]) == 1206
    assert int(t["ECDSA-P256"]["public_key_der_max"]) == 91
    # ECDSA signatures are DER INTEGER pairs: 70-72 bytes in practice, r||s is 64.
    assert int(t["ECDSA-P256"]["signature"]) == 64
    assert (
        68
        <= int(t["ECDSA-P256"]["signature_der_min"])
        <= int(t["ECDSA-P256"]["signature_der_max"])
        <= 72
    )
    assert int(t["RSA-2048"]["public_key_der_max"]) == 294
    assert 1210 <= int(t["RSA-2048"]["secret_key_der_min"]) <= 1220
    assert int(t["X25519"]["ciphertext"]) == 32 and int(t["FFDHE-2048"]["public_key"]) == 256
    # Falcon: variable-length signatures up to liboqs's maximum; DER computed from the OID.
    falcon = t["Falcon-512"]
    assert int(falcon["signature_min"]) <= int(falcon["signature"]) <= 752
    assert falcon["encoding_source"] == "liboqs"
    assert int(falcon["public_key_der_max"]) == 897 + 18


def test_liboqs_computed_spki_matches_openssl(run_dir):
    con = duckdb.connect(str(run_dir / "results.duckdb"), read_only=True)
    try:
        rows = con.execute(
            "SELECT backend, max_bytes FROM primitive_sizes WHERE algorithm = 'ML-KEM-768' "
            "AND field = 'public_key_der'"
        ).fetchall()
    finally:
        con.close()
    assert dict(rows) == {"openssl": 1206, "liboqs": 1206}


def test_resume_skips_finished_cells_and_refuses_silent_overwrite(run_dir):
    again = run_pqlab("sizes", "--kem", "ML-KEM-512", "--out", run_dir, timeout=60)
    assert again.returncode == 2 and "--resume" in again.stderr
    other_n = run_pqlab(
        "sizes", "--kem", "ML-KEM-512", "--out", run_dir, "--resume", "--samples", "32"
    )
    assert other_n.returncode == 2 and "samples was 24" in other_n.stderr  # never mixed
    resumed = run_pqlab(
        "sizes",
        "--kem",
        "ML-KEM-512",
        "--samples",
        "24",
        "--out",
        run_dir,
        "--resume",
        check=True,
        timeout=60,
    )
    assert "ML-KEM-512" not in resumed.stderr.replace("results:", "")
