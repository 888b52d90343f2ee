"""pqlab tls12: real handshakes between two namespaces (root only), matrix and checks;
bad input. No speed assertions."""

from __future__ import annotations

import csv
import os
import subprocess

import duckdb
import pytest

from pqlab import cli, engine
from pqlab.errors import CheckError
from pqlab.experiments.tls12 import dhe as tls12_dhe
from pqlab.experiments.tls12 import plan as tls12_plan
from pqlab.experiments.tls12 import run as tls12_run
from pqlab.net import privileges

needs_net = pytest.mark.skipif(
    not privileges.can_admin_network()[0], reason="needs CAP_NET_ADMIN (run as root)"
)


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def test_matrix_covers_every_kex_and_cert():
    plan = tls12_plan.Plan(
        versions=["1.2", "1.3"],
        kexes=list(tls12_plan.KEX_NAMES),
        certs=list(tls12_plan.CERTS),
        n=1,
        warmup=0,
        server_cpu=None,
        profile=None,
        shaper="auto",
    )
    cells = {(c.version, c.kex.label, c.cert): c for c in plan.cells()}
    assert len(cells) == (10 + 8) * 2
    assert cells[("1.2", "RSA", "ECDSA-P-256")].suite is None
    assert all(
        cells[("1.2", f"DHE-{b}", "ECDSA-P-256")].suite is None for b in (1024, 2048, 3072, 4096)
    )
    assert cells[("1.2", "DHE-2048", "RSA-2048")].suite == "DHE-RSA-AES128-GCM-SHA256"
    assert cells[("1.2", "ECDHE-X448", "ECDSA-P-256")].suite == "ECDHE-ECDSA-AES128-GCM-SHA256"
    assert cells[("1.3", "FFDHE-4096", "ECDSA-P-256")].suite == "TLS_AES_128_GCM_SHA256"
    # ECDSA in TLS 1.2 needs P-256 offered for the certificate, measured group first.
    server, client, expect, _ = tls12_run.tls_config(cells[("1.2", "ECDHE-X25519", "ECDSA-P-256")])
    args = client.args()
    assert args[args.index("--groups") + 1] == "x25519:secp256r1"
    assert expect.group.name == "X25519" and expect.cipher == "ECDHE-ECDSA-AES128-GCM-SHA256"
    # DHE-1024 needs the client's security level lowered; the server gets the DH size.
    server, client, expect, dh_bits = tls12_run.tls_config(cells[("1.2", "DHE-1024", "RSA-2048")])
    assert client.security_level == 1 and server.security_level is None and dh_bits == 1024


@needs_net
def test_tls12_small_run_has_every_row_and_verified_negotiation(tmp_path):
    out = tmp_path / "run"
    rc = cli.main(["tls12", "-n", "5", "--warmup", "1", "--out", str(out)])
    assert rc == 0
    # Nothing left behind (other processes on the machine may have their own namespaces).
    assert not [ns for ns in _namespaces() if ns.startswith(f"pqlab-{os.getpid()}-")]
    rows = _rows(out / "tables" / "tls12.csv")
    for col in ("kex", "cert", "n", "mean_ms", "median_ms", "p90_ms", "ratio_vs_rsa", "version"):
        assert col in rows[0]
    got = {(r["version"], r["kex"], r["cert"]): r for r in rows}
    for version, kexes in (("1.2", tls12_plan.KEX12), ("1.3", tls12_plan.KEX13)):
        for k in kexes:
            for cert in tls12_plan.CERTS:
                r = got[(version, k.label, cert)]
                spec = tls12_plan.cell_spec(version, k, cert)
                if spec.suite is None:
                    assert r["n"] == "0" and r["note"]
                    continue
                assert r["n"] == "5"
                assert r["suite"] == spec.suite
                if k.family == "dhe":
                    assert r["group"] == f"DH {k.dh_bits} bit"
                elif k.family == "rsa":
                    assert r["group"] == "-"
                else:
                    assert r["group"] == k.group
                if cert.startswith("ECDSA") and k.family != "rsa":
                    assert r["server_sigalg"].startswith("ecdsa")
                assert float(r["median_ms"]) > 0
    assert float(got[("1.2", "RSA", "RSA-2048")]["ratio_vs_rsa"]) == 1.0
    assert len(rows) == 36


def test_dh_sources_make_a_cell_each():
    plan = tls12_plan.Plan(
        versions=["1.2"],
        kexes=["dhe-2048"],
        certs=["RSA-2048"],
        n=1,
        warmup=0,
        server_cpu=None,
        profile=None,
        shaper="auto",
        dh_sources=["rfc", "generated"],
    )
    cells = {c.kex.label: c for c in plan.cells()}
    assert set(cells) == {"DHE-2048", "DHE-2048-generated"}
    _, _, _, rfc_bits = tls12_run.tls_config(cells["DHE-2048"])
    _, _, _, gen_bits = tls12_run.tls_config(cells["DHE-2048-generated"])
    assert rfc_bits == 2048 and gen_bits is None  # generated parameters come from a file


# Debian's own openssl command: a DH_check by an OpenSSL build the lab did not make.
SYSTEM_OPENSSL = "/usr/bin/openssl"


def _dh_check(path) -> str:
    """What `openssl dhparam -check` says of a parameters file (p and (p-1)/2 prime,
    generator suitable)."""
    out = subprocess.run(
        [SYSTEM_OPENSSL, "dhparam", "-in", str(path), "-check", "-noout"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return (out.stdout + out.stderr).strip()


@pytest.mark.skipif(not os.path.exists(SYSTEM_OPENSSL), reason="needs Debian's openssl command")
@pytest.mark.parametrize("bits", [1024, 2048, 3072, 4096])
def test_shipped_generated_dh_parameters_are_safe_primes_of_no_named_group(bits):
    """The generated DHE parameters pqlab ships: a safe prime of the size with generator 2
    (checked by another OpenSSL's DH_check), which the engine's OpenSSL matches to no named
    group (full-length private exponents, no q)."""
    path = tls12_run.generated_dh_file(bits)
    assert _dh_check(path) == "DH parameters appear to be ok."
    rec = next(r for r in engine.run(["dhparams", "--in", str(path)]) if r["type"] == "dhparams")
    assert (rec["prime_bits"], rec["generator"], rec["has_q"]) == (bits, "2", False)
    assert rec["private_bits"] == bits - 2


@pytest.mark.skipif(not os.path.exists(SYSTEM_OPENSSL), reason="needs Debian's openssl command")
def test_the_engine_generates_a_safe_prime(tmp_path):
    """`pqlab-engine dhparams --source generated` (how the shipped parameters were made)
    still makes parameters another OpenSSL accepts, and none of the RFC primes."""
    out = tmp_path / "dh1024.pem"
    rec = next(
        r
        for r in engine.run(
            ["dhparams", "--source", "generated", "--bits", "1024", "--out", str(out)],
            timeout=600,
        )
        if r["type"] == "dhparams"
    )
    assert (rec["source"], rec["prime_bits"], rec["private_bits"]) == ("generated", 1024, 1022)
    assert _dh_check(out) == "DH parameters appear to be ok."
    assert out.read_bytes() != tls12_run.generated_dh_file(1024).read_bytes()


@needs_net
def test_generated_dh_parameters_have_full_exponents_and_cost_more(tmp_path):
    """Document 002's DHE: generated parameters (full-length private exponents) against the
    RFC primes, which OpenSSL treats as named groups with short exponents (the 1024-bit RFC
    5114 group dh_1024_160 at 1024 bits, whose exponents are 160 bits).
    The exponent lengths are the server's own, per handshake, checked against OpenSSL's
    source (crypto/ffc/ffc_dh.c: 225 bits for modp_2048; crypto/dh/dh_key.c: p bits - 2
    for a prime of no named group, dh->length when the parameters carry one)."""
    out = tmp_path / "dh"
    rc = cli.main(
        [
            "tls12", "--versions", "1.2", "--kex", "RSA,DHE-1024,DHE-2048", "--certs",
            "RSA-2048", "--dh-params", "rfc,generated", "-n", "30", "--out", str(out),
        ]
    )  # fmt: skip
    assert rc == 0
    got = {r["kex"]: r for r in _rows(out / "tables" / "tls12.csv")}
    for bits in (1024, 2048):
        rfc, gen = got[f"DHE-{bits}"], got[f"DHE-{bits}-generated"]
        assert (rfc["dh_params"], gen["dh_params"]) == ("rfc", "generated")
        assert int(gen["dh_private_bits"]) == bits - 2  # as long as the prime
        assert gen["document_ratio_vs_rsa"] == rfc["document_ratio_vs_rsa"] != ""
    # The server's exponent of every handshake, kept raw.
    con = duckdb.connect(str(out / "results.duckdb"), read_only=True)
    per_handshake = dict(
        con.execute(
            "SELECT kex, list(DISTINCT server_dh_private_bits) FROM tls12_handshakes "
            "WHERE kex LIKE 'DHE-%' GROUP BY kex"
        ).fetchall()
    )
    con.close()
    assert per_handshake["DHE-1024-generated"] == [1022]
    assert per_handshake["DHE-2048-generated"] == [2046]
    assert 150 <= max(per_handshake["DHE-1024"]) <= 160
    assert 215 <= max(per_handshake["DHE-2048"]) <= 225
    # The per-size table: generated costs more at every size, as the exponents predict.
    dhe = {int(r["dh_bits"]): r for r in _rows(out / "tables" / "tls12_dhe.csv")}
    assert set(dhe) == {1024, 2048}
    for bits in (1024, 2048):
        assert (dhe[bits]["rfc_private_bits"], dhe[bits]["generated_private_bits"]) == (
            got[f"DHE-{bits}"]["dh_private_bits"],
            str(bits - 2),
        )
        assert dhe[bits]["generated_costs_more"] == "yes", dhe[bits]
        assert dhe[bits]["expected"].startswith("generated dearer")
    assert float(dhe[2048]["ci_low"]) > 1.5  # 2046- against at most 225-bit exponents
    assert dhe[2048]["document_ratio_vs_rsa"] == "4.75"
    assert "the private exponent" in (out / "report.html").read_text()


def _dhe_row(kex: str, source: str, bits: int, ms: list[float]) -> dict:
    return {
        "version": "1.2", "kex": kex, "cert": "RSA-2048", "n": len(ms), "dh_params": source,
        "dh_private_bits": bits, "mean_ms": sum(ms) / len(ms), "median_ms": sorted(ms)[1],
        "ratio_vs_rsa": 2.0, "document_ratio_vs_rsa": 4.75, "host_pair": None, "_ms": ms,
    }  # fmt: skip


def test_dhe_table_calls_a_difference_only_beyond_its_margin():
    base = [1.0, 1.01, 0.99, 1.02, 0.98] * 20
    rows = [
        _dhe_row("DHE-2048", "rfc", 225, base),
        _dhe_row("DHE-2048-generated", "generated", 2046, [4 * x for x in base]),
        # Equal exponents (the RFC 2409 prime without a private length has 1022 bits).
        _dhe_row("DHE-1024", "rfc", 1022, base),
        _dhe_row("DHE-1024-generated", "generated", 1022, [1.02 * x for x in base]),
        _dhe_row("DHE-3072", "rfc", 275, base),  # no generated cell: no row
    ]
    got = {r["dh_bits"]: r for r in tls12_dhe.table(rows)}
    assert set(got) == {1024, 2048}
    assert got[2048]["generated_costs_more"] == "yes"
    assert got[2048]["generated_over_rfc"] == pytest.approx(4.0, rel=0.01)
    assert got[2048]["expected"].startswith("generated dearer")
    # 2 % is within what cells run one after another drift by.
    assert got[1024]["generated_costs_more"] == "no difference (within 5 %)"
    assert got[1024]["expected"].startswith("same cost")


def test_a_server_exponent_longer_than_its_parameters_allow_is_refused():
    spec = tls12_plan.cell_spec("1.2", tls12_plan.KEX12[2].with_source("rfc"), "RSA-2048")
    described = {"private_bits": 225}
    tls12_run._check_server_exponent(spec, {"dh_private_bits": 224}, described, "c")
    with pytest.raises(CheckError, match="226-bit DH exponent"):
        tls12_run._check_server_exponent(spec, {"dh_private_bits": 226}, described, "c")
    with pytest.raises(CheckError, match="no DH private exponent"):
        tls12_run._check_server_exponent(spec, {}, described, "c")


@needs_net
def test_server_cpu_quota_is_recorded_and_removed(tmp_path):
    out = tmp_path / "run"
    rc = cli.main(
        [
            "tls12",
            "-n",
            "3",
            "--warmup",
            "0",
            "--versions",
            "1.2",
            "--kex",
            "ECDHE-X25519",
            "--certs",
            "ECDSA-P-256",
            "--server-cpu",
            "0.5",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    rows = _rows(out / "tables" / "tls12.csv")
    assert rows[0]["server_cpu"] == "0.5" and float(rows[0]["server_cpu_ms_per_handshake"]) > 0
    html = (out / "report.html").read_text()
    assert "cgroup" in html
    for root in ("/sys/fs/cgroup/cpu", "/sys/fs/cgroup"):
        try:
            assert not [d for d in os.listdir(root) if d.startswith(f"pqlab-{os.getpid()}-")]
        except FileNotFoundError:
            pass


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["-n", "0"], "-n"),
        (["-n", "x"], "-n"),
        (["--kex", "DHE-512"], "unknown key exchange 'DHE-512'"),
        (["--certs", "DSA-1024"], "unknown certificate 'DSA-1024'"),
        (["--versions", "1.1"], "--versions"),
        (["--server-cpu", "2"], "--server-cpu"),
        (["--server-cpu", "quarter"], "--server-cpu"),
        (["--versions", "1.3", "--kex", "RSA"], "no cells"),
    ],
)
def test_bad_input_is_one_clear_line(tmp_path, capsys, argv, needle):
    rc = cli.main(["tls12", *argv, "--out", str(tmp_path / "run")])
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and needle in err
    assert len(err.splitlines()) == 1
    assert not (tmp_path / "run").exists()


@needs_net
def test_link_profile_is_applied(tmp_path):
    # A lower bound from physics, not a speed assertion: TCP connect plus a TLS 1.3
    # handshake take two round trips, so with rtt=10ms no sample can be under 20 ms.
    out = tmp_path / "run"
    rc = cli.main(
        [
            "tls12",
            "-n",
            "3",
            "--warmup",
            "0",
            "--versions",
            "1.3",
            "--kex",
            "ECDHE-X25519",
            "--certs",
            "ECDSA-P-256",
            "--profile",
            "rtt=10ms",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    row = _rows(out / "tables" / "tls12.csv")[0]
    assert row["profile"] != "none"
    assert float(row["median_ms"]) >= 20.0
