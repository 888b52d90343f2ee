"""Two-host topology: real namespaces and a veth link, TLS across it, and nothing left
behind after a normal exit, an exception, SIGINT, SIGTERM or a killed process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import netns_list, pqlab_env
from tls_helpers import engine_bin, make_chain

pytestmark = pytest.mark.net


def root_links() -> set[str]:
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    return {line.split(":")[1].strip().split("@")[0] for line in out.splitlines()}


def mine(prefix: str) -> set[str]:
    return {n for n in netns_list() if n.startswith(prefix)}


def test_create_describe_teardown():
    from pqlab.net.topology import TcpSettings, TwoHosts

    before_links = root_links()
    with TwoHosts(tcp=TcpSettings(congestion_control="cubic", initcwnd=10)) as topo:
        assert {topo.client_ns, topo.server_ns} <= netns_list()
        d = topo.describe()
        assert d["link"]["kind"] == "veth" and d["mtu"] == 1500 and d["mss"] == 1460
        for side in ("client", "server"):
            s = d["sides"][side]
            assert s["mtu"] == 1500
            for feat in (
                "tcp-segmentation-offload",
                "generic-segmentation-offload",
                "generic-receive-offload",
            ):
                assert s["offloads"][feat].startswith("off"), (side, feat, s["offloads"])
            assert s["congestion_control"] == "cubic"
            assert s["initcwnd"] == 10
        # The interfaces live only inside the namespaces.
        assert topo.client_if not in root_links() and topo.server_if not in root_links()
        names = (topo.client_ns, topo.server_ns)
    assert not set(names) & netns_list()
    assert root_links() <= before_links | set()  # nothing new in the root namespace


def test_tls_across_the_link(tmp_path):
    from pqlab.net.topology import TwoHosts

    make_chain(tmp_path, "EC:P-256", "EC:P-256")
    with TwoHosts() as topo:
        srv = topo.popen(
            "server",
            [
                engine_bin(),
                "tls",
                "server",
                "--listen",
                f"{topo.server_ip}:4433",
                "--cert-chain",
                str(tmp_path / "chain.pem"),
                "--key",
                str(tmp_path / "server.key.pem"),
                "--max-connections",
                "2",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert json.loads(srv.stdout.readline())["type"] == "listening"
        res = topo.run(
            "client",
            [
                engine_bin(),
                "tls",
                "client",
                "--connect",
                f"{topo.server_ip}:4433",
                "--ca",
                str(tmp_path / "root.crt.pem"),
                "--groups",
                "X25519",
                "-n",
                "2",
                "--request-bytes",
                "100000",
            ],
            timeout=60,
        )
        assert res.returncode == 0, res.stdout + res.stderr
        recs = [json.loads(line) for line in res.stdout.splitlines()]
        conns = [r for r in recs if r["type"] == "connection"]
        srv.wait(timeout=10)
    assert len(conns) == 2
    for c in conns:
        assert c["negotiated"]["group"].lower() == "x25519"
        assert c["congestion_control"] == "cubic"
        # A real 1500-byte link: MSS 1448 with timestamps (loopback would give ~65 KB).
        assert c["tcp_info"]["snd_mss"] == 1448 and c["tcp_info"]["rcv_mss"] == 1448
        assert c["app_bytes_received"] == 100000


def test_cleanup_after_exception():
    from pqlab.net.topology import TwoHosts

    with pytest.raises(RuntimeError), TwoHosts() as topo:
        names = {topo.client_ns, topo.server_ns}
        sleeper = topo.popen("server", ["sleep", "300"])
        raise RuntimeError("boom")
    assert not names & netns_list()
    assert sleeper.poll() is not None


CHILD = """
import sys, time
from pqlab.net.topology import TwoHosts
with TwoHosts() as topo:
    topo.popen("server", ["sleep", "300"])
    print(topo.client_ns, topo.server_ns, flush=True)
    time.sleep(120)
"""


def _child():
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD],
        stdout=subprocess.PIPE,
        text=True,
        env=pqlab_env(),
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    names = set(proc.stdout.readline().split())
    assert len(names) == 2 and names <= netns_list()
    return proc, names


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_cleanup_after_signal(sig):
    proc, names = _child()
    proc.send_signal(sig)
    proc.wait(timeout=30)
    assert proc.returncode != 0
    assert not names & netns_list()


def test_stale_namespaces_of_dead_process_are_removed():
    from pqlab.net.topology import TwoHosts, cleanup_stale

    proc, names = _child()
    os.kill(proc.pid, signal.SIGKILL)  # no chance to clean up
    proc.wait(timeout=10)
    time.sleep(0.2)
    # A shaped link's own namespace (the netem link's bridge) goes the same way.
    link_ns = f"pqlab-{proc.pid}-77-l"
    subprocess.run(["ip", "netns", "add", link_ns], check=True)
    names.add(link_ns)
    assert names <= netns_list()
    removed = cleanup_stale()
    assert names <= set(removed)
    assert not names & netns_list()
    # And a new topology starts fine afterwards.
    with TwoHosts() as topo:
        assert topo.client_ns in netns_list()


def test_bad_settings_are_user_errors():
    from pqlab.errors import UserError
    from pqlab.net.topology import TcpSettings, TwoHosts

    with pytest.raises(UserError, match="MTU"):
        TwoHosts(mtu=100)
    with pytest.raises(UserError, match="initcwnd"):
        TwoHosts(tcp=TcpSettings(initcwnd=0))
    with pytest.raises(UserError, match="congestion control"):
        with TwoHosts(tcp=TcpSettings(congestion_control="nosuchcc")):
            pass


def test_signal_handlers_restored_after_nested_topologies():
    from pqlab.net.topology import TwoHosts

    before = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
    outer = TwoHosts().start()
    try:
        with TwoHosts():
            pass
        # The outer topology is still up: SIGTERM must still unwind it.
        assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, before[1])
    finally:
        outer.stop()
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
