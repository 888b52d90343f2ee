"""`pqlab primitives --wolfcrypt-benchmark`: wolfCrypt's own benchmark program beside pqlab's
measurement of the same algorithm and operation, and document 004's rows. Parsing and the
checks on captured output; the real program end to end; bad input."""

from __future__ import annotations

import csv
import json

import duckdb
import pytest

from conftest import pqlab_env, run_pqlab
from pqlab import catalog, engine
from pqlab.errors import CheckError
from pqlab.experiments.primitives import wolfcrypt

# Lines as wolfSSL 5.9.4's benchmark prints them (the widths vary with the numbers).
OUTPUT = """\
------------------------------------------------------------------------------
 wolfSSL version 5.9.4
------------------------------------------------------------------------------
CPU: Intel x86_64 - avx1 avx2 aesni
Math: \tMulti-Precision: Wolf(SP) word-size=64 bits=4096 sp_int.c
wolfCrypt Benchmark (block bytes 1048576, min 1.0 sec each)
ML-KEM 768    192  key gen    131600 ops took 1.000 sec, avg 0.008 ms, 131536.494 ops/sec, \
2597402132 cycles    19737.1 Cycles/op
ML-KEM 768    192    encap    137300 ops took 1.000 sec, avg 0.007 ms, 137252.355 ops/sec, \
2597050404 cycles    18915.2 Cycles/op
ML-KEM 768    192    decap     96000 ops took 1.001 sec, avg 0.010 ms, 95903.852 ops/sec, \
2598749270 cycles    27070.3 Cycles/op
ECDSA [      SECP256R1]   256     sign     55600 ops took 1.002 sec, avg 0.018 ms, \
55514.537 ops/sec, 2600147082 cycles    46765.2 Cycles/op
ML-DSA    87     sign      9100 ops took 1.009 sec, avg 0.111 ms,  9016.819 ops/sec, \
2620102134 cycles   287923.3 Cycles/op
Benchmark complete
"""


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_rows_are_read_as_printed():
    rows = {r["name"]: r for r in wolfcrypt.parse(OUTPUT)}
    assert list(rows) == [
        "ML-KEM 768 192 key gen",
        "ML-KEM 768 192 encap",
        "ML-KEM 768 192 decap",
        "ECDSA [SECP256R1] 256 sign",
        "ML-DSA 87 sign",  # a padded rate: "ms,  9016.819 ops/sec"
    ]
    assert rows["ML-KEM 768 192 decap"] == {
        "name": "ML-KEM 768 192 decap",
        "ops": 96000,
        "seconds": 1.001,
        "avg_ms": 0.010,
        "ops_per_s": 95903.852,
        "cycles": 2598749270,
        "cycles_per_op": 27070.3,
    }


def test_the_checks_refuse_output_that_does_not_add_up():
    rows = wolfcrypt.parse(OUTPUT)
    passed = ["-ml-kem-768"]
    wolfcrypt.check(OUTPUT, rows, passed)
    with pytest.raises(CheckError, match="Benchmark complete"):
        wolfcrypt.check(OUTPUT.replace("Benchmark complete", ""), rows, passed)
    with pytest.raises(CheckError, match="failure"):
        wolfcrypt.check(OUTPUT + "wc_MlDsaKey_VerifyCtx failed -1, verify 0\n", rows, passed)
    bad = [dict(r) for r in rows]
    bad[0]["ops_per_s"] *= 1.02  # 131600 ops in 1.000 s are not 134167 ops/sec
    with pytest.raises(CheckError, match="does not add up"):
        wolfcrypt.check(OUTPUT, bad, passed)
    # ML-KEM-512 was asked for, so its rows must be there.
    with pytest.raises(CheckError, match="printed no row 'ML-KEM 512 128 key gen'"):
        wolfcrypt.check(OUTPUT, rows, [*passed, "-ml-kem-512"])
    garbled = OUTPUT.replace("137300 ops took 1.000 sec", "137300 ops took one sec")
    with pytest.raises(CheckError, match="cannot read"):
        wolfcrypt.check(garbled, wolfcrypt.parse(garbled), passed)


def test_the_table_sets_each_row_beside_pqlab_and_the_document():
    pqlab = [
        {"algorithm": "ML-KEM-768", "operation": op, "backend": b, "mean_us": us}
        for op, b, us in (
            ("keygen", "openssl", 30.0),
            ("encaps", "openssl", 20.0),
            ("decaps", "openssl", 30.0),
            ("keygen", "liboqs", 12.0),
        )
    ]
    table = wolfcrypt.table(pqlab, wolfcrypt.parse(OUTPUT), {"-ml-kem-768"})
    by = {(r["algorithm"], r["operation"]): r for r in table if r["algorithm"]}
    keygen = by[("ML-KEM-768", "keygen")]
    assert keygen["document_row"] == "kyber_level3-kg" and keygen["document_ops_per_s"]
    assert keygen["wolfcrypt_us"] == pytest.approx(1e6 / 131536.494, abs=1e-3)
    assert keygen["openssl_over_wolfcrypt"] == pytest.approx(30.0 / keygen["wolfcrypt_us"], 1e-3)
    assert keygen["liboqs_over_wolfcrypt"] == pytest.approx(12.0 / keygen["wolfcrypt_us"], 1e-3)
    assert "Kyber768" in keygen["note"] and "ML-KEM-768" in keygen["note"]
    # The document timed encapsulation and decapsulation together: their sum on both sides.
    both = by[("ML-KEM-768", "encaps+decaps")]
    assert both["document_row"] == "kyber_level3-ed"
    assert both["wolfcrypt_us"] == pytest.approx(1e6 / 137252.355 + 1e6 / 95903.852, abs=1e-3)
    assert both["openssl_mean_us"] == 50.0 and both["liboqs_mean_us"] is None
    # Algorithms this build lacks, or pqlab did not measure, say so.
    falcon = by[("Falcon-512", "sign")]
    assert falcon["wolfcrypt_us"] is None
    assert (
        "not in this wolfSSL build" in falcon["note"] and "not measured by pqlab" in falcon["note"]
    )
    gone = [r for r in table if (r["document_row"] or "").startswith("kyber90s")]
    assert len(gone) == 6 and all("no longer exists" in r["note"] for r in gone)


def test_the_documents_tables_hold_together():
    """Document 004's liboqs rows: iterations x mean = the 3 s each ran (a check of the
    transcription); every algorithm the wolfCrypt rows name is in the catalogue."""
    for (alg, op), row in wolfcrypt.liboqs_table().items():
        assert row["iterations"] * row["mean_us"] / 1e6 == pytest.approx(3.0, rel=0.01), (alg, op)
        assert catalog.resolve(alg).kind == "kem"
    for entry in wolfcrypt.mapping():
        assert entry.get("document") or entry.get("wolfcrypt")
        if entry.get("algorithm"):
            catalog.resolve(entry["algorithm"])
            assert entry["flags"]


def test_wolfcrypt_benchmark_beside_pqlab_end_to_end(tmp_path):
    out = tmp_path / "wc"
    r = run_pqlab(
        "primitives", "--wolfcrypt-benchmark", "--kem", "ML-KEM-768", "--sig", "ML-DSA-44",
        "-n", "100", "--out", out,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    rows = _rows(out / "tables" / "primitives_wolfcrypt.csv")
    by = {(r["algorithm"], r["operation"]): r for r in rows}
    for key in (("ML-KEM-768", "keygen"), ("ML-DSA-44", "sign"), ("ML-DSA-44", "verify")):
        row = by[key]
        wolf, ossl, oqs = (
            float(row[c]) for c in ("wolfcrypt_us", "openssl_mean_us", "liboqs_mean_us")
        )
        assert wolf > 0 and float(row["openssl_over_wolfcrypt"]) == pytest.approx(ossl / wolf, 1e-2)
        assert float(row["liboqs_over_wolfcrypt"]) == pytest.approx(oqs / wolf, 1e-2)
        assert int(row["wolfcrypt_ops"]) > 0 and float(row["wolfcrypt_seconds"]) >= 1.0
    assert by[("ML-DSA-44", "sign")]["document_row"] == "DILITHIUM_level2 sign"
    # Not asked for: wolfCrypt's row is there, pqlab's is not, and the note says how.
    assert "pqlab primitives --sig ECDSA-P256" in by[("ECDSA-P256", "sign")]["note"]
    con = duckdb.connect(str(out / "results.duckdb"), read_only=True)
    try:
        (stdout, version, options) = con.execute(
            "SELECT stdout, version, build_options FROM wolfcrypt_benchmark_runs"
        ).fetchone()
        meta = json.loads(con.execute("SELECT metadata FROM invocations").fetchone()[0])
    finally:
        con.close()
    assert "Benchmark complete" in stdout and version.startswith("5.")
    assert "--enable-mldsa" in json.loads(options)
    # wolfCrypt's version and build options with the run's metadata.
    described = json.dumps(meta)
    assert '"wolfcrypt_benchmark"' in described and version in described
    assert "wolfCrypt's benchmark beside pqlab" in (out / "report.html").read_text()


def test_a_missing_benchmark_program_is_one_clear_line(tmp_path):
    out = tmp_path / "none"
    r = run_pqlab(
        "primitives", "--wolfcrypt-benchmark", "--kem", "ML-KEM-768", "--out", out,
        # The wolfSSL program's place taken by one without the wolfssl stack: no stack of
        # the build then has wolfCrypt's benchmark.
        env={**pqlab_env(), "PQLAB_ENGINE_WOLFSSL": str(engine.engine_path())},
    )  # fmt: skip
    assert r.returncode == 2
    assert r.stderr.strip().startswith("error:") and len(r.stderr.strip().splitlines()) == 1
    assert "wolfCrypt's benchmark" in r.stderr and "make engine" in r.stderr
    assert not out.exists()
