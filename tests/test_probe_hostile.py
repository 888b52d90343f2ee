"""`pqlab probe` against hostile and broken servers on 127.0.0.1: one that closes after the
ClientHello, one that answers with garbage, one that sends a 100 KB certificate chain, one
that stalls past the timeout, one that speaks TLS 1.2 only. Each gets one clear verdict
line, exit 0, and no traceback; a server that is not there is one line too."""

from __future__ import annotations

import time

import pytest

from conftest import is_root
from pqlab.tls.chains import make_chain
from probe_helpers import (
    close_after_hello,
    garbage,
    probe,
    rows,
    s_server,
    stall,
    tcp_server,
    verdicts,
)
from tls_helpers import free_port


def _one_line(tmp_path, port: int, *args) -> tuple[str, str]:
    """Probe with one configuration; (its verdict, the probe's stdout)."""
    out = tmp_path / "run"
    proc = probe(out, f"127.0.0.1:{port}", "--groups", "X25519MLKEM768", "-n", "3",
                 "--timeout", "2", *args)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith("X25519MLKEM768")]
    assert len(lines) == 1, proc.stdout
    v = verdicts(out)["X25519MLKEM768"]
    assert v in lines[0]
    assert "no configuration completed a handshake" in proc.stdout
    return v, proc.stdout


@pytest.fixture(params=["capture", "no-capture"])
def capture_or_not(request):
    """With the probe's capture (root only) and without it: the same clear line, from the
    client alone."""
    if request.param == "capture" and not is_root():
        pytest.skip("the probe's capture needs root (CAP_NET_RAW)")
    return [] if request.param == "capture" else ["--no-capture"]


def test_a_server_that_closes_after_the_client_hello(tmp_path, capture_or_not):
    with tcp_server(close_after_hello) as port:
        v, _ = _one_line(tmp_path, port, *capture_or_not)
    assert v.startswith("the server closed the connection after the ClientHello"), v
    assert "without an alert" in v and "nothing received" in v


def test_a_server_that_answers_with_garbage(tmp_path, capture_or_not):
    with tcp_server(garbage) as port:
        v, _ = _one_line(tmp_path, port, *capture_or_not)
    assert v.startswith("the server answered with bytes that are not TLS"), v
    if not capture_or_not:  # the capture shows what came back
        assert "'HTTP/1.1 400 Bad'" in v, v


def test_a_server_that_stalls_past_the_timeout(tmp_path, capture_or_not):
    started = time.monotonic()
    with tcp_server(stall) as port:
        v, _ = _one_line(tmp_path, port, *capture_or_not)
    assert v.startswith("timed out after 2 s in the handshake: nothing received after the "), v
    assert time.monotonic() - started < 60


def test_a_server_that_speaks_tls12_only(tmp_path, capture_or_not):
    chain = make_chain(tmp_path / "certs", "ECDSA-P256", "ECDSA-P256")
    with s_server(chain.chain, chain.key, "-tls1_2") as port:
        v, _ = _one_line(tmp_path, port, *capture_or_not)
    assert v.startswith("the server speaks TLS 1.2 or older only"), v
    assert "protocol_version (70)" in v


def test_a_server_that_sends_a_100_kb_chain(tmp_path, capture_or_not):
    # The server certificate, then 14 ML-DSA-87 certificates (about 7.5 KB each) it adds to
    # its chain: a Certificate message of about 105 KB.
    chain = make_chain(tmp_path / "certs", "ML-DSA-87", "ML-DSA-87")
    extra = tmp_path / "extra.pem"
    extra.write_text(chain.root.read_text() * 14)
    with s_server(chain.chain, chain.key, "-cert_chain", str(extra)) as port:
        v, _ = _one_line(tmp_path, port, *capture_or_not)
    assert v.startswith("failed: handshake failed: excessive message size"), v
    row = rows(tmp_path / "run", "SELECT * FROM probe_raw")[0]
    # The capture holds the whole message the client refused to read when the server wrote
    # all of it before the client's reset reached it (on a busy machine it may not have).
    if not capture_or_not and row["certificate_bytes"] is not None:
        assert row["certificate_bytes"] > 100_000
        assert f"the server's Certificate message is {row['certificate_bytes']:,} B" in v
    else:
        assert "after receiving" in v, v
    assert 0 < row["bytes_received"] < 100_000


def test_nothing_listening_is_one_line(tmp_path):
    out = tmp_path / "run"
    proc = probe(out, f"127.0.0.1:{free_port()}", "--groups", "X25519", "-n", "2",
                 "--no-capture")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert verdicts(out)["X25519"].startswith("cannot connect: "), verdicts(out)
    assert "Connection refused" in verdicts(out)["X25519"]
