"""`pqlab primitives` end to end with the real engine: the issue's check command, the
statistics against the raw samples, resume, and bad input refused before any measurement."""

from __future__ import annotations

import csv
import json

import duckdb
import numpy as np
import pytest

from conftest import pqlab_env, run_pqlab
from pqlab import catalog
from pqlab.algorithms import selection

OPS = {"kem": ("keygen", "encaps", "decaps")}
COLUMNS = [
    "algorithm",
    "backend",
    "operation",
    "n",
    "mean_us",
    "sd_us",
    "q1_us",
    "median_us",
    "q3_us",
    "robust_cv",
    "min_us",
    "max_us",
    "p90_us",
    "p99_us",
    "ops_per_s",
]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("prim") / "D"
    run_pqlab(
        "primitives",
        "--kem",
        "ML-KEM-768,X25519",
        "--sig",
        "ML-DSA-44,P-256",
        "--iterations",
        "300",
        "--out",
        out,
        check=True,
    )
    return out


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_issue_check_tables_have_300_samples_per_row(run_dir):
    with open(run_dir / "tables" / "primitives.csv", newline="") as f:
        header = next(csv.reader(f))
    assert header[: len(COLUMNS)] == COLUMNS
    rows = _rows(run_dir / "tables" / "primitives.csv")
    cells = {(r["algorithm"], r["backend"]) for r in rows}
    # ML-KEM-768 and ML-DSA-44 on both backends, X25519 and P-256 on OpenSSL only.
    assert cells == {
        ("ML-KEM-768", "openssl"),
        ("ML-KEM-768", "liboqs"),
        ("X25519", "openssl"),
        ("ML-DSA-44", "openssl"),
        ("ML-DSA-44", "liboqs"),
        ("ECDSA-P256", "openssl"),
    }
    assert len(rows) == 3 * len(cells)
    assert all(int(r["n"]) == 300 for r in rows)
    ops = {(r["algorithm"], r["operation"]) for r in rows}
    assert ("X25519", "public_key") in ops and ("X25519", "shared_secret") in ops
    assert ("ML-KEM-768", "decaps") in ops and ("ECDSA-P256", "verify") in ops
    for name in ("sizes.csv", "primitive_backend_ratios.csv"):
        assert (run_dir / "tables" / name).is_file()
    assert (run_dir / "report.html").is_file()
    figs = {p.name for p in (run_dir / "figures").glob("*.png")}
    assert {
        "primitives-backends.png",
        "primitives-compare-kem.png",
        "primitives-compare-sig.png",
        "primitives-dist-sig-sign.png",
    } <= figs


def test_statistics_equal_those_recomputed_from_raw_samples(run_dir):
    con = duckdb.connect(str(run_dir / "results.duckdb"), read_only=True)
    try:
        for r in _rows(run_dir / "tables" / "primitives.csv"):
            key = [r["algorithm"], r["backend"], r["operation"]]
            raw = con.execute(
                "SELECT i, ns, dropped FROM primitive_samples WHERE algorithm = ? AND "
                "backend = ? AND operation = ? ORDER BY i",
                key,
            ).fetchall()
            # One extra first run, stored and flagged dropped; 300 kept, indices 1..300.
            assert [x[0] for x in raw] == list(range(301))
            assert [x[2] for x in raw] == [True] + [False] * 300
            us = np.array([x[1] for x in raw[1:]], dtype=float) / 1000
            q1, med, q3, p90, p99 = np.percentile(us, [25, 50, 75, 90, 99])
            expect = {
                "mean_us": us.mean(),
                "sd_us": us.std(ddof=1),
                "q1_us": q1,
                "median_us": med,
                "q3_us": q3,
                "robust_cv": (q3 - q1) / med,
                "min_us": us.min(),
                "max_us": us.max(),
                "p90_us": p90,
                "p99_us": p99,
                "ops_per_s": 1e6 / us.mean(),
            }
            for col, v in expect.items():
                assert float(r[col]) == pytest.approx(v, rel=1e-9), (key, col)
            assert float(r["min_us"]) > 0
    finally:
        con.close()


def test_every_cell_was_checked(run_dir):
    con = duckdb.connect(str(run_dir / "results.duckdb"), read_only=True)
    try:
        rows = con.execute(
            "SELECT algorithm, backend, operation, kept, checks_passed, "
            "negative_checks FROM primitive_runs"
        ).fetchall()
    finally:
        con.close()
    assert len(rows) == 18
    for alg, backend, op, kept, passed, negative in rows:
        assert kept == 300, (alg, backend, op)
        assert passed >= 2 * 301, (alg, backend)  # keygen phase + operation phase
        assert json.loads(negative), (alg, backend)


def test_report_rebuilds_the_same_table(run_dir):
    before = (run_dir / "tables" / "primitives.csv").read_text()
    run_pqlab("report", run_dir, check=True)
    assert (run_dir / "tables" / "primitives.csv").read_text() == before


def _one_error_line(proc, *needles):
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    for n in needles:
        assert n in lines[0], lines[0]


@pytest.mark.parametrize(
    "args,needles",
    [
        (["--kem", "ML-KEM-769"], ["unknown", "ML-KEM-769", "ML-KEM-768"]),
        (["--sig", "ML-KEM-768"], ["ML-KEM-768"]),
        (["--kem", "X25519", "--iterations", "0"], ["--iterations", "at least 1"]),
        (["--kem", "X25519", "--iterations", "many"], ["--iterations"]),
        (["--kem", "X25519", "--backend", "liboqs"], ["X25519", "liboqs"]),
        (["--sig", "MAYO-1", "--backend", "openssl"], ["MAYO-1", "openssl"]),
        (["--kem", "X25519", "--backend", "wolfssl"], ["wolfssl"]),
        (["--kem", "X25519", "--max-seconds", "-1"], ["--max-seconds"]),
    ],
)
def test_bad_input_is_one_line_and_nothing_is_measured(tmp_path, args, needles):
    out = tmp_path / "never"
    proc = run_pqlab("primitives", *args, "--out", out, timeout=60)
    _one_error_line(proc, *needles)
    assert not out.exists()


def test_failed_check_is_an_error_not_a_number(tmp_path):
    """A stand-in engine whose check fails: exit 3, no samples stored for the cell."""
    fake = tmp_path / "engine"
    real = pqlab_env()
    from pqlab import engine

    info = json.dumps(engine.info())
    fake.write_text(
        "#!/bin/sh\n"
        f"if [ \"$1\" = info ]; then cat <<'EOF'\n{info}\nEOF\nexit 0; fi\n"
        'echo \'{"type":"start"}\'\n'
        'echo \'{"type":"error","message":"check failed: decapsulated secret differs"}\'\n'
        "exit 2\n"
    )
    fake.chmod(0o755)
    env = {**real, "PQLAB_ENGINE": str(fake)}
    import subprocess
    import sys

    out = tmp_path / "D"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pqlab",
            "primitives",
            "--kem",
            "ML-KEM-768",
            "--backend",
            "openssl",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 3
    assert "check failed" in proc.stderr
    con = duckdb.connect(str(out / "results.duckdb"), read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM primitive_samples").fetchone()[0] == 0
    finally:
        con.close()


def test_default_set_is_document_000_and_engine_args_follow_the_catalogue():
    cells, skipped = selection.select_cells([], [], "all")
    names = {c.algorithm.name for c in cells}
    doc = {a.name for a in catalog.all_algorithms() if "000" in a.documents}
    assert names | set(skipped) == doc
    assert "ML-KEM-768" in names and "RSA-2048" in names
    rsa = next(c for c in cells if c.algorithm.name == "RSA-2048")
    assert rsa.engine_args() == [
        "sig",
        "--backend",
        "openssl",
        "--alg",
        "RSA",
        "--param",
        "bits=2048",
        "--param",
        "digest=SHA256",
        "--param",
        "padding=pss",
    ]
    mayo = next(c for c in cells if c.algorithm.name == "MAYO-1")
    assert mayo.engine_args()[:5] == ["sig", "--backend", "liboqs", "--alg", "MAYO-1"]
    assert "--oid" in mayo.engine_args()


def test_the_measuring_process_reports_its_own_peak_memory():
    """The last record carries the process's own VmHWM: sampling /proc from outside can miss
    a run shorter than the sampling interval (it then saw 0.2 MiB, the image just after
    exec), so the load table must not depend on it."""
    from pqlab import engine

    args = ["kem", "--alg", "ML-KEM-768", "--backend", "liboqs", "--iterations", "5"]
    recs = engine.run(args, timeout=60)
    sizes = [r for r in recs if r["type"] == "sizes"]
    assert recs[-1]["type"] == "sizes" and len(sizes) == 1
    # the engine is a 17 MB static binary linking OpenSSL and liboqs: megabytes, not the
    # few hundred KiB of a fresh exec
    assert 2048 < sizes[0]["vm_hwm_kib"] < 200_000, sizes[0]


def test_fixed_time_mode_gives_the_liboqs_speed_table_from_raw_samples(tmp_path):
    """Document 004's liboqs table: `--seconds S`, as many runs as fit for each operation;
    every column recomputed here from the raw samples, and the document's own row beside
    the round-3 Kyber it printed."""
    out = tmp_path / "speed"
    r = run_pqlab(
        "primitives", "--kem", "Kyber512,ML-KEM-512", "--backend", "liboqs", "--seconds",
        "0.2", "--warmup", "5", "--out", out,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    with open(out / "tables" / "primitives_speed.csv", newline="") as f:
        rows = {(row["algorithm"], row["operation"]): row for row in csv.DictReader(f)}
    assert set(rows) == {(a, op) for a in ("Kyber512", "ML-KEM-512") for op in OPS["kem"]}
    con = duckdb.connect(str(out / "results.duckdb"), read_only=True)
    try:
        for (alg, op), row in rows.items():
            ns = np.array(
                con.execute(
                    "SELECT ns FROM primitive_samples WHERE algorithm = ? AND operation = ? "
                    "AND NOT dropped",
                    [alg, op],
                ).fetchall(),
                dtype=float,
            ).ravel()
            assert int(row["iterations"]) == len(ns) > 100
            assert float(row["total_time_s"]) == pytest.approx(ns.sum() / 1e9, abs=1e-3)
            # Each operation got its own seconds, and no more than one run beyond them
            # (its partner's runs do not keep it timed).
            assert 0.2 <= float(row["total_time_s"]) < 0.25
            assert float(row["mean_us"]) == pytest.approx(ns.mean() / 1e3, rel=1e-3)
            assert float(row["pop_stdev_us"]) == pytest.approx(ns.std(ddof=0) / 1e3, rel=1e-3)
            assert float(row["seconds_per_op"]) == 0.2
    finally:
        con.close()
    # Document 004 printed liboqs's round-3 Kyber512: its row beside pqlab's.
    assert rows[("Kyber512", "keygen")]["document_iterations"] == "443212"
    assert float(rows[("Kyber512", "decaps")]["document_mean_us"]) == 6.251
    assert rows[("ML-KEM-512", "keygen")]["document_iterations"] == ""
    bad = run_pqlab("primitives", "--kem", "X25519", "--backend", "python", "--seconds", "1")
    assert bad.returncode == 2 and "fixed-time" in bad.stderr


def test_rsa_key_generation_is_timed_once_for_pss_and_pkcs1(tmp_path):
    """RSA-2048 (PSS) and RSA-2048-PKCS1 sign with one kind of key pair: a run with both
    times that key generation once (the PKCS #1 entry's engine run skips it) and records the
    same samples under both names; each entry still times its own signing. Alone, the PKCS #1
    entry times its own key generation."""
    out = tmp_path / "rsa"
    r = run_pqlab(
        "primitives", "--sig", "RSA-2048-PKCS1,RSA-2048,RSA-3072-PKCS1", "--backend", "openssl",
        "--iterations", "12", "--warmup", "1", "--out", out,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    con = duckdb.connect(str(out / "results.duckdb"), read_only=True)
    try:

        def samples(alg, op):
            return con.execute(
                "SELECT i, ns FROM primitive_samples WHERE algorithm = ? AND operation = ? "
                "ORDER BY i",
                [alg, op],
            ).fetchall()

        def args(alg, op):
            (row,) = con.execute(
                "SELECT engine_args FROM primitive_runs WHERE algorithm = ? AND operation = ?",
                [alg, op],
            ).fetchall()
            return json.loads(row[0])

        shared = samples("RSA-2048", "keygen")
        assert len(shared) == 13 and samples("RSA-2048-PKCS1", "keygen") == shared
        # The PKCS #1 entry's key generation row names the run that made the samples.
        assert args("RSA-2048-PKCS1", "keygen") == args("RSA-2048", "keygen")
        assert "--skip-keygen" not in args("RSA-2048", "sign")
        assert "--skip-keygen" in args("RSA-2048-PKCS1", "sign")
        for op in ("sign", "verify"):
            assert len(samples("RSA-2048-PKCS1", op)) == 13
            assert samples("RSA-2048-PKCS1", op) != samples("RSA-2048", op)
        # Without its PSS entry in the run, RSA-3072-PKCS1 times its own key generation.
        assert len(samples("RSA-3072-PKCS1", "keygen")) == 13
        assert "--skip-keygen" not in args("RSA-3072-PKCS1", "keygen")
    finally:
        con.close()
    with open(out / "tables" / "primitives.csv", newline="") as f:
        rows = {(row["algorithm"], row["operation"]): row for row in csv.DictReader(f)}
    assert (
        rows[("RSA-2048-PKCS1", "keygen")]["median_us"] == rows[("RSA-2048", "keygen")]["median_us"]
    )
