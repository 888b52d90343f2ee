"""Helpers for the TLS tests: the engine, the reference openssl command, free ports."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import pytest

from pqlab import engine

REPO = Path(__file__).resolve().parents[1]


def engine_bin() -> str:
    return str(engine.engine_path())


def openssl_bin() -> str:
    """The openssl command built from the engine's OpenSSL source (scripts/build-openssl-cli.sh)."""
    for cand in (
        os.environ.get("PQLAB_OPENSSL"),
        REPO / "build/openssl/bin/openssl",
        "/work/main/build/openssl/bin/openssl",
    ):
        if cand and Path(cand).is_file():
            return str(cand)
    pytest.skip("build/openssl/bin/openssl missing: run scripts/build-openssl-cli.sh")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def records(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


class Server:
    """The engine's TLS server on 127.0.0.1 with a free port, stopped on exit."""

    def __init__(self, chain_dir: Path, *args: str, max_connections: int | None = None):
        argv = [
            engine_bin(),
            "tls",
            "server",
            "--listen",
            "127.0.0.1:0",
            "--cert-chain",
            str(chain_dir / "chain.pem"),
            "--key",
            str(chain_dir / "server.key.pem"),
            *args,
        ]
        if max_connections is not None:
            argv += ["--max-connections", str(max_connections)]
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        line = self.proc.stdout.readline()
        rec = json.loads(line) if line else {}
        if rec.get("type") != "listening":
            self.stop()
            raise AssertionError(f"server did not start: {line} {self.proc.stderr.read()}")
        self.port = rec["port"]
        self.listening = rec

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> list[dict]:
        if self.proc.poll() is None:
            self.proc.terminate()
        out, _ = self.proc.communicate(timeout=10)
        return records(out)

    def finish(self, timeout: float = 30) -> list[dict]:
        """Wait for the server to exit by itself (after --max-connections)."""
        out, err = self.proc.communicate(timeout=timeout)
        assert self.proc.returncode == 0, err
        return records(out)


def client(port: int, ca: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    argv = [
        engine_bin(),
        "tls",
        "client",
        "--connect",
        f"127.0.0.1:{port}",
        "--ca",
        str(ca),
        "--servername",
        "server.pqlab.test",
        *args,
    ]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if check and proc.returncode != 0:
        raise AssertionError(f"client failed: {proc.stdout[-500:]} {proc.stderr[-500:]}")
    return proc


def make_chain(directory: Path, ca: str, server: str, *extra: str) -> dict:
    proc = subprocess.run(
        [
            engine_bin(),
            "tls",
            "certs",
            "--ca-alg",
            ca,
            "--server-alg",
            server,
            "--out-dir",
            str(directory),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return records(proc.stdout)[-1]


def tshark_content_types(pcap: Path, keylog: Path, port: int) -> dict[int, list[tuple[str, int]]]:
    """Per client port, every TLS record of the connection as Wireshark's dissector decrypts
    it with the key log: (who sent it, "client" or "server"; its content type: 20
    change_cipher_spec, 21 alert, 22 handshake, 23 application data), in capture order."""
    out = subprocess.run(
        [
            "tshark", "-r", str(pcap), "-o", f"tls.keylog_file:{keylog}",
            "-d", f"tcp.port=={port},tls", "-Y", "tls",
            "-T", "fields", "-e", "tcp.srcport", "-e", "tcp.dstport",
            "-e", "tls.record.content_type",
        ],
        capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    by_port: dict[int, list[tuple[str, int]]] = {}
    for line in out.stdout.splitlines():
        sport, dport, types = line.split("\t")
        side, cport = ("server", int(dport)) if int(sport) == port else ("client", int(sport))
        by_port.setdefault(cport, []).extend((side, int(t)) for t in types.split(","))
    return by_port
