"""Hostile and broken TLS peers on 127.0.0.1, against the real engine on every stack:

- slow readers (ask for a large response, then read a kilobyte every few seconds) cannot
  lock `pqlab serve` out: a full server evicts its slowest response and a good client gets
  through; a response has a total deadline;
- a server that trickles its ServerHello a byte a second, or stalls after the handshake,
  cannot hold `pqlab connect` or `pqlab probe` past `--timeout`: the connection's whole life
  is bounded, the probe still writes its row ("timed out after N s in <phase>");
- a server that is not TLS, or breaks TLS, is a misbehaving peer (exit 7), not a library
  failure (exit 3);
- the probe reports the chain a server sent as it crossed the wire, on every stack, even
  when the client stack keeps only part of it (wolfSSL keeps 9 certificates).

Every server here is bounded in time and stopped by the test that started it."""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import struct
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import is_root, run_pqlab
from pqlab.tls.chains import make_chain
from probe_helpers import probe, rows, s_server, say_nothing, tcp_server, verdicts
from test_robustness import Serve, one_error_line
from tls_helpers import free_port, tshark_fields

STACKS = ("openssl", "rustls", "wolfssl")
# The start of a real ServerHello record (handshake, TLS 1.2 legacy version, 122 bytes).
SERVER_HELLO = bytes.fromhex("160303007a020000760303") + bytes(range(32)) + b"\x20" + bytes(32)


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    return make_chain(tmp_path_factory.mktemp("certs"), "ECDSA-P256", "ECDSA-P256")


def trickle(conn, stop):
    """Read the ClientHello, then send a ServerHello's start a byte a second."""
    conn.recv(65536)
    for b in SERVER_HELLO:
        conn.sendall(bytes([b]))
        if stop.wait(1):
            return


def stall_after_handshake(chain):
    """A TLS server (Python's ssl) that completes the handshake, reads the request and then
    says nothing until the client goes."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(chain.chain, chain.key)

    def handle(conn, stop):
        with ctx.wrap_socket(conn, server_side=True) as tls:
            say_nothing(tls, stop)

    return handle


def connect(
    chain, port: int, *args, timeout: float = 60
) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    proc = run_pqlab("connect", f"127.0.0.1:{port}", "--ca", chain.root, "--servername",
                     "localhost", *args, timeout=timeout)  # fmt: skip
    return proc, time.monotonic() - t0


# --- slow readers against `pqlab serve` -------------------------------------------------------


class SlowReader:
    """A TLS client that asks `pqlab serve` for 100 MB and then reads a kilobyte every two
    seconds, with a small receive buffer (as a slow-read attacker would)."""

    def __init__(self, srv: Serve, stop: threading.Event):
        raw = socket.socket()
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
        raw.settimeout(30)
        raw.connect(("127.0.0.1", srv.port))
        self.tls = srv.context().wrap_socket(raw)
        self.tls.sendall(b"GET 100000000\n")
        self.ended = threading.Event()
        self.thread = threading.Thread(target=self._read, args=(stop,), daemon=True)
        self.thread.start()

    def _read(self, stop: threading.Event) -> None:
        try:
            while not stop.is_set() and self.tls.recv(1024):
                stop.wait(2)
        except OSError:
            pass
        self.ended.set()

    def close(self) -> None:
        self.thread.join(timeout=10)
        with contextlib.suppress(OSError):
            self.tls.close()


def test_slow_readers_cannot_lock_out_serve(tmp_path):
    """64 slow readers hold every worker of `pqlab serve` (64 by default); once their rates
    are known (two samples of 5 s), a good client evicts the slowest and is served at once."""
    srv = Serve(tmp_path)
    stop = threading.Event()
    readers: list[SlowReader] = []
    try:
        pid = srv.engine_pid()
        readers = [SlowReader(srv, stop) for _ in range(64)]
        time.sleep(12)
        assert not any(r.ended.is_set() for r in readers), "a slow reader ended early"
        root = next(srv.cert_dir.rglob("root.crt.pem"))
        started = time.monotonic()
        proc = run_pqlab("connect", f"127.0.0.1:{srv.port}", "--group", "X25519", "--ca", root,
                         "--servername", "localhost", "--request-bytes", "1MiB", "--timeout",
                         "20", timeout=60)  # fmt: skip
        took = time.monotonic() - started
        threads = len(list(Path(f"/proc/{pid}/task").iterdir()))
        print(f"good client after 64 slow readers: {took:.2f} s, engine threads {threads}")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "last byte" in proc.stdout
        assert took < 20
        assert threads <= 2 * 64 + 3, f"{threads} threads"
    finally:
        stop.set()
        for r in readers:
            r.close()
        srv.stop()
    evicted = [line for line in srv.lines if "slowest response" in line]
    assert evicted, "".join(srv.lines[-20:])
    assert "under --min-response-rate 16384" in evicted[0]


def server_said(srv: Serve, needle: str, timeout: float) -> bool:
    """Whether `pqlab serve` printed a line holding `needle` within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(needle in line for line in srv.lines):
            return True
        time.sleep(0.1)
    return False


def test_a_response_has_a_total_deadline(tmp_path):
    """A slow reader of a server that is not full is cut off at --response-timeout (the
    reader itself sees the end only once it has read what its buffers hold)."""
    srv = Serve(tmp_path, "--response-timeout", "2")
    stop = threading.Event()
    reader = None
    try:
        started = time.monotonic()
        reader = SlowReader(srv, stop)
        assert server_said(srv, "the response was not complete after 2 s", 15), srv.lines
        took = time.monotonic() - started
        print(f"slow reader cut off after {took:.2f} s (--response-timeout 2)")
        assert 1.5 < took < 10
    finally:
        stop.set()
        if reader is not None:
            reader.close()
        srv.stop()


def test_serve_refuses_bad_response_limits(tmp_path):
    for flag, value in (("--response-timeout", "0"), ("--min-response-rate", "fast")):
        proc = run_pqlab("serve", "--port", str(free_port()), flag, value, timeout=60)
        assert value in one_error_line(proc)


# --- servers that trickle or stall: --timeout bounds the whole connection -------------------


@pytest.mark.parametrize("stack", STACKS)
def test_connect_to_a_trickling_server_times_out_in_its_handshake(chain, stack):
    with tcp_server(trickle) as port:
        proc, took = connect(chain, port, "--stack", stack, "--timeout", "3")
    line = one_error_line(proc, 6)
    assert "timed out after 3 s in the handshake (--timeout 3)" in line, line
    assert took < 15, f"{took:.1f} s"


@pytest.mark.parametrize("stack", STACKS)
def test_connect_to_a_server_that_stalls_after_the_handshake(chain, stack):
    with tcp_server(stall_after_handshake(chain)) as port:
        proc, took = connect(chain, port, "--stack", stack, "--group", "X25519",
                             "--request-bytes", "1000", "--timeout", "3")  # fmt: skip
    line = one_error_line(proc, 6)
    assert "timed out after 3 s in the response" in line, line
    assert took < 15, f"{took:.1f} s"


@pytest.fixture(params=["capture", "no-capture"])
def capture_or_not(request):
    """With the probe's capture (root only) and without it."""
    if request.param == "capture" and not is_root():
        pytest.skip("the probe's capture needs root (CAP_NET_RAW)")
    return [] if request.param == "capture" else ["--no-capture"]


def test_probe_of_a_trickling_server_writes_its_rows(tmp_path, capture_or_not):
    """`probe --timeout 3 -n 1` on three stacks: each configuration ends after 3 s with its
    row and verdict, not after the server's 122 seconds."""
    out = tmp_path / "run"
    started = time.monotonic()
    with tcp_server(trickle) as port:
        proc = probe(out, f"127.0.0.1:{port}", "--groups", "X25519", "-n", "1", "--timeout",
                     "3", "--stack", ",".join(STACKS), *capture_or_not)  # fmt: skip
    took = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr
    assert took < 60, f"{took:.1f} s"
    got = rows(out, "SELECT stack, outcome, failed_in FROM probe_raw ORDER BY stack")
    assert [(r["stack"], r["outcome"], r["failed_in"]) for r in got] == [
        (s, "timeout", "handshake") for s in sorted(STACKS)
    ]
    for line in (r["verdict"] for r in rows(out, "SELECT verdict FROM probe_configs")):
        assert line.startswith("timed out after 3 s in the handshake: "), line


def test_probe_of_a_server_that_stalls_after_the_handshake(tmp_path, chain):
    out = tmp_path / "run"
    with tcp_server(stall_after_handshake(chain)) as port:
        proc = probe(out, f"https://127.0.0.1:{port}/", "--groups", "X25519", "-n", "1",
                     "--timeout", "3", "--ca", chain.root, "--servername", "localhost",
                     "--stack", ",".join(STACKS), "--no-capture")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    got = rows(out, "SELECT stack, outcome, failed_in, handshake_ms FROM probe_raw")
    assert {r["stack"] for r in got} == set(STACKS)
    for r in got:
        assert (r["outcome"], r["failed_in"]) == ("timeout", "response"), r
    for line in verdicts(out).values():
        assert line.startswith("timed out after 3 s in the response: "), line


# --- misbehaving peers: exit 7 --------------------------------------------------------------


def reply_with(data: bytes | None):
    """Read the ClientHello, then send `data` (None: reset the connection)."""

    def handle(conn, stop):
        conn.recv(65536)
        if data is None:
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            return
        conn.sendall(data)
        stop.wait(0.5)

    return handle


MISBEHAVING = {
    "plain HTTP": b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n",
    "random bytes": os.urandom(2048),
    "a malformed ServerHello": bytes.fromhex("1603030010") + b"\x02\x00\x00\x0c" + b"\xff" * 12,
    "a Certificate first": bytes.fromhex("16030300040b000000"),
    "a record over 16 KiB": bytes.fromhex("160303ffff") + bytes(100),
    "a fatal alert": bytes([21, 3, 3, 0, 2, 2, 40]),
    "a reset": None,
    "a close": b"",
}


@pytest.mark.parametrize("stack", STACKS)
def test_connect_to_a_misbehaving_peer_exits_7(chain, stack):
    for what, data in MISBEHAVING.items():
        with tcp_server(reply_with(data), connections=1) as port:
            proc, _ = connect(chain, port, "--stack", stack, "--timeout", "10")
        assert proc.returncode == 7, f"{what}: exit {proc.returncode}: {proc.stderr}"
        one_error_line(proc, 7)


# --- the chain as it crossed the wire ---------------------------------------------------------


def tshark_certificate_lengths(pcap: Path, keylog: Path, port: int) -> list[list[int]]:
    """Per server Certificate message tshark decrypts, its certificates' DER sizes (with a
    dissection tree deep enough for 100 certificates: tshark stops at 256 levels; the
    server's `port` decoded as TLS, whatever protocol tshark gives the client's)."""
    rows_ = tshark_fields(
        pcap,
        ["tls.handshake.certificate_length"],
        keylog=keylog,
        port=port,
        options=("gui.max_tree_depth:4096",),
        display_filter="tls.handshake.type == 11",
    )
    return [[int(n) for n in row[0].split(",")] for row in rows_ if row[0]]


@pytest.fixture(scope="module")
def hundred_certificates(tmp_path_factory):
    """`openssl s_server` sending its certificate and 99 more (its root again and again):
    a Certificate message of 100 certificates; yields its port."""
    d = tmp_path_factory.mktemp("long")
    c = make_chain(d / "certs", "ECDSA-P256", "ECDSA-P256")
    extra = d / "extra.pem"
    extra.write_text(c.root.read_text() * 99)
    with s_server(c.chain, c.key, "-cert_chain", str(extra)) as port:
        yield port, c


def test_the_probe_reports_the_chain_on_the_wire_on_every_stack(tmp_path, hundred_certificates):
    if not is_root():
        pytest.skip("the probe's capture needs root (CAP_NET_RAW)")
    port, _ = hundred_certificates
    out = tmp_path / "run"
    proc = probe(out, f"127.0.0.1:{port}", "--groups", "X25519", "-n", "1",
                 "--stack", ",".join(STACKS))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    raw = {r["stack"]: r for r in rows(out, "SELECT * FROM probe_raw")}
    assert set(raw) == set(STACKS)
    chains = rows(out, "SELECT stack, position, der_bytes, source FROM probe_chain "
                       "ORDER BY stack, position")  # fmt: skip
    for stack, r in raw.items():
        sizes = [x["der_bytes"] for x in chains if x["stack"] == stack]
        assert len(sizes) == 100 and r["chain_certs"] == 100, (stack, len(sizes))
        assert {x["source"] for x in chains if x["stack"] == stack} == {"capture"}
        assert r["chain_from"] == "capture" and r["chain_der_bytes"] == sum(sizes)
        # The Certificate message: its header, context and list length, then per
        # certificate a 3-byte length and 2 bytes of (empty) extensions.
        assert r["certificate_bytes"] == 4 + 1 + 3 + sum(n + 5 for n in sizes), stack
        # tshark, reading the same capture with the same key log, sees the same sizes.
        pcap = next((out / "captures").glob(f"{stack}_*.pcap"))
        assert tshark_certificate_lengths(pcap, pcap.with_suffix(".keys.log"), port) == [sizes]
        assert f"chain 100 certs {sum(sizes):,} B" in verdicts_by_stack(out)[stack]
    assert (raw["wolfssl"]["stack_chain_certs"], raw["wolfssl"]["stack_chain_truncated"]) == (
        9,
        True,
    )
    assert raw["openssl"]["stack_chain_certs"] == raw["rustls"]["stack_chain_certs"] == 100
    kept = rows(out, "SELECT subject, message FROM warnings WHERE code = 'probe-chain-kept'")
    assert len(kept) == 1 and "(wolfssl)" in kept[0]["subject"], kept
    assert "kept 9 of the 100 certificates" in kept[0]["message"]
    assert not rows(out, "SELECT * FROM warnings WHERE code = 'probe-sources-disagree'")


def test_without_a_capture_a_truncated_chain_is_said_to_be(tmp_path, hundred_certificates):
    port, _ = hundred_certificates
    out = tmp_path / "run"
    proc = probe(out, f"127.0.0.1:{port}", "--groups", "X25519", "-n", "1", "--stack",
                 "wolfssl", "--no-capture")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    r = rows(out, "SELECT * FROM probe_raw")[0]
    assert (r["chain_from"], r["chain_certs"], r["stack_chain_truncated"]) == ("client", 9, True)
    assert "the first of a longer chain (wolfssl kept no more)" in verdicts(out)["X25519"]
    assert rows(out, "SELECT * FROM warnings WHERE code = 'probe-chain-kept'")


def verdicts_by_stack(out: Path) -> dict[str, str]:
    return {r["stack"]: r["verdict"] for r in rows(out, "SELECT * FROM probe_configs")}
