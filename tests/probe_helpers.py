"""Helpers for the probe's tests: servers pqlab did not write (Go's crypto/tls, Debian's
nginx, `openssl s_server`), `pqlab serve`, and small hostile TCP servers, each started on
127.0.0.1 and stopped by pid or by the test; the probe's rows read back; and tshark's decryption of the probe's own captures, the
independent source every probed handshake's message types and sizes must equal."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

import duckdb
import pytest

from conftest import pqlab_env, run_pqlab
from pqlab.experiments.probe.run import capture_stem
from tls_helpers import free_port, openssl_bin, tshark_fields

PEERS = Path(__file__).resolve().parent / "peers"
GO_MIN = (1, 24)  # crypto/tls has X25519MLKEM768 from Go 1.24 on


def _stop(proc: subprocess.Popen) -> None:
    """Stop a server this test started (its own process group), by its pid."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def _wait_listening(port: int, proc: subprocess.Popen, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"{what} exited: {proc.stderr.read() if proc.stderr else ''}")
        with socket.socket() as s:
            s.settimeout(0.5)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError(f"{what} did not listen on {port} within {timeout} s")


# --- Go's crypto/tls -------------------------------------------------------------------------


def go_server_binary(tmp_dir: Path) -> Path:
    """tests/peers/goserver.go built with the Go toolchain on this machine (skips when
    there is none, or one older than GO_MIN)."""
    go = shutil.which("go")
    if go is None:
        pytest.skip("no Go toolchain (go) on this machine")
    out = subprocess.run([go, "version"], capture_output=True, text=True, timeout=60).stdout
    m = re.search(r"go(\d+)\.(\d+)", out)
    if not m or (int(m.group(1)), int(m.group(2))) < GO_MIN:
        pytest.skip(f"Go {'.'.join(map(str, GO_MIN))} or newer needed, found: {out.strip()}")
    binary = tmp_dir / "goserver"
    env = {**os.environ, "GOTOOLCHAIN": "local", "GOCACHE": str(tmp_dir / "gocache")}
    env.setdefault("HOME", str(tmp_dir))
    proc = subprocess.run(
        [go, "build", "-o", str(binary), str(PEERS / "goserver.go")],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    return binary


@contextlib.contextmanager
def go_server(binary: Path, chain: Path, key: Path, *args: str):
    """The Go server; yields its port."""
    proc = subprocess.Popen(
        [str(binary), "-cert", str(chain), "-key", str(key), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        line = proc.stdout.readline()
        m = re.match(r"listening \S+:(\d+)", line)
        assert m, f"Go server did not start: {line} {proc.stderr.read() if not line else ''}"
        yield int(m.group(1))
    finally:
        _stop(proc)


# --- nginx ------------------------------------------------------------------------------------

NGINX_CONF = """
worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {prefix}/tmp;
    proxy_temp_path {prefix}/tmp;
    fastcgi_temp_path {prefix}/tmp;
    uwsgi_temp_path {prefix}/tmp;
    scgi_temp_path {prefix}/tmp;
    server {{
        listen 127.0.0.1:{port} ssl;
        ssl_certificate {chain};
        ssl_certificate_key {key};
        ssl_protocols TLSv1.2 TLSv1.3;
        location / {{ return 200 "hello from nginx\\n"; }}
    }}
}}
"""


@contextlib.contextmanager
def nginx(prefix: Path, chain: Path, key: Path):
    """Debian's nginx with a configuration of its own on a free port (never the system
    service); yields the port."""
    binary = Path("/usr/sbin/nginx")
    if not binary.exists():
        pytest.skip("nginx is not installed (scripts/bootstrap.sh installs it)")
    prefix.mkdir(parents=True, exist_ok=True)
    (prefix / "tmp").mkdir(exist_ok=True)
    port = free_port()
    conf = prefix / "nginx.conf"
    conf.write_text(NGINX_CONF.format(prefix=prefix, port=port, chain=chain, key=key))
    proc = subprocess.Popen(
        [str(binary), "-p", str(prefix), "-c", str(conf), "-g", "daemon off;"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        _wait_listening(port, proc, "nginx")
        yield port
    finally:
        _stop(proc)


# --- openssl s_server and pqlab serve --------------------------------------------------------


@contextlib.contextmanager
def tcp_server(handle, connections: int = 8):
    """A server on 127.0.0.1 running `handle(conn, stop)` for each of up to `connections`
    connections, each in its own thread; yields its port. Every wait is bounded, and the
    threads end when the test does."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.settimeout(0.5)
    stop = threading.Event()
    workers: list[threading.Thread] = []

    def one(conn):
        with conn:
            conn.settimeout(30)
            with contextlib.suppress(OSError):
                handle(conn, stop)

    def accept():
        while not stop.is_set() and len(workers) < connections:
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            t = threading.Thread(target=one, args=(conn,), daemon=True)
            workers.append(t)
            t.start()

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        listener.close()
        t.join(timeout=5)
        for w in workers:
            w.join(timeout=5)


def say_nothing(conn, stop: threading.Event, at_most: float = 30) -> None:
    """Read and drop what the client sends, answering nothing, until it goes (recv returns
    b""), the test ends (`stop`) or `at_most` seconds pass."""
    deadline = time.monotonic() + at_most
    conn.settimeout(0.2)
    while not stop.is_set() and time.monotonic() < deadline:
        try:
            if not conn.recv(65536):
                return
        except TimeoutError:
            continue


# Hostile servers' handlers for `tcp_server`.
def close_after_hello(conn, stop):
    conn.recv(65536)


def garbage(conn, stop):
    conn.recv(65536)
    conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")


def stall(conn, stop):
    conn.recv(65536)
    say_nothing(conn, stop)


@contextlib.contextmanager
def s_server(chain: Path, key: Path, *args: str):
    """`openssl s_server -www` of the engine's OpenSSL source; yields its port."""
    port = free_port()
    proc = subprocess.Popen(
        [openssl_bin(), "s_server", "-accept", f"127.0.0.1:{port}", "-cert", str(chain),
         "-key", str(key), "-www", "-quiet", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        _wait_listening(port, proc, "openssl s_server")
        yield port
    finally:
        _stop(proc)


@contextlib.contextmanager
def pqlab_serve(cert_dir: Path, *args: str, listen: str = "127.0.0.1", netns: str | None = None):
    """`pqlab serve` (optionally inside a network namespace); yields (port, root PEM)."""
    port = free_port() if netns is None else 4433
    argv = [sys.executable, "-m", "pqlab", "serve", "--listen", listen, "--port", str(port),
            "--cert-dir", str(cert_dir), *args]  # fmt: skip
    if netns is not None:
        argv = ["ip", "netns", "exec", netns, *argv]
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=pqlab_env(),
        start_new_session=True,
    )
    try:
        lines = []
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                raise AssertionError(f"pqlab serve exited: {proc.stderr.read()}")
            lines.append(line)
            if line.startswith("Ctrl-C"):
                break
        root = re.search(r"root certificate: (\S+)", "".join(lines)).group(1)
        yield port, Path(root)
    finally:
        _stop(proc)


# --- the probe and its results ------------------------------------------------------------


def probe(out: Path, target: str, *args, timeout: float = 900) -> subprocess.CompletedProcess:
    """`pqlab probe` as a user runs it; its output must hold no traceback."""
    proc = run_pqlab("probe", target, "--out", out, *args, timeout=timeout)
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    return proc


def rows(out: Path, sql: str, params=()) -> list[dict]:
    con = duckdb.connect(str(out / "results.duckdb"), read_only=True)
    try:
        cur = con.execute(sql, list(params))
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
    finally:
        con.close()


def verdicts(out: Path) -> dict[str, str]:
    """config -> its verdict line."""
    return {r["config"]: r["verdict"] for r in rows(out, "SELECT * FROM probe_configs")}


def tshark_messages(pcap: Path, keylog: Path, server_port: int) -> dict:
    """client port -> sender -> [(handshake type, length incl. the 4-byte header)], as
    tshark decrypts the capture with the key log (the server's port decoded as TLS: tshark
    reads a client port it knows for another protocol, 57000 for IRC, as that one)."""
    rows = tshark_fields(
        pcap,
        ["tcp.srcport", "tcp.dstport", "tls.handshake.type", "tls.handshake.length"],
        keylog=keylog,
        port=server_port,
        display_filter="tls.handshake",
    )
    out: dict = defaultdict(lambda: defaultdict(list))
    for src, dst, types, lengths in rows:
        sender = "server" if int(src) == server_port else "client"
        port = int(dst) if sender == "server" else int(src)
        for t, n in zip(types.split(","), lengths.split(","), strict=True):
            out[port][sender].append((int(t), int(n) + 4))
    return out


def probe_messages(out: Path) -> dict:
    """(pcap stem, client port) -> sender -> [(type, length)] from the probe's own table."""
    got: dict = defaultdict(lambda: defaultdict(list))
    for r in rows(
        out,
        """SELECT r.stack, r.config, r.sig, r.client_port, m.sender, m.type_code, m.length_bytes
           FROM probe_messages m JOIN probe_raw r ON r.cell_id = m.cell_id AND r.idx = m.idx
           WHERE m.source = 'capture' ORDER BY r.cell_id, m.idx, m.seq""",
    ):
        key = (capture_stem(r["stack"], r["config"], r["sig"]), r["client_port"])
        got[key][r["sender"]].append((r["type_code"], r["length_bytes"]))
    return got


def assert_messages_equal_tshark(out: Path, server_port: int) -> int:
    """Every probed connection's messages (type and size, per sender, in order) equal
    tshark's decryption of the probe's capture with the probe's key log; returns how many
    connections were compared."""
    ours = probe_messages(out)
    theirs: dict = {}
    for pcap in sorted((out / "captures").glob("*.pcap")):
        found = tshark_messages(pcap, pcap.with_suffix(".keys.log"), server_port)
        theirs.update({(pcap.stem, port): m for port, m in found.items()})
    completed = [
        (capture_stem(r["stack"], r["config"], r["sig"]), r["client_port"])
        for r in rows(
            out,
            "SELECT stack, config, sig, client_port FROM probe_raw "
            "WHERE outcome IN ('accepted', 'hello-retry')",
        )
    ]
    assert completed, "no completed handshake to compare"
    for key in completed:
        assert key in theirs, f"{key}: tshark found no handshake"
        for sender in ("client", "server"):
            assert ours[key][sender] == theirs[key][sender], (key, sender)
    return len(completed)
