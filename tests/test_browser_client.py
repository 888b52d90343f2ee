"""A real browser as the TLS client: headless Chromium loads a page from `pqlab serve
--group X25519MLKEM768 --sig ECDSA-P256`, and both ends must show the handshake it made.

Trust: the run's root CA is imported into a fresh NSS database ($HOME/.pki/nssdb, with
`certutil` from libnss3-tools), which is where Chromium on Linux reads locally trusted roots,
and Chromium runs with that HOME and a fresh profile. So the handshake is fully verified
(chain, host name, key usage), unlike `--ignore-certificate-errors`, which would accept any
certificate and prove nothing about the chain. A second Chromium without the root must
refuse the same server (net::ERR_CERT_AUTHORITY_INVALID): that is what shows the check is
real. Skipped with a message where chromium or certutil is missing.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from browser import Chromium, chromium_path
from conftest import pqlab_env

pytestmark = [
    pytest.mark.skipif(
        chromium_path() is None,
        reason="chromium is not installed (scripts/bootstrap.sh installs it: apt-get install "
        "chromium)",
    ),
    pytest.mark.skipif(
        shutil.which("certutil") is None,
        reason="certutil is not installed (scripts/bootstrap.sh installs it: apt-get install "
        "libnss3-tools)",
    ),
]
pytest.importorskip("websocket", reason="websocket-client is not installed (pip install '.[test]')")

ECDSA_P256_SHA256 = 0x0403  # TLS SignatureScheme ecdsa_secp256r1_sha256
MLDSA44 = 0x0904  # TLS SignatureScheme mldsa44


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Serve:
    """`pqlab serve ... --json` in the background, its records collected as they come."""

    def __init__(
        self, tmp_path, port: int, sig: str = "ECDSA-P256", stack: str = "openssl", ca=None
    ):
        self.cert_dir = tmp_path / "certs"
        self.sig, self.ca = sig, ca or sig
        argv = [
            sys.executable, "-m", "pqlab", "serve", "--stack", stack,
            "--group", "X25519MLKEM768", "--sig", sig, "--ca", self.ca, "--port", str(port),
            "--cert-dir", str(self.cert_dir), "--json",
        ]  # fmt: skip
        self.proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=pqlab_env(),
            start_new_session=True,
        )
        self.records: list[dict] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.strip():
                self.records.append(json.loads(line))

    def wait(self, pred, timeout: float, what: str) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for r in list(self.records):
                if pred(r):
                    return r
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise AssertionError(f"pqlab serve: no {what}; stderr: {self.proc.stderr.read()[-2000:]}")

    def root(self):
        (root,) = self.cert_dir.glob(f"{self.ca}__{self.sig}/root.crt.pem")
        return root

    def stop(self) -> int:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)  # Ctrl-C: serve stops its engine itself
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self._reader.join(5)
        return self.proc.returncode


def nss_home(tmp_path, root=None):
    """A HOME whose NSS database trusts `root` as a CA for servers (or nothing)."""
    home = tmp_path / ("home-with-root" if root else "home-empty")
    db = home / ".pki" / "nssdb"
    db.mkdir(parents=True)
    subprocess.run(["certutil", "-d", f"sql:{db}", "-N", "--empty-password"], check=True)
    if root:
        subprocess.run(
            ["certutil", "-d", f"sql:{db}", "-A", "-n", "pqlab test root", "-t", "C,,", "-i",
             str(root)],
            check=True,
        )  # fmt: skip
    return home


@pytest.fixture
def served(tmp_path):
    s = Serve(tmp_path, free_port())
    try:
        s.wait(lambda r: r["type"] == "listening", 60, "listening record")
        yield s
    finally:
        code = s.stop()
    assert code == 0, f"pqlab serve exited {code}"


def _response(chromium: Chromium, url: str) -> dict:
    for ev in chromium.events:
        if ev["method"] == "Network.responseReceived" and ev["params"]["response"]["url"] == url:
            return ev["params"]["response"]
    raise AssertionError(f"no response for {url}")


def test_chromium_loads_a_page_over_x25519mlkem768_with_a_verified_ecdsa_chain(served, tmp_path):
    port = served.records[0]["port"]
    url = f"https://localhost:{port}/"
    home = nss_home(tmp_path, served.root())
    with Chromium(tmp_path / "verified", env={"HOME": str(home)}) as chromium:
        nav = chromium.open(url)
        assert not nav.get("errorText"), nav
        text = chromium.evaluate("document.body.innerText")
        sec = _response(chromium, url)["securityDetails"]
    # What the page says the server negotiated, and what Chromium itself reports.
    assert "group: X25519MLKEM768" in text and "signature: ecdsa_secp256r1_sha256" in text
    assert sec["protocol"] == "TLS 1.3"
    assert sec["keyExchangeGroup"] == "X25519MLKEM768"
    assert sec["serverSignatureAlgorithm"] == ECDSA_P256_SHA256
    assert "localhost" in sec["sanList"] and sec["issuer"].startswith("pqlab")
    # The server's own record of the connection that served the page.
    page = served.wait(
        lambda r: r["type"] == "connection" and r.get("http_path") == "/", 30, "page connection"
    )
    neg = page["negotiated"]
    assert neg["version"] == "TLSv1.3"
    assert neg["group"] == "X25519MLKEM768"
    assert neg["sigalg"] == "ecdsa_secp256r1_sha256"
    assert page["role"] == "server" and page["peer"].startswith("127.0.0.1:")
    # Every connection Chromium made (it may open more than one) negotiated the same.
    for r in served.records:
        if r["type"] == "connection":
            assert r["negotiated"]["group"] == "X25519MLKEM768", r
            assert r["negotiated"]["sigalg"] == "ecdsa_secp256r1_sha256", r


def test_without_the_root_chromium_refuses_the_server(served, tmp_path):
    """The negative control: the same server, a profile that does not trust the run's root."""
    port = served.records[0]["port"]
    home = nss_home(tmp_path)
    with Chromium(tmp_path / "untrusted", env={"HOME": str(home)}) as chromium:
        nav = chromium.open(f"https://localhost:{port}/")
    assert nav.get("errorText") == "net::ERR_CERT_AUTHORITY_INVALID", nav
    failed = served.wait(lambda r: r["type"] == "connection_error", 30, "failed handshake record")
    assert "certificate unknown" in failed["message"]
    assert not any(r["type"] == "connection" and r.get("http_path") for r in served.records), (
        "a page was served to a client that does not trust the root"
    )


@pytest.fixture
def served_ml_dsa(tmp_path):
    # Debian 12's NSS cannot store an ML-DSA root in the profile's trust database, so the
    # root is ECDSA and the server's own key, which signs the handshake, ML-DSA-44.
    s = Serve(tmp_path, free_port(), sig="ML-DSA-44", stack="rustls-aws-lc-rs", ca="ECDSA-P256")
    try:
        s.wait(lambda r: r["type"] == "listening", 60, "listening record")
        yield s
    finally:
        code = s.stop()
    assert code == 0, f"pqlab serve exited {code}"


def test_chromium_loads_a_page_from_rustls_with_an_ml_dsa_chain(served_ml_dsa, tmp_path):
    """rustls with its own aws-lc-rs provider, X25519MLKEM768 and an ML-DSA-44 server
    certificate signing the handshake, as a browser with ML-DSA in TLS sees it."""
    served = served_ml_dsa
    port = served.records[0]["port"]
    url = f"https://localhost:{port}/"
    home = nss_home(tmp_path, served.root())
    with Chromium(tmp_path / "verified", env={"HOME": str(home)}) as chromium:
        nav = chromium.open(url)
        assert not nav.get("errorText"), nav
        text = chromium.evaluate("document.body.innerText")
        sec = _response(chromium, url)["securityDetails"]
    assert "group: X25519MLKEM768" in text and "signature: mldsa44" in text, text
    assert sec["protocol"] == "TLS 1.3"
    assert sec["keyExchangeGroup"] == "X25519MLKEM768"
    assert sec["serverSignatureAlgorithm"] == MLDSA44
    page = served.wait(
        lambda r: r["type"] == "connection" and r.get("http_path") == "/", 30, "page connection"
    )
    assert page["stack"] == "rustls-aws-lc-rs"
    assert page["negotiated"]["group"] == "X25519MLKEM768"
    assert page["negotiated"]["sigalg_code"] == MLDSA44


@pytest.fixture
def served_wolfssl(tmp_path):
    s = Serve(tmp_path, free_port(), sig="ECDSA-P256", stack="wolfssl")
    try:
        s.wait(lambda r: r["type"] == "listening", 60, "listening record")
        yield s
    finally:
        code = s.stop()
    assert code == 0, f"pqlab serve exited {code}"


def test_chromium_loads_a_page_from_wolfssl(served_wolfssl, tmp_path):
    """wolfSSL (the program that carries it) serving Chromium over X25519MLKEM768."""
    served = served_wolfssl
    port = served.records[0]["port"]
    url = f"https://localhost:{port}/"
    home = nss_home(tmp_path, served.root())
    with Chromium(tmp_path / "verified", env={"HOME": str(home)}) as chromium:
        nav = chromium.open(url)
        assert not nav.get("errorText"), nav
        text = chromium.evaluate("document.body.innerText")
        sec = _response(chromium, url)["securityDetails"]
    assert "group: X25519MLKEM768" in text, text
    assert sec["keyExchangeGroup"] == "X25519MLKEM768"
    assert sec["serverSignatureAlgorithm"] == ECDSA_P256_SHA256
    page = served.wait(
        lambda r: r["type"] == "connection" and r.get("http_path") == "/", 30, "page connection"
    )
    assert page["stack"] == "wolfssl"
    assert page["negotiated"]["group_code"] == 0x11EC
