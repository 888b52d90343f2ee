"""`pqlab plan` end to end (the real CLI, the real engine's certificates and ClientHello; no
network): document 000's table 9 predicted from sizes alone, the ML-DSA-87 stall, the
migration table, the cliffs against a brute-force search, and bad input."""

from __future__ import annotations

import csv

import pytest

from conftest import query, run_pqlab
from pqlab import catalog
from pqlab.experiments.plan import calibrate
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
        (["--calibrate", "--client-sig", "ECDSA-P256"], "leave out --client-sig"),
        (["--calibrate", "--shaper", "carrier-pigeon"], "--shaper"),
    ],
)
def test_bad_input_one_line_nothing_created(args, fragment, tmp_path):
    proc = run_pqlab("plan", *args, "--out", tmp_path / "run")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], lines
    assert not (tmp_path / "run").exists()


def _events(rec: dict, ev: str = "handshake") -> list[dict]:
    return [e for e in rec.get("events") or [] if e.get("ev") == ev]


def _msg(rec: dict, direction: str, name: str) -> dict:
    return next(e for e in _events(rec) if e["dir"] == direction and e["msg"] == name)


@pytest.mark.parametrize("stack_name", ["openssl", "rustls"])
def test_mutual_tls_sizes_against_real_handshakes(stack_name, tmp_path):
    """A mutually authenticated handshake on 127.0.0.1 between the engine's server and
    client: the ClientHello, the server's flight (with its CertificateRequest) and the
    client's Certificate and CertificateVerify take the sizes the model gives from the
    catalogue and the certificates alone (the CertificateRequest within its range: with or
    without the client CA's name)."""
    from pqlab.tls import runner
    from pqlab.tls.chains import make_chain
    from pqlab.tls.negotiation import Expected

    st = stacks.get(stack_name)
    group = catalog.resolve("X25519MLKEM768", "kem")
    signer = catalog.resolve("ML-DSA-44", "sig")
    client_sig = catalog.resolve("ECDSA-P256", "sig")
    server = make_chain(tmp_path, "ML-DSA-44", signer, stack_name)
    # The client's CA is not the server's root: a client whose trust store holds its own CA
    # (OpenSSL) sends it after its certificate, which the model does not count.
    client = make_chain(tmp_path, "ECDSA-P256", client_sig, stack_name, purpose="client")
    auth = predict.ClientAuth(client_sig, tuple(client.sent_der), client.root_name_der_bytes)
    hs = predict.of_chain(st, group, signer, server, "127.0.0.1", client_auth=auth)
    low, high = (predict.predict(h, wire.Link.symmetric(0.01), 100) for h in hs.extremes())
    tls = runner.Tls(stack=st, groups=(group,), sigalgs=(signer,))
    spec = runner.ServerSpec(
        tls=tls,
        chain=server,
        listen="127.0.0.1:0",
        max_connections=2,
        client_auth=runner.ClientAuth(st, ca=client.root, sigalgs=(client_sig,)),
    )
    with runner.start_server(spec) as srv:
        port = srv.listening["address"].rsplit(":", 1)[1]
        recs = runner.run_client(
            runner.ClientSpec(
                # The client offers its own scheme too, to sign with it (as `memory` does).
                tls=runner.Tls(stack=st, groups=(group,), sigalgs=(signer, client_sig)),
                connect=f"127.0.0.1:{port}",
                ca=server.root,
                servername="127.0.0.1",
                n=2,
                request_bytes=100,
                expected=Expected(group=group, sigalg=signer),
                identity=runner.Identity(st, client.chain, client.key, client_sig),
            ),
            timeout=120,
        )
    assert len(recs) == 2
    for rec in recs:
        records = _events(rec, "record")
        sent = [e for e in records if e["dir"] == "sent"]
        assert sent[0]["offset_end"] == hs.client_hello
        if st.message_events:
            cr = _msg(rec, "recv", "certificate_request")["length"]
            assert low.handshake.certificate_request <= cr <= high.handshake.certificate_request
            flight_end = _msg(rec, "recv", "finished")["offset_end"]
            certificate = _msg(rec, "sent", "certificate")["length"]
            assert certificate == 4 + 1 + 3 + sum(3 + d + 2 for d in client.sent_der)
            cv = _msg(rec, "sent", "certificate_verify")["length"]
            assert 8 + 68 <= cv <= 8 + 72  # an ECDSA P-256 signature in DER
        else:
            first_app = next(e for e in sent if e.get("content_type") == "application_data")
            flight_end = max(
                e["offset_end"] for e in records if e["dir"] == "recv" and e["t"] <= first_app["t"]
            )
        bounds = (low.flight_bytes, high.flight_bytes)
        assert bounds[0] <= flight_end <= bounds[1], (flight_end, bounds, records)
        # What the client sent after the ClientHello, its request excluded.
        second = rec["record_bytes_sent"] - hs.client_hello
        client_flight = [w.client_flight for w in (low.wire, high.wire)]
        sizes = sorted(c[-1].end - c[0].start for c in client_flight)
        assert sizes[0] <= second <= sizes[1] + 24  # + close_notify


def test_the_ca_name_size_is_what_an_independent_parser_reads(tmp_path):
    """The CA Name a CertificateRequest may carry: its DER size, read by pqlab's small DER
    walk, equals what PyCA cryptography's X.509 parser gives."""
    from cryptography import x509

    from pqlab.tls.chains import make_chain, subject_der_bytes

    for ca in ("ECDSA-P256", "ML-DSA-44", "RSA-3072"):
        chain = make_chain(tmp_path, ca, "ECDSA-P256", purpose="client")
        der = (chain.directory / "root.crt.der").read_bytes()
        want = len(x509.load_der_x509_certificate(der).subject.public_bytes())
        assert chain.root_name_der_bytes == subject_der_bytes(der) == want
        leaf = (chain.directory / "server.crt.der").read_bytes()
        assert subject_der_bytes(leaf) == len(
            x509.load_der_x509_certificate(leaf).subject.public_bytes()
        )


def test_compare_reports_predictions_same_or_changed(tmp_path):
    """Two plan runs compare value by value (computed, no statistics): the same inputs give
    "same"; a prediction that moved (here edited into run B) is "changed"."""
    import duckdb

    for name in ("a", "b"):
        run_pqlab(
            "plan", "--groups", "X25519", "--server-sig", "ML-DSA-44", "--rtt", "50ms",
            "--out", tmp_path / name, check=True,
        )  # fmt: skip
    same = run_pqlab("compare", tmp_path / "a", tmp_path / "b", check=True)
    assert same.stdout.count("same (computed)") == 3, same.stdout
    con = duckdb.connect(str(tmp_path / "b" / "results.duckdb"))
    con.execute("UPDATE plan_cells SET ttfb_ms = ttfb_ms * 1.5")
    con.close()
    moved = run_pqlab("compare", tmp_path / "a", tmp_path / "b", check=True)
    line = next(x for x in moved.stdout.splitlines() if x.startswith("plan TTFB"))
    assert "changed (computed)" in line and "+50.0%" in line, line


@pytest.mark.parametrize(
    "command, args",
    [
        ("ttlb", ["--chain", "RSA-2048,ML-DSA-44", "--chain-bytes", "8000,16000"]),
        (
            "handshake",
            ["--server-sig", "ML-DSA-44", "--ca-sig", "ML-DSA-44", "--chain-bytes", "3000"],
        ),
        ("handshake", ["--stack", "rustls", "--chain-bytes", "70000", "--server-sig", "ML-DSA-44"]),
    ],
)
def test_a_chain_that_cannot_be_padded_is_refused_before_anything_exists(command, args, tmp_path):
    """Padding only adds (an ML-DSA-44 chain with its root is 8245 bytes, more than 8000);
    and a padded certificate must fit the stack (rustls: 64 KiB)."""
    proc = run_pqlab(command, *args, "--out", tmp_path / "run")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--chain-bytes" in lines[0], lines
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("stack_name", ["openssl", "rustls"])
def test_intermediates_against_real_handshakes(stack_name, tmp_path):
    """A chain with two intermediate CAs, as `pqlab plan --intermediates 2` builds it, served
    on 127.0.0.1 and verified by the client: the server's flight takes the predicted bytes
    (and, with message events, its Certificate message the predicted size)."""
    from pqlab.tls import runner
    from pqlab.tls.chains import make_chain
    from pqlab.tls.negotiation import Expected

    st = stacks.get(stack_name)
    group = catalog.resolve("X25519", "kem")
    signer = catalog.resolve("ECDSA-P256", "sig")
    ml_dsa_65 = catalog.resolve("ML-DSA-65", "sig")
    chain = make_chain(tmp_path, ml_dsa_65, signer, stack_name, intermediates=(ml_dsa_65,) * 2)
    assert chain.sent_certs == 3 and chain.sent_der_bytes > 10_000
    hs = predict.of_chain(st, group, signer, chain, "127.0.0.1")
    low, high = (predict.predict(h, wire.Link.symmetric(0.01)) for h in hs.extremes())
    tls = runner.Tls(stack=st, groups=(group,), sigalgs=(signer,))
    spec = runner.ServerSpec(tls=tls, chain=chain, listen="127.0.0.1:0", max_connections=2)
    with runner.start_server(spec) as srv:
        port = srv.listening["address"].rsplit(":", 1)[1]
        recs = runner.run_client(
            runner.ClientSpec(
                tls=tls,
                connect=f"127.0.0.1:{port}",
                ca=chain.root,
                servername="127.0.0.1",
                n=2,
                expected=Expected(group=group, sigalg=signer),
            ),
            timeout=120,
        )
    assert len(recs) == 2
    for rec in recs:
        assert rec["peer_chain_der_bytes"] == chain.sent_der
        records = _events(rec, "record")
        if st.message_events:
            assert _msg(rec, "recv", "certificate")["length"] == low.flight.certificate
            flight_end = _msg(rec, "recv", "finished")["offset_end"]
        else:
            sent = [e for e in records if e["dir"] == "sent"]
            finished = next(e for e in sent if e.get("content_type") == "application_data")
            flight_end = max(
                e["offset_end"] for e in records if e["dir"] == "recv" and e["t"] <= finished["t"]
            )
        assert low.flight_bytes <= flight_end <= high.flight_bytes


def test_client_sig_list_from_the_command_line(tmp_path):
    """`--client-sig none,ML-DSA-44,ECDSA-P256` (the shared mutual-TLS options): one cell
    each, the CertificateRequest only with a client certificate."""
    out = tmp_path / "m"
    run_pqlab(
        "plan", "--groups", "X25519", "--server-sig", "ML-DSA-44", "--client-sig",
        "none,ML-DSA-44,ECDSA-P256,ML-DSA-44", "--rtt", "50ms", "--out", out, check=True,
    )  # fmt: skip
    rows = {r["client_sig"]: r for r in _rows(out / "tables/plan_messages.csv")}
    assert set(rows) == {"", "ML-DSA-44", "ECDSA-P256"}
    assert rows[""]["certificate_request_bytes_max"] == "0"
    assert int(rows["ML-DSA-44"]["certificate_request_bytes_min"]) == 15
    assert int(rows["ML-DSA-44"]["client_flight_bytes_min"]) > 3000  # an ML-DSA-44 chain


def test_a_calibration_is_the_machine_beyond_the_model():
    """Connections over the calibration link (5 ms, no rate): half the median TCP connect
    beyond the RTT is each packet's forwarding; the median TTFB beyond the model on that
    link (those crossings included) is the handshake's CPU; the calibrated prediction of
    the same connection is then the measured median."""
    hs = predict.Handshake.of(
        catalog.resolve("X25519", "kem"),
        catalog.resolve("ECDSA-P256", "sig"),
        [700, 500],
        179,
        stacks.get("openssl"),
    )
    cols = {
        "idx": [0, 1, 2],
        "tcp_connect_ns": [5_410_000, 5_400_000, 5_390_000],
        "ttfb_ns": [12_000_000, 12_100_000, 11_900_000],
    }
    cal = calibrate.from_connections(hs, cols, "userspace", 0.005)
    assert cal.per_packet_s == pytest.approx(200e-6)
    # two round trips, SYN, SYN-ACK, ClientHello, flight: four crossings of 0.2 ms, then
    # 1.2 ms of CPU
    assert cal.cpu_s == pytest.approx(12e-3 - 10e-3 - 4 * 200e-6)
    five = wire.Link.symmetric(0.005)
    out = predict.predict(hs, cal.link(five), timing=cal.timing()).wire
    assert out.ttfb_s == pytest.approx(12e-3)
    # on a 10 ms link the same machine adds the same CPU and the same crossings
    ten = wire.Link.symmetric(0.01)
    plain = predict.predict(hs, ten).wire.ttfb_s
    assert predict.predict(hs, cal.link(ten), timing=cal.timing()).wire.ttfb_s == pytest.approx(
        plain + 2e-3
    )


@pytest.mark.net
def test_calibrate_measures_through_the_emulator_and_adds_what_it_measured(tmp_path):
    """--calibrate on the userspace emulator: each configuration's calibration is stored
    and every prediction of it carries exactly that much more than the network's: the
    handshake's CPU and four crossings of the forwarding time to the server's Finished."""
    common = ["--groups", "X25519", "--server-sig", "ECDSA-P256", "--send-root"]
    common += ["--rtt", "10ms", "--sizes", "0", "--no-report"]
    run_pqlab("plan", *common, "--out", tmp_path / "net", check=True, timeout=300)
    run_pqlab(
        "plan", *common, "--calibrate", "--shaper", "userspace", "--out", tmp_path / "cal",
        check=True, timeout=600,
    )  # fmt: skip
    ((shaper, connections, per_packet_us, cpu_ms),) = query(
        tmp_path / "cal", "SELECT shaper, connections, per_packet_us, cpu_ms FROM plan_calibration"
    )
    assert shaper == "userspace" and connections == calibrate.CONNECTIONS
    # the emulator costs each packet something, and less than a millisecond; the handshake
    # (X25519, ECDSA-P256) some CPU, and less than the 5 ms link's round trip
    assert 5 < per_packet_us < 1000 and 0.05 < cpu_ms < 5
    (net,) = _rows(tmp_path / "net" / "tables" / "plan.csv")[:1]
    (row,) = _rows(tmp_path / "cal" / "tables" / "plan.csv")[:1]
    assert float(row["cpu_ms"]) == pytest.approx(cpu_ms)
    extra = cpu_ms + 4 * per_packet_us / 1e3
    assert float(row["ttfb_ms_max"]) - float(net["ttfb_ms_max"]) == pytest.approx(extra, abs=1e-6)
