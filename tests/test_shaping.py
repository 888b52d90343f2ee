"""Shaping backends: netem detection and command construction, backend choice, and the
userspace emulator's TUN link inside real namespaces."""

from __future__ import annotations

import subprocess
from types import SimpleNamespace

import pytest

from conftest import needs_root
from netleaks import my_tuns, nothing_left  # noqa: F401
from pqlab.errors import UserError
from pqlab.net import shaping
from pqlab.net.profiles import parse_profile


class _FakeTopo(SimpleNamespace):
    def exec_argv(self, side, argv):
        return ["ip", "netns", "exec", f"ns-{side}", *argv]

    def ifname(self, side):
        return f"if-{side}"


def test_netem_commands_one_direction_per_end():
    p = parse_profile("rtt=50ms,rate=1mbit,s2c.loss=2%")
    cmds = shaping.NetemLink(p).qdisc_commands(_FakeTopo())
    assert cmds[0] == [
        "ip",
        "netns",
        "exec",
        "ns-client",
        "tc",
        "qdisc",
        "replace",
        "dev",
        "if-client",
        "root",
        "netem",
        "limit",
        "1000",
        "delay",
        "25000us",
        "rate",
        "1000000bit",
    ]
    assert cmds[1][-5:] == ["loss", "random", "2%", "rate", "1000000bit"]
    assert cmds[1][4:10] == ["tc", "qdisc", "replace", "dev", "if-server", "root"]
    assert "loss" not in cmds[0]


def test_unknown_shaper():
    with pytest.raises(UserError, match="not one of auto, netem, userspace"):
        shaping.make_link(parse_profile("lan"), "kernel")


@needs_root
def test_auto_picks_and_says_which(monkeypatch):
    p = parse_profile("rtt=10ms")
    ok, why = shaping.netem_available()
    assert isinstance(why, str) and why
    link = shaping.make_link(p, "auto")
    assert link.kind == ("netem" if ok else "userspace")
    assert link.choice.startswith(link.kind)
    if not ok:
        # Asking for netem where the kernel lacks it is a clear error, before anything starts.
        with pytest.raises(UserError, match="--shaper netem: .*use --shaper userspace"):
            shaping.make_link(p, "netem")
    # And the decision follows the probe.
    shaping.netem_available.cache_clear()
    monkeypatch.setattr(shaping, "netem_available", lambda: (True, "probe says yes"))
    assert shaping.make_link(p, "auto").kind == "netem"
    monkeypatch.setattr(shaping, "netem_available", lambda: (False, "no netem"))
    assert shaping.make_link(p, "auto").kind == "userspace"
    assert "no netem" in shaping.make_link(p, "auto").choice


@needs_root
@pytest.mark.usefixtures("nothing_left")
def test_userspace_link_up_and_gone():
    from pqlab.net.topology import TwoHosts

    p = parse_profile("rtt=20ms,initcwnd=10")
    link = shaping.UserspaceLink(p)
    with TwoHosts(link=link, mtu=p.mtu, tcp=p.tcp_settings()) as topo:
        d = topo.describe()
        assert d["link"]["kind"] == "userspace"
        assert d["sides"]["client"]["mtu"] == 1500
        assert d["sides"]["client"]["initcwnd"] == 10
        assert d["congestion_control"] == "cubic"
        r = topo.run("client", ["ip", "-o", "link", "show", "dev", topo.client_if])
        assert r.returncode == 0 and "POINTOPOINT" in r.stdout  # a TUN device
        assert not my_tuns()
        pid = link.proc.pid
    # The emulator stopped cleanly and reported its counters; its devices vanished with it.
    assert link.proc.returncode == 0
    assert set(link.direction_stats()) == {"c2s", "s2c"}
    assert not my_tuns()
    assert subprocess.run(["kill", "-0", str(pid)], capture_output=True).returncode != 0


@needs_root
@pytest.mark.usefixtures("nothing_left")
def test_emulator_failure_is_an_error_and_leaves_nothing():
    from pqlab.errors import EngineError
    from pqlab.net.topology import TwoHosts

    link = shaping.UserspaceLink(parse_profile("lan"))
    link.engine_args = lambda a, b: ["linkem", "--tun-a", "x" * 20, "--tun-b", b]
    with pytest.raises(EngineError, match="did not start: .*1-15 characters"):
        with TwoHosts(link=link):
            pass
    assert not my_tuns()
