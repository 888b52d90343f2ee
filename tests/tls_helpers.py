"""Helpers for the TLS tests: the engine, the reference openssl command, free ports."""

from __future__ import annotations

import json
import os
import shutil
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


def tshark_fields(
    pcap: Path,
    fields: list[str],
    keylog: Path | None = None,
    port: int | None = None,
    options: tuple[str, ...] = (),
    display_filter: str | None = None,
) -> list[list[str]]:
    """Wireshark's dissection of a capture as rows of `fields` (tshark -T fields), decrypted
    with `keylog` when given, `port` decoded as TLS, `options` as tshark's `-o` preferences
    (name:value), only the frames `display_filter` keeps. Skips the test without tshark."""
    if shutil.which("tshark") is None:
        pytest.skip("tshark is not installed")
    args = ["tshark", "-r", str(pcap)]
    if keylog is not None:
        args += ["-o", f"tls.keylog_file:{keylog}"]
    for option in options:
        args += ["-o", option]
    if port is not None:
        args += ["-d", f"tcp.port=={port},tls"]
    if display_filter:
        args += ["-Y", display_filter]
    args += ["-T", "fields", *(x for f in fields for x in ("-e", f))]
    out = subprocess.run(args, capture_output=True, text=True, check=True, timeout=300)
    return [line.split("\t") for line in out.stdout.splitlines()]


def tshark_content_types(pcap: Path, keylog: Path, port: int) -> dict[int, list[tuple[str, int]]]:
    """Per client port, every TLS record of the connection as Wireshark's dissector decrypts
    it with the key log: (who sent it, "client" or "server"; its content type: 20
    change_cipher_spec, 21 alert, 22 handshake, 23 application data), in capture order."""
    rows = tshark_fields(
        pcap,
        ["tcp.srcport", "tcp.dstport", "tls.record.content_type"],
        keylog=keylog,
        port=port,
        display_filter="tls",
    )
    by_port: dict[int, list[tuple[str, int]]] = {}
    for sport, dport, types in rows:
        side, cport = ("server", int(dport)) if int(sport) == port else ("client", int(sport))
        by_port.setdefault(cport, []).extend((side, int(t)) for t in types.split(","))
    return by_port


def tshark_segments_to_certificate_verify(pcap: Path, keylog: Path, port: int) -> dict[int, int]:
    """Per client port, the server's TCP segments with payload from its first (the
    ServerHello's) through the one completing the record that carries CertificateVerify
    (handshake type 15), as Wireshark's dissector reassembles and decrypts them with the
    key log: document 000's count from ServerHello to CertificateVerify."""
    rows = tshark_fields(
        pcap,
        ["tcp.srcport", "tcp.dstport", "tcp.len", "tls.handshake.type"],
        keylog=keylog,
        port=port,
        display_filter=f"tcp.srcport == {port} && tcp.len > 0",
    )
    counted: dict[int, int] = {}
    done: set[int] = set()
    for _sport, dport, _length, types in rows:
        cport = int(dport)
        if cport in done:
            continue
        counted[cport] = counted.get(cport, 0) + 1
        if "15" in types.split(","):
            done.add(cport)
    return {p: n for p, n in counted.items() if p in done}
