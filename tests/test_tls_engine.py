"""The engine's TLS certificates, server and client on 127.0.0.1: real handshakes, every
check that must fail does fail, and the records add up."""

from __future__ import annotations

import subprocess

import pytest

from tls_helpers import Server, client, make_chain, openssl_bin, records


@pytest.fixture(scope="module")
def mldsa_chain(tmp_path_factory):
    d = tmp_path_factory.mktemp("rsa-mldsa")
    rec = make_chain(d, "RSA:2048", "ML-DSA-44")
    return d, rec


@pytest.fixture(scope="module")
def rsa_chain(tmp_path_factory):
    d = tmp_path_factory.mktemp("rsa-rsa")
    return d, make_chain(d, "RSA:2048", "RSA:2048")


@pytest.fixture(scope="module")
def ec_chain(tmp_path_factory):
    d = tmp_path_factory.mktemp("ec-ec")
    return d, make_chain(d, "EC:P-256", "EC:P-256")


def test_certs_content_and_sizes(mldsa_chain):
    d, rec = mldsa_chain
    assert rec["root_der_bytes"] == (d / "root.crt.der").stat().st_size
    assert rec["server_cert_der_bytes"] == (d / "server.crt.der").stat().st_size
    assert rec["chain_der_bytes"] == rec["server_cert_der_bytes"]
    assert rec["server_public_key_der_bytes"] == 1334  # ML-DSA-44 SPKI: 1312 + 22
    assert rec["server_cert_signature_bytes"] == 256  # RSA-2048 CA signature
    openssl = openssl_bin()
    ok = subprocess.run(
        [
            openssl,
            "verify",
            "-CAfile",
            str(d / "root.crt.pem"),
            "-purpose",
            "sslserver",
            str(d / "chain.pem"),
        ],
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 0 and "OK" in ok.stdout, ok.stdout + ok.stderr
    text = subprocess.run(
        [openssl, "x509", "-in", str(d / "server.crt.pem"), "-noout", "-text"],
        capture_output=True,
        text=True,
    ).stdout
    for needle in (
        "DNS:server.pqlab.test",
        "IP Address:127.0.0.1",
        "TLS Web Server Authentication",
        "Digital Signature",
        "CA:FALSE",
        "Authority Key Identifier",
        "ML-DSA-44",
    ):
        assert needle in text, needle


def test_certs_bad_spec(tmp_path):
    from tls_helpers import engine_bin

    proc = subprocess.run(
        [
            engine_bin(),
            "tls",
            "certs",
            "--ca-alg",
            "NOPE-1",
            "--server-alg",
            "RSA:2048",
            "--out-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2  # usage
    assert records(proc.stdout)[-1]["type"] == "error"
    assert records(proc.stdout)[-1]["kind"] == "usage"
    assert "NOPE-1" in records(proc.stdout)[-1]["message"]


def test_tls13_handshake_records(mldsa_chain):
    d, rec = mldsa_chain
    with Server(d, "--groups", "X25519MLKEM768", max_connections=3) as srv:
        out = client(
            srv.port,
            d / "root.crt.pem",
            "--groups",
            "X25519MLKEM768",
            "--sigalgs",
            "mldsa44",
            "-n",
            "2",
            "--warmup",
            "1",
            "--request-bytes",
            "50000",
        )
        server_recs = srv.finish()
    conns = [r for r in records(out.stdout) if r["type"] == "connection"]
    assert [c["warmup"] for c in conns] == [True, False, False]
    srv_conns = [r for r in server_recs if r["type"] == "connection"]
    assert len(srv_conns) == 3
    for c, s in zip(conns, srv_conns, strict=True):
        neg = c["negotiated"]
        assert (neg["version"], neg["group"], neg["sigalg"]) == (
            "TLSv1.3",
            "X25519MLKEM768",
            "mldsa44",
        )
        assert s["negotiated"]["sigalg"] == "mldsa44"
        assert c["verified"] and c["app_bytes_received"] == 50000
        assert (
            c["t_connect_start"]
            <= c["t_tcp_connected"]
            <= c["t_handshake_done"]
            <= c["t_first_byte"]
            <= c["t_last_byte"]
        )
        # Both ends saw the same bytes.
        assert c["bytes_received"] == s["bytes_sent"] == c["record_bytes_received"]
        assert c["bytes_sent"] == s["bytes_received"]
        assert c["peer_chain_der_bytes"] == [rec["server_cert_der_bytes"]]
        msgs = [(e["dir"], e["msg"]) for e in c["events"] if e["ev"] == "handshake"]
        assert msgs == [
            ("sent", "client_hello"),
            ("recv", "server_hello"),
            ("recv", "encrypted_extensions"),
            ("recv", "certificate"),
            ("recv", "certificate_verify"),
            ("recv", "finished"),
            ("sent", "finished"),
        ]
        smsgs = [(e["dir"], e["msg"]) for e in s["events"] if e["ev"] == "handshake"]
        assert smsgs == [("recv" if d_ == "sent" else "sent", m) for d_, m in msgs]
        # Offsets: the server's sent handshake messages end where the client's received ones do.
        c_off = [
            e["offset_end"] for e in c["events"] if e["ev"] == "handshake" and e["dir"] == "recv"
        ]
        s_off = [
            e["offset_end"] for e in s["events"] if e["ev"] == "handshake" and e["dir"] == "sent"
        ]
        assert c_off == s_off
        # Syscalls account for every byte, and the server's flight went through OpenSSL's
        # 4096-byte handshake write buffer (this flight is ~5.8 KB).
        s_writes = [e["bytes"] for e in s["events"] if e["ev"] == "io" and e["dir"] == "sent"]
        assert sum(s_writes) == s["bytes_sent"]
        assert s_writes[0] == 4096
        cert = next(e for e in c["events"] if e["ev"] == "handshake" and e["msg"] == "certificate")
        assert cert["length"] == 4 + 1 + 3 + 3 + rec["server_cert_der_bytes"] + 2
        assert c["tcp_info"]["total_retrans"] == 0 and c["tcp_info"]["snd_mss"] > 0


def test_wrong_group_is_an_error(ec_chain):
    d, _ = ec_chain
    with Server(d, "--groups", "P-256", max_connections=1) as srv:
        out = client(
            srv.port,
            d / "root.crt.pem",
            "--groups",
            "X25519:P-256",
            "--expect-group",
            "X25519",
            check=False,
        )
    assert out.returncode == 5  # check
    msg = records(out.stdout)[-1]
    assert msg["type"] == "error" and msg["kind"] == "check"
    assert "negotiated group" in msg["message"]


def test_wrong_signature_is_an_error(rsa_chain):
    d, _ = rsa_chain
    with Server(d, max_connections=1) as srv:
        out = client(
            srv.port,
            d / "root.crt.pem",
            "--sigalgs",
            "rsa_pss_rsae_sha256:rsa_pss_rsae_sha384",
            "--expect-sigalg",
            "rsa_pss_rsae_sha384",
            check=False,
        )
    assert out.returncode == 5  # check
    assert "signed with" in records(out.stdout)[-1]["message"]


def test_untrusted_chain_is_an_error(rsa_chain, ec_chain):
    d, _ = rsa_chain
    other, _ = ec_chain
    with Server(d, max_connections=1) as srv:
        out = client(srv.port, other / "root.crt.pem", check=False)
    assert out.returncode == 5  # check
    assert records(out.stdout)[-1]["kind"] == "check"
    assert "verif" in records(out.stdout)[-1]["message"]


def test_wrong_hostname_is_an_error(rsa_chain):
    d, _ = rsa_chain
    with Server(d, max_connections=1) as srv:
        from tls_helpers import engine_bin

        out = subprocess.run(
            [
                engine_bin(),
                "tls",
                "client",
                "--connect",
                f"127.0.0.1:{srv.port}",
                "--ca",
                str(d / "root.crt.pem"),
                "--servername",
                "evil.example",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert out.returncode == 5  # check
    assert "verif" in records(out.stdout)[-1]["message"]


@pytest.mark.parametrize(
    "server_args,client_args,expect",
    [
        (
            ["--tls-version", "1.2", "--ciphers", "AES128-GCM-SHA256"],
            ["--tls-version", "1.2", "--ciphers", "AES128-GCM-SHA256"],
            ("AES128-GCM-SHA256", None),
        ),
        (
            ["--tls-version", "1.2", "--dh-bits", "1024", "--ciphers", "DHE-RSA-AES128-GCM-SHA256"],
            [
                "--tls-version",
                "1.2",
                "--ciphers",
                "DHE-RSA-AES128-GCM-SHA256",
                "--security-level",
                "1",
            ],
            ("DHE-RSA-AES128-GCM-SHA256", 1024),
        ),
        (
            ["--tls-version", "1.2", "--dh-bits", "2048", "--ciphers", "DHE-RSA-AES128-GCM-SHA256"],
            ["--tls-version", "1.2", "--ciphers", "DHE-RSA-AES128-GCM-SHA256"],
            ("DHE-RSA-AES128-GCM-SHA256", 2048),
        ),
        (
            [
                "--tls-version",
                "1.2",
                "--groups",
                "X448",
                "--ciphers",
                "ECDHE-RSA-AES128-GCM-SHA256",
            ],
            [
                "--tls-version",
                "1.2",
                "--groups",
                "X448",
                "--ciphers",
                "ECDHE-RSA-AES128-GCM-SHA256",
            ],
            ("ECDHE-RSA-AES128-GCM-SHA256", 448),
        ),
    ],
)
def test_tls12(rsa_chain, server_args, client_args, expect):
    d, _ = rsa_chain
    with Server(d, *server_args, max_connections=1) as srv:
        out = client(srv.port, d / "root.crt.pem", *client_args, "--request-bytes", "1000")
        s = [r for r in srv.finish() if r["type"] == "connection"][0]
    c = [r for r in records(out.stdout) if r["type"] == "connection"][0]
    cipher, bits = expect
    assert c["negotiated"]["version"] == "TLSv1.2"
    assert c["negotiated"]["cipher"] == cipher == s["negotiated"]["cipher"]
    tmp = c["negotiated"]["peer_tmp_key"]
    assert (tmp["bits"] if tmp else None) == bits
    if bits == 1024:
        assert s["security_level"] == 1 and c["security_level"] == 1
    assert c["app_bytes_received"] == 1000


def test_dhe1024_refused_at_default_level(rsa_chain):
    d, _ = rsa_chain
    with Server(
        d,
        "--tls-version",
        "1.2",
        "--dh-bits",
        "1024",
        "--ciphers",
        "DHE-RSA-AES128-GCM-SHA256",
        max_connections=1,
    ) as srv:
        out = client(
            srv.port,
            d / "root.crt.pem",
            "--tls-version",
            "1.2",
            "--ciphers",
            "DHE-RSA-AES128-GCM-SHA256",
            check=False,
        )
    # The client's own libssl refuses the server's group: a library refusal, exit 3.
    err = records(out.stdout)[-1]
    assert out.returncode == 3 and err["kind"] == "library"
    assert "dh key too small" in err["message"]


def test_port_in_use(rsa_chain):
    d, _ = rsa_chain
    with Server(d) as srv:
        from tls_helpers import engine_bin

        out = subprocess.run(
            [
                engine_bin(),
                "tls",
                "server",
                "--listen",
                f"127.0.0.1:{srv.port}",
                "--cert-chain",
                str(d / "chain.pem"),
                "--key",
                str(d / "server.key.pem"),
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert out.returncode == 6  # io
    assert "cannot listen" in records(out.stdout)[-1]["message"]


def test_keylog_for_wireshark(ec_chain, tmp_path):
    d, _ = ec_chain
    keylog = tmp_path / "keys.log"
    with Server(d, "--keylog", str(keylog), max_connections=2) as srv:
        client(srv.port, d / "root.crt.pem", "-n", "2", "--events", "off")
        srv.finish()
    lines = keylog.read_text().splitlines()
    labels = {line.split()[0] for line in lines}
    assert {
        "CLIENT_HANDSHAKE_TRAFFIC_SECRET",
        "SERVER_HANDSHAKE_TRAFFIC_SECRET",
        "CLIENT_TRAFFIC_SECRET_0",
        "SERVER_TRAFFIC_SECRET_0",
    } <= labels
    # One set per connection: two distinct client randoms.
    assert len({line.split()[1] for line in lines}) == 2


@pytest.mark.parametrize("version", ["1.3", "1.2"])
def test_nist_curve_names_are_checked_as_aliases(ec_chain, version):
    # OpenSSL reports "secp384r1" for a group configured as "P-384": that is a match. In
    # TLS 1.2 an ECDSA P-256 certificate also needs P-256 among the client's groups.
    d, _ = ec_chain
    extra = (
        ["--tls-version", "1.2", "--ciphers", "ECDHE-ECDSA-AES128-GCM-SHA256"]
        if version == "1.2"
        else []
    )
    with Server(d, "--groups", "P-384", *extra, max_connections=1) as srv:
        out = client(
            srv.port,
            d / "root.crt.pem",
            "--groups",
            "P-384:P-256",
            "--expect-group",
            "P-384",
            *extra,
        )
    c = [r for r in records(out.stdout) if r["type"] == "connection"][0]
    assert c["negotiated"]["group"] == "secp384r1"
    assert c["negotiated"]["peer_tmp_key"] is None or c["negotiated"]["peer_tmp_key"]["bits"] == 384
