"""Two hosts on one machine: a client and a server network namespace joined by a link.

`with TwoHosts() as topo:` creates both namespaces, lets the link (a veth pair by default;
shaped links subclass `Link`) create one interface in each, sets a 1500-byte MTU, turns
segmentation offloads off so captures show MSS-sized segments, applies the TCP settings
(congestion control, initcwnd) and tears everything down again on normal exit, exceptions,
Ctrl-C and SIGTERM. Namespaces are named `pqlab-<pid>-<n>-c|s` (and `-l` for a link that
needs one of its own, `pqlab.net.shaping.NetemLink`); ones left by a process
that died without cleaning up are removed when the next topology starts.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import re
import signal
import subprocess
import threading
import time
from dataclasses import asdict, dataclass, field

from pqlab.errors import Interrupted, UserError
from pqlab.net import privileges

SIDES = ("client", "server")
_NS_RE = re.compile(r"^pqlab-(\d+)-(\d+)-[csl]$")
# Features that make captures show super-packets instead of wire segments.
OFFLOADS_OFF = ("tso", "gso", "gro")
OFFLOADS_OPTIONAL = ("lro", "tx-gso-partial", "tx-udp-segmentation", "rx-gro-list")
# What describe() reads back (ethtool -k long names).
OFFLOAD_FEATURES = (
    "tcp-segmentation-offload",
    "generic-segmentation-offload",
    "generic-receive-offload",
    "large-receive-offload",
    "rx-gro-list",
    "tx-checksumming",
    "rx-checksumming",
)

_counter = itertools.count()
_active: list[TwoHosts] = []
_lock = threading.Lock()
# Signal handlers in force before the first topology came up (restored after the last).
_saved_handlers: dict[int, object] = {}


def _on_signal(signum, frame):
    raise Interrupted(signum)


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _install_handlers() -> None:
    """While any topology is up, SIGINT and SIGTERM raise `Interrupted` (a KeyboardInterrupt),
    so the `with` block unwinds and tears down (also when used outside the CLI)."""
    if not _in_main_thread() or _saved_handlers:
        return
    for sig, handler in ((signal.SIGTERM, _on_signal), (signal.SIGINT, _on_signal)):
        _saved_handlers[sig] = signal.getsignal(sig)
        signal.signal(sig, handler)


def _quiet_signals() -> dict[int, object]:
    """Ignore SIGINT/SIGTERM during a teardown (a second Ctrl-C must not cut it short)."""
    if not _in_main_thread():
        return {}
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in before:
        signal.signal(sig, signal.SIG_IGN)
    return before


def _after_teardown(before: dict[int, object]) -> None:
    if not _in_main_thread():
        return
    with _lock:
        last = not _active
    if last and _saved_handlers:
        for sig, old in _saved_handlers.items():
            with contextlib.suppress(Exception):
                signal.signal(sig, old)
        _saved_handlers.clear()
    else:
        for sig, old in before.items():
            with contextlib.suppress(Exception):
                signal.signal(sig, old)


class TopologyError(UserError):
    """Building or tearing down the topology failed (message says which command)."""


def _sh(argv: list[str], check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise TopologyError(f"{argv[0]} not found; install iproute2 and ethtool") from None
    except subprocess.TimeoutExpired:
        raise TopologyError(f"'{' '.join(argv)}' did not finish in {timeout:.0f} s") from None
    if check and proc.returncode != 0:
        raise TopologyError(f"'{' '.join(argv)}' failed: {proc.stderr.strip() or proc.returncode}")
    return proc


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def list_namespaces() -> list[str]:
    out = _sh(["ip", "netns", "list"], check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _kill_namespace_pids(ns: str) -> None:
    pids = _sh(["ip", "netns", "pids", ns], check=False).stdout.split()
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = []
        for p in pids:
            with contextlib.suppress(ProcessLookupError, ValueError, PermissionError):
                os.kill(int(p), sig)
                alive.append(p)
        if not alive:
            return
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline and any(_pid_alive(int(p)) for p in alive):
            time.sleep(0.02)
        pids = [p for p in alive if _pid_alive(int(p))]


def delete_namespace(ns: str) -> None:
    _kill_namespace_pids(ns)
    _sh(["ip", "netns", "del", ns], check=False)


def cleanup_stale() -> list[str]:
    """Delete pqlab namespaces (and processes in them) whose creating process is gone."""
    removed = []
    with _lock:
        ours = {n for t in _active for n in (t.client_ns, t.server_ns)}
    for ns in list_namespaces():
        m = _NS_RE.match(ns)
        if not m:
            continue
        pid = int(m.group(1))
        # Also a namespace carrying our own pid but no live topology of ours: left by an
        # earlier process that had this pid.
        if (pid == os.getpid() and ns not in ours) or (pid != os.getpid() and not _pid_alive(pid)):
            delete_namespace(ns)
            removed.append(ns)
    return removed


class Link:
    """What joins the two namespaces. Subclasses create `topo.client_if` in
    `topo.client_ns` and `topo.server_if` in `topo.server_ns`, then call
    `topo.configure_interface(side)` for each (MTU, offloads off, address, up)."""

    kind = "base"

    def setup(self, topo: TwoHosts) -> None:
        raise NotImplementedError

    def teardown(self, topo: TwoHosts) -> None:
        """Remove what setup made outside the namespaces (deleting a namespace already
        removes the interfaces inside it)."""

    def describe(self) -> dict:
        return {"kind": self.kind}


class VethLink(Link):
    """A veth pair, one end in each namespace: no shaping, the kernel's own forwarding."""

    kind = "veth"

    def setup(self, topo: TwoHosts) -> None:
        # Created directly inside the namespaces, so nothing ever sits in the root one.
        _sh(
            [
                "ip",
                "link",
                "add",
                topo.client_if,
                "netns",
                topo.client_ns,
                "type",
                "veth",
                "peer",
                "name",
                topo.server_if,
                "netns",
                topo.server_ns,
            ]
        )
        for side in SIDES:
            topo.configure_interface(side)

    def describe(self) -> dict:
        return {"kind": self.kind}


@dataclass
class TcpSettings:
    congestion_control: str = "cubic"  # per namespace; must be available in the kernel
    initcwnd: int | None = None  # `ip route change ... initcwnd N` on both sides
    initrwnd: int | None = None

    def validate(self) -> None:
        if not re.fullmatch(r"[a-z0-9_]+", self.congestion_control or ""):
            raise UserError(
                f"congestion control {self.congestion_control!r} is not a name "
                "like cubic, reno, bbr"
            )
        for name in ("initcwnd", "initrwnd"):
            v = getattr(self, name)
            if v is not None and not (1 <= int(v) <= 1000):
                raise UserError(f"{name} {v!r} is out of range 1..1000 segments")


@dataclass
class TwoHosts:
    """A client and a server namespace joined by `link`. Use as a context manager."""

    link: Link | None = None
    mtu: int = 1500
    tcp: TcpSettings | None = None
    client_ip: str = "198.18.0.1"
    server_ip: str = "198.18.0.2"
    prefix_len: int = 24
    client_if: str = "pqlab-c"
    server_if: str = "pqlab-s"
    client_ns: str = field(init=False, default="")
    server_ns: str = field(init=False, default="")

    def __post_init__(self) -> None:
        if self.link is None:
            self.link = VethLink()
        if self.tcp is None:
            self.tcp = TcpSettings()
        if not (576 <= int(self.mtu) <= 65535):
            raise UserError(f"MTU {self.mtu!r} is out of range 576..65535")
        self.tcp.validate()
        n = next(_counter)
        base = f"pqlab-{os.getpid()}-{n}"
        self.client_ns, self.server_ns = f"{base}-c", f"{base}-s"
        self._procs: list[subprocess.Popen] = []
        self._up = False
        self._notes: list[str] = []
        self._cc_set: dict[str, str] = {}

    # --- naming helpers -----------------------------------------------------------------
    def ns(self, side: str) -> str:
        if side not in SIDES:
            raise ValueError(f"side must be 'client' or 'server', not {side!r}")
        return self.client_ns if side == "client" else self.server_ns

    def ifname(self, side: str) -> str:
        return self.client_if if side == "client" else self.server_if

    @property
    def link_ns(self) -> str:
        """The name for a namespace of the link's own (`pqlab.net.shaping.NetemLink`'s):
        removed like the hosts' when a process dies before tearing it down."""
        return self.client_ns[: -len("-c")] + "-l"

    def ip_of(self, side: str) -> str:
        return self.client_ip if side == "client" else self.server_ip

    # --- running things inside ----------------------------------------------------------
    def exec_argv(self, side: str, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.ns(side), *map(str, argv)]

    def run(self, side: str, argv: list[str], **kw) -> subprocess.CompletedProcess:
        """Run argv inside that side's namespace and wait (kw as subprocess.run)."""
        if "stdout" not in kw and "stderr" not in kw:
            kw.setdefault("capture_output", True)
        kw.setdefault("text", True)
        kw.setdefault("timeout", 600)
        return subprocess.run(self.exec_argv(side, argv), **kw)

    def popen(self, side: str, argv: list[str], **kw) -> subprocess.Popen:
        """Start argv inside that side's namespace; killed at teardown if still running."""
        proc = subprocess.Popen(self.exec_argv(side, argv), **kw)
        self._procs.append(proc)
        return proc

    def sh(self, side: str, argv: list[str], check: bool = True) -> subprocess.CompletedProcess:
        return _sh(self.exec_argv(side, argv), check=check)

    # --- building -------------------------------------------------------------------------
    def configure_interface(self, side: str) -> None:
        """MTU, offloads off (checked), address, up: for links that created the interface."""
        dev = self.ifname(side)
        self.sh(side, ["ip", "link", "set", "dev", dev, "mtu", str(self.mtu)])
        args = []
        for feat in OFFLOADS_OFF:
            args += [feat, "off"]
        self.sh(side, ["ethtool", "-K", dev, *args])
        for feat in OFFLOADS_OPTIONAL:  # not every device has these; fixed ones stay
            self.sh(side, ["ethtool", "-K", dev, feat, "off"], check=False)
        state = self.offloads(side)
        on = [
            k
            for k in (
                "tcp-segmentation-offload",
                "generic-segmentation-offload",
                "generic-receive-offload",
            )
            if state.get(k, "off").startswith("on")
        ]
        if on:
            raise TopologyError(f"could not turn off {', '.join(on)} on {dev} in {self.ns(side)}")
        self.sh(side, ["ip", "addr", "add", f"{self.ip_of(side)}/{self.prefix_len}", "dev", dev])
        self.sh(side, ["ip", "link", "set", "dev", dev, "up"])

    def offloads(self, side: str) -> dict[str, str]:
        out = self.sh(side, ["ethtool", "-k", self.ifname(side)], check=False).stdout
        state = {}
        for line in out.splitlines():
            if ":" in line and not line.startswith("Features"):
                k, v = line.split(":", 1)
                k = k.strip()
                if k in OFFLOAD_FEATURES:
                    state[k] = v.strip()
        return state

    def _ensure_cc_allowed(self, cc: str) -> None:
        path = "/proc/sys/net/ipv4/tcp_allowed_congestion_control"
        avail = open("/proc/sys/net/ipv4/tcp_available_congestion_control").read().split()
        if cc not in avail:
            # Loading the module makes it available (tcp_cubic is usually built in).
            with contextlib.suppress(OSError):
                subprocess.run(["modprobe", f"tcp_{cc}"], capture_output=True, timeout=30)
            avail = open("/proc/sys/net/ipv4/tcp_available_congestion_control").read().split()
            if cc not in avail:
                raise TopologyError(
                    f"congestion control {cc!r} is not available in this kernel "
                    f"(available: {', '.join(avail)})"
                )
        allowed = open(path).read().split()
        if cc not in allowed:
            with open(path, "w") as f:
                f.write(" ".join([*allowed, cc]))
            self._notes.append(f"added {cc} to the host's net.ipv4.tcp_allowed_congestion_control")

    def _apply_tcp(self) -> None:
        tcp = self.tcp
        for side in SIDES:
            self.sh(
                side, ["sysctl", "-qw", f"net.ipv4.tcp_congestion_control={tcp.congestion_control}"]
            )
            got = self.sh(side, ["sysctl", "-n", "net.ipv4.tcp_congestion_control"]).stdout.strip()
            if got != tcp.congestion_control:
                raise TopologyError(
                    f"congestion control in {self.ns(side)} is {got}, "
                    f"asked for {tcp.congestion_control}"
                )
            self._cc_set[side] = got
            if tcp.initcwnd is not None or tcp.initrwnd is not None:
                route = self._route(side)
                extra = []
                if tcp.initcwnd is not None:
                    extra += ["initcwnd", str(int(tcp.initcwnd))]
                if tcp.initrwnd is not None:
                    extra += ["initrwnd", str(int(tcp.initrwnd))]
                self.sh(side, ["ip", "route", "change", *route.split(), *extra])

    def _route(self, side: str) -> str:
        out = self.sh(side, ["ip", "-4", "route", "show", "dev", self.ifname(side)]).stdout
        for line in out.splitlines():
            if line.strip():
                # "198.18.0.0/24 proto kernel scope link src 198.18.0.1 [initcwnd N]"
                words = re.sub(r"\s(initcwnd|initrwnd)\s+\d+", "", line).split()
                return " ".join([*words[:1], "dev", self.ifname(side), *words[1:]])
        raise TopologyError(f"no route on {self.ifname(side)} in {self.ns(side)}")

    def start(self) -> TwoHosts:
        privileges.require_net_admin()
        cleanup_stale()
        self._ensure_cc_allowed(self.tcp.congestion_control)
        with _lock:
            _active.append(self)
        _install_handlers()
        self._up = True
        try:
            for ns in (self.client_ns, self.server_ns):
                _sh(["ip", "netns", "add", ns])
            for side in SIDES:
                self.sh(side, ["ip", "link", "set", "lo", "up"])
            self.link.setup(self)
            self._apply_tcp()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Kill tracked processes, let the link clean up, delete both namespaces."""
        if not self._up:
            return
        self._up = False
        before = _quiet_signals()
        try:
            for proc in self._procs:
                if proc.poll() is None:
                    proc.terminate()
            deadline = time.monotonic() + 3.0
            for proc in self._procs:
                try:
                    proc.wait(timeout=max(0.05, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    proc.kill()
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.wait(timeout=2)
            with contextlib.suppress(Exception):
                self.link.teardown(self)
            for ns in (self.client_ns, self.server_ns):
                delete_namespace(ns)
        finally:
            with _lock:
                if self in _active:
                    _active.remove(self)
            _after_teardown(before)

    def __enter__(self) -> TwoHosts:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # --- what ran -------------------------------------------------------------------------
    def describe(self) -> dict:
        """The network as it actually is (read back), for the run's metadata."""
        sides = {}
        for side in SIDES:
            mtu = None
            out = self.sh(
                side, ["ip", "-o", "link", "show", "dev", self.ifname(side)], check=False
            ).stdout
            m = re.search(r"\bmtu (\d+)", out)
            if m:
                mtu = int(m.group(1))
            route = self.sh(
                side, ["ip", "-4", "route", "show", "dev", self.ifname(side)], check=False
            ).stdout.strip()
            cwnd = re.search(r"initcwnd (\d+)", route)
            rwnd = re.search(r"initrwnd (\d+)", route)
            ts = self.sh(
                side, ["sysctl", "-n", "net.ipv4.tcp_timestamps"], check=False
            ).stdout.strip()
            sides[side] = {
                "namespace": self.ns(side),
                "interface": self.ifname(side),
                "address": self.ip_of(side),
                "mtu": mtu,
                "offloads": self.offloads(side),
                "congestion_control": self.sh(
                    side, ["sysctl", "-n", "net.ipv4.tcp_congestion_control"], check=False
                ).stdout.strip(),
                "initcwnd": int(cwnd.group(1)) if cwnd else None,
                "initrwnd": int(rwnd.group(1)) if rwnd else None,
                "tcp_timestamps": ts,
                "route": route,
            }
        timestamps = sides["client"]["tcp_timestamps"] not in ("0", "")
        return {
            "link": {**self.link.describe(), "kind": self.link.kind},
            "mtu": self.mtu,
            # MSS advertised in the SYN; payload per segment is 12 bytes less with timestamps.
            "mss": self.mtu - 40,
            "mss_payload": self.mtu - 40 - (12 if timestamps else 0),
            "tcp": asdict(self.tcp),
            "congestion_control": self._cc_set.get("server") or self.tcp.congestion_control,
            "initcwnd": self.tcp.initcwnd,
            "sides": sides,
            "notes": list(self._notes),
        }


def teardown_all() -> None:
    """Stop every topology this process still has up (atexit safety net)."""
    for topo in list(_active):
        with contextlib.suppress(Exception):
            topo.stop()


atexit.register(teardown_all)
