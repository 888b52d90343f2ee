"""`pqlab throughput`: refusals before anything exists, the MB/s arithmetic, and (root only) a
real run: both directions measured for each cell, every connection checked."""

from __future__ import annotations

import csv

import pytest

from conftest import is_root, run_pqlab
from pqlab.errors import UserError
from pqlab.experiments import throughput


def values(**kw):
    v = throughput.EXPERIMENT.defaults()
    for k, x in kw.items():
        setattr(v, k, x)
    return v


def test_megabytes_per_second():
    assert throughput.mbps(10**6, 10**9) == pytest.approx(1.0)
    assert throughput.mbps(64 * 2**20, 50_000_000) == pytest.approx(1342.17728)


def test_ccm_is_a_suite_of_openssl_only():
    plan = throughput.from_values(values(ciphersuites="TLS_AES_128_CCM_SHA256"))
    assert plan.suites == ["TLS_AES_128_CCM_SHA256"]


@pytest.mark.parametrize(
    "kw, words",
    [
        (
            {"ciphersuites": "TLS_AES_128_CCM_SHA256", "stack": "rustls"},
            ["--ciphersuites", "CCM", "rustls"],
        ),
        ({"ciphersuites": "AES128-GCM-SHA256"}, ["AES128-GCM-SHA256"]),
        ({"bytes": "0"}, ["--bytes"]),
        ({"bytes": "17GiB"}, ["--bytes"]),
        ({"bytes": "lots"}, ["--bytes", "lots"]),
        ({"n": "0"}, ["-n"]),
        ({"n": "1001"}, ["-n", "1001"]),
        ({"groups": "X25519,Nope"}, ["Nope"]),
        ({"server_sig": "ML-KEM-512"}, ["ML-KEM-512"]),
        ({"warmup": "101"}, ["--warmup"]),
    ],
)
def test_bad_values_are_refused_by_name(kw, words):
    with pytest.raises(UserError) as e:
        throughput.from_values(values(**kw))
    for w in words:
        assert w in str(e.value), str(e.value)


def test_cli_refusal_creates_nothing(tmp_path):
    out = tmp_path / "T"
    proc = run_pqlab("throughput", "--bytes", "-1", "--out", out)
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("error:") and "--bytes" in proc.stderr
    assert not out.exists()


@pytest.mark.skipif(not is_root(), reason="needs root (network namespaces)")
def test_both_directions_for_each_group_and_suite(tmp_path, no_leaks):
    out = tmp_path / "run"
    run_pqlab(
        "throughput",
        "--groups",
        "X25519,X25519MLKEM768",
        "--ciphersuites",
        "TLS_AES_128_GCM_SHA256,TLS_CHACHA20_POLY1305_SHA256",
        "--bytes",
        "4MiB",
        "-n",
        "2",
        "--out",
        out,
        check=True,
        timeout=600,
    )
    with open(out / "tables" / "throughput.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 4
    cells = {(r["group"], r["cipher_suite"]) for r in rows}
    assert ("X25519MLKEM768", "TLS_CHACHA20_POLY1305_SHA256") in cells
    for r in rows:
        assert int(r["n"]) == 2 and int(r["bytes"]) == 4 * 2**20
        assert float(r["tx_MBps"]) > 0 and float(r["rx_MBps"]) > 0
        assert float(r["tx_MBps_min"]) <= float(r["tx_MBps"]) <= float(r["tx_MBps_max"])
    assert (out / "figures" / "throughput.png").exists()
