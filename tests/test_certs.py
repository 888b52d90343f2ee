"""`pqlab certs`: the tables, their sizes against the files, and clear errors."""

from __future__ import annotations

import csv

from conftest import run_pqlab


def read_csv(path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_certs_tables(tmp_path):
    out = tmp_path / "run"
    run_pqlab(
        "certs",
        "--ca-sig",
        "RSA-2048,ML-DSA-44",
        "--server-sig",
        "ECDSA-P256,ML-DSA-44",
        "--out",
        out,
        "--no-report",
        check=True,
    )
    roots = {r["algorithm"]: r for r in read_csv(out / "tables" / "certs_root.csv")}
    assert set(roots) == {"RSA-2048", "ML-DSA-44"}
    server = read_csv(out / "tables" / "certs_server.csv")
    assert len(server) == 4
    assert set(server[0]) >= {"server_sig", "ca_sig", "server_cert_der_bytes", "chain_bytes"}
    for row in server:
        d = out / "certs" / f"{row['ca_sig']}__{row['server_sig']}"
        assert int(row["server_cert_der_bytes"]) == (d / "server.crt.der").stat().st_size
        assert int(row["chain_bytes"]) == int(row["server_cert_der_bytes"])
        root = roots[row["ca_sig"]]
        assert (
            int(root["root_der_bytes_min"])
            <= (d / "root.crt.der").stat().st_size
            <= int(root["root_der_bytes_max"])
        )
    size = {(r["server_sig"], r["ca_sig"]): int(r["server_cert_der_bytes"]) for r in server}
    # An ML-DSA-44 CA signature (2420 B) instead of RSA-2048's (256 B) grows the server
    # certificate by the difference, give or take DER length bytes and names.
    for srv in ("ECDSA-P256", "ML-DSA-44"):
        grow = size[(srv, "ML-DSA-44")] - size[(srv, "RSA-2048")]
        assert 2100 < grow < 2250, (srv, grow)
    # Root of ML-DSA-44: 1312-byte key + 2420-byte signature inside.
    assert int(roots["ML-DSA-44"]["root_der_bytes"]) > 1312 + 2420
    # One root per CA algorithm, signing every server certificate of that CA.
    for ca in ("RSA-2048", "ML-DSA-44"):
        assert roots[ca]["n_roots"] == "1"
        ders = {
            (out / "certs" / f"{ca}__{srv}" / "root.crt.der").read_bytes()
            for srv in ("ECDSA-P256", "ML-DSA-44")
        }
        assert len(ders) == 1
    # Resume: nothing to redo, same tables.
    again = run_pqlab(
        "certs",
        "--ca-sig",
        "RSA-2048,ML-DSA-44",
        "--server-sig",
        "ECDSA-P256,ML-DSA-44",
        "--out",
        out,
        "--resume",
        "--no-report",
    )
    assert again.returncode == 0, again.stderr
    assert len(read_csv(out / "tables" / "certs_server.csv")) == 4


def test_certs_unknown_algorithm(tmp_path):
    proc = run_pqlab("certs", "--ca-sig", "RSA-2047", "--out", tmp_path / "x")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "RSA-2047" in lines[0]


def test_certs_kem_is_not_a_signature(tmp_path):
    proc = run_pqlab(
        "certs", "--ca-sig", "RSA-2048", "--server-sig", "ML-KEM-768", "--out", tmp_path / "x"
    )
    assert proc.returncode == 2 and "ML-KEM-768" in proc.stderr and "signature" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_make_chain_is_cached_and_private(tmp_path):
    import stat

    from pqlab.tls.chains import make_chain

    a = make_chain(tmp_path, "RSA-2048", "ECDSA-P256")
    first = a.chain.read_bytes()
    b = make_chain(tmp_path, "RSA-2048", "ECDSA-P256")
    assert stat.S_IMODE(a.key.stat().st_mode) == 0o600
    assert stat.S_IMODE(a.directory.stat().st_mode) == 0o700
    root_key = tmp_path / "roots" / "RSA-2048" / "root.key.pem"
    assert stat.S_IMODE(root_key.stat().st_mode) == 0o600
    with_root = a.sending_root()
    assert with_root.sent_certs == 2 and with_root.chain.read_text().count("BEGIN CERT") == 2
    assert (
        with_root.sent_der_bytes == a.record["server_cert_der_bytes"] + a.record["root_der_bytes"]
    )
    assert b.chain.read_bytes() == first and b.record == a.record
    assert a.root.exists() and a.key.exists()
    assert a.record["server_sig"] == "ECDSA-P256" and a.record["ca_sig"] == "RSA-2048"
