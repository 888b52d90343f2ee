"""Mutual TLS in `pqlab handshake` (root only): the client's Certificate and
CertificateVerify as phases of both views, its second flight counted, and document 004's
"TLS 1.3 data transmission size" (tables/wire_bytes.csv) checked against tshark's tcp.len
sums on the kept captures, each way, connection by connection."""

from __future__ import annotations

import csv
import shutil
import statistics

import duckdb
import pytest

from conftest import run_pqlab
from pqlab import catalog
from pqlab.errors import UserError
from pqlab.experiments.handshake import plan as hs_plan
from pqlab.experiments.handshake import wire_bytes
from tls_helpers import tshark_content_types, tshark_fields

CLIENT_PHASES = (
    "Finished rcv -> Client Certificate send",
    "Client Certificate send -> Client Certificate Verify send",
    "Client Certificate Verify send -> Finished send",
)


def read_csv(path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def tshark_payload_sums(pcap, server_port: int) -> list[tuple[int, int]]:
    """Per TCP connection of a capture: (sum of tcp.len client to server, server to
    client), from Wireshark's dissector."""
    sums: dict[int, list[int]] = {}
    for row in tshark_fields(pcap, ["tcp.stream", "tcp.srcport", "tcp.len"]):
        stream, sport, length = (int(x) for x in row)
        both = sums.setdefault(stream, [0, 0])
        both[1 if sport == server_port else 0] += length
    return [tuple(v) for _, v in sorted(sums.items())]


@pytest.fixture(scope="module")
def mutual_run(tmp_path_factory):
    """The issue's command as a user types it."""
    out = tmp_path_factory.mktemp("mutual") / "run"
    run_pqlab(
        "handshake", "--client-sig", "ML-DSA-44,ECDSA-P256", "--groups", "X25519MLKEM768",
        "--server-sig", "ML-DSA-44", "--ca-sig", "ML-DSA-44", "-n", "20", "--keep-pcap",
        "--out", out, check=True, timeout=900,
    )  # fmt: skip
    return out


@pytest.mark.net
def test_the_clients_certificate_is_a_phase_of_both_views(mutual_run):
    con = duckdb.connect(str(mutual_run / "results.duckdb"), read_only=True)
    try:
        phases = con.execute(
            "SELECT client_sig, view, list(DISTINCT phase) FROM handshake_phase GROUP BY ALL"
        ).fetchall()
        raw = con.execute(
            "SELECT client_sig, negotiated_client_sigalg, client_certificate_bytes, "
            "client_certificate_verify_bytes, certificate_request_bytes, client_flight_segments "
            "FROM handshake_raw"
        ).fetchall()
        # Each view's phases still add up to SYN -> the client's Finished.
        mismatched = con.execute(
            "SELECT count(*) FROM (SELECT cell_id, idx, view, sum(ns) AS s FROM handshake_phase "
            "GROUP BY ALL) p JOIN handshake_raw r USING (cell_id, idx) WHERE p.s <> r.total_ns"
        ).fetchone()[0]
    finally:
        con.close()
    assert mismatched == 0
    assert {(c, v) for c, v, _ in phases} == {
        (c, v) for c in ("ML-DSA-44", "ECDSA-P256") for v in ("client", "server")
    }
    for _, _, names in phases:
        assert set(CLIENT_PHASES) <= set(names)
        assert "Finished rcv -> Finished send" not in names
    schemes = {"ML-DSA-44": "mldsa44", "ECDSA-P256": "ecdsa_secp256r1_sha256"}
    assert len(raw) == 40
    for client, scheme, cert, cv, cr, segments in raw:
        assert scheme == schemes[client]
        assert cert > 500 and cv > 60 and cr > 0 and segments >= 1


@pytest.mark.net
@pytest.mark.skipif(shutil.which("tshark") is None, reason="needs tshark")
def test_wire_bytes_equal_tsharks_tcp_len_each_way(mutual_run):
    """wire_bytes.csv's TCP payload sums are tshark's sums of tcp.len on the kept client
    capture, each way (the cell's median; every connection counted identically)."""
    rows = [r for r in read_csv(mutual_run / "tables" / "wire_bytes.csv") if r["n"]]
    assert {r["client_sig"] for r in rows} == {"ML-DSA-44", "ECDSA-P256"}
    con = duckdb.connect(str(mutual_run / "results.duckdb"), read_only=True)
    try:
        pcaps = dict(
            con.execute(
                "SELECT r.client_sig, c.pcap FROM handshake_capture c JOIN (SELECT DISTINCT "
                "cell_id, client_sig FROM handshake_raw) r USING (cell_id) WHERE side = 'client'"
            ).fetchall()
        )
        ports = dict(
            con.execute(
                "SELECT r.client_sig, any_value(o.port) FROM handshake_order o JOIN (SELECT "
                "DISTINCT cell_id, client_sig FROM handshake_raw) r USING (cell_id) GROUP BY 1"
            ).fetchall()
        )
    finally:
        con.close()
    for r in rows:
        pcap, port = pcaps[r["client_sig"]], ports[r["client_sig"]]
        sums = tshark_payload_sums(pcap, port)
        assert len(sums) >= 20
        # Each connection carries the request and its answer: one application-data record
        # each way, decrypted by Wireshark with the key log kept beside the capture.
        keys = pcap.replace(".client.pcap", ".keys.log")
        for got in tshark_content_types(pcap, keys, port).values():
            assert [side for side, t in got if t == 23] == ["client", "server"], got
        assert int(r["client_payload_bytes"]) == statistics.median(c for c, _ in sums)
        assert int(r["server_payload_bytes"]) == statistics.median(s for _, s in sums)
        assert int(r["total_payload_bytes"]) > int(r["handshake_ip_bytes"]) * 0.8
    # The document's rows this run did not measure are listed, each saying why.
    unmatched = [r for r in read_csv(mutual_run / "tables" / "wire_bytes.csv") if not r["n"]]
    assert len(unmatched) == 22
    assert all(r["note"] for r in unmatched)


@pytest.mark.net
def test_same_client_signer_reproduces_document_004_rows(tmp_path):
    """`--client-sig same` with RSA-2048 everywhere: the cells match document 004's RSA
    rows (Kyber512 measured as its standard, ML-KEM-512)."""
    out = tmp_path / "run"
    run_pqlab(
        "handshake", "--client-sig", "same", "--groups", "ECDH-P256,ML-KEM-512",
        "--server-sig", "RSA-2048", "--ca-sig", "RSA-2048", "-n", "5", "--out", out,
        check=True, timeout=900,
    )  # fmt: skip
    rows = {
        (r["document_auth"], r["document_kex"]): r
        for r in read_csv(out / "tables" / "wire_bytes.csv")
    }
    p256, kyber = rows[("RSA-2048", "ECDH-P256")], rows[("RSA-2048", "KYBER_LEVEL1")]
    assert p256["n"] and kyber["n"]
    assert (int(p256["document_total_bytes"]), int(kyber["document_total_bytes"])) == (5455, 6633)
    # The server's side of the two connections differs by its key share alone (the same
    # certificates, RSA-PSS signatures of one size): ML-KEM-512's ciphertext against a P-256
    # point, from the catalogue's sizes. The client's by its key share, less the 8 bytes of
    # the ec_point_formats extension OpenSSL's client sends only when it offers an EC group.
    mlkem, ecdh = (catalog.resolve(n, "kem").sizes for n in ("ML-KEM-512", "ECDH-P256"))
    server_grown = int(kyber["server_payload_bytes"]) - int(p256["server_payload_bytes"])
    client_grown = int(kyber["client_payload_bytes"]) - int(p256["client_payload_bytes"])
    assert server_grown == mlkem["ciphertext"] - ecdh["public_key"]
    assert client_grown == mlkem["public_key"] - ecdh["public_key"] - 8
    assert "withdrawn" not in rows[("RSA-2048", "KYBER_90S_LEVEL1")]["note"]
    assert rows[("RSA-2048", "KYBER_90S_LEVEL1")]["note"].startswith("Kyber512-90s")


def test_document_004_names_map_to_what_is_measured_today():
    sig = {r["auth"]: wire_bytes.today(r["auth"], "sig")[0] for r in wire_bytes.document_rows()}
    kem = {r["kex"]: wire_bytes.today(r["kex"], "kem")[0] for r in wire_bytes.document_rows()}
    assert sig["DILITHIUM_LEVEL3"].name == "ML-DSA-65"
    assert sig["FALCON_LEVEL5"].name == "Falcon-1024"
    assert kem["KYBER_LEVEL5"].name == "ML-KEM-1024"
    assert kem["P256_KYBER_LEVEL1"] is None and kem["KYBER_90S_LEVEL3"] is None
    assert len(wire_bytes.document_rows()) == 22


def test_client_signers_are_checked_against_the_stack():
    from pqlab.experiments.handshake import EXPERIMENT

    def values(**kw):
        v = EXPERIMENT.defaults()
        for k, x in kw.items():
            setattr(v, k, x)
        return v

    with pytest.raises(UserError, match="Falcon-512"):
        hs_plan.from_values(values(client_sig="Falcon-512"))
    with pytest.raises(UserError, match="--client-ca-sig"):
        hs_plan.from_values(values(client_ca_sig="ECDSA-P256"))
    plan = hs_plan.from_values(
        values(groups="X25519", server_sig="ECDSA-P256,RSA-2048", ca_sig="ECDSA-P256",
               client_sig="none,same")
    )  # fmt: skip
    cells = list(plan.cells())
    assert [(c[1].name, c[4] and c[4].name) for c in cells] == [
        ("ECDSA-P256", None), ("ECDSA-P256", "ECDSA-P256"), ("RSA-2048", None),
        ("RSA-2048", "RSA-2048"),
    ]  # fmt: skip
    ids = [str(plan.cell_id(*c)) for c in cells]
    assert ids[0] == "X25519|ECDSA-P256|ECDSA-P256|openssl" and ids[1].endswith(
        "|+client-ECDSA-P256"
    )


def test_ca_same_puts_each_server_under_its_own_root():
    from pqlab.experiments.handshake import EXPERIMENT

    v = EXPERIMENT.defaults()
    v.groups, v.server_sig, v.ca_sig = "X25519", "ECDSA-P256,ML-DSA-44", "same"
    plan = hs_plan.from_values(v)
    assert [(c[1].name, c[2].name) for c in plan.cells()] == [
        ("ECDSA-P256", "ECDSA-P256"),
        ("ML-DSA-44", "ML-DSA-44"),
    ]
