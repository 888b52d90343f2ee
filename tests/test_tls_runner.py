"""pqlab.tls.runner: the one way the lab starts and supervises engine processes, on the host
and across a topology; typed specs become the engine's arguments."""

from __future__ import annotations

import pytest

from conftest import needs_root
from pqlab import catalog, process
from pqlab.errors import CheckError, EngineError
from pqlab.tls import runner
from pqlab.tls.chains import make_chain
from pqlab.tls.negotiation import Expected


def alg(name: str, kind: str = "sig"):
    return catalog.resolve(name, kind)


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    return make_chain(tmp_path_factory.mktemp("certs"), "ECDSA-P256", "ECDSA-P256")


def server_spec(chain, listen="127.0.0.1:0", **kw):
    tls = runner.Tls(groups=(alg("X25519", "kem"),), sigalgs=(alg("ECDSA-P256"),))
    return runner.ServerSpec(tls=tls, chain=chain, listen=listen, **kw)


def client_spec(chain, port, host="127.0.0.1", groups=("X25519",), expect="X25519", **kw):
    tls = runner.Tls(groups=tuple(alg(g, "kem") for g in groups), sigalgs=(alg("ECDSA-P256"),))
    expected = Expected(group=alg(expect, "kem"), sigalg=alg("ECDSA-P256"))
    return runner.ClientSpec(
        tls=tls, connect=f"{host}:{port}", ca=chain.root, expected=expected, **kw
    )


def test_specs_become_engine_arguments(chain):
    args = server_spec(chain, max_connections=3, response_mode="none").args()
    assert args[:4] == ["tls", "server", "--listen", "127.0.0.1:0"]
    assert args[args.index("--groups") + 1] == "x25519"
    assert args[args.index("--sigalgs") + 1] == "ecdsa_secp256r1_sha256"
    assert args[args.index("--max-connections") + 1] == "3"
    assert "--stack" not in args  # the default stack needs no flag
    cargs = client_spec(chain, 4433, n=7, warmup=2, request_bytes=100).args()
    assert cargs[cargs.index("-n") + 1] == "7" and cargs[cargs.index("--warmup") + 1] == "2"
    assert cargs[cargs.index("--expect-group") + 1] == "x25519"
    assert cargs[cargs.index("--request-bytes") + 1] == "100"


def test_many_connections_do_not_stall_the_server(chain):
    # 150 connections with events: ~1 MB of server records, far more than a pipe holds.
    with runner.start_server(server_spec(chain, max_connections=150)) as srv:
        recs = runner.run_client(client_spec(chain, srv.listening["port"], n=150), timeout=300)
        server_recs = srv.finish(60)
    assert len(recs) == 150
    assert len([r for r in server_recs if r["type"] == "connection"]) == 150
    assert srv.cpu_seconds() is not None and srv.cpu_seconds() > 0


def test_client_check_failures_raise_the_engines_error(chain):
    with runner.start_server(server_spec(chain)) as srv, pytest.raises(EngineError, match="group"):
        runner.run_client(
            client_spec(chain, srv.listening["port"], groups=("X25519", "P-256"), expect="P-256"),
            timeout=60,
        )


def test_server_start_error_raises(chain, tmp_path):
    from dataclasses import replace

    missing = replace(chain, chain=tmp_path / "missing.pem")
    with pytest.raises(EngineError, match="cert-chain"):
        runner.start_server(server_spec(missing))


def test_wait_for_is_bounded(chain):
    proc = process.EngineProcess(["info"], "engine info")
    with pytest.raises(EngineError, match="did not report"):
        proc.wait_for("no-such-record", 20)
    assert proc.p.returncode is not None  # stopped and reaped


def test_negotiation_check_uses_code_points():
    from pqlab.tls import negotiation, stacks

    rec = {
        "role": "client",
        "verified": True,
        "negotiated": {"version": "TLSv1.3", "group": "P-256", "sigalg": "mldsa44"},
    }
    exp = Expected(group=alg("secp256r1", "kem"), sigalg=alg("ML-DSA-44"))
    negotiation.check(rec, exp, stacks.get())  # "P-256" and "secp256r1" are one group
    with pytest.raises(CheckError, match="asked for X25519"):
        negotiation.check(rec, Expected(group=alg("X25519", "kem")), stacks.get())
    with pytest.raises(CheckError, match="did not verify"):
        negotiation.check({**rec, "verified": False}, Expected(), stacks.get())
    rec13 = {**rec, "negotiated": {**rec["negotiated"], "version": "TLSv1.2"}}
    with pytest.raises(CheckError, match="TLSv1.2"):
        negotiation.check(rec13, Expected(), stacks.get())


@pytest.mark.net
@needs_root
def test_across_topology(chain):
    from pqlab.net.shaping import build_hosts

    with build_hosts(None) as topo:
        spec = server_spec(chain, listen=f"{topo.server_ip}:0", max_connections=3)
        with runner.start_server(spec, topo) as srv:
            assert srv.listening["address"].startswith(topo.server_ip)
            recs = runner.run_client(
                client_spec(
                    chain, srv.listening["port"], host=topo.server_ip, n=3, request_bytes=30000
                ),
                topo,
                timeout=120,
            )
            server_recs = srv.finish(30)
    assert [r["app_bytes_received"] for r in recs] == [30000] * 3
    assert all(r["tcp_info"]["snd_mss"] == 1448 for r in recs)
    assert sum(r["type"] == "connection" for r in server_recs) == 3
