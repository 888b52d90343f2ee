"""Shaped links between the two hosts: the kernel's netem, or pqlab's userspace emulator.

Both are `Link`s for `pqlab.net.topology.TwoHosts` and apply a `LinkProfile` per direction
with netem's semantics:

- `NetemLink`: each host's veth joined to a bridge in a namespace of the link's own, with a
  netem qdisc at the root of each bridge port (the port facing the server shapes
  client-to-server traffic, the one facing the client server-to-client), using netem's own
  `rate`.
- `UserspaceLink`: two TUN devices joined by `pqlab-engine linkem`, for kernels without netem.

Either way the link lies between the hosts' interfaces, where their captures are: a host's
capture sees a packet leave when the host sent it and arrive when the link delivered it, and
sees every packet the link lost leave. (A qdisc on a host's own interface would come before
that interface's packet sockets: its capture would show each packet only as netem released
it, delay included, and never one netem dropped.)

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
import socket
import struct
import subprocess
import threading
from dataclasses import dataclass

from pqlab.errors import EngineError, UserError
from pqlab.net import uml
from pqlab.net.profiles import Direction, LinkProfile
from pqlab.net.remote import RemoteHosts
from pqlab.net.topology import SIDES, Link, TopologyError, TwoHosts, delete_namespace
from pqlab.process import EngineProcess
from pqlab.specs import Arg, Spec

SHAPERS = ("auto", "netem", "userspace", "uml")
# What every --shaper option says of its choices.
SHAPER_CHOICES_HELP = (
    "netem (the kernel's qdisc), userspace (pqlab's TUN emulator), auto (netem when the "
    "kernel has it), or uml (the whole command inside a User-Mode Linux guest whose kernel "
    "has netem, where this host can boot one: `pqlab doctor` says)"
)


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


# --- netem as the kernel holds it (rtnetlink) -------------------------------------------
# `tc -j qdisc show` is not exact: iproute2 6.1 prints delays from the legacy tick field with
# six decimals, so the kernel's own values are read with an RTM_GETQDISC dump.
_NLMSG = struct.Struct("=IHHII")  # len, type, flags, seq, pid
_TCMSG = struct.Struct("=BxxxiIII")  # family, ifindex, handle, parent, info
_NETEM_QOPT = struct.Struct("=6I")  # latency (ticks), limit, loss, gap, duplicate, jitter
RTM_GETQDISC = 38
TCA_KIND, TCA_OPTIONS, TCA_STATS2 = 1, 2, 7
TCA_STATS_BASIC, TCA_STATS_QUEUE, TCA_STATS_PKT64 = 1, 3, 8
TCA_NETEM_CORR, TCA_NETEM_RATE, TCA_NETEM_RATE64 = 1, 6, 8
TCA_NETEM_LATENCY64, TCA_NETEM_JITTER64 = 10, 11
# The kernel's psched tick. iproute2 up to at least 6.1 passes delay and jitter to the kernel
# in these ticks after truncating them to whole microseconds (17.5 ms arrives as
# 17.499968 ms, 0.5 us as 0): values within one tick of the profile are what tc can do.
NETEM_TICK_NS = 64
U32 = 0xFFFFFFFF


def _rtattrs(buf: bytes) -> dict[int, bytes]:
    out, i = {}, 0
    while i + 4 <= len(buf):
        length, kind = struct.unpack_from("=HH", buf, i)
        if length < 4:
            break
        out[kind & 0x3FFF] = buf[i + 4 : i + length]
        i += (length + 3) & ~3
    return out


def parse_netem_options(opt: bytes) -> dict:
    """The kernel's netem settings from a TCA_OPTIONS attribute (struct tc_netem_qopt and
    the nested attributes after it), in exact units: ns, bytes per second, u32 fractions."""
    latency_ticks, limit, loss, gap, duplicate, jitter_ticks = _NETEM_QOPT.unpack_from(opt)
    nested = _rtattrs(opt[_NETEM_QOPT.size :])
    out = {
        "limit": limit,
        "latency_ns": latency_ticks * NETEM_TICK_NS,
        "jitter_ns": jitter_ticks * NETEM_TICK_NS,
        "loss_u32": loss,
        "delay_corr_u32": 0,
        "loss_corr_u32": 0,
        "rate_bytes_per_s": 0,
        "packet_overhead": 0,
        "gap": gap,
        "duplicate_u32": duplicate,
    }
    if TCA_NETEM_LATENCY64 in nested:
        out["latency_ns"] = struct.unpack("=q", nested[TCA_NETEM_LATENCY64][:8])[0]
    if TCA_NETEM_JITTER64 in nested:
        out["jitter_ns"] = struct.unpack("=q", nested[TCA_NETEM_JITTER64][:8])[0]
    if TCA_NETEM_CORR in nested:
        out["delay_corr_u32"], out["loss_corr_u32"], _ = struct.unpack_from(
            "=3I", nested[TCA_NETEM_CORR]
        )
    if TCA_NETEM_RATE in nested:
        rate, overhead = struct.unpack_from("=Ii", nested[TCA_NETEM_RATE])
        out["rate_bytes_per_s"], out["packet_overhead"] = rate, overhead
    if TCA_NETEM_RATE64 in nested:
        out["rate_bytes_per_s"] = max(
            out["rate_bytes_per_s"], struct.unpack("=Q", nested[TCA_NETEM_RATE64][:8])[0]
        )
    return out


def parse_qdisc_stats(stats2: bytes) -> dict:
    """A qdisc's counters from its TCA_STATS2 attribute (gnet_stats_basic, _queue)."""
    nested = _rtattrs(stats2)
    out = {"sent_bytes": 0, "sent_packets": 0}
    if TCA_STATS_BASIC in nested:
        out["sent_bytes"], out["sent_packets"] = struct.unpack_from("=QI", nested[TCA_STATS_BASIC])
    if TCA_STATS_PKT64 in nested:  # the packet count without the 32-bit wrap (kernel 5.13+)
        out["sent_packets"] = struct.unpack_from("=Q", nested[TCA_STATS_PKT64])[0]
    if TCA_STATS_QUEUE in nested:
        qlen, backlog, drops, requeues, overlimits = struct.unpack_from(
            "=5I", nested[TCA_STATS_QUEUE]
        )
        out.update(
            drops=drops,
            overlimits=overlimits,
            requeues=requeues,
            backlog_bytes=backlog,
            queued_packets=qlen,
        )
    return out


def read_netem(ifname: str) -> dict | None:
    """The root netem qdisc of `ifname` in this process's network namespace, as the kernel
    holds it (`parse_netem_options`, plus its counters under 'stats'), or None if its root
    qdisc is not netem."""
    ifindex = socket.if_nametoindex(ifname)
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0) as s:  # NETLINK_ROUTE
        s.settimeout(5)
        s.bind((0, 0))
        body = _TCMSG.pack(socket.AF_UNSPEC, ifindex, 0, 0, 0)
        flags = 0x1 | 0x300  # NLM_F_REQUEST | NLM_F_DUMP
        s.send(_NLMSG.pack(_NLMSG.size + len(body), RTM_GETQDISC, flags, 1, 0) + body)
        found = None
        while True:
            data, i = s.recv(1 << 16), 0
            while i + _NLMSG.size <= len(data):
                length, kind = _NLMSG.unpack_from(data, i)[:2]
                if kind == 3:  # NLMSG_DONE
                    return found
                if kind == 2:  # NLMSG_ERROR
                    raise OSError(f"RTM_GETQDISC failed on {ifname}")
                _, index, _, parent, _ = _TCMSG.unpack_from(data, i + _NLMSG.size)
                attrs = _rtattrs(data[i + _NLMSG.size + _TCMSG.size : i + length])
                if (
                    index == ifindex
                    and parent == U32  # TC_H_ROOT
                    and attrs.get(TCA_KIND, b"").rstrip(b"\0") == b"netem"
                ):
                    found = parse_netem_options(attrs[TCA_OPTIONS])
                    found["stats"] = parse_qdisc_stats(attrs.get(TCA_STATS2, b""))
                i += (length + 3) & ~3


CLONE_NEWNET = 0x40000000


def _setns(fd: int) -> None:
    if hasattr(os, "setns"):  # Python 3.12
        os.setns(fd, CLONE_NEWNET)
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def read_netem_in(netns: str, ifname: str) -> dict | None:
    """`read_netem(ifname)` inside the named network namespace (/run/netns/NAME), without
    starting a process: a short-lived thread joins the namespace (setns affects only the
    calling thread) and asks there."""
    result: dict = {}

    def ask() -> None:
        try:
            fd = os.open(f"/run/netns/{netns}", os.O_RDONLY | os.O_CLOEXEC)
            try:
                _setns(fd)
            finally:
                os.close(fd)
            result["held"] = read_netem(ifname)
        except OSError as e:
            result["error"] = e

    thread = threading.Thread(target=ask, name=f"netem-readback-{netns}", daemon=True)
    thread.start()
    thread.join(30)
    if thread.is_alive():
        raise OSError(f"reading netem back in {netns} did not finish in 30 s")
    if "error" in result:
        raise result["error"]
    return result["held"]


def _fraction_u32(pct: float) -> int:
    """A percentage as netem's u32 fraction, rounded as tc rounds it."""
    return round(pct / 100 * U32)


def applied_problems(direction: Direction, held: dict | None) -> list[str]:
    """How the kernel's netem (`read_netem`) differs from `direction`; [] if it is the
    profile within tc's resolution (delays: one tick; fractions: one part in 2^32)."""
    if held is None:
        return ["no netem qdisc at the root of the interface"]
    want = {
        "limit": (direction.limit, 0),
        "latency_ns": (round(direction.delay_s * 1e9), NETEM_TICK_NS),
        "jitter_ns": (round(direction.jitter_s * 1e9), NETEM_TICK_NS),
        "loss_u32": (_fraction_u32(direction.loss_pct), 1),
        "loss_corr_u32": (_fraction_u32(direction.loss_corr_pct), 1),
        "rate_bytes_per_s": (round(direction.rate_bps or 0) // 8, 0),
        "packet_overhead": (0, 0),
    }
    if direction.jitter_s:
        want["delay_corr_u32"] = (_fraction_u32(direction.delay_corr_pct), 1)
    return [
        f"{key} is {held[key]}, the profile asks for {value}"
        for key, (value, slack) in want.items()
        if abs(held[key] - value) > slack
    ]


class NetemLink(Link):
    """Each host's veth joined to a bridge in the link's own namespace, netem (own rate) at
    the root of each bridge port: the port facing the server carries client-to-server
    traffic, the one facing the client server-to-client (see the module docstring)."""

    kind = "netem"
    BRIDGE = "pqlab-br"
    # The bridge port facing each host, and the direction its egress carries.
    PORTS = {"client": ("pqlab-lc", "s2c"), "server": ("pqlab-ls", "c2s")}

    def __init__(self, profile: LinkProfile):
        self.profile = profile
        self.commands: list[list[str]] = []
        self.applied: dict[str, dict] = {}  # per direction, as the kernel holds it
        self.stats: dict[str, dict] = {}  # per direction, netem's counters at teardown
        self.ns = ""  # the link's namespace while it is up

    def _in_link(self, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.ns, *argv]

    def _port(self, direction: str) -> str:
        return next(port for port, carried in self.PORTS.values() if carried == direction)

    def qdisc_commands(self, topo) -> list[list[str]]:
        """The tc commands, one per direction, on the bridge port it leaves by. `add`, not
        `replace`: replacing an existing netem keeps every setting the new command leaves
        out (its rate, its correlations), so a fresh interface must get a fresh qdisc."""
        return [
            self._in_link(
                [
                    "tc",
                    "qdisc",
                    "add",
                    "dev",
                    self._port(name),
                    "root",
                    "netem",
                    *direction.netem_args(),
                ]
            )  # fmt: skip
            for name, direction in (("c2s", self.profile.c2s), ("s2c", self.profile.s2c))
        ]

    def _wire(self, topo) -> list[list[str]]:
        """The commands that make the link's namespace, its bridge and the two veth pairs,
        each port like a host's end (the topology's MTU, offloads off) and up."""
        out = [
            ["ip", "netns", "add", self.ns],
            self._in_link(["ip", "link", "add", self.BRIDGE, "type", "bridge", "stp_state", "0",
                           "forward_delay", "0"]),
        ]  # fmt: skip
        for side, (port, _) in self.PORTS.items():
            out += [
                ["ip", "link", "add", topo.ifname(side), "netns", topo.ns(side), "type", "veth",
                 "peer", "name", port, "netns", self.ns],
                self._in_link(["ip", "link", "set", "dev", port, "mtu", str(topo.mtu)]),
                self._in_link(["ethtool", "-K", port, "tso", "off", "gso", "off", "gro", "off"]),
                self._in_link(["ip", "link", "set", "dev", port, "master", self.BRIDGE]),
                self._in_link(["ip", "link", "set", "dev", port, "up"]),
            ]  # fmt: skip
        out.append(self._in_link(["ip", "link", "set", "dev", self.BRIDGE, "up"]))
        return out

    def setup(self, topo) -> None:
        ok, why = netem_available()
        if not ok:
            raise UserError(f"--shaper netem: {why}; use --shaper userspace (or auto)")
        self.ns = topo.link_ns
        for argv in self._wire(topo):
            proc = _run(argv)
            if proc.returncode != 0:
                raise TopologyError(f"'{' '.join(argv)}' failed: {proc.stderr.strip()}")
        for side in SIDES:
            topo.configure_interface(side)
        self.commands = self.qdisc_commands(topo)
        for argv in self.commands:
            proc = _run(argv)
            if proc.returncode != 0:
                raise TopologyError(f"'{' '.join(argv)}' failed: {proc.stderr.strip()}")
        self.check_applied(topo)

    def check_applied(self, topo) -> None:
        """Read each port's netem back from the kernel and refuse a link that is not the
        profile (tc rounds delays to whole microseconds and 64-ns ticks, silently)."""
        for name, direction in (("c2s", self.profile.c2s), ("s2c", self.profile.s2c)):
            port = self._port(name)
            try:
                held = read_netem_in(self.ns, port)
            except OSError as e:
                raise TopologyError(f"cannot read netem back on {port}: {e}") from None
            problems = applied_problems(direction, held)
            if problems:
                raise TopologyError(
                    f"netem on {port} ({name}) is not the profile "
                    f"{self.profile.name!r}: {'; '.join(problems)}. tc passes delays in "
                    "whole microseconds (then 64-ns ticks): give one-way delays and jitter "
                    "in whole microseconds (an rtt in an even number of them), or use "
                    "--shaper userspace"
                )
            self.applied[name] = {k: v for k, v in held.items() if k != "stats"}

    def teardown(self, topo) -> None:
        """netem's counters per direction, read before the link's namespace goes with its
        bridge and ports (and, with them, the hosts' ends of the veth pairs)."""
        if not self.ns:
            return
        try:
            for name in ("c2s", "s2c"):
                with contextlib.suppress(OSError):
                    held = read_netem_in(self.ns, self._port(name))
                    if held is not None:
                        self.stats[name] = held["stats"]
        finally:
            delete_namespace(self.ns)
            self.ns = ""

    def direction_stats(self) -> dict[str, dict]:
        """netem's counters per direction ('c2s', 's2c') after teardown: packets and bytes
        sent (bytes include the 14-byte Ethernet header), drops (random loss and the queue
        limit together: netem counts both as drops)."""
        return dict(self.stats)

    def describe(self) -> dict:
        d = {
            "kind": self.kind,
            "profile": self.profile.describe(),
            "where": "a bridge in the link's own namespace between the hosts' interfaces",
            "ports": {name: port for port, name in self.PORTS.values()},
            "tc": [" ".join(c) for c in self.commands],
            "applied": self.applied,
        }
        if self.stats:
            d["stats"] = self.direction_stats()
        return d


@dataclass(frozen=True)
class LinkemSpec(Spec):
    """`linkem`: the emulator between two TUN devices it creates (`tun_a` the client side,
    `tun_b` the server side), with the link's parameters per direction and its seed
    (`config`, JSON), how many release-lateness samples it keeps, its real-time priority
    (None: normal scheduling) and its busy-poll before each deadline (None: the engine's)."""

    tun_a: str
    tun_b: str
    config: str
    lateness_samples: int | None = None
    rt_priority: int | None = None
    spin_us: int | None = None

    COMMAND = ("linkem",)
    ARGS = (
        Arg("tun_a", "--tun-a"),
        Arg("tun_b", "--tun-b"),
        Arg("config", "--config"),
        Arg("lateness_samples", "--lateness-samples"),
        Arg("rt_priority", "--rt-priority"),
        Arg("spin_us", "--spin-us"),
    )


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

    def spec(self, tun_a: str, tun_b: str) -> LinkemSpec:
        return LinkemSpec(
            tun_a=tun_a,
            tun_b=tun_b,
            config=json.dumps(self.profile.linkem_config(self.seed, ETHERNET_HEADER)),
            lateness_samples=self.lateness_samples,
            rt_priority=self.rt_priority or None,
            spin_us=self.spin_us,
        )

    def setup(self, topo) -> None:

        n = next(_tun_counter)
        tmp = {
            "client": f"pqt{os.getpid() % 100000}-{n}a",
            "server": f"pqt{os.getpid() % 100000}-{n}b",
        }
        spec = self.spec(tmp["client"], tmp["server"])
        self.proc = EngineProcess(spec.argv(), "the link emulator", spec.program)
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
    if shaper == "uml":
        ok, why = uml.available()
        if not ok:
            raise UserError(f"--shaper uml: {why}; use --shaper userspace (or auto)")


def make_link(profile: LinkProfile, shaper: str = "auto", seed: int = 1) -> Link:
    """The link for `profile` with the chosen backend. `link.choice` says which one and why
    (print it: users must know which emulator their numbers came from)."""
    check_shaper(shaper)
    if shaper == "uml":
        # The command re-runs itself in the guest with --shaper netem (`pqlab.net.guest`);
        # a link is never built for "uml" on the host.
        raise UserError("--shaper uml runs the whole command in the guest, not one link")
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
    mtu: int | None = None,
):
    """The one topology builder: two hosts joined by a bare veth link (no profile; `tcp`
    settings or the defaults; `mtu` or 1500 bytes) or by the shaped link of `profile` (its
    MTU and TCP settings),
    with the chosen shaper; or, given a `pqlab.net.remote.HostPair`, the client and the
    server on those real hosts (reached over SSH with `ssh_config`), joined by the real
    network: nothing is shaped and the hosts' own TCP settings are read, not changed. Use as
    a context manager."""

    if pair is not None:
        if profile is not None:
            raise UserError("a link profile shapes the lab's own link, not real hosts' network")
        return RemoteHosts(pair, ssh_config, tcp)
    if profile is None:
        return TwoHosts(tcp=tcp, mtu=mtu or 1500)
    return TwoHosts(link=make_link(profile, shaper), mtu=profile.mtu, tcp=profile.tcp_settings())
