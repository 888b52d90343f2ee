"""The python backend of `pqlab primitives` (document 000's harness): the issue's command
end to end with real processes, every catalogued `python` entry run through `cryptography`,
a broken wrapper refused by the checks, and the recomputed conclusions of document 000."""

from __future__ import annotations

import csv
import io
import json

import duckdb
import numpy as np
import pytest

from conftest import run_pqlab
from pqlab import catalog, engine, stats
from pqlab.algorithms import python as pp
from pqlab.algorithms import selection
from pqlab.errors import CheckError
from pqlab.experiments.primitives import findings as primitives_report


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("pyprim") / "D"
    run_pqlab(
        "primitives",
        "--backend",
        "python,openssl,liboqs",
        "--kem",
        "X25519,ML-KEM-768",
        "--sig",
        "ECDSA-P256,ML-DSA-44",
        "-n",
        "150",
        "--out",
        out,
        check=True,
    )
    return out


def _csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_issue_command_gives_a_row_per_backend_and_operation(run_dir):
    rows = _csv(run_dir / "tables" / "primitives.csv")
    got = {(r["algorithm"], r["operation"]): set() for r in rows}
    for r in rows:
        got[(r["algorithm"], r["operation"])].add(r["backend"])
        assert int(r["n"]) == 150, r
    for op in ("keygen", "encaps", "decaps"):
        assert got[("ML-KEM-768", op)] == {"python", "openssl", "liboqs"}
    for op in ("keygen", "sign", "verify"):
        assert got[("ML-DSA-44", op)] == {"python", "openssl", "liboqs"}
        assert got[("ECDSA-P256", op)] == {"python", "openssl"}  # liboqs has no ECDSA
    for op in ("keygen", "public_key", "shared_secret"):
        assert got[("X25519", op)] == {"python", "openssl"}
    assert len(rows) == 3 * 10


def test_every_cell_was_checked_including_negative_checks(run_dir):
    con = duckdb.connect(str(run_dir / "results.duckdb"), read_only=True)
    try:
        runs = con.execute(
            "SELECT algorithm, backend, operation, kept, checks_passed, negative_checks "
            "FROM primitive_runs"
        ).fetchall()
        py = con.execute(
            "SELECT count(*), count(*) FILTER (WHERE dropped), min(i), max(i), "
            "count(*) FILTER (WHERE cycles IS NOT NULL) FROM primitive_samples "
            "WHERE backend = 'python'"
        ).fetchone()
    finally:
        con.close()
    assert {(a, b) for a, b, *_ in runs} >= {("ML-KEM-768", "python"), ("ML-DSA-44", "python")}
    for alg, backend, op, kept, passed, negative in runs:
        assert kept == 150, (alg, backend, op)
        assert passed >= 2 * 151, (alg, backend)  # every keygen and every operation checked
        names = {n["name"] for n in json.loads(negative)}
        assert names, (alg, backend)
        if backend == "python" and alg == "ML-DSA-44":
            assert names == {"corrupted signature", "different message"}
    # 4 cells x 3 operations x 151 timed runs, index 0 of each dropped; no cycle counter.
    assert py == (4 * 3 * 151, 4 * 3, 0, 150, 0)


def test_python_rows_are_the_raw_samples_statistics(run_dir):
    con = duckdb.connect(str(run_dir / "results.duckdb"), read_only=True)
    try:
        for r in _csv(run_dir / "tables" / "primitives.csv"):
            if r["backend"] != "python":
                continue
            ns = con.execute(
                "SELECT ns FROM primitive_samples WHERE algorithm = ? AND backend = 'python' "
                "AND operation = ? AND NOT dropped ORDER BY i",
                [r["algorithm"], r["operation"]],
            ).fetchall()
            us = np.array([x[0] for x in ns], dtype=float) / 1000
            q1, med, q3 = np.percentile(us, [25, 50, 75])
            assert float(r["median_us"]) == pytest.approx(med, rel=1e-9)
            assert float(r["robust_cv"]) == pytest.approx((q3 - q1) / med, rel=1e-9)
            assert float(r["mean_us"]) == pytest.approx(us.mean(), rel=1e-9)
    finally:
        con.close()


def test_versions_and_load_are_recorded(run_dir):
    meta = json.loads((run_dir / "metadata.json").read_text())
    import cryptography

    harness = meta["python_harness"]
    assert harness["cryptography"] == cryptography.__version__
    assert harness["openssl"].startswith("OpenSSL")
    assert meta["plan"]["python_harness"]["cryptography"] == cryptography.__version__
    load = _csv(run_dir / "tables" / "primitive_load.csv")
    assert len(load) == 10
    for r in load:
        assert 0 < float(r["cpu_s"]) and 0 < float(r["cpu_per_wall"]) <= 1.05, r
        # VmHWM of the measuring process itself: the lab's own ~100+ MiB (inherited at fork
        # and counted by wait4's ru_maxrss) must not leak into it.
        rss = float(r["max_rss_mib"])
        assert 1 < rss < (80 if r["backend"] == "python" else 48), r
        if r["backend"] == "python":
            assert 10 < int(r["timer_overhead_ns"]) < 20_000, r


def test_the_report_states_the_document_000_conclusions_per_harness(run_dir):
    claims = _csv(run_dir / "tables" / "primitive_doc000_claims.csv")
    keygen = {r["harness"]: r for r in claims if r["claim"] == "mlkem-keygen"}
    assert set(keygen) == {"python", "openssl", "document 000's mix"}
    mix = keygen["document 000's mix"]
    assert mix["subject"] == "ML-KEM-768 keygen (liboqs)"
    assert mix["reference"] == "X25519 keygen (python)"
    for r in keygen.values():
        faster = float(r["subject_mean_us"]) < float(r["reference_mean_us"])
        steadier = float(r["subject_robust_cv"]) < float(r["reference_robust_cv"])
        assert (r["holds"] == "true") == (faster and steadier)
    html = (run_dir / "report.html").read_text()
    assert "ML-KEM key generation is faster and steadier than X25519" in html
    assert "The python harness" in html and "cryptography" in html


def test_ml_dsa_signing_spread_is_reported_as_inherent_not_noise(run_dir):
    con = duckdb.connect(str(run_dir / "results.duckdb"), read_only=True)
    try:
        codes = {
            r[0]
            for r in con.execute(
                "SELECT code FROM warnings WHERE subject LIKE 'ML-DSA-44 (%) sign'"
            ).fetchall()
        }
    finally:
        con.close()
    assert "noisy" not in codes and "outliers" not in codes
    assert "inherent-variance" in codes  # its robust CV is far above 10 % in every library


def test_sizes_refuses_the_python_harness(tmp_path):
    proc = run_pqlab("sizes", "--kem", "X25519", "--backend", "python", "--out", tmp_path / "x")
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ") and "python" in proc.stderr
    assert not (tmp_path / "x").exists()


def test_an_unknown_backend_in_a_list_is_refused(tmp_path):
    proc = run_pqlab("primitives", "--kem", "X25519", "--backend", "python,wolfssl")
    assert proc.returncode == 2 and "wolfssl" in proc.stderr


# --- every catalogued python entry, through the real cryptography ---------------------------


PY_ALGS = [a for a in catalog.all_algorithms() if a.python]


def _records(alg, iterations=2):
    out: list[dict] = []
    a = pp.adapter("sig" if alg.kind == "sig" else "kem", alg.python, alg.params or {})
    pp.measure(a, pp.Plan(iterations, 0, None), out.append)
    return out


@pytest.mark.parametrize("alg", PY_ALGS, ids=[a.name for a in PY_ALGS])
def test_every_python_entry_runs_and_matches_the_catalogue_sizes(alg):
    recs = _records(alg)
    sizes = next(r for r in recs if r["type"] == "sizes")
    for field, expected in alg.sizes.items():
        got = sizes.get(field)
        if got is None:  # e.g. ML-KEM/ML-DSA secret keys: cryptography exports seeds only
            assert field == "secret_key", (alg.name, field)
            continue
        assert got["max"] == expected, (alg.name, field, got)
    ops = {r["op"] for r in recs if r["type"] == "op_done"}
    assert ops == set(pp.OPERATIONS["sig" if alg.kind == "sig" else alg.kind])
    assert next(r for r in recs if r["type"] == "checks")["negative"]


def test_the_catalogue_lists_what_cryptography_provides():
    names = {a.name for a in PY_ALGS}
    assert {"X25519", "ECDSA-P256", "RSA-2048", "ML-KEM-768", "ML-DSA-44"} <= names
    # Not provided by cryptography: must not be claimed.
    assert not {"ML-KEM-512", "X25519MLKEM768", "SLH-DSA-SHA2-128s", "FFDHE-2048"} & names
    assert all(a.python not in (None, "") and "python" not in a.backends for a in PY_ALGS)


# --- the checks can fail: broken wrappers (fakes of pure logic) ---------------------------


class _WrongSecretKem(pp.MlKem):
    def decaps_call(self, key, ct):
        return (lambda ct: bytes(32), ct)


class _AcceptAllSig(pp.Signature):
    def verify_call(self, pub, m, sig):
        return (lambda *args: None,)  # never raises InvalidSignature


class _IgnoresPeerKex(pp.KeyAgreement):
    def derive_call(self, key, peer):
        return (lambda: b"same for everyone",)


@pytest.mark.parametrize(
    "broken,needle",
    [
        (lambda: _WrongSecretKem("MLKEM768"), "decapsulate"),
        (lambda: _AcceptAllSig("EC", {"curve": "P-256", "digest": "SHA256"}), "corrupted"),
        (lambda: _IgnoresPeerKex("X25519", {}), "different peer key"),
    ],
)
def test_a_broken_wrapper_is_refused(broken, needle):
    with pytest.raises(pp.CheckFailed, match=needle):
        pp.measure(broken(), pp.Plan(5, 0, None), lambda rec: None)


def test_a_failed_check_is_an_error_record_the_lab_refuses(monkeypatch):
    monkeypatch.setattr(pp, "adapter", lambda kind, name, params: _WrongSecretKem("MLKEM768"))
    buf = io.StringIO()
    monkeypatch.setattr(pp.sys, "stdout", buf)
    code = pp.main(["kem", "--backend", "python", "--alg", "MLKEM768", "--iterations", "3"])
    assert code == 5
    lines = buf.getvalue().splitlines()
    assert not any(json.loads(x)["type"] == "sample" for x in lines)  # no number reported
    with pytest.raises(CheckError, match="check failed"):
        for line in lines:
            engine.parse_line(line)


def test_inherent_variance_changes_the_advice():
    wide = stats.summarize([100, 100, 150, 200, 300, 400, 90, 95, 500] * 5)
    plain = {w.code for w in stats.noise_warnings("x", wide)}
    assert "noisy" in plain
    why = stats.inherent_variance("ML-DSA", "sign")
    inh = stats.noise_warnings("x", wide, inherent=why)
    assert [w.code for w in inh] == ["inherent-variance"]
    assert "FIPS 204" in inh[0].message and "close other programs" not in inh[0].advice
    assert stats.inherent_variance("ML-DSA", "verify") is None
    assert stats.inherent_variance("ECDSA", "sign") is None


def test_claims_are_judged_by_the_documents_criteria():
    def row(alg, op, backend, mean, cv, family):
        return {
            "algorithm": alg,
            "operation": op,
            "backend": backend,
            "mean_us": mean,
            "median_us": mean,
            "robust_cv": cv,
            "family": family,
        }

    rows = [
        row("X25519", "keygen", "python", 40, 0.05, "ECDH"),
        row("ML-KEM-768", "keygen", "python", 120, 0.30, "ML-KEM"),
        row("ML-KEM-768", "keygen", "liboqs", 15, 0.04, "ML-KEM"),
    ]
    got = {r["harness"]: r for r in primitives_report.claims(rows)}
    assert set(got) == {"python", "document 000's mix"}
    assert got["python"]["holds"] is False and got["python"]["faster"] is False
    assert got["document 000's mix"]["holds"] is True
    assert got["document 000's mix"]["ratio_of_means"] == pytest.approx(15 / 40)


def test_backend_lists_make_cells_for_each_backend_that_has_the_algorithm():
    cells, skipped = selection.select_cells(["X25519"], ["ML-DSA-44"], "python,liboqs")
    assert [str(c.cell_id) for c in cells] == [
        "X25519|python",
        "ML-DSA-44|python",
        "ML-DSA-44|liboqs",
    ]
    assert skipped == []
    py = next(c for c in cells if c.backend == "python")
    assert py.engine_args() == ["kem", "--backend", "python", "--alg", "X25519"]
    # "all" stays the engine's backends: the harness runs only when named.
    cells, _ = selection.select_cells(["ML-KEM-768"], [], "all")
    assert {c.backend for c in cells} == {"openssl", "liboqs"}
