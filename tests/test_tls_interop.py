"""Interop with the stock openssl command from the same OpenSSL source: s_client against
`pqlab serve`, and `pqlab connect` against s_server (issue 3's checks)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from conftest import pqlab_env, run_pqlab
from pqlab import catalog
from pqlab.errors import UserError
from tls_helpers import free_port, openssl_bin


def _need(name: str, kind: str):
    try:
        return catalog.resolve(name, kind)
    except UserError:
        pytest.skip(f"the catalogue has no {name} yet")


def _new_group_with_default_sigint():
    os.setpgid(0, 0)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Serve:
    def __init__(self, *args):
        self.port = free_port()
        # Own process group, so stop() can send Ctrl-C to it like a terminal does (to the
        # pqlab process and the engine server alike).
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pqlab", "serve", "--port", str(self.port), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=pqlab_env(),
            preexec_fn=_new_group_with_default_sigint,
        )
        self.lines = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise AssertionError(f"pqlab serve exited: {self.proc.stderr.read()}")
            self.lines.append(line)
            if line.startswith("Ctrl-C"):
                break
        text = "".join(self.lines)
        self.root = re.search(r"root certificate: (\S+)", text).group(1)

    def stop(self) -> tuple[str, str]:
        os.killpg(self.proc.pid, signal.SIGINT)
        out, err = self.proc.communicate(timeout=20)
        return out, err


@pytest.mark.parametrize("group", ["X25519MLKEM768", "ML-KEM-768"])
def test_s_client_against_pqlab_serve(group):
    g = _need(group, "kem")
    srv = Serve("--group", group, "--sig", "ML-DSA-44", "--ca", "ML-DSA-44")
    try:
        assert os.path.exists(srv.root)
        res = subprocess.run(
            [
                openssl_bin(),
                "s_client",
                "-connect",
                f"127.0.0.1:{srv.port}",
                "-CAfile",
                srv.root,
                "-groups",
                g.tls_name,
                "-servername",
                "localhost",
                "-verify_return_error",
                "-verify_hostname",
                "localhost",
                "-brief",
            ],
            input="",
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        out, err = srv.stop()
    text = res.stdout + res.stderr
    assert res.returncode == 0, text
    assert "Verification: OK" in text
    assert f"Negotiated TLS1.3 group: {g.tls_name}" in text
    assert "mldsa44" in text
    assert srv.proc.returncode == 0
    assert not os.path.exists(srv.root), "temporary certificates left behind"
    assert f"group {g.tls_name} signature mldsa44" in out


def test_serve_port_in_use():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        proc = run_pqlab(
            "serve", "--port", port, "--group", "X25519", "--sig", "ECDSA-P256", timeout=60
        )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "in use" in lines[0] and str(port) in lines[0]


@pytest.mark.parametrize("group_name", ["X25519MLKEM768", "ML-KEM-768"])
def test_pqlab_connect_against_s_server(tmp_path, group_name):
    from pqlab.tls.chains import make_chain

    group = _need(group_name, "kem")
    chain = make_chain(tmp_path, "ML-DSA-44", "ML-DSA-44")
    port = free_port()
    server = subprocess.Popen(
        [
            openssl_bin(),
            "s_server",
            "-accept",
            f"127.0.0.1:{port}",
            "-cert",
            str(chain.chain),
            "-key",
            str(chain.key),
            "-groups",
            group.tls_name,
            "-naccept",
            "3",
            "-quiet",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(0.5)
        res = run_pqlab(
            "connect",
            f"127.0.0.1:{port}",
            "--group",
            group_name,
            "--sig",
            "ML-DSA-44",
            "--ca",
            chain.root,
            "--servername",
            "localhost",
            "-n",
            "2",
            "--warmup",
            "1",
            timeout=120,
        )
    finally:
        server.kill()
        server.wait()
    assert res.returncode == 0, res.stdout + res.stderr
    lines = [line for line in res.stdout.splitlines() if line.startswith("#")]
    assert len(lines) == 2
    for line in lines:
        assert f"group {group.tls_name} signature mldsa44" in line and "verified" in line


def test_pqlab_connect_refuses_other_group(tmp_path):
    from pqlab.tls.chains import make_chain

    chain = make_chain(tmp_path, "ECDSA-P256", "ECDSA-P256")
    port = free_port()
    server = subprocess.Popen(
        [
            openssl_bin(),
            "s_server",
            "-accept",
            f"127.0.0.1:{port}",
            "-cert",
            str(chain.chain),
            "-key",
            str(chain.key),
            "-groups",
            "X25519",
            "-naccept",
            "1",
            "-quiet",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(0.5)
        res = run_pqlab(
            "connect",
            f"127.0.0.1:{port}",
            "--group",
            "ML-KEM-768",
            "--ca",
            chain.root,
            "--servername",
            "localhost",
            timeout=60,
        )
    finally:
        server.kill()
        server.wait()
    # The server refused the handshake with an alert: a peer error (exit 7), one line
    # naming the alert.
    assert res.returncode == 7, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert "handshake failure" in res.stderr


def test_mutual_tls_between_serve_connect_and_s_client(tmp_path):
    """`serve --client-sig` asks for a client certificate; `pqlab connect` presenting the one
    serve wrote completes with the client's scheme checked on both ends, openssl s_client
    with it too, and a client without one is refused."""
    srv = Serve(
        "--group", "X25519MLKEM768", "--sig", "ML-DSA-44", "--ca", "ML-DSA-44",
        "--client-sig", "ECDSA-P256", "--client-ca-sig", "ML-DSA-44",
        "--cert-dir", str(tmp_path / "certs"),
    )  # fmt: skip
    try:
        text = "".join(srv.lines)
        m = re.search(r"--client-cert (\S+) --client-key (\S+)", text)
        assert m, text
        cert, key = m.groups()
        assert os.stat(key).st_mode & 0o777 == 0o600
        ok = run_pqlab(
            "connect", f"127.0.0.1:{srv.port}", "--ca", srv.root, "--servername", "localhost",
            "--group", "X25519MLKEM768", "--sig", "ML-DSA-44", "-n", "3",
            "--client-sig", "ECDSA-P256", "--client-cert", cert, "--client-key", key,
        )  # fmt: skip
        assert ok.returncode == 0, ok.stderr
        assert ok.stdout.count("client signature ecdsa_secp256r1_sha256") == 3, ok.stdout
        s_client = subprocess.run(
            [
                openssl_bin(), "s_client", "-connect", f"127.0.0.1:{srv.port}",
                "-CAfile", srv.root, "-cert", cert, "-key", key, "-groups", "X25519MLKEM768",
                "-servername", "localhost", "-verify_return_error", "-brief",
            ],
            input="", capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert s_client.returncode == 0, s_client.stdout + s_client.stderr
        # TLS 1.3: a client without a certificate finishes its side of the handshake before
        # the server answers with an alert, so it sees the refusal when it reads.
        refused = run_pqlab(
            "connect", f"127.0.0.1:{srv.port}", "--ca", srv.root, "--servername", "localhost",
            "--group", "X25519MLKEM768", "--request-bytes", "10",
        )  # fmt: skip
        assert refused.returncode == 7, refused.stdout + refused.stderr
        half = run_pqlab(
            "connect", f"127.0.0.1:{srv.port}", "--ca", srv.root, "--client-sig", "ECDSA-P256"
        )
        assert half.returncode == 2 and "--client-cert" in half.stderr
    finally:
        out, _ = srv.stop()
    assert "connection 0" in out and "failed" in out


def test_serve_accepts_each_client_signer_of_its_list(tmp_path):
    """`serve --client-sig ECDSA-P256,ML-DSA-44`: a client certificate of each is written,
    and a client presenting either completes with its own scheme checked on both ends."""
    srv = Serve(
        "--group", "X25519MLKEM768", "--sig", "ECDSA-P256", "--ca", "ECDSA-P256",
        "--client-sig", "ECDSA-P256,ML-DSA-44", "--cert-dir", str(tmp_path / "certs"),
    )  # fmt: skip
    try:
        text = "".join(srv.lines)
        found = re.findall(r"--client-sig (\S+) --client-cert (\S+) --client-key (\S+)", text)
        assert sorted(f[0] for f in found) == ["ECDSA-P256", "ML-DSA-44"], text
        for alg, cert, key in found:
            ok = run_pqlab(
                "connect", f"127.0.0.1:{srv.port}", "--ca", srv.root, "--servername",
                "localhost", "--group", "X25519MLKEM768", "--sig", "ECDSA-P256", "-n", "2",
                "--client-sig", alg, "--client-cert", cert, "--client-key", key,
            )  # fmt: skip
            assert ok.returncode == 0, ok.stderr
            scheme = "mldsa44" if alg == "ML-DSA-44" else "ecdsa_secp256r1_sha256"
            assert ok.stdout.count(f"client signature {scheme}") == 2, ok.stdout
    finally:
        srv.stop()
