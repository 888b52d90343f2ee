"""pqlab.net.tlsrun: engine server and client on the host and across a topology."""

from __future__ import annotations

import pytest

from conftest import needs_root
from pqlab.errors import EngineError
from pqlab.net.tlsrun import EngineServer, run_client
from tls_helpers import make_chain


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    d = tmp_path_factory.mktemp("run")
    make_chain(d, "EC:P-256", "EC:P-256")
    return d


def _server_args(d):
    return ["--cert-chain", d / "chain.pem", "--key", d / "server.key.pem", "--groups", "X25519"]


def test_many_connections_do_not_stall_the_server(chain):
    # 150 connections with events: ~1 MB of server records, far more than a pipe holds.
    with EngineServer(_server_args(chain), max_connections=150) as srv:
        recs = run_client(
            [
                "--connect",
                f"127.0.0.1:{srv.port}",
                "--ca",
                chain / "root.crt.pem",
                "--groups",
                "X25519",
                "-n",
                "150",
            ],
            timeout=300,
        )
        server_recs = srv.wait(timeout=60)
    assert len(recs) == 150
    assert len([r for r in server_recs if r["type"] == "connection"]) == 150


def test_client_errors_raise(chain):
    with EngineServer(_server_args(chain)) as srv, pytest.raises(EngineError, match="group"):
        run_client(
            [
                "--connect",
                f"127.0.0.1:{srv.port}",
                "--ca",
                chain / "root.crt.pem",
                "--groups",
                "X25519:P-256",
                "--expect-group",
                "P-256",
            ],
            timeout=60,
        )


def test_server_start_error_raises(chain, tmp_path):
    with pytest.raises(EngineError, match="cert-chain"):
        EngineServer(["--cert-chain", tmp_path / "missing.pem", "--key", chain / "server.key.pem"])


@pytest.mark.net
@needs_root
def test_across_topology(chain):
    from pqlab.net.topology import TwoHosts

    with TwoHosts() as topo:
        with EngineServer(_server_args(chain), topo=topo, max_connections=3) as srv:
            assert srv.address.startswith(topo.server_ip)
            recs = run_client(
                [
                    "--connect",
                    f"{topo.server_ip}:{srv.port}",
                    "--ca",
                    chain / "root.crt.pem",
                    "--groups",
                    "X25519",
                    "-n",
                    "3",
                    "--request-bytes",
                    "30000",
                ],
                topo=topo,
                timeout=120,
            )
            server_recs = srv.wait(timeout=30)
    assert [r["app_bytes_received"] for r in recs] == [30000] * 3
    assert all(r["tcp_info"]["snd_mss"] == 1448 for r in recs)
    assert sum(r["type"] == "connection" for r in server_recs) == 3
