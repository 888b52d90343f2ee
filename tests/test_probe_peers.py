"""`pqlab probe` against servers no one here wrote, started by the tests on 127.0.0.1: Go's
crypto/tls, Debian's nginx (classical only), `openssl s_server`, and `pqlab serve` on every
stack. For every probe, every completed handshake's message types and sizes equal
tshark's decryption of the probe's own capture with its own key log."""

from __future__ import annotations

import os
import stat

import pytest

from pqlab.tls.chains import make_chain
from probe_helpers import (
    assert_messages_equal_tshark,
    go_server,
    go_server_binary,
    nginx,
    pqlab_serve,
    probe,
    rows,
    s_server,
    verdicts,
)

pytestmark = pytest.mark.root  # the probe's capture needs CAP_NET_RAW


@pytest.fixture(scope="module")
def ecdsa_chain(tmp_path_factory):
    """A P-256 server certificate and its root, the root sent too (Go and nginx serve it)."""
    return make_chain(tmp_path_factory.mktemp("certs"), "ECDSA-P256", "ECDSA-P256", send_root=True)


def test_go_crypto_tls(tmp_path, ecdsa_chain):
    binary = go_server_binary(tmp_path)
    keys = tmp_path / "go.keys"
    groups = "X25519MLKEM768,SecP256r1MLKEM768,X25519"
    with go_server(binary, ecdsa_chain.chain, ecdsa_chain.key, "-groups", groups,
                   "-keylog", str(keys)) as port:  # fmt: skip
        out = tmp_path / "run"
        proc = probe(
            out,
            f"127.0.0.1:{port}",
            "--servername", "localhost", "--ca", ecdsa_chain.root, "-n", "5",
            "--groups", "X25519MLKEM768,SecP256r1MLKEM768,X25519,ML-KEM-768,"
            "X25519MLKEM768+X25519,X25519/X25519MLKEM768",
            "--path", "/20000",
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    v = verdicts(out)
    assert v["X25519MLKEM768"].startswith("accepted X25519MLKEM768 (post-quantum)")
    assert v["SecP256r1MLKEM768"].startswith("accepted SecP256r1MLKEM768 (post-quantum)")
    assert v["ML-KEM-768"].startswith("refused"), v["ML-KEM-768"]
    assert v["X25519/X25519MLKEM768"].startswith("HelloRetryRequest for X25519MLKEM768")
    # The chain: both certificates, their algorithms and sizes, the root sent.
    chain = rows(out, "SELECT DISTINCT position, key_algorithm, signature_algorithm, der_bytes,"
                      " self_signed FROM probe_chain ORDER BY position")  # fmt: skip
    der = [len(p) for p in (ecdsa_chain.server_cert.with_suffix(".der").read_bytes(),
                            (ecdsa_chain.directory / "root.crt.der").read_bytes())]  # fmt: skip
    assert [(c["key_algorithm"], c["der_bytes"], c["self_signed"]) for c in chain] == [
        ("ECDSA-P256", der[0], False),
        ("ECDSA-P256", der[1], True),
    ]
    assert {c["signature_algorithm"] for c in chain} == {"ecdsa-with-SHA256"}
    assert "chain 2 certs" in v["X25519MLKEM768"] and "root sent" in v["X25519MLKEM768"]
    raw = rows(out, "SELECT * FROM probe_raw WHERE outcome = 'accepted'")
    assert all(r["http_status"] == 200 and r["response_bytes"] == 20000 for r in raw)
    assert all(r["ttlb_ms"] > r["ttfb_ms"] > 0 for r in raw)
    assert all(r["session_tickets"] >= 1 for r in raw)  # Go sends tickets
    # The probe's messages equal tshark's, and so do the Go server's own secrets: the key
    # log the server wrote decrypts the same connections.
    n = assert_messages_equal_tshark(out, port)
    assert n == 5 * 5
    assert "post-quantum groups accepted: X25519MLKEM768, SecP256r1MLKEM768" in proc.stdout
    for pcap in (out / "captures").glob("*.keys.log"):
        assert stat.S_IMODE(os.stat(pcap).st_mode) == 0o600


def test_nginx_classical_only(tmp_path, ecdsa_chain):
    with nginx(tmp_path / "nginx", ecdsa_chain.chain, ecdsa_chain.key) as port:
        out = tmp_path / "run"
        proc = probe(
            out,
            f"127.0.0.1:{port}",
            "--servername", "localhost", "--ca", ecdsa_chain.root, "-n", "3",
            "--groups", "X25519MLKEM768,X25519,SecP256r1MLKEM768,ML-KEM-768,"
            "X25519MLKEM768+X25519,X25519MLKEM768/X25519",
            "--path", "/",
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    v = verdicts(out)
    for pq in ("X25519MLKEM768", "SecP256r1MLKEM768", "ML-KEM-768"):
        assert v[pq].startswith("refused") and "handshake_failure" in v[pq], v[pq]
    assert v["X25519"].startswith("accepted X25519;")
    # The two-share ClientHello falls back to X25519 at once; a PQ share alone is answered
    # with a HelloRetryRequest for X25519.
    assert v["X25519MLKEM768+X25519"].startswith("fell back to X25519"), v
    assert v["X25519MLKEM768/X25519"].startswith("HelloRetryRequest for X25519"), v
    assert "fell back to X25519" in v["X25519MLKEM768/X25519"]
    assert "no post-quantum group accepted (classical only: X25519)" in proc.stdout
    hrr = rows(out, "SELECT * FROM probe_raw WHERE config = 'X25519MLKEM768/X25519'")
    assert all(r["hello_retry"] and r["round_trips"] == 3 and r["hello_retry_bytes"] > 0
               for r in hrr)  # fmt: skip
    assert all(r["http_status"] == 200 for r in hrr)
    assert assert_messages_equal_tshark(out, port) == 3 * 3


def test_openssl_s_server(tmp_path):
    chain = make_chain(tmp_path / "certs", "ML-DSA-44", "ML-DSA-44")
    configs = "X25519MLKEM768,X25519,SecP256r1MLKEM768,ML-KEM-768,X25519/X25519MLKEM768"
    with s_server(chain.chain, chain.key) as port:
        out = tmp_path / "run"
        proc = probe(out, f"127.0.0.1:{port}", "--servername", "localhost", "--ca", chain.root,
                     "-n", "2", "--path", "/", "--groups", configs)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    v = verdicts(out)
    # OpenSSL 3.5's server by default: the X25519MLKEM768 hybrid first, then X25519 and the
    # NIST curves; neither SecP256r1MLKEM768 nor ML-KEM-768 alone; and a retry for its
    # preferred hybrid when the client's only share is X25519's.
    assert "signed mldsa44" in v["X25519MLKEM768"]
    assert v["X25519MLKEM768"].startswith("accepted X25519MLKEM768 (post-quantum)")
    assert v["X25519"].startswith("accepted X25519;")
    for config in ("SecP256r1MLKEM768", "ML-KEM-768"):
        assert v[config].startswith("refused"), v[config]
    assert v["X25519/X25519MLKEM768"].startswith("HelloRetryRequest for X25519MLKEM768")
    assert assert_messages_equal_tshark(out, port) == 3 * 2
    # On loopback (64 KiB segments) no flight fills a window: nothing waits for an ACK, and
    # the server's signing between its writes is not taken for such a wait.
    done = rows(out, "SELECT * FROM probe_raw WHERE outcome IN ('accepted', 'hello-retry')")
    assert all(r["ack_waits"] == 0 for r in done)
    assert {(r["outcome"], r["round_trips"]) for r in done} == {("accepted", 2), ("hello-retry", 3)}
    # Told to take them, it takes them.
    groups = "X25519MLKEM768:SecP256r1MLKEM768:MLKEM768:X25519"
    with s_server(chain.chain, chain.key, "-groups", groups) as port:
        out = tmp_path / "run-groups"
        proc = probe(out, f"127.0.0.1:{port}", "--servername", "localhost", "--ca", chain.root,
                     "-n", "1", "--groups", "SecP256r1MLKEM768,ML-KEM-768")  # fmt: skip
    v = verdicts(out)
    assert v["SecP256r1MLKEM768"].startswith("accepted SecP256r1MLKEM768 (post-quantum)")
    assert v["ML-KEM-768"].startswith("accepted ML-KEM-768 (post-quantum)")
    assert assert_messages_equal_tshark(out, port) == 2


def test_the_probe_client_on_every_stack_and_signature(tmp_path):
    """The probe's own client on each stack against OpenSSL's s_server with an ML-DSA-44
    chain; each signature offered alone: the server has no ECDSA certificate."""
    chain = make_chain(tmp_path / "certs", "ML-DSA-44", "ML-DSA-44")
    every = "openssl,rustls,rustls-aws-lc-rs,wolfssl"
    with s_server(chain.chain, chain.key) as port:
        out = tmp_path / "run"
        proc = probe(out, f"127.0.0.1:{port}", "--servername", "localhost", "--ca", chain.root,
                     "-n", "2", "--stack", every, "--groups", "X25519MLKEM768+X25519",
                     "--sig", "ML-DSA-44,ECDSA-P256")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    configs = {(r["stack"], r["sig"]): r for r in rows(out, "SELECT * FROM probe_configs")}
    assert len(configs) == 8
    for stack in every.split(","):
        ok = configs[(stack, "ML-DSA-44")]
        assert ok["verdict"].startswith("accepted X25519MLKEM768 (post-quantum)"), ok
        assert "signed mldsa44" in ok["verdict"]
        assert configs[(stack, "ECDSA-P256")]["outcome"] != "accepted"
    # A stack that can name the scheme it offers is refused; wolfSSL's client cannot leave
    # ML-DSA out of its list, so the server signs with it and the probe's check says so.
    for stack in ("openssl", "rustls", "rustls-aws-lc-rs"):
        assert configs[(stack, "ECDSA-P256")]["outcome"] == "refused"
    raw = rows(out, "SELECT stack, messages_from FROM probe_raw WHERE outcome = 'accepted'")
    assert {r["messages_from"] for r in raw} == {"capture"}
    assert assert_messages_equal_tshark(out, port) == 4 * 2


@pytest.mark.parametrize("stack", ["openssl", "rustls", "rustls-aws-lc-rs", "wolfssl"])
def test_pqlab_serve_on_every_stack(tmp_path, stack):
    sig = "ML-DSA-44"
    with pqlab_serve(tmp_path / "certs", "--stack", stack, "--group", "X25519MLKEM768",
                     "--sig", sig) as (port, root):  # fmt: skip
        out = tmp_path / "run"
        proc = probe(out, f"127.0.0.1:{port}", "--servername", "localhost", "--ca", root,
                     "-n", "2", "--path", "/5000")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    v = verdicts(out)
    assert v["X25519MLKEM768"].startswith("accepted X25519MLKEM768 (post-quantum)"), v
    assert v["X25519MLKEM768+X25519"].startswith("accepted X25519MLKEM768"), v
    assert v["X25519"].startswith("refused"), v  # the server forces its group
    raw = rows(out, "SELECT * FROM probe_raw WHERE outcome = 'accepted'")
    assert all(r["response_bytes"] == 5000 and r["verified"] for r in raw)
    assert assert_messages_equal_tshark(out, port) == 2 * 2
