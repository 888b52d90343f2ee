"""pqlab compare on two real (small) primitives runs."""

import json

import pytest

from conftest import run_pqlab
from pqlab.commands.compare import _verdict


def test_verdicts():
    assert _verdict(False, -0.5, "lower") == "not significant"
    assert _verdict(True, -0.30, "lower") == "faster"
    assert _verdict(True, 0.30, "lower") == "slower"
    assert _verdict(True, 0.30, "higher") == "faster"
    assert _verdict(True, 0.001, "lower").startswith("significant but under")


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("cmp")
    for name in ("a", "b"):
        run_pqlab(
            "primitives",
            "--kem",
            "X25519",
            "--sig",
            "Ed25519",
            "--iterations",
            "60",
            "--out",
            base / name,
            check=True,
        )
    return base / "a", base / "b"


def test_compare_same_setup(two_runs):
    a, b = two_runs
    proc = run_pqlab("compare", a, b, "--json", check=True)
    data = json.loads(proc.stdout)
    keys = {r["key"] for r in data["rows"]}
    assert "X25519 / openssl / shared_secret" in keys
    assert "Ed25519 / openssl / sign" in keys
    for row in data["rows"]:
        assert row["n_a"] == row["n_b"] == 60
        assert row["ci_low_pct"] <= row["change_pct"] <= row["ci_high_pct"]


def test_compare_needs_runs(tmp_path):
    proc = run_pqlab("compare", tmp_path, tmp_path)
    assert proc.returncode == 2
    assert "not a pqlab run directory" in proc.stderr
