"""Experiments across real hosts: `--server-host`, `--client-host`, `--inventory --pairs`.

The options (`OPTIONS`, shared by every TLS experiment), their validation (`plan`: every
host reached over SSH and checked before anything is created) and the topology
(`RemoteHosts`), which offers experiments what `pqlab.net.topology.TwoHosts` offers (the
TLS endpoints `server_ip`/`client_ip`, `ifname(side)`, processes per side, `tcp`, `link`,
`describe()`), so the TLS runner starts processes on whichever host a side is. A side is a
remote host (`pqlab.net.ssh.RemoteHost`) or this machine itself (no namespace).

`pqlab.net.shaping.build_hosts(..., pair=HostPair)` builds it. See docs/remote.md.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import secrets
import shlex
import subprocess
import sys
from dataclasses import dataclass, field, replace

from pqlab import metadata
from pqlab.errors import UserError
from pqlab.net import clock, inventory, ssh, topology
from pqlab.net.profiles import LinkProfile
from pqlab.net.topology import OFFLOAD_FEATURES, SIDES, TcpSettings, TopologyError

_SPEC = re.compile(
    r"^(?:(?P<user>[A-Za-z0-9_][A-Za-z0-9_.\-]*)@)?"
    r"(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_](?:[A-Za-z0-9_.\-]*[A-Za-z0-9_])?)"
    r"(?::(?P<port>[0-9]+))?$"
)
# ssh -o options pqlab passes on (each maps to an asyncssh setting); anything else is
# refused rather than silently ignored.
_SSH_O = {
    "proxyjump",
    "proxycommand",
    "userknownhostsfile",
    "identityfile",
    "identitiesonly",
    "port",
    "user",
    "connecttimeout",
    "hostkeyalias",
    "stricthostkeychecking",
}


@dataclass(frozen=True)
class HostSpec:
    """One host of a pair. `host` None: this machine itself (ansible_connection=local)."""

    name: str  # as the user named it: the --*-host text or the inventory name
    host: str | None
    user: str | None = None
    port: int | None = None
    key_files: tuple[str, ...] = ()
    ssh: tuple[tuple[str, str], ...] = ()  # (option, value) from ansible_ssh_*_args
    tls_address: str | None = None  # pqlab_tls_address: where the client connects

    @property
    def local(self) -> bool:
        return self.host is None

    def options(self, config: tuple[str, ...]) -> ssh.SshOptions:
        opts = ssh.SshOptions(
            host=self.host or "localhost",
            port=self.port,
            user=self.user,
            key_files=self.key_files,
            config=config,
        )
        for key, value in self.ssh:
            opts = _apply_ssh_option(opts, key, value, self.name)
        return opts


def parse_host(text: str, option: str = "--server-host") -> HostSpec:
    """`[user@]host[:port]` (IPv6 in brackets); UserError naming the option otherwise."""
    m = _SPEC.match((text or "").strip())
    if not m:
        raise UserError(
            f"{option} {text!r} is not [USER@]HOST[:PORT] (e.g. root@10.0.0.2 or "
            "ubuntu@server.example:2222)"
        )
    port = None
    if m.group("port"):
        port = int(m.group("port"))
        if not 1 <= port <= 65535:
            raise UserError(f"{option} {text!r}: port {port} is not 1-65535")
    return HostSpec(
        name=text.strip(), host=m.group("host").strip("[]"), user=m.group("user"), port=port
    )


def _apply_ssh_option(opts: ssh.SshOptions, key: str, value: str, where: str):
    k = key.lower()
    if k not in _SSH_O:
        raise UserError(
            f"{where}: SSH option {key} is not supported by pqlab (it passes on ProxyJump, "
            "ProxyCommand, UserKnownHostsFile, IdentityFile, IdentitiesOnly, Port, User, "
            "ConnectTimeout, HostKeyAlias); put others in --ssh-config"
        )
    if k == "stricthostkeychecking":
        if value.lower() != "yes":
            raise UserError(
                f"{where}: StrictHostKeyChecking={value}: pqlab always checks host keys "
                "against known_hosts; add the host's key there instead"
            )
        return opts
    if k in ("port", "connecttimeout") and not value.isdigit():
        raise UserError(f"{where}: {key}={value!r} is not a number")
    changes = {
        "proxyjump": {"proxy_jump": value},
        "proxycommand": {"proxy_command": value},
        "userknownhostsfile": {"known_hosts": value},
        "identityfile": {"key_files": (*opts.key_files, value)},
        "identitiesonly": {"identities_only": value.lower() == "yes"},
        "port": {"port": int(value) if value.isdigit() else None},
        "user": {"user": value},
        "connecttimeout": {"connect_timeout": float(value) if value.isdigit() else 20.0},
        "hostkeyalias": {"host_key_alias": value},
    }[k]
    return replace(opts, **changes)


def parse_ssh_args(text: str, where: str) -> tuple[tuple[str, str], ...]:
    """ansible_ssh_common_args / ansible_ssh_extra_args: -o Key=Value, -i, -p, -l, -J."""
    try:
        words = shlex.split(text or "")
    except ValueError as e:
        raise UserError(f"{where}: {e}") from None
    out: list[tuple[str, str]] = []
    flags = {"-i": "IdentityFile", "-p": "Port", "-l": "User", "-J": "ProxyJump"}
    i = 0
    while i < len(words):
        w = words[i]
        flag, inline = w[:2], w[2:]
        if flag not in (*flags, "-o"):
            raise UserError(f"{where}: SSH argument {w!r} is not supported (-o, -i, -p, -l, -J)")
        if inline:
            value = inline
        elif i + 1 < len(words):
            i += 1
            value = words[i]
        else:
            raise UserError(f"{where}: {w} needs a value")
        if flag == "-o":
            key, sep, v = value.partition("=")
            if not sep:
                key, _, v = value.partition(" ")
            out.append((key.strip(), v.strip()))
        else:
            out.append((flags[flag], value))
        i += 1
    return tuple(out)


def spec_from_inventory(inv, name: str) -> HostSpec:
    v = inv.host_vars(name)
    where = f"{inv.path}: host {name}"
    conn = v.get("ansible_connection", "ssh")
    if conn == "local":
        return HostSpec(name=name, host=None, tls_address=v.get("pqlab_tls_address"))
    if conn not in ("ssh", "paramiko", "smart"):
        raise UserError(f"{where}: ansible_connection={conn} (pqlab uses ssh or local)")
    port = v.get("ansible_port") or v.get("ansible_ssh_port")
    if port is not None and not (str(port).isdigit() and 1 <= int(port) <= 65535):
        raise UserError(f"{where}: ansible_port={port!r} is not 1-65535")
    keys = v.get("ansible_ssh_private_key_file") or v.get("ansible_private_key_file")
    args = " ".join(
        a for a in (v.get("ansible_ssh_common_args"), v.get("ansible_ssh_extra_args")) if a
    )
    host = v.get("ansible_host") or v.get("ansible_ssh_host") or name
    spec = HostSpec(
        name=name,
        host=host,
        user=v.get("ansible_user") or v.get("ansible_ssh_user"),
        port=int(port) if port else None,
        key_files=(keys,) if keys else (),
        ssh=parse_ssh_args(args, where),
        tls_address=v.get("pqlab_tls_address"),
    )
    parse_host(f"{spec.host}", f"{where}: ansible_host")  # a valid host name or address
    return spec


@dataclass(frozen=True)
class HostPair:
    """Where the client and the server run (None: this machine)."""

    client: HostSpec | None
    server: HostSpec | None

    @property
    def label(self) -> str:
        def name(s):
            return "local" if s is None or s.local else s.name

        return f"{name(self.client)}->{name(self.server)}"

    def side(self, side: str) -> HostSpec | None:
        return self.client if side == "client" else self.server


def pairs_from_inventory(path: str, patterns: list[str]) -> list[HostPair]:

    if not patterns:
        raise UserError("--inventory needs --pairs CLIENTS:SERVERS (groups or hosts in it)")
    inv = inventory.load(path)
    pairs: list[HostPair] = []
    for text in patterns:
        a, sep, b = text.partition(":")
        if not sep or not a.strip() or not b.strip():
            raise UserError(f"--pairs {text!r} is not CLIENTS:SERVERS (e.g. tokyo:frankfurt)")
        for c in inv.resolve(a):
            for s in inv.resolve(b):
                if c == s:
                    continue
                pair = HostPair(spec_from_inventory(inv, c), spec_from_inventory(inv, s))
                if pair.client.local and pair.server.local:
                    continue
                if pair not in pairs:
                    pairs.append(pair)
    if not pairs:
        raise UserError(f"--pairs {' '.join(patterns)}: no pair of two different hosts")
    return pairs


def network_profile(pair: HostPair):
    """The link of a pair as experiments that iterate link profiles (ttlb) see it: named
    after the pair, shaping nothing (its results carry the measured RTT per connection)."""

    class NetworkProfile(LinkProfile):
        def describe(self) -> dict:
            return {
                "name": self.name,
                "spec": self.spec,
                "shaped": False,
                "host_pair": pair.label,
                "link": "the real network between the hosts",
            }

        def warnings(self) -> list[str]:
            return []

        def summary(self) -> str:
            return "the real network, not shaped"

    prof = NetworkProfile(name=pair.label, spec=f"network:{pair.label}")
    prof.pair = pair
    return prof


# --- the plan ---------------------------------------------------------------------------------


@dataclass
class RemotePlan:
    """The validated host pairs of a run, with every remote host connected and checked."""

    pairs: list[HostPair]
    config: tuple[str, ...]
    test_offsets: dict[str, int] = field(default_factory=dict)
    hosts: dict[str, dict] = field(default_factory=dict)  # name -> metadata

    def labels(self) -> list[str]:
        return [p.label for p in self.pairs]

    def describe(self) -> dict:
        out = {"pairs": self.labels(), "hosts": self.hosts}
        if self.test_offsets:
            out["TEST_ONLY_injected_clock_offset_ns"] = self.test_offsets
        return out


def remote_host(spec: HostSpec, config: tuple[str, ...]) -> ssh.RemoteHost:
    return ssh.host(spec.name, spec.options(config))


def _pairs(values, server, client, inv, patterns) -> tuple[list[HostPair], tuple[str, ...]]:
    """The pairs and the SSH configuration the options name (no host contacted yet)."""
    if patterns and not inv:
        raise UserError("--pairs needs --inventory FILE")
    if inv and (server or client):
        raise UserError("give either --inventory with --pairs, or --server-host/--client-host")
    config_file = getattr(values, "ssh_config", None)
    config: tuple[str, ...] = ()
    if config_file:
        if not os.path.isfile(os.path.expanduser(config_file)):
            raise UserError(f"--ssh-config {config_file!r} is not a file")
        config = (config_file,)
    if inv:
        return pairs_from_inventory(inv, patterns), config
    pair = HostPair(
        parse_host(client, "--client-host") if client else None,
        parse_host(server, "--server-host") if server else None,
    )
    return [pair], config


# Why a capture cannot run with both sides on one machine.
CAPTURE_TWICE = (
    "they would talk over its loopback, where a capture records every packet twice (leaving "
    "and arriving) and neither side's timing can be read"
)


def plan(values, needs_capture: bool, what: str, apart: str | None = None) -> RemotePlan | None:
    """Validate the remote options of an experiment (None: a one-machine run). Every remote
    host is connected to and checked here; nothing is created on it yet. A pair whose two
    sides are one machine is refused when a capture runs, or when `apart` says why else
    the experiment needs two machines."""

    server = getattr(values, "server_host", None)
    client = getattr(values, "client_host", None)
    inv = getattr(values, "inventory", None)
    patterns = getattr(values, "pairs", None) or []
    offsets = clock.test_offsets()
    if not (server or client or inv or patterns):
        if offsets:
            raise UserError(
                f"{clock.TEST_OFFSET_ENV} is set but no host is remote; it applies to captures "
                "fetched from a remote host only"
            )
        return None
    pairs, config = _pairs(values, server, client, inv, patterns)
    result = RemotePlan(pairs=pairs, config=config, test_offsets=offsets)
    _check_test_offsets(result)
    for pair in pairs:
        for side in SIDES:
            spec = pair.side(side)
            if spec is not None and not spec.local and spec.name not in result.hosts:
                _check_host(result, spec, side, needs_capture, what)
        why = CAPTURE_TWICE if needs_capture else apart
        if why:
            _refuse_one_machine(pair, result.config, what, why)
    if offsets:
        print(
            f"warning: {clock.TEST_OFFSET_ENV}={os.environ[clock.TEST_OFFSET_ENV]}: TEST ONLY, "
            "the captures of remote hosts are shifted on purpose (recorded in the metadata)",
            file=sys.stderr,
        )
    return result


def _check_host(result: RemotePlan, spec: HostSpec, side: str, needs_capture: bool, what):
    host = remote_host(spec, result.config)
    host.check(needs_capture)
    host.test_offset_ns = result.test_offsets.get(side, 0)
    result.hosts[spec.name] = {**host.metadata(), "clock": host.clock()}
    for d in host.stale_removed:
        print(f"{what}: removed {d} left on {spec.name} by an earlier run", file=sys.stderr)


def via_loopback(address: str | None) -> bool:
    """Whether this machine reaches `address` over its loopback interface (127.0.0.0/8,
    ::1, or one of its own addresses, which Linux routes through `lo`)."""
    if not address:
        return False
    try:
        if ipaddress.ip_address(address).is_loopback:
            return True
    except ValueError:
        return False
    try:
        route = subprocess.run(
            ["ip", "-o", "route", "get", address], capture_output=True, text=True, timeout=10
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return re.search(r"\bdev lo\b", route) is not None


def _where(spec: HostSpec | None, config: tuple[str, ...]) -> str:
    """Which machine runs a side: "here" for this one (no host, or a host this machine
    reaches over its own loopback), else the address the SSH connection reached."""
    if spec is None or spec.local:
        return "here"
    peer = remote_host(spec, config).conn.peer_ip
    return "here" if via_loopback(peer) else str(peer)


def _refuse_one_machine(pair: HostPair, config: tuple[str, ...], what: str, why: str) -> None:
    """Refuse a pair whose two sides are one machine (`why`: what that would spoil)."""
    client, server = _where(pair.client, config), _where(pair.server, config)
    if client == server:
        host = pair.server or pair.client
        raise UserError(
            f"{what}: {pair.label}: both sides run on {'this machine' if client == 'here' else client}"
            f" ({host.name if host else 'local'}), so {why}; drop the host options to run both "
            "sides in the lab's own namespaces, or name hosts on a real interface"
        )


def _check_test_offsets(p: RemotePlan) -> None:

    for side in p.test_offsets:
        for pair in p.pairs:
            spec = pair.side(side)
            if spec is None or spec.local:
                raise UserError(
                    f"{clock.TEST_OFFSET_ENV}: the {side} of {pair.label} is this machine; the "
                    "test offset applies to captures fetched from a remote host only"
                )


# --- the topology ------------------------------------------------------------------------------


# One round trip per side: the route to the peer (interface, source address) and what
# pqlab records about that side's interface, TCP settings and clock. $1: the peer address;
# $2: "addr" to also list the host's addresses.
SIDE_SCRIPT = (
    r"""
route=$(ip -o route get "$1" 2>&1 | head -n 1)
echo "route=$route"
dev=$(printf '%s\n' "$route" | sed -n 's/.* dev \([^ ]*\).*/\1/p')
echo "dev=$dev"
echo "mtu=$(cat /sys/class/net/$dev/mtu 2>/dev/null)"
echo "tcp_timestamps=$(cat /proc/sys/net/ipv4/tcp_timestamps 2>/dev/null)"
echo "congestion_control=$(cat /proc/sys/net/ipv4/tcp_congestion_control 2>/dev/null)"
[ "$2" = addr ] && ip -o addr show | sed 's/^/addr|/'
[ -n "$dev" ] && ethtool -k "$dev" 2>/dev/null | sed 's/^/offload|/'
"""
    + metadata.CLOCK_SCRIPT
)


def _route(kv: dict, address: str, where: str) -> tuple[str, str]:
    """(interface, source address) a side uses to reach `address`."""
    route = kv.get("route", "")
    dev = re.search(r"\bdev (\S+)", route)
    src = re.search(r"\bsrc (\S+)", route)
    if not dev or not src:
        raise TopologyError(f"{where} has no route to {address}: {route.strip()[:200]}")
    return dev.group(1), src.group(1)


def _offloads(text: str) -> dict[str, str]:
    """`ethtool -k` output: the features pqlab records (as TwoHosts.offloads)."""
    state = {}
    for line in text.splitlines():
        if ":" in line and not line.startswith("Features"):
            k, v = line.split(":", 1)
            if k.strip() in OFFLOAD_FEATURES:
                state[k.strip()] = v.strip()
    return state


def _lines(text: str, prefix: str) -> str:
    return "\n".join(line[len(prefix) :] for line in text.splitlines() if line.startswith(prefix))


class _LocalSide:
    """This machine as one side of a remote pair (no namespace)."""

    kind = "local"

    def __init__(self, name: str):
        self.label = name
        self.procs: list[subprocess.Popen] = []

    def script(self, text: str, args=()) -> str:
        try:
            r = subprocess.run(
                ["sh", "-c", text, "pqlab", *args], capture_output=True, text=True, timeout=60
            )
        except subprocess.TimeoutExpired:
            raise TopologyError("reading this machine's network took over 60 s") from None
        return r.stdout

    def popen(self, argv, **kw) -> subprocess.Popen:
        proc = subprocess.Popen(argv, **kw)
        self.procs.append(proc)
        return proc

    def metadata(self) -> dict:
        meta = metadata.collect([])
        return {
            k: meta[k] for k in ("hostname", "kernel", "machine", "cpu", "network", "clock")
        } | {"ssh": None}

    def clock(self) -> dict:
        return metadata.local_clock()

    def open(self, run_id: str) -> None:
        """Nothing to create here."""

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, 15)
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        self.procs.clear()


class _RemoteSide:
    kind = "ssh"

    def __init__(self, host: ssh.RemoteHost):
        self.host = host
        self.label = host.label

    def script(self, text: str, args=()) -> str:
        return self.host.conn.run(text, args, what=f"reading {self.label}").stdout

    def metadata(self) -> dict:
        return self.host.metadata()

    def clock(self) -> dict:
        return self.host.clock()

    def open(self, run_id: str) -> None:
        self.host.open_run(run_id)

    def close(self) -> None:
        self.host.close_run()


class NetworkLink:
    """The link of a remote pair: the real network, not shaped by pqlab."""

    kind = "network"

    def __init__(self, pair: HostPair):
        self.pair = pair
        self.choice = "the real network between the hosts (not shaped)"

    def describe(self) -> dict:
        return {"kind": self.kind, "pair": self.pair.label, "shaped": False}


class RemoteHosts:
    """A client and a server on real hosts (one of them may be this machine). Use as a
    context manager; see the module docstring."""

    def __init__(
        self, pair: HostPair, config: tuple[str, ...] = (), tcp: TcpSettings | None = None
    ):
        if pair.client is None and pair.server is None:
            raise UserError("a remote pair needs at least one remote host")
        self.pair = pair
        self.requested_tcp = tcp
        self.link = NetworkLink(pair)
        self.sides = {}
        for side in SIDES:
            spec = pair.side(side)
            if spec is None or spec.local:
                self.sides[side] = _LocalSide(spec.name if spec else "local")
            else:
                self.sides[side] = _RemoteSide(remote_host(spec, config))
        self.shared_clock = all(isinstance(s, _LocalSide) for s in self.sides.values())
        self.server_ip = self.client_ip = ""
        self.interfaces: dict[str, str] = {}
        self.tcp = TcpSettings()
        self._described: dict | None = None
        self._up = False
        self.run_id = f"{os.getpid()}-{secrets.token_hex(3)}"

    # --- what experiments use ---------------------------------------------------------------
    def ifname(self, side: str) -> str:
        return self.interfaces[side]

    def ip_of(self, side: str) -> str:
        return self.client_ip if side == "client" else self.server_ip

    def remote_side(self, side: str) -> ssh.RemoteHost | None:
        s = self.sides[side]
        return s.host if isinstance(s, _RemoteSide) else None

    def popen(self, side: str, argv, **kw) -> subprocess.Popen:
        s = self.sides[side]
        if not isinstance(s, _LocalSide):
            raise TopologyError(f"the {side} runs on {s.label}, not on this machine")
        return s.popen(argv, **kw)

    def clock_states(self) -> dict[str, dict]:
        return {side: self.sides[side].clock() for side in SIDES}

    def script(self, side: str, text: str, args=()) -> str:
        """Run a POSIX shell script on the host of `side` (over its SSH connection, or here)
        and return what it printed."""
        return self.sides[side].script(text, args)

    # --- building ---------------------------------------------------------------------------
    def _server_address(self) -> str:
        server, client = self.sides["server"], self.sides["client"]
        spec = self.pair.server
        address = spec.tls_address if spec else None
        if not address and isinstance(server, _RemoteSide):
            address = server.host.conn.peer_ip
        if not address:  # the server is this machine: its address towards the client host
            peer = client.host.conn.peer_ip
            _, address = _route(metadata.parse_kv(server.script(SIDE_SCRIPT, [peer])), peer, "")
        with contextlib.suppress(ValueError):
            address = str(ipaddress.ip_address(address))
        return address

    def _resolve(self) -> dict[str, str]:
        """Addresses and interfaces of both sides (client first: its route to the server
        gives the client's address); the raw description of each side."""
        server, client = self.sides["server"], self.sides["client"]
        self.server_ip = self._server_address()
        out = {"client": client.script(SIDE_SCRIPT, [self.server_ip])}
        kv = metadata.parse_kv(out["client"])
        self.interfaces["client"], self.client_ip = _route(kv, self.server_ip, client.label)
        out["server"] = server.script(SIDE_SCRIPT, [self.client_ip, "addr"])
        kv = metadata.parse_kv(out["server"])
        self.interfaces["server"], _ = _route(kv, self.client_ip, server.label)
        addrs = _lines(out["server"], "addr|")
        if not re.search(rf"\binet6? {re.escape(self.server_ip)}/", addrs):
            raise UserError(
                f"{server.label} has no interface with address {self.server_ip}, where the "
                "client would connect (behind NAT?): give the address it owns as "
                "pqlab_tls_address in an inventory"
            )
        return out

    def _side_description(self, side: str, raw: str) -> dict:
        s = self.sides[side]
        kv = metadata.parse_kv(raw)
        cwnd = re.search(r"\binitcwnd (\d+)", kv.get("route", ""))
        return {
            "host": s.label,
            "kind": s.kind,
            "interface": self.interfaces[side],
            "address": self.ip_of(side),
            "mtu": int(kv["mtu"]) if kv.get("mtu", "").isdigit() else None,
            "offloads": _offloads(_lines(raw, "offload|")),
            "congestion_control": kv.get("congestion_control"),
            "initcwnd": int(cwnd.group(1)) if cwnd else None,
            "tcp_timestamps": kv.get("tcp_timestamps"),
            "route": kv.get("route"),
            "machine": s.metadata(),
            "clock": metadata.parse_clock(raw),
            "run_directory": getattr(s, "host", None) and s.host.run_dir,
            "engine": getattr(s, "host", None) and s.host.engine_source,
        }

    def _describe(self, raw: dict[str, str]) -> dict:
        sides = {side: self._side_description(side, raw[side]) for side in SIDES}
        server = sides["server"]
        # The server's TCP settings as they are: pqlab does not change a real host's.
        self.tcp = TcpSettings(congestion_control=server["congestion_control"] or "cubic")
        self.tcp.initcwnd = server["initcwnd"]
        mtu = min((sides[s]["mtu"] or 1500) for s in SIDES)
        timestamps = sides["client"]["tcp_timestamps"] not in ("0", "", None)
        return {
            "link": self.link.describe(),
            "remote": True,
            "host_pair": self.pair.label,
            "shared_clock": self.shared_clock,
            "mtu": mtu,
            "mss": mtu - 40,
            "mss_payload": mtu - 40 - (12 if timestamps else 0),
            "tcp": {
                "congestion_control": self.tcp.congestion_control,
                "initcwnd": self.tcp.initcwnd,
            },
            "congestion_control": self.tcp.congestion_control,
            "initcwnd": self.tcp.initcwnd,
            "sides": sides,
            "notes": _offload_notes(sides),
        }

    def start(self) -> RemoteHosts:
        self._up = True
        try:
            for side in SIDES:
                self.sides[side].open(self.run_id)
            self._described = self._describe(self._resolve())
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop this machine's processes of the pair, and remove the run directories on the
        remote hosts (stopping whatever still runs there). A second Ctrl-C waits."""
        if not self._up:
            return
        self._up = False

        before = topology._quiet_signals()
        try:
            errors = []
            for side in SIDES:
                try:
                    self.sides[side].close()
                except Exception as e:  # keep cleaning the other side
                    errors.append(e)
            if errors:
                raise errors[0]
        finally:
            topology._after_teardown(before)

    def __enter__(self) -> RemoteHosts:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def describe(self) -> dict:
        """The pair as it was at start (read back on both hosts), for the metadata."""
        if self._described is None:
            raise TopologyError("the remote topology is not started")
        return self._described

    def record(self, store) -> None:
        """Put the pair as read back (interfaces, offloads, TCP settings, clocks, hosts) in
        the run's metadata, under `topologies`."""
        metadata.add_to_invocation(store, "topologies", {self.pair.label: self.describe()})


def _offload_notes(sides: dict) -> list[str]:
    notes = []
    for side in SIDES:
        d = sides[side]
        on = [
            k
            for k in (
                "tcp-segmentation-offload",
                "generic-segmentation-offload",
                "generic-receive-offload",
            )
            if d["offloads"].get(k, "off").startswith("on")
        ]
        if on:
            notes.append(
                f"{side} ({d['host']}) interface {d['interface']} has {', '.join(on)} on: its "
                "capture shows the kernel's super-packets, not wire segments (segment counts "
                "and per-segment times are the kernel's view)"
            )
    return notes
