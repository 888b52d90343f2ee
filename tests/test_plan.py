"""`pqlab plan` end to end (the real CLI, the real engine's certificates and ClientHello; no
network): document 000's table 9 predicted from sizes alone, the ML-DSA-87 stall, the
migration table, the cliffs against a brute-force search, and bad input."""

from __future__ import annotations

import csv

import pytest

from conftest import run_pqlab
from pqlab import catalog
from pqlab.tls import predict, stacks, wire

# Document 000, table 9: TCP segments from ServerHello to Finished, root CA sent; columns
# (CA signer, server signer).
TABLE_9_COLUMNS = [
    ("RSA-2048", "RSA-2048"),
    ("RSA-2048", "RSA-3072"),
    ("RSA-2048", "ML-DSA-44"),
    ("ML-DSA-44", "RSA-2048"),
    ("ML-DSA-44", "ML-DSA-44"),
]
TABLE_9 = {
    "X25519": [2, 2, 5, 6, 9],
    "ML-KEM-512": [3, 3, 5, 7, 9],
    "ML-KEM-768": [3, 3, 5, 8, 9],
    "ML-KEM-1024": [3, 4, 6, 8, 10],
    "X25519MLKEM768": [3, 3, 5, 8, 9],
}


def _rows(path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_table_9_of_document_000_predicted_from_sizes(tmp_path):
    out = tmp_path / "t9"
    run_pqlab(
        "plan", "--groups", ",".join(TABLE_9), "--server-sig", "RSA-2048,RSA-3072,ML-DSA-44",
        "--ca-sig", "RSA-2048,ML-DSA-44", "--send-root", "--rtt", "20ms", "--sizes", "0",
        "--out", out, check=True,
    )  # fmt: skip
    got = {(r["group"], r["ca_sig"], r["server_sig"]): r for r in _rows(out / "tables/plan.csv")}
    for group, counts in TABLE_9.items():
        for (ca, server), want in zip(TABLE_9_COLUMNS, counts, strict=True):
            r = got[(group, ca, server)]
            assert int(r["server_flight_segments_min"]) == want, (group, ca, server)
            assert int(r["server_flight_segments_max"]) == want, (group, ca, server)


def test_ml_dsa_87_with_root_stalls_one_round_trip(tmp_path):
    out = tmp_path / "p"
    r = run_pqlab(
        "plan", "--groups", "X25519", "--server-sig", "ML-DSA-87", "--ca-sig", "ML-DSA-87",
        "--send-root", "--rtt", "20ms", "--initcwnd", "10", "--out", out, check=True,
    )  # fmt: skip
    line = next(x for x in r.stdout.splitlines() if "ML-DSA-87" in x)
    assert "3 round trips (the flight waits 1 round trip for ACKs)" in line, line
    assert "TTFB 60.0 ms" in line and "15 segments" in line, line
    (row,) = _rows(out / "tables/plan.csv")
    assert (row["round_trips_min"], row["flight_rounds_max"]) == ("3", "2")
    # The certificates are the builder's: the root and the server certificate, as made.
    assert int(row["chain_certs"]) == 2 and int(row["chain_der_bytes"]) > 15_000


def test_migration_table(tmp_path):
    out = tmp_path / "m"
    r = run_pqlab(
        "plan", "--from", "X25519,ECDSA-P256", "--to", "X25519MLKEM768,ML-DSA-44",
        "--rtt", "10ms,200ms", "--bandwidth", "none,1mbit", "--out", out, check=True,
    )  # fmt: skip
    assert "migration: X25519 / ECDSA-P256 / CA ECDSA-P256  ->  X25519MLKEM768" in r.stdout
    rows = _rows(out / "tables/plan_migration.csv")
    assert len(rows) == 4
    for row in rows:
        extra = int(row["to_handshake_bytes"]) - int(row["from_handshake_bytes"])
        assert int(row["extra_bytes"]) == extra > 7000  # an ML-KEM share and ML-DSA chain
        assert int(row["response_bytes"]) == 100 * 1024
        if row["bandwidth_bps"]:
            # At 1 Mbit/s the extra kilobytes cost their serialisation: about 8 ms per KB.
            assert float(row["extra_ttfb_ms"]) == pytest.approx(extra * 8 / 1e6 * 1e3, rel=0.2)
        else:
            assert float(row["extra_ttfb_ms"]) == pytest.approx(0, abs=1e-6)


def test_chain_bytes_sweep_and_cliffs(tmp_path):
    out = tmp_path / "s"
    run_pqlab(
        "plan", "--groups", "X25519", "--server-sig", "ECDSA-P256", "--ca-sig", "ECDSA-P256",
        "--send-root", "--chain-bytes", "2000..40000/2000", "--rtt", "50ms", "--out", out,
        check=True,
    )  # fmt: skip
    cells = _rows(out / "tables/plan.csv")
    assert [int(r["chain_der_bytes"]) for r in cells] == list(range(2000, 40001, 2000))
    cliffs = _rows(out / "tables/plan_cliffs.csv")
    first = min(int(c["chain_der_bytes"]) for c in cliffs if c["round_trips"] == "3")
    for r in cells:
        expect = 3 if int(r["chain_der_bytes"]) >= first else 2
        assert int(r["round_trips_max"]) == expect, r["chain_der_bytes"]
    assert (out / "figures/plan_ttfb_vs_chain_bytes.png").exists()
    assert (out / "figures/plan_round_trips_vs_chain_bytes.png").exists()


def test_cliffs_are_where_a_byte_by_byte_search_finds_them():
    st = stacks.get("openssl")
    hs = predict.Handshake.of(
        catalog.resolve("X25519MLKEM768", "kem"),
        catalog.resolve("ML-DSA-44", "sig"),
        [3000, 2000, 1000],
        1355,
        st,
    )
    link = wire.Link.symmetric(0.05)
    found = predict.cliffs(hs, link, limit=60_000)
    assert [rt for rt, _ in found] == [3, 4]

    def rt(total: int) -> int:
        return predict.round_trips(hs.with_chain(predict.chain_of(total, 3)), link)

    for trips, at in found:
        assert rt(at) == trips and rt(at - 1) == trips - 1
    # Below the first cliff nothing changes, byte by byte over the last segment before it.
    first = found[0][1]
    assert {rt(n) for n in range(first - 1448, first)} == {2}


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--rtt", "fast"], "is not a duration"),
        (["--chain-bytes", "9000..2000"], "a range runs from a smaller size"),
        (["--chain-bytes", "1..200000/1"], "more than 1000 points"),
        (["--from", "X25519,ECDSA-P256"], "--from and --to go together"),
        (["--from", "X25519,ECDSA-P256", "--to", "X25519", "--groups", "X25519"], "--groups"),
        (["--to", "X25519", "--from", "X25519,ECDSA-P256"], "GROUP,SERVER_SIG"),
        (["--intermediates", "9"], "at most 4"),
        (["--groups", "NotAGroup"], "NotAGroup"),
        (["--mss", "100"], "--mss"),
        (["--bandwidth", "1 potato"], "is not a rate"),
    ],
)
def test_bad_input_one_line_nothing_created(args, fragment, tmp_path):
    proc = run_pqlab("plan", *args, "--out", tmp_path / "run")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], lines
    assert not (tmp_path / "run").exists()
