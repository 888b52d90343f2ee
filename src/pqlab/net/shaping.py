"""Shaped links between the two hosts: the kernel's netem, or pqlab's userspace emulator.

Both are `Link`s for `pqlab.net.topology.TwoHosts` and apply a `LinkProfile` per direction
with netem's semantics:

- `NetemLink`: a veth pair with a netem qdisc at the root of each end (the client end shapes
  client-to-server traffic, the server end server-to-client), using netem's own `rate`.
- `UserspaceLink`: two TUN devices joined by `pqlab-engine linkem`, for kernels without netem.

`make_link(profile, shaper)` picks one (`auto` = netem when the kernel has it) and records
why. Other experiments wire `--profile` through this one seam:

    link = make_link(profile, args.shaper)
    with TwoHosts(link=link, mtu=profile.mtu, tcp=profile.tcp_settings()) as topo: ...
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import os
import shutil
import signal
import subprocess

from pqlab.errors import EngineError, UserError
from pqlab.net.profiles import LinkProfile
from pqlab.net.topology import SIDES, Link, TopologyError, VethLink

SHAPERS = ("auto", "netem", "userspace")
# A veth frame carries a 14-byte Ethernet header that netem's rate counts; a TUN device
# carries bare IP packets, so the emulator adds the same 14 bytes per packet to match.
ETHERNET_HEADER = 14
_tun_counter = itertools.count()
# SCHED_FIFO priority of the emulator's threads: precise wake-ups on a busy machine. Low
# enough not to compete with kernel threads; the engine falls back to normal scheduling
# (and records why) where real-time scheduling is not allowed.
DEFAULT_RT_PRIORITY = int(os.environ.get("PQLAB_LINKEM_RT_PRIORITY", "10"))


def _run(argv: list[str], timeout: float = 20) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise TopologyError(f"{argv[0]} not found; install iproute2") from None
    except subprocess.TimeoutExpired:
        raise TopologyError(f"'{' '.join(argv)}' did not finish in {timeout:.0f} s") from None


@functools.lru_cache(maxsize=1)
def netem_available() -> tuple[bool, str]:
    """(True, how it was checked) if the kernel has the netem qdisc, else (False, why).

    Probed for real: a netem qdisc is added to the loopback device of a throwaway network
    namespace, which is deleted again."""
    if not shutil.which("tc"):
        return False, "tc (iproute2) is not installed"
    ns = f"pqlab-probe-{os.getpid()}"
    made = _run(["ip", "netns", "add", ns])
    if made.returncode != 0:
        return False, f"cannot create a namespace to probe netem: {made.stderr.strip()}"
    try:
        probe = _run(
            [
                "ip",
                "netns",
                "exec",
                ns,
                "tc",
                "qdisc",
                "add",
                "dev",
                "lo",
                "root",
                "netem",
                "delay",
                "1ms",
            ]
        )
    finally:
        _run(["ip", "netns", "del", ns])
    if probe.returncode == 0:
        return True, "a netem qdisc could be added in a probe namespace"
    err = probe.stderr.strip().splitlines()
    reason = err[-1] if err else f"tc exited with {probe.returncode}"
    return False, (
        f"the kernel refused a netem qdisc ({reason}); load it with "
        "'modprobe sch_netem' (on Ubuntu it is in linux-modules-extra-$(uname -r))"
    )


class NetemLink(VethLink):
    """A veth pair with netem (own rate) on both ends' egress."""

    kind = "netem"

    def __init__(self, profile: LinkProfile):
        self.profile = profile
        self.commands: list[list[str]] = []

    def qdisc_commands(self, topo) -> list[list[str]]:
        """The tc commands, per side: each end's egress carries one direction."""
        out = []
        for side, direction in (("client", self.profile.c2s), ("server", self.profile.s2c)):
            out.append(
                topo.exec_argv(
                    side,
                    [
                        "tc",
                        "qdisc",
                        "replace",
                        "dev",
                        topo.ifname(side),
                        "root",
                        "netem",
                        *direction.netem_args(),
                    ],
                )
            )
        return out

    def setup(self, topo) -> None:
        ok, why = netem_available()
        if not ok:
            raise UserError(f"--shaper netem: {why}; use --shaper userspace (or auto)")
        super().setup(topo)
        self.commands = self.qdisc_commands(topo)
        for argv in self.commands:
            proc = _run(argv)
            if proc.returncode != 0:
                raise TopologyError(f"'{' '.join(argv)}' failed: {proc.stderr.strip()}")

    def stats(self, topo) -> dict:
        """netem's own counters (sent, dropped, backlog) per side."""
        out = {}
        for side in SIDES:
            proc = _run(
                topo.exec_argv(side, ["tc", "-s", "-j", "qdisc", "show", "dev", topo.ifname(side)])
            )
            with contextlib.suppress(ValueError):
                out[side] = json.loads(proc.stdout or "[]")
        return out

    def describe(self) -> dict:
        return {
            "kind": self.kind,
            "profile": self.profile.describe(),
            "tc": [" ".join(c) for c in self.commands],
        }


class UserspaceLink(Link):
    """Two TUN devices joined by `pqlab-engine linkem` (one thread per direction).

    The engine creates both devices in the root namespace under temporary names; they are
    moved into the client and server namespaces, renamed and configured like a veth end. The
    devices belong to the engine process: when it exits they vanish, wherever they are."""

    kind = "userspace"

    def __init__(
        self,
        profile: LinkProfile,
        seed: int = 1,
        spin_us: int | None = None,
        lateness_samples: int = 20000,
        rt_priority: int = DEFAULT_RT_PRIORITY,
    ):
        self.profile = profile
        self.rt_priority = rt_priority
        self.seed = seed
        self.spin_us = spin_us
        self.lateness_samples = lateness_samples
        self.proc = None  # pqlab.tls.runner.EngineProcess while the link is up
        self.stats: list[dict] = []
        self.ready: dict = {}

    def engine_args(self, tun_a: str, tun_b: str) -> list[str]:
        args = [
            "linkem",
            "--tun-a",
            tun_a,
            "--tun-b",
            tun_b,
            "--config",
            json.dumps(self.profile.linkem_config(self.seed, ETHERNET_HEADER)),
            "--lateness-samples",
            str(self.lateness_samples),
        ]
        if self.rt_priority:
            args += ["--rt-priority", str(self.rt_priority)]
        if self.spin_us is not None:
            args += ["--spin-us", str(self.spin_us)]
        return args

    def setup(self, topo) -> None:
        from pqlab.tls.runner import EngineProcess

        n = next(_tun_counter)
        tmp = {
            "client": f"pqt{os.getpid() % 100000}-{n}a",
            "server": f"pqt{os.getpid() % 100000}-{n}b",
        }
        self.proc = EngineProcess(
            self.engine_args(tmp["client"], tmp["server"]), "the link emulator"
        )
        try:
            self.ready = self.proc.wait_for("linkem_ready", 10)
        except EngineError as e:
            raise type(e)(f"the link emulator did not start: {e}") from None
        for side in SIDES:
            ns, dev = topo.ns(side), topo.ifname(side)
            for cmd in (
                ["ip", "link", "set", "dev", tmp[side], "netns", ns],
                ["ip", "-n", ns, "link", "set", "dev", tmp[side], "name", dev],
                ["ip", "-n", ns, "link", "set", "dev", dev, "txqueuelen", "1000"],
            ):
                proc = _run(cmd)
                if proc.returncode != 0:
                    raise TopologyError(f"'{' '.join(cmd)}' failed: {proc.stderr.strip()}")
            topo.configure_interface(side)

    def teardown(self, topo) -> None:
        """Stop the emulator (SIGTERM: it prints one linkem_stats record per direction)."""
        proc = self.proc
        if proc is None or proc.returncode is not None:
            return
        proc.signal(signal.SIGTERM)
        try:
            proc.finish(10)
        finally:
            proc.stop()
            self.stats = proc.take("linkem_stats")

    def direction_stats(self) -> dict[str, dict]:
        """Engine counters per direction after teardown: 'c2s' and 's2c'."""
        names = {"a_to_b": "c2s", "b_to_a": "s2c"}
        return {names[s["direction"]]: s for s in self.stats}

    def describe(self) -> dict:
        d = {
            "kind": self.kind,
            "profile": self.profile.describe(),
            "seed": self.seed,
            "spin_us": self.ready.get("spin_us"),
            "rt_priority": self.ready.get("rt_priority"),
            "rt_error": self.ready.get("rt_error"),
            "ethernet_overhead_bytes": ETHERNET_HEADER,
        }
        if self.stats:
            d["stats"] = {
                k: {f: v for f, v in s.items() if f != "lateness_ns"}
                for k, s in self.direction_stats().items()
            }
        return d


def check_shaper(shaper: str) -> None:
    """Refuse a shaper this machine cannot provide. Commands call it while validating their
    input, before a run directory or a namespace exists."""
    if shaper not in SHAPERS:
        raise UserError(f"--shaper {shaper!r} is not one of {', '.join(SHAPERS)}")
    if shaper == "netem":
        ok, why = netem_available()
        if not ok:
            raise UserError(f"--shaper netem: {why}; use --shaper userspace (or auto)")


def make_link(profile: LinkProfile, shaper: str = "auto", seed: int = 1) -> Link:
    """The link for `profile` with the chosen backend. `link.choice` says which one and why
    (print it: users must know which emulator their numbers came from)."""
    check_shaper(shaper)
    if shaper == "netem":
        link: Link = NetemLink(profile)
        link.choice = "netem (asked for)"
    elif shaper == "userspace":
        link = UserspaceLink(profile, seed=seed)
        link.choice = "userspace (asked for)"
    else:
        ok, why = netem_available()
        if ok:
            link = NetemLink(profile)
            link.choice = "netem (auto: the kernel has netem)"
        else:
            link = UserspaceLink(profile, seed=seed)
            link.choice = f"userspace (auto: netem unavailable: {why})"
    return link


def build_hosts(
    profile: LinkProfile | None,
    shaper: str = "auto",
    tcp=None,
    pair=None,
    ssh_config: tuple[str, ...] = (),
):
    """The one topology builder: two hosts joined by a bare veth link (no profile; `tcp`
    settings or the defaults) or by the shaped link of `profile` (its MTU and TCP settings),
    with the chosen shaper; or, given a `pqlab.net.remote.HostPair`, the client and the
    server on those real hosts (reached over SSH with `ssh_config`), joined by the real
    network: nothing is shaped and the hosts' own TCP settings are read, not changed. Use as
    a context manager."""
    from pqlab.net.topology import TwoHosts

    if pair is not None:
        from pqlab.net.remote import RemoteHosts

        if profile is not None:
            raise UserError("a link profile shapes the lab's own link, not real hosts' network")
        return RemoteHosts(pair, ssh_config, tcp)
    if profile is None:
        return TwoHosts(tcp=tcp)
    return TwoHosts(link=make_link(profile, shaper), mtu=profile.mtu, tcp=profile.tcp_settings())
