"""A fleet for the scan's tests: real servers no one here wrote (Go's crypto/tls with the
hybrid, Debian's nginx, `openssl s_server` with ML-DSA and one with TLS 1.2 only) and
`pqlab serve` on every stack, on 127.0.0.1; hostile servers (one that closes after the
ClientHello, one that answers with garbage, one that says nothing); closed ports on other
loopback addresses and a name that does not resolve. Each target comes with the verdict
its server's own configuration implies."""

from __future__ import annotations

import contextlib
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

from pqlab.tls.chains import make_chain
from probe_helpers import (
    close_after_hello,
    garbage,
    go_server,
    go_server_binary,
    nginx,
    pqlab_serve,
    s_server,
    stall,
    tcp_server,
)

STACKS = ("openssl", "rustls", "rustls-aws-lc-rs", "wolfssl")


@dataclass(frozen=True)
class Server:
    name: str
    target: str  # HOST:PORT
    verdict: str  # what its configuration implies
    real: bool  # a TLS server (not a hostile or closed one)


def closed_port(address: str) -> int:
    """A port on `address` nothing listens on (bound, then closed, by this test)."""
    with socket.socket() as s:
        s.bind((address, 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def fleet(tmp: Path, stacks=STACKS, hostile_connections: int = 64):
    """The servers, started; yields [Server] and the CA bundle of every real server's root."""
    ecdsa = make_chain(tmp / "certs-ecdsa", "ECDSA-P256", "ECDSA-P256", send_root=True)
    mldsa = make_chain(tmp / "certs-mldsa", "ML-DSA-44", "ML-DSA-44")
    binary = go_server_binary(tmp)
    roots = [ecdsa.root, mldsa.root]
    out: list[Server] = []
    with contextlib.ExitStack() as stack:

        def go(name, groups, verdict):
            port = stack.enter_context(go_server(binary, ecdsa.chain, ecdsa.key, "-groups", groups))
            out.append(Server(name, f"127.0.0.1:{port}", verdict, True))

        go("go-hybrid", "X25519MLKEM768,SecP256r1MLKEM768,X25519", "pq-ready")
        go("go-classical", "X25519,P-256", "classical-only")
        # Its post-quantum group is one the browser-like ClientHello does not offer: only a
        # client that offers it (alone) gets it.
        go("go-p256-hybrid", "SecP256r1MLKEM768,X25519", "pq-with-hrr")
        port = stack.enter_context(nginx(tmp / "nginx", ecdsa.chain, ecdsa.key))
        out.append(Server("nginx", f"127.0.0.1:{port}", "classical-only", True))
        port = stack.enter_context(s_server(mldsa.chain, mldsa.key))
        out.append(Server("s_server-mldsa", f"127.0.0.1:{port}", "pq-ready", True))
        port = stack.enter_context(s_server(ecdsa.chain, ecdsa.key, "-tls1_2"))
        out.append(Server("s_server-tls12", f"127.0.0.1:{port}", "classical-only", True))
        for st in stacks:
            port, root = stack.enter_context(
                pqlab_serve(
                    tmp / f"serve-{st}",
                    "--stack",
                    st,
                    "--group",
                    "X25519MLKEM768",
                    "--sig",
                    "ML-DSA-44",
                )  # fmt: skip
            )
            roots.append(root)
            out.append(Server(f"serve-{st}", f"127.0.0.1:{port}", "pq-ready", True))
        for name, handle, verdict in (
            ("closes-after-hello", close_after_hello, "error"),
            ("garbage", garbage, "unreachable"),
            ("silent", stall, "unreachable"),
        ):
            port = stack.enter_context(tcp_server(handle, connections=hostile_connections))
            out.append(Server(name, f"127.0.0.1:{port}", verdict, False))
        out.append(Server("closed", f"127.0.0.2:{closed_port('127.0.0.2')}", "unreachable", False))
        out.append(Server("no-dns", "no-such-host.invalid:443", "unreachable", False))
        bundle = tmp / "roots.pem"
        bundle.write_text("".join(Path(r).read_text() for r in roots))
        yield out, bundle


def scan_argv(targets: Path, out: Path, ca: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "pqlab", "probe", "--targets", str(targets), "--out", str(out),
            "--ca", str(ca), *args]  # fmt: skip
