"""Shaping backends: netem detection and command construction, backend choice, and the
userspace emulator's TUN link inside real namespaces."""

from __future__ import annotations

import dataclasses
import subprocess
from types import SimpleNamespace

import pytest

from netleaks import my_tuns, nothing_left  # noqa: F401
from pqlab.errors import UserError
from pqlab.net import shaping
from pqlab.net.profiles import parse_profile


def test_netem_commands_one_direction_per_bridge_port():
    """c2s leaves the link's bridge by the port facing the server, s2c by the one facing
    the client: both in the link's own namespace, between the hosts' interfaces."""
    p = parse_profile("rtt=50ms,rate=1mbit,s2c.loss=2%")
    link = shaping.NetemLink(p)
    link.ns = "ns-link"
    cmds = link.qdisc_commands(SimpleNamespace())
    assert cmds[0] == [
        "ip", "netns", "exec", "ns-link", "tc", "qdisc", "add", "dev", "pqlab-ls", "root",
        "netem", "limit", "1000", "delay", "25000us", "rate", "1000000bit",
    ]  # fmt: skip
    assert cmds[1][-5:] == ["loss", "random", "2%", "rate", "1000000bit"]
    assert cmds[1][4:10] == ["tc", "qdisc", "add", "dev", "pqlab-lc", "root"]
    assert "loss" not in cmds[0]


# TCA_OPTIONS of a root netem qdisc as the UML guest's 6.1 kernel dumped them (RTM_GETQDISC)
# after iproute2 6.1's `tc qdisc add dev pa root netem ARGS`, ARGS as in the comment.
KERNEL_DUMPS = [
    (
        # limit 10000 delay 17500us 8750us distribution paretonormal rate 1000000000bit
        "1d2c0400102700000000000000000000000000000e1602000c000a0040070b01000000000c000b00"
        "8083850000000000100001000000000000000000000000000c00030000000000000000000c000400"
        "00000000000000001400060040597307000000000000000000000000",
        {
            "limit": 10000,
            "latency_ns": 17_499_968,  # 17.5 ms in whole 64-ns ticks, truncated by tc
            "jitter_ns": 8_749_952,
            "rate_bytes_per_s": 125_000_000,
            "loss_u32": 0,
            "delay_corr_u32": 0,
        },
    ),
    (
        # limit 1000 delay 10000us 2000us 50% loss random 5% 25% rate 100000000000bit
        "5a620200e8030000cdcccc0c0000000000000000127a00000c000a0080969800000000000c000b00"
        "80841e0000000000100001000000008000000040000000000c00030000000000000000000c000400"
        "00000000000000000c00080000dd0ee90200000014000600ffffffff000000000000000000000000",
        {
            "limit": 1000,
            "latency_ns": 10_000_000,
            "jitter_ns": 2_000_000,
            "loss_u32": 214_748_365,  # 5 % of 2^32 - 1, rounded
            "delay_corr_u32": 2_147_483_648,
            "loss_corr_u32": 1_073_741_824,
            "rate_bytes_per_s": 12_500_000_000,  # above 2^32 B/s: TCA_NETEM_RATE64
        },
    ),
]


@pytest.mark.parametrize(("hexdump", "expected"), KERNEL_DUMPS)
def test_netem_options_parsed_from_the_kernels_bytes(hexdump, expected):
    got = shaping.parse_netem_options(bytes.fromhex(hexdump))
    assert {k: got[k] for k in expected} == expected


def test_applied_netem_compared_with_the_profile():
    held = shaping.parse_netem_options(bytes.fromhex(KERNEL_DUMPS[0][0]))
    # pareto-35ms as netem holds it through tc: 32 and 48 ns short, within one tick.
    d = parse_profile("pareto-35ms").c2s
    assert shaping.applied_problems(d, held) == []
    # Anything further off is named: a delay tc cannot express, another rate, another limit.
    assert shaping.applied_problems(parse_profile("pareto-35ms,rtt=35.2ms").c2s, held) == [
        "latency_ns is 17499968, the profile asks for 17600000"
    ]
    problems = shaping.applied_problems(
        parse_profile("rtt=35ms,jitter=8.75ms,dist=paretonormal,rate=100mbit").c2s, held
    )
    assert problems == [
        "limit is 10000, the profile asks for 1000",
        "rate_bytes_per_s is 125000000, the profile asks for 12500000",
    ]
    held2 = shaping.parse_netem_options(bytes.fromhex(KERNEL_DUMPS[1][0]))
    d2 = parse_profile("rtt=20ms,jitter=2ms,corr=50%,loss=5%,loss_corr=25%,rate=100gbit").c2s
    assert shaping.applied_problems(d2, held2) == []
    assert shaping.applied_problems(d2, None) == ["no netem qdisc at the root of the interface"]


def test_unknown_shaper():
    with pytest.raises(UserError, match="not one of auto, netem, userspace"):
        shaping.make_link(parse_profile("lan"), "kernel")


@pytest.mark.net
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


@pytest.mark.net
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


@pytest.mark.net
@pytest.mark.usefixtures("nothing_left")
def test_emulator_failure_is_an_error_and_leaves_nothing():
    from pqlab.errors import EngineError
    from pqlab.net.topology import TwoHosts

    link = shaping.UserspaceLink(parse_profile("lan"))
    spec = link.spec
    link.spec = lambda a, b: dataclasses.replace(spec(a, b), tun_a="x" * 20)
    with pytest.raises(EngineError, match="did not start: .*1-15 characters"):
        with TwoHosts(link=link):
            pass
    assert not my_tuns()
